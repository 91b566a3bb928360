"""The diagrams of images/diagrams/ (drawn by ``python -m diagrams``): up to date byte for byte, labelled
with the shapes that tfmini computes for each chapter's configuration, and shown by their chapters with
alt text, a caption and a number."""

from __future__ import annotations

import re
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import matplotlib
import nbformat
import pytest
import torch

import tfmini
from diagrams import DIAGRAMS, OUTPUT, build
from diagrams.__main__ import differences
from diagrams.chapters import assigned, call_arguments, call_keywords

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
SHAPE = re.compile(r"\((?:\d+, )+\d+\)")  # a tuple of two or more ints, as Python prints it
FIGURE = re.compile(r"^```\{figure\}[ \t]+\.\./images/diagrams/(?P<file>[\w-]+\.svg)[ \t]*\n(?P<body>.*?)^```",
                    re.MULTILINE | re.DOTALL)
OPTION = re.compile(r"^:(?P<key>[\w-]+):[ \t]*(?P<value>.*)$", re.MULTILINE)


def svg_text(name: str) -> list[str]:
    """The text elements of a committed diagram."""
    tree = ET.parse(OUTPUT / f"{name}.svg")
    return ["".join(el.itertext()) for el in tree.iter("{http://www.w3.org/2000/svg}text")]


def labelled_shapes(name: str) -> set[tuple[int, ...]]:
    return {tuple(int(n) for n in m.strip("()").split(", ")) for t in svg_text(name) for m in SHAPE.findall(t)}


def _locked_matplotlib() -> str:
    """The Matplotlib version of requirements.txt, with which the committed SVGs are drawn."""
    found = re.search(r"^matplotlib==(\S+)", (ROOT / "requirements.txt").read_text(encoding="utf-8"), re.MULTILINE)
    return found.group(1)


# Another Matplotlib writes another SVG for the same drawing (scripts/test_minimums.sh runs these tests
# with the oldest version pyproject.toml allows): the byte comparison holds for the locked version only.
@pytest.mark.skipif(matplotlib.__version__ != _locked_matplotlib(),
                    reason="the committed SVGs are drawn with requirements.txt's Matplotlib")
def test_regenerating_changes_nothing():
    problems = differences()
    assert not problems, f"images/diagrams/ is not up to date, run python -m diagrams: {problems}"


def test_drawing_twice_gives_the_same_bytes():
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        first = {p.name: p.read_bytes() for p in build(Path(a), ["masks", "sinusoid_pairs"])}
        second = {p.name: p.read_bytes() for p in build(Path(b), ["masks", "sinusoid_pairs"])}
    assert first == second


def test_diagrams_are_light_cards_with_text():
    for diagram in DIAGRAMS:
        svg = (OUTPUT / diagram.file).read_text(encoding="utf-8")
        assert "fill: #ffffff" in svg, f"{diagram.file}: no white card behind the drawing"
        assert svg_text(diagram.name), f"{diagram.file}: no text (svg.fonttype must be 'none')"
        assert "<dc:date>" not in svg, f"{diagram.file}: a date makes the file change on every run"


# For each diagram that labels shapes, the shapes computed here, directly with tfmini and the chapter's
# configuration (read from the chapter's code), independently of diagrams/shapes.py.
def expected_quick_tour():
    train = tfmini.spelled_numbers(*call_arguments(0, "spelled_numbers", 0)[0], **call_keywords(0, "spelled_numbers", 0))
    test = tfmini.spelled_numbers(*call_arguments(0, "spelled_numbers", 2)[0], **call_keywords(0, "spelled_numbers", 2))
    src_vocab, tgt_vocab = tfmini.Vocab.build(s for s, _ in train), tfmini.Vocab.build(t for _, t in train)
    args, kwargs = call_arguments(0, "Batches", 2)
    src, tgt = next(iter(tfmini.Batches(tfmini.encode_pairs(test, src_vocab, tgt_vocab), *args[1:], **kwargs)))
    model = tfmini.Transformer(tfmini.TransformerConfig(len(tgt_vocab), src_vocab_size=len(src_vocab),
                                                        **assigned(0, "CONFIG")))
    with torch.no_grad():
        memory, _ = model.encode(src)
        logits, w = model(src, tgt[:, :-1], need_weights=True)
    return {tuple(src.shape), tuple(tgt[:, :-1].shape), tuple(memory.shape), tuple(logits.shape),
            tuple(w["cross"][0].shape)}


