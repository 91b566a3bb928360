"""Diagram of the modern decoder chapter (16): one Llama-style block, pre-RMSNorm, grouped-query attention
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
    """Chapter 16: a Llama-style decoder block with the shapes of the chapter's model."""
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


def rope_rotation() -> Canvas:
    """Chapter 15: RoPE turns pair i of the query at position m by m θ_i and of the key at n by n θ_i, so
    the angle between them, and the score, changes only with m - n; right, the two layouts of the pairs."""
    import math

    from matplotlib.patches import Arc

    q_colour, k_colour = GROUP_COLOURS[0], GROUP_COLOURS[1]
    c = Canvas(7.6, 3.9)
    c.title("RoPE: each pair of dimensions of q and k turns by its position's angle")
    cx, cy, r = 1.75, 1.95, 1.1
    c.circle(cx, cy, r, color="#c8ccd0")
    c.line([cx - r - 0.15, cx + r + 0.15], [cy, cy], color="#dddddd", width=0.8)
    c.line([cx, cx], [cy - r - 0.15, cy + r + 0.15], color="#dddddd", width=0.8)
    theta, m, n = 0.3, 3, 1                     # one pair's angle per position, and the two positions drawn
    phi_q, phi_k = 0.2, -0.55                   # the pair's direction in q and in k before turning

    def tip(angle: float, length: float = r) -> tuple[float, float]:
        return cx + length * math.cos(angle), cy + length * math.sin(angle)

    for phi, p, colour, name in ((phi_q, m, q_colour, "q"), (phi_k, n, k_colour, "k")):
        c.arrow((cx, cy), tip(phi), color=colour, dashed=True, width=1.0)
        c.arrow((cx, cy), tip(phi + p * theta), color=colour, width=1.6)
        radius = 0.5 if name == "q" else 0.7
        c.ax.add_patch(Arc((cx, cy), 2 * radius, 2 * radius, theta1=math.degrees(phi),
                           theta2=math.degrees(phi + p * theta), color=colour, linewidth=1.0, zorder=3))
        mid = phi + p * theta / 2
        c.text(*tip(mid, radius + 0.2), f"{p}·θᵢ", size=7.5, color=colour)
        x, y = tip(phi + p * theta, r + (0.22 if name == "q" else 0.42))
        c.text(x, y, f"{name} at {'m' if name == 'q' else 'n'} = {p}", size=8, color=colour, weight="bold")
    c.text(cx, 0.12, "dashed: before turning; solid: turned by\nposition × θᵢ. The angle between q and k\n"
                     "changes by (m − n) θᵢ, whatever m and n are.", size=7.3, color=MUTED, va="bottom")

    # The two layouts of one head of width 8: which dimensions form pair i.
    d_k, cell, x0 = 8, 0.3, 4.35
    c.text(x0 + d_k * cell / 2, 3.2, f"which dimensions form pair i (head width dₖ = {d_k})", size=8.3,
           weight="bold")
    for row, (title, pair_of) in enumerate((("interleaved (RoFormer, Meta's Llama code)", lambda j: j // 2),
                                            ("half-split (Hugging Face's Llama, tfmini)", lambda j: j % (d_k // 2)))):
        y = 2.45 - row * 0.95
        c.text(x0, y + cell + 0.14, title, size=8, ha="left")
        for j in range(d_k):
            i = pair_of(j)
            c.rect(x0 + j * cell, y, cell, cell, fill=GROUP_COLOURS[i + 2])
            c.text(x0 + (j + 0.5) * cell, y + cell / 2, str(i), size=7.5, color="white", weight="bold")
            c.text(x0 + (j + 0.5) * cell, y - 0.1, str(j), size=6.5, color=MUTED)
    c.text(x0 + d_k * cell / 2, 0.55, "pair i turns by p·θᵢ at position p,  θᵢ = 10000^(−2i / dₖ);\n"
                                       "score of q at m and k at n:  q R(m − n) kᵀ", size=7.5, color=MUTED)
    return c
