"""Diagram of the modern decoder chapter (14): one Llama-style block, pre-RMSNorm, grouped-query attention
with RoPE on queries and keys, and SwiGLU."""

from __future__ import annotations

from . import shapes
from .canvas import MUTED, Box, Canvas

GROUP_COLOURS = ["#4a7fb5", "#c0772b", "#4f9a56", "#7b5aa6", "#b55454", "#a8861a", "#5c5c5c", "#2a9d8f"]


def _sharing(c: Canvas, x0: float, y_top: float, H: int, G: int) -> None:
    """Query heads above, key/value heads below, a line from each query head to the head it shares."""
    cell, gap = 0.17, 0.05
    width = H * cell + (H - 1) * gap
    c.text(x0 + width / 2, y_top + 0.42, f"{H} query heads share", size=8, weight="bold")
    c.text(x0 + width / 2, y_top + 0.24, f"{G} key/value heads", size=8, weight="bold")
    yq, ykv = y_top - cell, y_top - 1.0
    group = H // G
    kv_x = [x0 + (g + 0.5) * width / G - cell / 2 for g in range(G)]
    for h in range(H):
        x = x0 + h * (cell + gap)
        colour = GROUP_COLOURS[(h // group) % len(GROUP_COLOURS)]
        c.rect(x, yq, cell, cell, fill=colour)
        c.text(x + cell / 2, yq + cell + 0.08, str(h), size=6.5, color=MUTED)
        c.line([x + cell / 2, kv_x[h // group] + cell / 2], [yq, ykv + cell], color=colour, width=0.8)
    for g, x in enumerate(kv_x):
        c.rect(x, ykv, cell, cell, fill=GROUP_COLOURS[g % len(GROUP_COLOURS)])
        c.text(x + cell / 2, ykv - 0.1, str(g), size=6.5, color=MUTED)
    c.text(x0 - 0.08, yq + cell / 2, "q", size=8, ha="right", weight="bold")
    c.text(x0 - 0.08, ykv + cell / 2, "k, v", size=8, ha="right", weight="bold")
    c.text(x0 + width / 2, ykv - 0.3, f"query head h uses\nkey/value head h // {group}", size=7.5, color=MUTED,
           va="top")


def modern_block() -> Canvas:
    """Chapter 14: a Llama-style decoder block with the shapes of the chapter's model."""
    s = shapes.modern_block()
    cfg = s["config"]
    H, G = cfg.num_heads, cfg.num_kv_heads
    c = Canvas(7.6, 7.5)
    c.title(f"A Llama-style decoder block: d = {cfg.d_model}, H = {H}, G = {G}, d_ff = {cfg.ffn_dim}")
    x, bypass = 1.45, 0.45            # the block's main column, and where the residual lines run
    w = 1.15
    # Input.
    c.text(x, 0.3, "x", size=9, weight="bold")
    c.shape(x + 0.15, 0.3, s["x"], ha="left")

    # Attention sub-layer.
    branch = (x, 0.6)
    c.circle(*branch, 0.03, color="#888888", fill="#888888", zorder=4)
    norm1 = c.box(x, 0.88, w, 0.3, "RMSNorm", kind="norm", size=8.5)
    c.arrow((x, 0.42), norm1.bottom, width=1.0)
    bus = 1.23
    xs = {"q": x, "k": x + 1.55, "v": x + 3.1}
    c.line([x, x], [norm1.top[1], bus], width=1.0)
    c.line([x, xs["v"]], [bus, bus], width=1.0)
    proj = {}
    for name, label in (("q", "$W^Q$"), ("k", "$W^K$"), ("v", "$W^V$")):
        proj[name] = c.box(xs[name], 1.55, 0.8, 0.3, label, kind="plain", size=9)
        c.arrow((xs[name], bus), proj[name].bottom, width=1.0)
    rope = {name: c.box(xs[name], 2.2, 0.8, 0.3, "RoPE", kind="embed", size=8.5) for name in ("q", "k")}
    for name in ("q", "k"):
        c.arrow(proj[name].top, rope[name].bottom, width=1.0)
        c.shape(xs[name] + 0.06, 1.89, s[name], ha="left", size=7.5)
    c.shape(xs["v"] + 0.06, 1.89, s["v"], ha="left", size=7.5)
    c.text(xs["k"] + 0.45, 2.2, "rotate each pair by\nits position's angle", size=7, color=MUTED, ha="left")
    rep = c.box((xs["k"] + xs["v"]) / 2, 2.9, xs["v"] - xs["k"] + 0.8, 0.32,
                f"repeat each key/value head {s['groups']} ×", kind="attention", size=8.5)
    c.arrow(rope["k"].top, (xs["k"], rep.bottom[1]), width=1.0)
    c.arrow(proj["v"].top, (xs["v"], rep.bottom[1]), width=1.0)
    attn_w = xs["v"] - x + 0.8
    attn = c.box((x + xs["v"]) / 2, 3.62, attn_w, 0.36,
                 f"causal attention, every query head: softmax(q kᵀ / √{cfg.head_width}) v", kind="attention", size=8.5)
    c.arrow(rope["q"].top, (x, attn.bottom[1]), width=1.0)
    for name in ("k", "v"):
        c.arrow((xs[name], rep.top[1]), (xs[name], attn.bottom[1]), width=1.0)
    c.shape((xs["k"] + xs["v"]) / 2, 3.27, s["shared"], size=7.5)
    out_proj = c.box(x, 4.2, w, 0.3, "merge heads, $W^O$", kind="plain", size=8.5)
    c.arrow((x, attn.top[1]), out_proj.bottom, width=1.0)
    plus1 = c.plus(x, 4.62)
    c.arrow(out_proj.top, plus1.bottom, width=1.0)
    c.arrow(branch, plus1.left, corners=[(bypass, branch[1]), (bypass, plus1.y)], width=1.0, color="#888888")

    # SwiGLU sub-layer.
    branch = (x, 4.86)
    c.circle(*branch, 0.03, color="#888888", fill="#888888", zorder=4)
    norm3 = c.box(x, 5.08, w, 0.28, "RMSNorm", kind="norm", size=8.5)
    c.arrow(plus1.top, norm3.bottom, width=1.0)
    bus = 5.36
    x_up = x + 1.55
    c.line([x, x], [norm3.top[1], bus], width=1.0)
    c.line([x, x_up], [bus, bus], width=1.0)
    gate = c.box(x, 5.62, w, 0.28, r"$W_\mathrm{gate}$ (gate)", kind="ffn", size=8.5)
    up = c.box(x_up, 5.62, 0.9, 0.28, "$W_1$ (up)", kind="ffn", size=8.5)
    c.arrow((x, bus), gate.bottom, width=1.0)
    c.arrow((x_up, bus), up.bottom, width=1.0)
    silu = c.box(x, 6.02, w, 0.26, "SiLU", kind="ffn", size=8.5)
    c.arrow(gate.top, silu.bottom, width=1.0)
    c.circle(x, 6.37, 0.11, color="#444444", fill="white", width=1.1, zorder=4)
    c.text(x, 6.37, "⊙", size=11)
    times = Box(x, 6.37, 0.22, 0.22)
    c.arrow(silu.top, times.bottom, width=1.0)
    c.arrow(up.top, times.right, corners=[(x_up, 6.37)], width=1.0)
    c.shape(x_up + 0.5, 6.0, s["hidden"], ha="left", size=7.5)
    c.text(x_up + 0.5, 6.18, "hidden, gate and up alike", size=7, color=MUTED, ha="left")
    down = c.box(x, 6.72, w, 0.26, "$W_2$ (down)", kind="ffn", size=8.5)
    c.arrow(times.top, down.bottom, width=1.0)
    plus2 = c.plus(x, 7.0 - 0.02)
    c.arrow(down.top, plus2.bottom, width=1.0)
    c.arrow(branch, plus2.left, corners=[(bypass, branch[1]), (bypass, plus2.y)], width=1.0, color="#888888")
    c.shape(x + 0.2, plus2.y, s["out"], "out", ha="left")

    _sharing(c, 5.55, 2.6, H, G)
    c.text(6.3, 0.55, "shapes: (B, T, d), heads (B, heads, T, dₖ)", size=7, color=MUTED)
    return c