def expected_multi_head():
    B, T, d, H = assigned(5, "B, T, d, H")
    mha = tfmini.MultiHeadAttention(d, H)
    x = torch.randn(B, T, d)
    q = mha.project_q(x)
    out, w = mha(x, x, x, need_weights=True)
    return {tuple(x.shape), tuple(q.shape), tuple(w.shape), tuple(out.shape)}


def expected_self_attention():
    d, (d_k, d_v) = assigned(4, "d"), assigned(4, "d_k, d_v")
    T = len(assigned(4, "words"))
    q, k, v = torch.randn(T, d_k), torch.randn(T, d_k), torch.randn(T, d_v)
    z, w = tfmini.scaled_dot_product_attention(q, k, v)
    return {(T, d), (T, d_k), (T, d_v), tuple(w.shape), tuple(z.shape)}


def expected_block():
    d, heads, d_ff, B, T = assigned(7, "d_e, heads, d_ff_e, B, T_e")
    layer = tfmini.EncoderLayer(d, heads, d_ff)
    x = torch.randn(B, T, d)
    out, w = layer(x, need_weights=True)
    return {tuple(x.shape), tuple(out.shape), tuple(w.shape), tuple(layer.ff.linear1(x).shape)}


def expected_decoder_layer():
    T, d_ff = assigned(8, "T_layer, d_ff")
    D, _ = assigned(8, "D, d_kc")
    B, H = assigned(8, "B, H")
    S = len(assigned(8, "src_words"))
    layer = tfmini.DecoderLayer(D, H, d_ff)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    out, w = layer(x, memory, need_weights=True, is_causal=True)
    return {tuple(x.shape), tuple(memory.shape), tuple(out.shape), tuple(w["self"].shape), tuple(w["cross"].shape),
            tuple(layer.ff.linear1(x).shape)}


def expected_masks():
    words, sentences = assigned(8, "words"), assigned(8, "sentences")
    vocab = tfmini.Vocab.build(sentences)
    tgt = tfmini.pad_sequences([vocab.encode(s, bos=True) for s in sentences], vocab.pad_id)
    pad = tfmini.mask_from_ids(tgt, vocab.pad_id)
    both = tfmini.attention_mask(pad, tfmini.causal_mask(tgt.shape[1]))
    return {tuple(tfmini.causal_mask(len(words)).shape), tuple(pad.shape), tuple(both.shape)}


