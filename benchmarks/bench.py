"""Speed of tfmini against PyTorch's own modules, measured side by side in one run.

    python benchmarks/bench.py            # full run (a few minutes on 2 CPU cores)
    python benchmarks/bench.py --quick    # smaller shapes, fewer repeats

Every line prints a ratio of two timings taken in this run on this machine, so the numbers are
comparable across machines; absolute times are printed only for context. Ratios below 1 mean
tfmini is faster. Sections 4 to 6 need Hugging Face's tokenizers and transformers (pip install
'tfmini[hf]'); section 7 compares with nanoGPT's model (benchmarks/nanogpt_model.py, MIT licence).
Targets: MultiHeadAttention <= 1.00, training step <= 1.05, KV-cache speed-up >= 3, cached greedy
generation >= 1.0x Hugging Face's tokens/s.
"""
from __future__ import annotations

import argparse
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


def interleaved(fns: dict, repeats: int, inner: int) -> dict:
    """Median seconds per call of each function, alternating between them to share machine noise."""
    for fn in fns.values():  # warm-up
        fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            times[name].append((time.perf_counter() - start) / inner)
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller shapes and fewer repeats")
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device cpu")
    if args.quick:
        shapes = [(8, 64, 128, 4, False), (2, 512, 128, 4, True)]
        mha = bench_mha(shapes, repeats=5, inner=3)
        train = bench_training(8, 32, 32, repeats=3, inner=2)
        kv = bench_kv_cache(64, repeats=1)
        bpe = bench_tokenizer(512, repeats=1)
        fwd = bench_hf_forward(4, 64, repeats=5, inner=2)
        gen = bench_hf_generate(1, 16, 32, repeats=3)
        nano = bench_nanogpt(8, 64, repeats=3, inner=2)
    else:
        shapes = [(32, 64, 128, 4, False), (16, 128, 256, 8, False), (8, 256, 256, 8, False),
                  (8, 256, 256, 8, True), (4, 512, 512, 8, True)]
        mha = bench_mha(shapes, repeats=15, inner=5)
        train = bench_training(32, 64, 64, repeats=10, inner=3)
        kv = bench_kv_cache(256, repeats=3)
        bpe = bench_tokenizer(1024, repeats=3)
        fwd = bench_hf_forward(8, 256, repeats=10, inner=3)
        gen = bench_hf_generate(1, 32, 128, repeats=5)
        nano = bench_nanogpt(16, 256, repeats=10, inner=2)
    print("\nsummary:")
    print(f"  MultiHeadAttention worst ratio {mha:.3f} (target <= 1.00): {'met' if mha <= 1.0 else 'NOT met'}")
    print(f"  training step ratio {train:.3f} (target <= 1.05): {'met' if train <= 1.05 else 'NOT met'}")
    print(f"  KV-cache speed-up {kv:.2f}x (target >= 3): {'met' if kv >= 3 else 'NOT met'}")
    if bpe is not None:
        print(f"  BPE encoding, first call, tfmini / tokenizers time {bpe:.2f} (reported; pure Python against Rust)")
    if fwd is not None:
        print(f"  GPT-2 forward, tfmini / transformers time {fwd:.3f} (reported)")
        print(f"  cached greedy generation, tfmini / transformers tokens/s {gen:.2f} (target >= 1.0): "
              f"{'met' if gen >= 1.0 else 'NOT met'}")
    print(f"  GPT training step, tfmini / nanoGPT time {nano:.3f} (reported)")


if __name__ == "__main__":
    main()
