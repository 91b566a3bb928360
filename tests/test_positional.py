"""tfmini.positional: the sinusoidal table, both positional modules, offsets and length checks."""
from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from tfmini import LearnedPositionalEncoding, SinusoidalPositionalEncoding, sinusoidal_positional_encoding

MODULES = [SinusoidalPositionalEncoding, LearnedPositionalEncoding]


@pytest.mark.parametrize("max_len, d_model", [(1, 2), (10, 8), (50, 16), (7, 6)])
def test_sinusoidal_table_matches_the_formula(max_len, d_model):
    pe = sinusoidal_positional_encoding(max_len, d_model)
    assert pe.shape == (max_len, d_model) and pe.dtype == torch.float32
    for p in range(max_len):
        for i in range(d_model // 2):
            angle = p / 10000 ** (2 * i / d_model)
            assert pe[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_sinusoidal_table_known_values():
    pe = sinusoidal_positional_encoding(3, 4)
    expected = torch.tensor([[0.0, 1.0, 0.0, 1.0],
                             [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
                             [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)]])
    assert_close(pe, expected, rtol=1e-6, atol=1e-7)


def test_sinusoidal_relative_position_is_a_rotation():
    """PE[p + k] is a fixed linear map (a rotation per frequency) of PE[p], the paper's motivation."""
    d, k = 8, 3
    pe = sinusoidal_positional_encoding(20, d).double()
    omega = 1.0 / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    for p in range(0, 15):
        sin_p, cos_p = pe[p, 0::2], pe[p, 1::2]
        rotated_sin = sin_p * torch.cos(k * omega) + cos_p * torch.sin(k * omega)
        rotated_cos = cos_p * torch.cos(k * omega) - sin_p * torch.sin(k * omega)
        assert_close(pe[p + k, 0::2], rotated_sin, rtol=1e-6, atol=1e-6)
        assert_close(pe[p + k, 1::2], rotated_cos, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("max_len, d_model, match", [
    (0, 8, r"max_len: expected >= 1, got 0"),
    (4, 7, r"d_model: expected an even number >= 2, got 7"),
    (4, 0, r"d_model: expected an even number >= 2, got 0"),
])
def test_sinusoidal_table_rejects_bad_sizes(max_len, d_model, match):
    with pytest.raises(ValueError, match=match):
        sinusoidal_positional_encoding(max_len, d_model)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("offset", [0, 3])
def test_sinusoidal_module_adds_the_table(offset, dtype):
    mod = SinusoidalPositionalEncoding(8, max_len=20)
    x = torch.randn(2, 5, 8, dtype=dtype)
    out = mod(x, offset=offset)
    assert out.dtype == dtype
    assert_close(out, x + sinusoidal_positional_encoding(20, 8)[offset:offset + 5].to(dtype), rtol=1e-6, atol=1e-6)


def test_sinusoidal_table_is_a_non_persistent_buffer():
    mod = SinusoidalPositionalEncoding(8, max_len=20)
    assert "pe" in dict(mod.named_buffers())
    assert "pe" not in mod.state_dict()
    assert len(list(mod.parameters())) == 0


def test_learned_module_adds_its_embedding():
    mod = LearnedPositionalEncoding(8, max_len=20)
    assert list(mod.state_dict()) == ["embedding.weight"]
    x = torch.randn(2, 5, 8)
    assert_close(mod(x, offset=4), x + mod.embedding.weight[4:9], rtol=1e-6, atol=1e-6)
    assert mod(x).requires_grad


@pytest.mark.parametrize("cls", MODULES)
def test_offset_equals_slicing_the_longer_sequence(cls):
    """Incremental decoding: positions of a chunk at offset t are those of the full sequence from t."""
    mod = cls(8, max_len=16)
    x = torch.randn(2, 10, 8)
    full = mod(x)
    assert_close(mod(x[:, 4:7], offset=4), full[:, 4:7], rtol=0, atol=0)
    assert_close(mod(x[:, 9:], offset=9), full[:, 9:], rtol=0, atol=0)


@pytest.mark.parametrize("cls", MODULES)
def test_dropout_only_in_training(cls):
    mod = cls(8, max_len=16, dropout=0.5)
    x = torch.randn(4, 10, 8)
    mod.eval()
    a, b = mod(x), mod(x)
    assert torch.equal(a, b)
    mod.train()
    assert (mod(x) == 0).float().mean() > 0.2


@pytest.mark.parametrize("cls", MODULES)
@pytest.mark.parametrize("T, offset", [(9, 0), (5, 4), (1, 8), (20, 0)])
def test_sequence_longer_than_the_table_is_an_error(cls, T, offset):
    mod = cls(8, max_len=8)
    with pytest.raises(ValueError, match=rf"x: expected positions offset \+ T <= max_len=8, got offset={offset}, T={T}"):
        mod(torch.randn(2, T, 8), offset=offset)


@pytest.mark.parametrize("cls", MODULES)
def test_longest_allowed_sequence_is_fine(cls):
    mod = cls(8, max_len=8)
    assert mod(torch.randn(2, 8, 8)).shape == (2, 8, 8)
    assert mod(torch.randn(2, 1, 8), offset=7).shape == (2, 1, 8)


@pytest.mark.parametrize("cls", MODULES)
def test_negative_offset_and_bad_width_are_errors(cls):
    mod = cls(8, max_len=8)
    with pytest.raises(ValueError, match=r"x: .*offset=-1, T=2"):
        mod(torch.randn(2, 2, 8), offset=-1)
    with pytest.raises(ValueError, match=r"x: expected last dimension d_model=8, got shape \(2, 3, 6\)"):
        mod(torch.randn(2, 3, 6))
    with pytest.raises(ValueError, match=r"x: expected a non-empty batch and sequence.*\(2, 0, 8\)"):
        mod(torch.randn(2, 0, 8))
