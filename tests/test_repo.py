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
        '    %pip install -q "tfmini @ git+<repository url>@<branch>"\n'
        f"found:\n{source}"
    )
    assert re.search(r"^import sys\b|^import .*\bsys\b", source[: match.start()], re.MULTILINE), (
        f"{path.name}: the setup cell must import sys before testing sys.modules"
    )
    url, branch = repository
    assert (match["url"].removesuffix(".git"), match["branch"]) == (url, branch), (
        f"{path.name} installs from {match['url']}@{match['branch']}, _config.yml says {url}@{branch}"
    )


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
