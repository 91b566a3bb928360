"""Shared fixtures for the tfmini tests: fixed seeds, the Agg backend, and weight copying from PyTorch's modules."""
from __future__ import annotations

import random

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch
from hypothesis import settings
from torch import nn

# Property tests draw the same examples on every run and machine, and keep no database on disk.
settings.register_profile("tfmini", derandomize=True, database=None)
settings.load_profile("tfmini")

# The models here are tiny: thread start-up and hand-over cost far more than the arithmetic,
# and on a busy 2-core machine they dominate the run time. One thread also makes timings steadier.
torch.set_num_threads(1)


def _cpu_half_matmul() -> bool:
    """Whether this torch multiplies float16 matrices on the CPU (torch 2.1 does not: "bmm" not implemented for 'Half')."""
    try:
        torch.ones(1, 1, 1, dtype=torch.float16) @ torch.ones(1, 1, 1, dtype=torch.float16)
    except RuntimeError:
        return False
    return True


def pytest_configure(config):
    config.addinivalue_line("markers", "cpu_half_matmul: a float16 case that multiplies matrices on the CPU; "
                                       "skipped where this torch has no such kernel (bfloat16 runs everywhere)")


def pytest_collection_modifyitems(config, items):
    if _cpu_half_matmul():
        return
    skip = pytest.mark.skip(reason=f"torch {torch.__version__} has no float16 matrix product on the CPU")
    for item in items:
        if "cpu_half_matmul" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fixed_seeds():
    """Every test starts from the same random state, so a failure reproduces."""
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    yield


def _copy_mha(tf_mha, nn_mha: nn.MultiheadAttention) -> None:
    """Copy ``nn.MultiheadAttention``'s packed ``in_proj`` and ``out_proj`` into a tfmini ``MultiHeadAttention``."""
    with torch.no_grad():
        for proj, w in zip((tf_mha.q_proj, tf_mha.k_proj, tf_mha.v_proj), nn_mha.in_proj_weight.chunk(3, dim=0)):
            proj.weight.copy_(w)
        for proj, b in zip((tf_mha.q_proj, tf_mha.k_proj, tf_mha.v_proj), nn_mha.in_proj_bias.chunk(3, dim=0)):
            proj.bias.copy_(b)
        tf_mha.out_proj.weight.copy_(nn_mha.out_proj.weight)
        tf_mha.out_proj.bias.copy_(nn_mha.out_proj.bias)


def _copy_layer(tf_layer, nn_layer: nn.Module) -> None:
    """Copy an ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` into the tfmini layer."""
    _copy_mha(tf_layer.self_attn, nn_layer.self_attn)
    if hasattr(nn_layer, "multihead_attn"):
        _copy_mha(tf_layer.multihead_attn, nn_layer.multihead_attn)
    with torch.no_grad():
        for name in ("linear1", "linear2"):
            getattr(tf_layer.ff, name).weight.copy_(getattr(nn_layer, name).weight)
            getattr(tf_layer.ff, name).bias.copy_(getattr(nn_layer, name).bias)
        for name in ("norm1", "norm2", "norm3"):
            if hasattr(nn_layer, name):
                getattr(tf_layer, name).weight.copy_(getattr(nn_layer, name).weight)
                getattr(tf_layer, name).bias.copy_(getattr(nn_layer, name).bias)


@pytest.fixture
def copy_mha():
    """``copy_mha(tfmini_mha, nn_mha)``: load PyTorch's weights into tfmini's module."""
    return _copy_mha


@pytest.fixture
def copy_layer():
    """``copy_layer(tfmini_layer, nn_layer)``: load PyTorch's encoder/decoder-layer weights into tfmini's."""
    return _copy_layer


class CopyOracle(nn.Module):
    """A model that is perfect on the copy task by construction, with the decoding interface of tfmini's
    encoder-decoders: after BOS and ``t`` generated tokens it predicts ``src[:, t]``, then EOS."""

    def __init__(self, vocab_size: int, eos_id: int = 2, pad_id: int = 0):
        super().__init__()
        self.vocab_size, self.eos_id, self.pad_id = vocab_size, eos_id, pad_id
        self.anchor = nn.Parameter(torch.zeros(()))  # gives the model a device

    def start_decoding(self, src: torch.Tensor) -> dict:
        return {"src": src}

    def decode_next(self, ys: torch.Tensor, state: dict, use_cache: bool = True) -> torch.Tensor:
        src = state["src"]
        t = ys.shape[1] - 1  # tokens generated so far
        lengths = (src != self.pad_id).sum(dim=1)
        nxt = torch.where(t < lengths, src[:, min(t, src.shape[1] - 1)], torch.full_like(lengths, self.eos_id))
        return 10.0 * torch.nn.functional.one_hot(nxt, self.vocab_size).float() + self.anchor


@pytest.fixture
def copy_oracle():
    """The class :class:`CopyOracle` (instantiate with a vocabulary size)."""
    return CopyOracle
