"""Consistency of the repository around the notebooks: configuration, README, Colab setup cells,
table of contents and committed outputs."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
NOTEBOOKS = sorted(CHAPTERS.glob("*.ipynb"))

# The first code cell of every chapter: on Colab, install tfmini from the course repository.
SETUP_CELL = re.compile(
    r'^if "google\.colab" in sys\.modules:[ \t]*\n'
    r'[ \t]+%pip install -q "tfmini @ git\+(?P<url>[^"@\s]+)@(?P<branch>[^"\s]+)"[ \t]*$',
    re.MULTILINE,
)


def notebook_params():
    if not NOTEBOOKS:
        return [pytest.param(None, marks=pytest.mark.skip(reason="no notebooks in chapters/ yet"))]
    return [pytest.param(p, id=p.name) for p in NOTEBOOKS]


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def repository(config) -> tuple[str, str]:
    repo = config["repository"]
    return repo["url"].rstrip("/"), repo["branch"]


def code_cells(nb: nbformat.NotebookNode) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def test_config_repository_is_a_github_url(repository):
    url, branch = repository
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url), url
    assert branch == "main"


def test_readme_installs_from_the_configured_repository(repository):
    url, branch = repository
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f'pip install "tfmini @ git+{url}@{branch}"' in readme
    # No other GitHub repository is named as the course's home.
    for other in set(re.findall(r"git\+(https://github\.com/[\w.-]+/[\w.-]+?)(?:\.git)?@", readme)):
        assert other == url, f"README installs from {other}, _config.yml says {url}"


@pytest.mark.parametrize("path", notebook_params())
def test_notebook_starts_with_colab_setup_cell(path, repository):
    cells = code_cells(read(path))
    assert cells, f"{path.name} has no code cell"
    source = cells[0].source
    match = SETUP_CELL.search(source)
    assert match, (
        f"{path.name}: the first code cell must be the Colab setup cell:\n"
        'import sys\nif "google.colab" in sys.modules:\n'
        '    %pip install -q "tfmini @ git+<repository url>@v<version>"\n'
        f"found:\n{source}"
    )
    assert re.search(r"^import sys\b|^import .*\bsys\b", source[: match.start()], re.MULTILINE), (
        f"{path.name}: the setup cell must import sys before testing sys.modules"
    )
    url, _ = repository
    tag = f"v{tfmini_version()}"
    assert (match["url"].removesuffix(".git"), match["branch"]) == (url, tag), (
        f"{path.name} installs from {match['url']}@{match['branch']}; expected {url}@{tag}, the release whose "
        "code produced the outputs (bash scripts/execute.sh pins it; see the README's 'Cut a release')"
    )


def tfmini_version() -> str:
    return re.search(r'^__version__ = "([^"]+)"', (ROOT / "tfmini" / "__init__.py").read_text(), re.MULTILINE)[1]


def test_the_package_and_pyproject_agree_on_the_version():
    pyproject = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)[1]
    assert pyproject == tfmini_version()


def toc_files(node) -> list[str]:
    files = []
    if isinstance(node, dict):
        if "file" in node:
            files.append(node["file"])
        for key, value in node.items():
            if key != "file":
                files.extend(toc_files(value))
    elif isinstance(node, list):
        for item in node:
            files.extend(toc_files(item))
    return files


def test_toc_lists_existing_files_and_every_chapter():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    assert toc["format"] == "jb-book"
    listed = [toc["root"], *toc_files(toc)]
    assert len(listed) == len(set(listed)), f"listed twice: {sorted({f for f in listed if listed.count(f) > 1})}"
    for entry in listed:
        stem = ROOT / Path(entry).with_suffix("") if Path(entry).suffix in {".md", ".ipynb"} else ROOT / entry
        found = [s for s in (".md", ".ipynb") if stem.with_suffix(s).is_file()]
        assert len(found) == 1, f"_toc.yml lists {entry!r}: expected exactly one of .md/.ipynb, found {found}"
    stems = {str(Path(f).with_suffix("")) if Path(f).suffix in {".md", ".ipynb"} else f for f in listed}
    unlisted = [p.name for p in NOTEBOOKS if f"chapters/{p.stem}" not in stems]
    assert not unlisted, f"notebooks missing from _toc.yml: {unlisted}"


@pytest.mark.parametrize("path", notebook_params())
def test_notebook_outputs_come_from_the_execute_command(path):
    cells = [c for c in code_cells(read(path)) if c.source.strip()]
    counts = [c.execution_count for c in cells]
    assert counts == list(range(1, len(cells) + 1)), (
        f"{path.name}: execution counts {counts}; run `bash scripts/execute.sh chapters/{path.name}`"
    )
    for number, cell in enumerate(cells, start=1):
        if "raises-exception" in cell.metadata.get("tags", []):
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert not errors, f"{path.name}, cell [{number}]: {errors[0].ename}: {errors[0].evalue}"


# Folded blocks (answers, solutions, Deeper sections) are MyST dropdowns, which scripts/colab.py turns into
# HTML <details> for Colab, or HTML <details> blocks written so that both MyST (the site) and Jupyter /
# Colab render them: the markdown inside is separated from the tags by blank lines, because CommonMark
# ends an HTML block at a blank line. sphinx-exercise's {solution} and {exercise} have no Colab form.
MYST_ONLY_COLLAPSIBLE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,})\{(solution|exercise)\}", re.MULTILINE)
DETAILS_OPEN = re.compile(r"^<details( open)?>\n<summary>(?P<summary>[^<\n]+)</summary>\n\n", re.MULTILINE)
DROPDOWN_OPEN = re.compile(r"^(?P<fence>:{3,}|`{3,})\{(?:dropdown|toggle)\}[ \t]*(?P<summary>[^\n]*)$", re.MULTILINE)


def markdown_cells(nb: nbformat.NotebookNode) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "markdown"]


@pytest.mark.parametrize("path", notebook_params())
def test_collapsible_blocks_render_in_jupyter_and_on_the_site(path):
    for number, source in enumerate(markdown_cells(read(path)), start=1):
        found = MYST_ONLY_COLLAPSIBLE.search(source)
        assert not found, (
            f"{path.name}, markdown cell {number}: {found.group(0).strip()!r} shows as raw text in Colab; "
            "write answers and solutions as {dropdown} or <details><summary>...</summary> blocks"
        )
        opened = len(re.findall(r"<details\b", source))
        well_formed = len(DETAILS_OPEN.findall(source))
        closed = len(re.findall(r"(?:^|\n)\n</details>(?:\n|$)", source))
        assert opened == well_formed == closed == source.count("</details>"), (
            f"{path.name}, markdown cell {number}: every block must read '<details>', "
            "'<summary>Title</summary>', a blank line, the markdown, a blank line, '</details>' "
            f"(found {opened} opening tags, {well_formed} well-formed openings, {closed} well-formed closings)"
        )


@pytest.mark.parametrize("path", notebook_params())
def test_chapter_has_exercises_with_solutions(path):
    summaries = [m["summary"].strip() for s in markdown_cells(read(path))
                 for pattern in (DETAILS_OPEN, DROPDOWN_OPEN) for m in pattern.finditer(s)]
    solutions = [s for s in summaries if s.lower().startswith("solution")]
    assert len(solutions) >= 2, f"{path.name}: expected at least two exercises with solutions, found {summaries}"


# A chapter is read in one sitting: its unfolded text up to the questions and exercises stays under this
# many words (words of the markdown cells, equations and folded {dropdown} blocks left out). A longer
# chapter is split in two.
BODY_WORDS = 3500
QUESTIONS = re.compile(r"^## Check your understanding", re.MULTILINE)


def body_words(nb: nbformat.NotebookNode) -> int:
    """Words of the markdown before the chapter's questions and exercises, without $...$ mathematics and
    folded {dropdown} blocks."""
    words = 0
    for source in markdown_cells(nb):
        found = QUESTIONS.search(source)
        text = source[:found.start()] if found else source
        text = re.sub(r"^(?P<fence>:{3,}|`{3,})\{(?:dropdown|toggle)\}.*?^(?P=fence)[ \t]*$", " ", text,
                      flags=re.MULTILINE | re.DOTALL)
        words += len(re.findall(r"\w+", re.sub(r"\$\$.*?\$\$|\$[^$]*\$", " ", text, flags=re.DOTALL)))
        if found:
            break
    return words


@pytest.mark.parametrize("path", notebook_params())
def test_chapter_reads_in_one_sitting(path):
    nb = read(path)
    assert any(QUESTIONS.search(s) for s in markdown_cells(nb)), f"{path.name}: no '## Check your understanding'"
    words = body_words(nb)
    assert words <= BODY_WORDS, (
        f"{path.name}: {words:,} words before its questions and exercises, more than {BODY_WORDS:,}: "
        "tighten it or split it into two chapters")


def _load_script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Clock and test-set couplings that make a notebook's result depend on the machine or on the test data.
TIME_LIMIT = re.compile(r"\btime_limit\s*=\s*\d")
CLOCK_ASSERT = re.compile(r"assert\b.*\b(runtime|seconds|elapsed|time)\b[^,]*?[<>]=?\s*[\d.]+(?!\s*\*)")
TEST_STOP = re.compile(r"eval_fn\s*=\s*\w*test")


def test_intro_runtime_table_lists_every_chapter():
    runtimes = _load_script("runtimes")
    assert runtimes.main(["--check"]) == 0, "intro.md's run-time table must have one row per chapter"


@pytest.mark.parametrize("path", notebook_params())
def test_no_clock_or_test_set_decides_a_result(path):
    """Fixed step counts, no wall-clock asserts, no stopping on test data: one slow core gives the same results."""
    for number, cell in enumerate(code_cells(read(path))):
        code = "\n".join(line.split("#")[0] for line in cell.source.splitlines())
        for line in code.splitlines():
            for pattern, why in ((TIME_LIMIT, "trains to a time limit"), (CLOCK_ASSERT, "asserts a wall-clock time")):
                found = pattern.search(line)
                assert not found, f"{path.name}, code cell {number}: {why}: {found.group(0)!r}"
        if "stop_fn" in code:
            assert not TEST_STOP.search(code), f"{path.name}, code cell {number}: stops training on test data"


def test_learning_path_figure_follows_the_table_of_contents():
    learning_path = _load_script("learning_path")
    assert (ROOT / "images" / "learning_path.svg").is_file(), "run python scripts/learning_path.py"
    assert "images/learning_path.svg" in (ROOT / "intro.md").read_text(encoding="utf-8")
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    figure = {number: caption for caption, _, chapters in learning_path.PARTS for number, _ in chapters}
    assert sorted(figure) == list(range(len(figure))), f"the figure's chapters are not 0..N: {sorted(figure)}"
    for part in toc["parts"]:
        for entry in part.get("chapters", []):
            stem = Path(entry["file"]).stem
            if Path(entry["file"]).parent.name == "chapters" and stem[:2].isdigit():
                assert figure.get(int(stem[:2])) == part["caption"], (
                    f"{entry['file']} is in the part {part['caption']!r} of _toc.yml but in "
                    f"{figure.get(int(stem[:2]))!r} in scripts/learning_path.py"
                )
    for a, b in learning_path.BUILDS_ON:
        assert a < b and a in figure and b in figure, f"arrow {a} -> {b} does not go forward between chapters"


def test_github_workflows_are_valid_and_a_broken_one_is_rejected(tmp_path):
    """The publishing and pull-request workflows pass GitHub's workflow schema; the check can fail."""
    import shutil
    import subprocess
    exe = shutil.which("check-jsonschema")
    if exe is None:
        pytest.skip("check-jsonschema is not installed (requirements.txt has it)")
    workflows = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
    assert {p.name for p in workflows} >= {"book.yml", "test.yml"}
    book = (ROOT / ".github" / "workflows" / "book.yml").read_text()
    assert "bash scripts/book.sh" in book and "deploy-pages" in book and "branches: [main]" in book
    assert "bash scripts/test.sh" in (ROOT / ".github" / "workflows" / "test.yml").read_text()
    ok = subprocess.run([exe, "--builtin-schema", "vendor.github-workflows", *map(str, workflows)],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text("name: broken\non: push\njobs:\n  x:\n    steps: 3\n")
    bad = subprocess.run([exe, "--builtin-schema", "vendor.github-workflows", str(broken)], capture_output=True, text=True)
    assert bad.returncode != 0