EXPECTED = {
    "quick_tour_model": expected_quick_tour,
    "multi_head_split": expected_multi_head,
    "scaled_dot_product": expected_self_attention,
    "block_post_pre_ln": expected_block,
    "decoder_layer": expected_decoder_layer,
    "masks": expected_masks,
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shape_labels_are_what_tfmini_computes(name):
    assert labelled_shapes(name) == EXPECTED[name](), (
        f"{name}.svg labels {sorted(labelled_shapes(name))}; tfmini on the chapter's configuration gives "
        f"{sorted(EXPECTED[name]())}")


def chapter_output_text(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


@pytest.mark.parametrize("name, chapter, at_least", [("quick_tour_model", 0, 1), ("full_transformer", 9, 4),
                                                     ("multi_head_split", 5, 3)])
def test_shape_labels_match_what_the_chapter_prints(name, chapter, at_least):
    """The shapes a chapter's own cells printed when it was executed appear in its diagram."""
    printed = {tuple(int(n) for n in m.strip("()").split(", "))
               for m in SHAPE.findall(chapter_output_text(CHAPTERS[chapter]))}
    shared = printed & labelled_shapes(name)
    assert len(shared) >= at_least, f"{name}.svg shares {sorted(shared)} with what chapter {chapter} printed"


def figures(path: Path) -> list[dict]:
    """The diagram figures of a chapter, in order, with their cell index and options."""
    found = []
    nb = nbformat.read(path, as_version=4)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            for m in FIGURE.finditer(cell.source):
                options = {o["key"]: o["value"].strip() for o in OPTION.finditer(m["body"])}
                caption = OPTION.sub("", m["body"]).strip()
                found.append({"cell": index, "file": m["file"], "caption": caption, **options,
                              "text": cell.source})
    return found


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_chapter_opens_with_a_diagram(path):
    found = figures(path)
    assert found, f"{path.name} shows no diagram of images/diagrams/"
    # among the first cells: after the opening, the setup cells and at most a short motivation
    assert found[0]["cell"] <= 4, f"{path.name}: the first diagram is in cell {found[0]['cell']}, not among the first"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_figures_have_name_alt_caption_and_are_referred_to(path):
    markdown = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    for figure in figures(path):
        assert (OUTPUT / figure["file"]).is_file(), f"{path.name}: {figure['file']} does not exist"
        assert figure.get("name", "").startswith("fig-"), f"{path.name}: {figure['file']} needs a :name: fig-..."
        assert len(figure.get("alt", "")) > 40, f"{path.name}: {figure['file']} needs alt text that describes it"
        assert figure["caption"], f"{path.name}: {figure['file']} needs a caption"
        assert f"{{numref}}`{figure['name']}`" in markdown, f"{path.name}: the text never refers to {figure['name']}"
        stem = figure["file"].removesuffix(".svg")
        labels = labelled_shapes(stem)
        for shape in SHAPE.findall(figure["alt"] + figure["caption"]):
            assert tuple(int(n) for n in shape.strip("()").split(", ")) in labels, (
                f"{path.name}: the alt text of {figure['file']} says {shape}, the diagram does not")


def test_every_diagram_is_shown_by_its_chapter():
    shown = {f["file"]: int(p.name[:2]) for p in CHAPTERS for f in figures(p)}
    for diagram in DIAGRAMS:
        chapter = [p for p in CHAPTERS if int(p.name[:2]) == diagram.chapter]
        if not chapter:
            continue  # the chapter is not written yet
        assert shown.get(diagram.file) == diagram.chapter, (
            f"{diagram.file} belongs to chapter {diagram.chapter}, which does not show it")


def test_beam_search_caption_quotes_the_toy_model():
    """The log-probabilities in chapter 10's beam-search caption are those of the diagram's toy model."""
    import math

    from diagrams.scale import TOY_MODEL

    def logp(*tokens):
        return sum(math.log(TOY_MODEL[tokens[:i]][tok]) for i, tok in enumerate(tokens))

    text = "\n".join(c.source for c in nbformat.read(ROOT / "chapters" / "10_decoding.ipynb", as_version=4).cells
                     if c.cell_type == "markdown")
    figure = next(m for m in FIGURE.finditer(text) if m["file"] == "beam_search.svg")["body"]
    quoted = {float(x.replace("−", "-")) for x in re.findall(r"[−-]\d+\.\d\d", figure)}
    sequences = [(t,) for t in TOY_MODEL[()]] + [p + (t,) for p in TOY_MODEL if p for t in TOY_MODEL[p]]
    sequences += [p + (t,) for p in TOY_MODEL if len(p) == 2 for t in TOY_MODEL[p]]
    possible = {round(logp(*seq), 2) for seq in sequences if all(seq[:i] in TOY_MODEL for i in range(len(seq)))}
    central = {round(logp(*seq), 2) for seq in (("2", "4"), ("4", "2"), ("2", "4", "<eos>"), ("4", "2", "<eos>"))}
    assert quoted <= possible, f"beam-search caption and alt text quote {sorted(quoted - possible)}, not in the toy model"
    assert central <= quoted, f"the caption should quote greedy's and beam search's results {sorted(central)}"
    assert logp("4", "2") > logp("2", "4") and logp("4", "2", "<eos>") > logp("2", "4", "<eos>")
