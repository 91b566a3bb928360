"""Speed of tfmini against PyTorch's own modules, measured side by side in one run.

    python benchmarks/bench.py            # full run (a few minutes on 2 CPU cores)
    python benchmarks/bench.py --quick    # smaller shapes, fewer repeats

Every line prints a ratio of two timings taken in this run on this machine, so the numbers are
comparable across machines; absolute times are printed only for context. Ratios below 1 mean
tfmini is faster. Targets: MultiHeadAttention <= 1.00, training step <= 1.05, KV-cache speed-up >= 3.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

import tfmini


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
    steps = {}
    for name, model in models.items():
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step(model=model, opt=opt):
            logits = model(src, tgt[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1), ignore_index=0)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        steps[name] = step
    t = interleaved(steps, repeats, inner)
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
    else:
        shapes = [(32, 64, 128, 4, False), (16, 128, 256, 8, False), (8, 256, 256, 8, False),
                  (8, 256, 256, 8, True), (4, 512, 512, 8, True)]
        mha = bench_mha(shapes, repeats=15, inner=5)
        train = bench_training(32, 64, 64, repeats=10, inner=3)
        kv = bench_kv_cache(256, repeats=3)
    print("\nsummary:")
    print(f"  MultiHeadAttention worst ratio {mha:.3f} (target <= 1.00): {'met' if mha <= 1.0 else 'NOT met'}")
    print(f"  training step ratio {train:.3f} (target <= 1.05): {'met' if train <= 1.05 else 'NOT met'}")
    print(f"  KV-cache speed-up {kv:.2f}x (target >= 3): {'met' if kv >= 3 else 'NOT met'}")


if __name__ == "__main__":
    main()
