"""tfmini.plot: every function returns its axes or figure with the expected content and rejects bad shapes;
``import tfmini`` does not import ``matplotlib.pyplot`` (the first plot does)."""
from __future__ import annotations

import os
import subprocess
import sys

import matplotlib.pyplot as plt  # the Agg backend is selected in conftest.py
import numpy as np
import pytest
import torch

from tfmini import History, sinusoidal_positional_encoding
from tfmini.plot import plot_attention, plot_attention_grid, plot_history, plot_positional_encoding


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_plot_attention_draws_the_matrix():
    w = torch.softmax(torch.randn(3, 5), -1)
    ax = plot_attention(w, x_labels=list("abcde"), y_labels=["x", "y", "z"], title="T")
    assert len(ax.figure.axes) == 2  # heatmap and colour bar
    assert len(ax.images) == 1
    np.testing.assert_allclose(ax.images[0].get_array(), w.numpy(), rtol=1e-6)
    assert [t.get_text() for t in ax.get_xticklabels()] == list("abcde")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["x", "y", "z"]
    assert ax.get_title() == "T"
    assert ax.images[0].get_clim() == (0.0, 1.0)


def test_plot_attention_on_a_given_axes_without_colorbar():
    fig, ax = plt.subplots()
    out = plot_attention(np.eye(4), ax=ax, colorbar=False)
    assert out is ax and len(fig.axes) == 1 and len(ax.images) == 1


def test_plot_attention_accepts_tensors_that_require_grad():
    w = torch.rand(2, 2, requires_grad=True)
    assert len(plot_attention(w).images) == 1


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4), (1, 1, 2, 2)])
def test_plot_attention_rejects_non_matrix(shape):
    with pytest.raises(ValueError, match=r"weights: expected shape \(T, S\), got \(" + ", ".join(map(str, shape))):
        plot_attention(torch.rand(shape))


def test_plot_attention_rejects_wrong_number_of_labels():
    with pytest.raises(ValueError, match=r"labels: expected 4 labels for an axis of length 4, got 3"):
        plot_attention(torch.rand(2, 4), x_labels=list("abc"))
    with pytest.raises(ValueError, match=r"labels: expected 2 labels for an axis of length 2, got 1"):
        plot_attention(torch.rand(2, 4), y_labels=["a"])


@pytest.mark.parametrize("L, H", [(1, 1), (2, 3), (3, 2)])
@pytest.mark.parametrize("as_list", [False, True])
def test_plot_attention_grid(L, H, as_list):
    w = torch.softmax(torch.randn(L, H, 4, 5), -1)
    fig = plot_attention_grid(list(w) if as_list else w, x_labels=list("abcde"), y_labels=list("wxyz"))
    assert len(fig.axes) == L * H
    assert all(len(ax.images) == 1 for ax in fig.axes)
    for i in range(L):
        for j in range(H):
            ax = fig.axes[i * H + j]
            assert ax.get_title() == f"layer {i + 1}, head {j + 1}"
            np.testing.assert_allclose(ax.images[0].get_array(), w[i, j].numpy(), rtol=1e-6)
    # labels only on the outer axes
    assert [t.get_text() for t in fig.axes[(L - 1) * H].get_xticklabels()] == list("abcde")
    if L > 1:
        assert len(fig.axes[0].get_xticks()) == 0


@pytest.mark.parametrize("shape", [(4, 5), (2, 4, 5), (1, 2, 2, 4, 5)])
def test_plot_attention_grid_rejects_wrong_shapes(shape):
    with pytest.raises(ValueError, match=r"weights: expected shape \(L, H, T, S\), got \(" + ", ".join(map(str, shape))):
        plot_attention_grid(torch.rand(shape))


def test_plot_positional_encoding():
    pe = sinusoidal_positional_encoding(20, 8)
    ax = plot_positional_encoding(pe)
    assert len(ax.images) == 1 and len(ax.figure.axes) == 2
    np.testing.assert_allclose(ax.images[0].get_array(), pe.numpy(), rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"weights: expected shape \(T, S\), got \(2, 20, 8\)"):
        plot_positional_encoding(pe[None].expand(2, -1, -1))


def make_history():
    return History(step=[10, 20, 30], loss=[2.0, 1.0, 0.5], lr=[1e-3] * 3, time=[0.1, 0.2, 0.4],
                   evals=[{"step": 15, "time": 0.15, "seq_acc": 0.3}, {"step": 30, "time": 0.4, "seq_acc": 0.9}])


def test_plot_history_loss_and_metric():
    h = make_history()
    ax = plot_history(h)
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [10, 20, 30] and list(line.get_ydata()) == [2.0, 1.0, 0.5]
    assert ax.get_ylabel() == "training loss" and ax.get_xlabel() == "optimiser step"
    ax = plot_history(h, metric="seq_acc", x="time", label="run")
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [0.15, 0.4] and list(line.get_ydata()) == [0.3, 0.9]
    assert ax.get_legend() is not None and ax.get_xlabel() == "seconds of training"
    # several runs on one axes
    fig, shared = plt.subplots()
    plot_history(h, ax=shared, label="a")
    plot_history(h, ax=shared, label="b")
    assert len(shared.get_lines()) == 2 and len(fig.axes) == 1


def test_plot_history_rejects_unknown_x():
    with pytest.raises(ValueError, match=r"x: expected 'step' or 'time', got 'epoch'"):
        plot_history(make_history(), x="epoch")


def test_import_tfmini_does_not_import_pyplot():
    """pyplot picks a backend on import; tfmini imports it only when a plot needs a new figure.
    A fresh interpreter, since this one has imported pyplot already."""
    code = ("import sys, torch, tfmini\n"
            "assert 'matplotlib.pyplot' not in sys.modules, 'import tfmini imported matplotlib.pyplot'\n"
            "ax = tfmini.plot.plot_attention(torch.eye(3))\n"
            "assert 'matplotlib.pyplot' in sys.modules and ax.images[0].get_array().shape == (3, 3)\n")
    env = {**os.environ, "MPLBACKEND": "Agg"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
