"""Plots: attention heatmaps (one, or a grid over layers and heads), the positional-encoding table,
and training curves. Every function takes tensors or a :class:`~tfmini.train.History`, draws on a
Matplotlib axes (a new figure if none is given) and returns the axes or the figure.

``matplotlib.pyplot`` is imported only when a function draws a new figure, so that ``import tfmini``
never imports it (pyplot picks a backend and, on some systems, starts a GUI toolkit).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

__all__ = ["plot_attention", "plot_attention_grid", "plot_positional_encoding", "plot_history"]


def _as_2d(weights) -> torch.Tensor:
    w = torch.as_tensor(weights).detach().float().cpu()
    if w.dim() != 2:
        raise ValueError(f"weights: expected shape (T, S), got {tuple(w.shape)}")
    return w


def _pyplot():
    """``matplotlib.pyplot``, imported on first use."""
    import matplotlib.pyplot as plt

    return plt


def plot_attention(weights, x_labels: Optional[Sequence[str]] = None, y_labels: Optional[Sequence[str]] = None,
                   ax=None, title: str = "Attention weights", xlabel: str = "key (source)",
                   ylabel: str = "query (target)", colorbar: bool = True):
    """Heatmap of one ``(T, S)`` weight matrix: rows are queries, columns keys; darker = more weight.

    Args:
        weights: attention weights ``(T, S)`` (a tensor or anything ``torch.as_tensor`` takes).
        x_labels: ``S`` tick labels for the keys (e.g. the source tokens).
        y_labels: ``T`` tick labels for the queries.
        ax: the Matplotlib axes to draw on (default: a new figure).
        title, xlabel, ylabel: texts of the plot.
        colorbar: draw a colour bar.

    Returns:
        the Matplotlib axes.
    """
    w = _as_2d(weights)
    if ax is None:
        _, ax = _pyplot().subplots(figsize=(max(3.0, 0.3 * w.shape[1] + 1.5), max(2.5, 0.3 * w.shape[0] + 1.0)))
    im = ax.imshow(w.numpy(), cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    for labels, n, set_ticks, set_labels, rot in ((x_labels, w.shape[1], ax.set_xticks, ax.set_xticklabels, 90),
                                                  (y_labels, w.shape[0], ax.set_yticks, ax.set_yticklabels, 0)):
        if labels is not None:
            if len(labels) != n:
                raise ValueError(f"labels: expected {n} labels for an axis of length {n}, got {len(labels)}")
            set_ticks(range(n))
            set_labels(list(labels), rotation=rot)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_attention_grid(weights, x_labels=None, y_labels=None, title: str = "Attention weights by layer and head"):
    """Grid of heatmaps, one per layer and head: rows are layers, columns heads.

    Args:
        weights: ``(L, H, T, S)``, or a list of ``L`` tensors ``(H, T, S)`` (take one batch element
            of each layer's ``(B, H, T, S)``).
        x_labels: ``S`` key labels, shown under the last row.
        y_labels: ``T`` query labels, shown left of the first column.
        title: the figure's title.

    Returns:
        the Matplotlib figure.
    """
    w = torch.stack([torch.as_tensor(x) for x in weights]) if isinstance(weights, (list, tuple)) else torch.as_tensor(weights)
    if w.dim() != 4:
        raise ValueError(f"weights: expected shape (L, H, T, S), got {tuple(w.shape)}")
    L, H = w.shape[:2]
    fig, axes = _pyplot().subplots(L, H, figsize=(2.6 * H + 0.5, 2.4 * L + 0.6), squeeze=False)
    for i in range(L):
        for j in range(H):
            ax = axes[i][j]
            plot_attention(w[i, j], x_labels if i == L - 1 else None, y_labels if j == 0 else None, ax=ax,
                           title=f"layer {i + 1}, head {j + 1}", xlabel="", ylabel="", colorbar=False)
            if i < L - 1:
                ax.set_xticks([])
            if j > 0:
                ax.set_yticks([])
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_positional_encoding(pe, ax=None, title: str = "Sinusoidal positional encoding"):
    """Heatmap of a ``(max_len, d_model)`` positional table: positions down, dimensions across.

    Args:
        pe: the table, e.g. :func:`tfmini.positional.sinusoidal_positional_encoding`.
        ax: the Matplotlib axes to draw on (default: a new figure).
        title: the plot's title.

    Returns:
        the Matplotlib axes.
    """
    pe = _as_2d(pe)
    if ax is None:
        _, ax = _pyplot().subplots(figsize=(7, 4))
    im = ax.imshow(pe.numpy(), cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
    ax.set_title(title)
    ax.set_xlabel("dimension k")
    ax.set_ylabel("position p")
    ax.figure.colorbar(im, ax=ax)
    return ax


def plot_history(history, metric: Optional[str] = None, ax=None, title: str = "Training",
                 x: str = "step", label: Optional[str] = None):
    """Training loss against ``x`` ("step" or "time"); with ``metric`` (e.g. "seq_acc"), that
    evaluation metric instead.

    Args:
        history: a :class:`tfmini.train.History`.
        metric: a key of the evaluation records in ``history.evals``; None plots the loss.
        ax: the Matplotlib axes to draw on (default: a new figure).
        title: the plot's title.
        x: ``"step"`` (optimiser steps) or ``"time"`` (seconds of training).
        label: legend entry for this curve (draws a legend).

    Returns:
        the Matplotlib axes.
    """
    if x not in ("step", "time"):
        raise ValueError(f"x: expected 'step' or 'time', got {x!r}")
    if ax is None:
        _, ax = _pyplot().subplots(figsize=(5, 3))
    if metric is None:
        ax.plot(history.step if x == "step" else history.time, history.loss, label=label)
        ax.set_ylabel("training loss")
    else:
        ax.plot([e[x] for e in history.evals], [e[metric] for e in history.evals], marker="o", label=label)
        ax.set_ylabel(metric)
    ax.set_xlabel("optimiser step" if x == "step" else "seconds of training")
    ax.set_title(title)
    if label is not None:
        ax.legend()
    return ax
