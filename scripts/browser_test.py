"""Browser test of the built site: open every page of ``_build/html`` in headless Chromium.

    python scripts/browser_test.py                 # the site in _build/html
    python scripts/browser_test.py --site DIR      # another build
    python scripts/browser_test.py --only chapters/04_self_attention.html

The site is served from a local HTTP server (a thread of this script, on 127.0.0.1) and opened with
Playwright driving Debian's Chromium (``/usr/bin/chromium``; ``bash scripts/chromium.sh`` installs
it). No browser is downloaded. For every HTML page of the build it checks that

- the page loads with no console error, no uncaught JavaScript error, no failed or unsuccessful
  request to the local server, and no request leaving it (the site must work offline);
- MathJax has finished typesetting: every ``math`` element Sphinx wrote holds a rendered
  ``mjx-container``, and no raw ``$$``, ``\\(``, ``\\)``, ``\\[``, ``\\]``, ``\\begin{`` or ``$x$``-like
  dollar math is left in the text outside code;
- every ``<img>`` has loaded (``complete`` and ``naturalWidth > 0``);
- every link into the site resolves: the target file exists and its ``#fragment``, if any, is an
  ``id`` (or ``name``) in the target page;
- every collapsible block (``<details>``) opens, and the math inside it is rendered;
- each chapter page (one per notebook of ``chapters/`` that ``_toc.yml`` lists) has a Colab launch
  link to exactly ``https://colab.research.google.com/github/<org>/<repo>/blob/<branch>/colab/<chapter>.ipynb``,
  the chapter's Colab copy (``scripts/colab.py``), with the repository and branch of ``_config.yml``;
- each chapter page shows at least one diagram of ``images/diagrams/`` (``python -m diagrams``): an
  ``<img>`` with alt text that has loaded and is displayed, in the light and in the dark theme (the
  pydata theme's ``data-theme`` on ``<html>``); the page's background must really change, and in
  the dark theme the diagram must stay legible: most of its pixels opaque and light (its own card);
- the figures of a chapter are numbered "Figure <chapter>.<k>" in page order
  (``scripts/sphinx_figure_numbers.py``; ``scripts/colab.py`` writes the same numbers);
- no output of a code cell on a chapter page is wider than its column at the 1280-pixel viewport: no
  line of a text output (``div.cell_output pre``: printed text, ``text/plain`` results) has to wrap
  (``_static/tfmini.css`` wraps them on narrower screens), and no table output
  (``tfmini.notebook.show_table``) is wider than the output area; the failure names the first line
  that does not fit (print fewer characters a line, or show a table);

and that the search page finds results for "attention". It prints a summary and exits with 1 and a
list of the failures if any check fails (2 if it cannot run at all).
"""

from __future__ import annotations

import argparse
import functools
import html.parser
import http.server
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urljoin, urlsplit

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
# Flags for a closed network: without the background-networking ones Chromium keeps trying to reach
# its own services, and those connections are refused.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Templates that Sphinx themes copy into _static; they are not pages.
NOT_PAGES = ("_static/",)
SEARCH_TERM = "attention"
TIMEOUT_MS = 30_000

# Text nodes outside these elements are "visible text" for the raw-delimiter check.
JS_PAGE_FACTS = r"""
async () => {
  const SKIP = new Set(["SCRIPT", "STYLE", "PRE", "CODE", "TEXTAREA", "KBD", "SAMP", "NOSCRIPT"]);
  function isSkipped(node) {
    for (let el = node.parentElement; el; el = el.parentElement) {
      if (SKIP.has(el.tagName) || el.tagName.startsWith("MJX-") || el.classList.contains("highlight")) return true;
    }
    return false;
  }
  // Images: lazy ones are made eager, then every image is awaited.
  const imgs = Array.from(document.images);
  imgs.forEach(img => { if (img.loading === "lazy") img.loading = "eager"; });
  await Promise.race([
    Promise.all(imgs.map(img => img.complete ? null :
      new Promise(r => { img.addEventListener("load", r); img.addEventListener("error", r); }))),
    new Promise(r => setTimeout(r, 15000)),
  ]);
  const images = imgs.map(img => ({src: img.currentSrc || img.src, ok: img.complete && img.naturalWidth > 0}));
  // Math: Sphinx writes each equation into an element of class "math"; MathJax renders into it.
  const mathEls = Array.from(document.querySelectorAll("span.math, div.math"));
  const unrendered = mathEls.filter(el => !el.querySelector("mjx-container"))
                            .map(el => el.textContent.trim().slice(0, 80));
  const rendered = document.querySelectorAll("mjx-container").length;
  // Visible text outside code, math and scripts.
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const texts = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (!isSkipped(n) && n.nodeValue.trim()) texts.push(n.nodeValue);
  }
  // Anchors, and the <link>s of the head (next/prev pages, stylesheets, icons).
  const links = Array.from(document.querySelectorAll("a[href], link[href]")).map(a => a.href);
  const ids = Array.from(document.querySelectorAll("[id], a[name]")).map(el => el.id || el.getAttribute("name"));
  // Collapsible blocks: each must open, and math inside it must be rendered.
  const details = Array.from(document.querySelectorAll("details"));
  const detailsFacts = details.map(d => {
    d.open = true;
    const summary = d.querySelector("summary");
    const inner = Array.from(d.querySelectorAll("span.math, div.math"));
    return {
      summary: summary ? summary.textContent.trim() : "",
      opened: d.open && d.getBoundingClientRect().height > (summary ? summary.getBoundingClientRect().height : 0),
      math: inner.length,
      mathRendered: inner.filter(el => el.querySelector("mjx-container")).length,
    };
  });
  return {images, mathCount: mathEls.length, unrendered, rendered, text: texts.join("\n"), links, ids,
          details: detailsFacts, hasMathJax: !!document.querySelector('script[src*="mathjax"]')};
}
"""

# The diagrams of the book, by file name: Sphinx copies them into _images/ under the same name.
DIAGRAMS = sorted(p.name for p in (ROOT / "images" / "diagrams").glob("*.svg"))
# In the dark theme a diagram must bring its own light background: at least this share of its pixels
# opaque and light.
LIGHT_SHARE = 0.6

JS_DIAGRAMS = r"""
async (names) => {
  const file = img => (img.currentSrc || img.src).split("/").pop().split("?")[0].split("#")[0];
  const imgs = Array.from(document.images).filter(img => names.includes(file(img)));
  const rgb = c => (c.match(/[\d.]+/g) || [0, 0, 0]).slice(0, 3).map(Number);
  const luminance = ([r, g, b]) => 0.2126 * r + 0.7152 * g + 0.0722 * b;
  const frame = () => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const results = [];
  for (const theme of ["light", "dark"]) {
    document.documentElement.dataset.theme = theme;
    await frame();
    const background = luminance(rgb(getComputedStyle(document.body).backgroundColor));
    for (const img of imgs) {
      const box = img.getBoundingClientRect();
      let light = 0, total = 0;
      if (img.complete && img.naturalWidth > 0) {
        const canvas = document.createElement("canvas");
        canvas.width = img.naturalWidth;
        canvas.height = img.naturalHeight;
        const ctx = canvas.getContext("2d");
        ctx.drawImage(img, 0, 0, canvas.width, canvas.height);
        const data = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
        for (let i = 0; i < data.length; i += 4 * 7) {
          total += 1;
          if (data[i + 3] >= 250 && luminance([data[i], data[i + 1], data[i + 2]]) >= 225) light += 1;
        }
      }
      results.push({theme, file: file(img), alt: img.alt || "", loaded: img.complete && img.naturalWidth > 0,
                    shown: box.width > 0 && box.height > 0 && getComputedStyle(img).visibility !== "hidden",
                    lightShare: total ? light / total : 0, background});
    }
  }
  const numbers = Array.from(document.querySelectorAll("figure .caption-number"))
                       .map(el => el.textContent.trim().replace(/[.:]$/, ""));
  return {results, numbers};
}
"""

# Outputs of code cells wider than their column. Text outputs (a <pre>) wrap long lines
# (_static/tfmini.css), so a phone shows them without a scroll bar; at 1280 pixels no line may need to.
# Each block is laid out again without wrapping in a hidden copy: if that copy is wider than the block,
# a line wraps, and the first such line is found by laying out each line alone. A table output (a
# markdown output, tfmini.notebook.show_table) must fit in the output area of its cell.
JS_WIDE_OUTPUTS = r"""
() => {
  const found = [];
  const pres = Array.from(document.querySelectorAll("div.cell_output pre"));
  pres.forEach((pre, index) => {
    const probe = pre.cloneNode(false);
    probe.style.visibility = "hidden";
    probe.style.whiteSpace = "pre";
    probe.style.overflowWrap = "normal";
    pre.parentNode.appendChild(probe);
    probe.textContent = pre.textContent;
    const natural = probe.scrollWidth;
    let line = "";
    if (natural > pre.clientWidth + 1) {
      for (const candidate of pre.textContent.split("\n")) {
        probe.textContent = candidate;
        if (probe.scrollWidth > pre.clientWidth + 1) { line = candidate; break; }
      }
    }
    probe.remove();
    if (natural <= pre.clientWidth + 1) return;
    found.push({kind: "text output", index, scrollWidth: natural, clientWidth: pre.clientWidth, line});
  });
  const tables = Array.from(document.querySelectorAll("div.cell_output table"));
  tables.forEach((table, index) => {
    const area = table.closest("div.cell_output");
    const width = table.getBoundingClientRect().width;
    if (width <= area.clientWidth + 1) return;
    const header = table.querySelector("tr");
    found.push({kind: "table output", index, scrollWidth: Math.round(width), clientWidth: area.clientWidth,
                line: header ? header.textContent.trim().replace(/\s+/g, " ") : ""});
  });
  return {found, pres: pres.length, tables: tables.length};
}
"""
# Longest part of an offending line quoted in a failure.
QUOTE_CHARS = 120

RAW_MATH = [
    (re.compile(r"\$\$"), "$$"),
    (re.compile(r"\\\("), r"\("),
    (re.compile(r"\\\)"), r"\)"),
    (re.compile(r"\\\["), r"\["),
    (re.compile(r"\\\]"), r"\]"),
    (re.compile(r"\\begin\{"), r"\begin{"),
    (re.compile(r"\$[A-Za-z\\{][^$\n]{0,80}?\$"), "$...$"),
]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


def serve(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve ``directory`` on 127.0.0.1 (a free port) from a daemon thread."""
    handler = functools.partial(_Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


class _Ids(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value and (name == "id" or (tag == "a" and name == "name")):
                self.ids.add(value)


@functools.lru_cache(maxsize=None)
def static_ids(path: Path) -> frozenset[str]:
    parser = _Ids()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return frozenset(parser.ids)


@dataclass
class Report:
    pages: int = 0
    links: int = 0
    link_targets: set = field(default_factory=set)
    external_links: int = 0
    equations: int = 0
    rendered: int = 0
    images: int = 0
    details: int = 0
    colab: int = 0
    diagrams: int = 0
    outputs: int = 0
    failures: list[str] = field(default_factory=list)

    def fail(self, page: str, message: str) -> None:
        self.failures.append(f"{page}: {message}")


def toc_chapters() -> list[Path]:
    """The notebooks of chapters/ that _toc.yml lists: each is a page of the site."""
    listed = set(re.findall(r"^\s*-?\s*file:\s*(chapters/\S+?)(?:\.ipynb)?\s*$",
                            (ROOT / "_toc.yml").read_text(encoding="utf-8"), re.MULTILINE))
    return [p for p in sorted((ROOT / "chapters").glob("*.ipynb")) if f"chapters/{p.stem}" in listed]


def expected_colab_url(stem: str) -> str:
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    repo = config["repository"]
    owner_name = urlsplit(repo["url"].rstrip("/")).path.strip("/").removesuffix(".git")
    book = (repo.get("path_to_book") or "").strip("/")
    path = f"{book}/colab/{stem}.ipynb" if book else f"colab/{stem}.ipynb"
    return f"https://colab.research.google.com/github/{owner_name}/blob/{repo.get('branch', 'main')}/{path}"


REFRESH = re.compile(r'<meta\s+http-equiv="refresh"\s+content="\d+;\s*url=([^"]+)"', re.IGNORECASE)


def redirect_target(path: Path) -> str | None:
    """The URL a page forwards to with a ``<meta http-equiv="refresh">``, if it does."""
    found = REFRESH.search(path.read_text(encoding="utf-8", errors="replace")[:2000])
    return found.group(1) if found else None


def resolve_local(site: Path, base: str, url: str) -> tuple[Path | None, str]:
    """The file that a URL of the local server points to, and its fragment."""
    parts = urlsplit(url)
    rel = unquote(parts.path)[len(urlsplit(base).path):]
    target = site / rel
    if not rel or rel.endswith("/") or target.is_dir():
        target = target / "index.html"
    return (target if target.is_file() else None), unquote(parts.fragment)


def check_page(page, site: Path, base: str, rel: str, report: Report, chapters: dict[str, str]) -> None:
    url = base + rel
    problems: list[str] = []

    # The browser asks the server root for /favicon.ico by itself when a page names no icon; that
    # request is not the site's.
    favicon = base + "favicon.ico"

    def on_console(msg):
        if msg.type == "error":
            where = msg.location.get("url", "") if msg.location else ""
            if where == favicon:
                return
            problems.append(f"console error: {msg.text}" + (f" ({where})" if where else ""))

    def on_request_failed(request):
        if request.url.startswith(base) and request.url != favicon:
            problems.append(f"request failed: {request.url} ({request.failure})")

    def on_response(response):
        if response.url.startswith(base) and response.status >= 400 and response.url != favicon:
            problems.append(f"HTTP {response.status}: {response.url}")

    def on_request(request):
        if not request.url.startswith((base, "data:", "blob:", "about:")):
            problems.append(f"request outside the site: {request.url}")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("requestfailed", on_request_failed)
    page.on("response", on_response)
    page.on("request", on_request)

    redirect = redirect_target(site / rel)
    response = page.goto(url, wait_until="load", timeout=TIMEOUT_MS)
    if response is None or not response.ok:
        report.fail(rel, f"page did not load (status {response.status if response else 'none'})")
        return
    if redirect is not None:
        # A page that only forwards (index.html -> intro.html): its target must exist and the browser
        # must arrive there; the target is checked as a page of its own.
        report.pages += 1
        report.links += 1
        target_url = urljoin(url, redirect)
        target, _ = resolve_local(site, base, target_url)
        if target is None:
            problems.append(f"redirects to a missing page: {redirect}")
        else:
            try:
                page.wait_for_url(target_url, timeout=TIMEOUT_MS)
                page.wait_for_load_state("load")
            except Exception:  # noqa: BLE001
                problems.append(f"does not forward to {redirect} (stays at {page.url})")
        for problem in problems:
            report.fail(rel, problem)
        return
    has_mathjax = page.evaluate("() => !!document.querySelector('script[src*=\"mathjax\"]')")
    if has_mathjax:
        try:
            page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise",
                                   timeout=TIMEOUT_MS)
            page.evaluate("async () => { await MathJax.startup.promise; "
                          "if (MathJax.typesetPromise) await MathJax.typesetPromise(); }")
        except Exception as exc:  # noqa: BLE001 - reported as a failure of the page
            problems.append(f"MathJax did not start: {exc}")
    facts = page.evaluate(JS_PAGE_FACTS)
    page.wait_for_timeout(100)  # late console messages

    report.pages += 1
    report.equations += facts["mathCount"]
    report.rendered += facts["rendered"]
    if facts["mathCount"] and not has_mathjax:
        problems.append(f"{facts['mathCount']} equation(s) but MathJax is not loaded")
    for tex in facts["unrendered"][:5]:
        problems.append(f"equation not rendered by MathJax: {tex!r}")
    if len(facts["unrendered"]) > 5:
        problems.append(f"... and {len(facts['unrendered']) - 5} more equations not rendered")
    for pattern, name in RAW_MATH:
        found = pattern.search(facts["text"])
        if found:
            start = max(found.start() - 40, 0)
            context = facts["text"][start:found.end() + 40].replace("\n", " ")
            problems.append(f"raw math delimiter {name} in the text: ...{context}...")

    for image in facts["images"]:
        report.images += 1
        if not image["ok"]:
            problems.append(f"image did not load: {image['src']}")

    for d in facts["details"]:
        report.details += 1
        if not d["opened"]:
            problems.append(f"collapsible block {d['summary']!r} does not open")
        if d["mathRendered"] < d["math"]:
            problems.append(f"collapsible block {d['summary']!r}: {d['math'] - d['mathRendered']} equation(s) "
                            "not rendered")

    live_ids = set(facts["ids"])
    for href in facts["links"]:
        scheme = urlsplit(href).scheme
        if not href.startswith(base):
            if scheme in ("http", "https"):
                report.external_links += 1
            continue
        report.links += 1
        target, fragment = resolve_local(site, base, href)
        report.link_targets.add(href)
        if target is None:
            problems.append(f"broken link: {href[len(base):]} (no such file)")
            continue
        if fragment and target.suffix == ".html":
            same_page = target == (site / rel)
            if fragment not in static_ids(target) and not (same_page and fragment in live_ids):
                problems.append(f"broken link: {href[len(base):]} (no id {fragment!r} in "
                                f"{target.relative_to(site)})")

    if rel in chapters:
        check_output_widths(page, report, problems, rel)
        check_diagrams(page, rel, report, problems)
        expected = chapters[rel]
        colab = sorted({h for h in facts["links"] if "colab.research.google.com" in h})
        report.colab += len(colab)
        if colab != [expected]:
            problems.append(f"Colab launch link: expected {expected}, found {colab or 'none'}")

    for problem in dict.fromkeys(problems):  # each distinct problem once, in order
        report.fail(rel, problem)


# Outputs known to be too wide, one a line: "<page><TAB><the start of its first too-wide line>". Each is
# a debt to pay (split the line and re-execute the chapter), never a new exception: an output that is
# too wide and not listed fails, and so does a listed one that is no longer found (delete its line).
KNOWN_WIDE_FILE = ROOT / "scripts" / "wide_outputs.txt"


def known_wide() -> dict[tuple[str, str], bool]:
    entries = {}
    if KNOWN_WIDE_FILE.is_file():
        for raw in KNOWN_WIDE_FILE.read_text(encoding="utf-8").splitlines():
            if raw.strip() and not raw.startswith("#"):
                page, _, start = raw.partition("\t")
                entries[(page, start)] = False
    return entries


KNOWN_WIDE = known_wide()


def check_output_widths(page, report: Report, problems: list[str], rel: str = "") -> None:
    """No output of a code cell is wider than its column (the viewport is 1280 pixels wide), except
    those listed in scripts/wide_outputs.txt."""
    facts = page.evaluate(JS_WIDE_OUTPUTS)
    report.outputs += facts["pres"] + facts["tables"]
    for wide in facts["found"]:
        line = wide["line"].rstrip()
        listed = [key for key in KNOWN_WIDE if key[0] == rel and line.startswith(key[1])]
        if listed:
            KNOWN_WIDE[listed[0]] = True
            continue
        quoted = line if len(line) <= QUOTE_CHARS else line[:QUOTE_CHARS] + "..."
        problems.append(f"{wide['kind']} {wide['index'] + 1} is wider than its column ({wide['scrollWidth']} > "
                        f"{wide['clientWidth']} px); first line too wide ({len(line)} characters): {quoted!r}")


def check_diagrams(page, rel: str, report: Report, problems: list[str]) -> None:
    """A chapter page shows a diagram, with alt text, in both themes; in the dark one it stays legible."""
    facts = page.evaluate(JS_DIAGRAMS, DIAGRAMS)
    results = facts["results"]
    if not results:
        problems.append("no diagram of images/diagrams/ on the page")
    backgrounds = {r["theme"]: r["background"] for r in results}
    if backgrounds and not backgrounds.get("dark", 255) < 80 < backgrounds.get("light", 0):
        problems.append(f"the dark theme did not darken the page (background luminance {backgrounds})")
    for r in results:
        if r["theme"] == "light":
            report.diagrams += 1
        where = f"diagram {r['file']} ({r['theme']} theme)"
        if not r["loaded"]:
            problems.append(f"{where} did not load")
        if not r["shown"]:
            problems.append(f"{where} is not displayed")
        if not r["alt"].strip():
            problems.append(f"{where} has no alt text")
        if r["theme"] == "dark" and r["lightShare"] < LIGHT_SHARE:
            problems.append(f"{where}: only {r['lightShare']:.0%} of its pixels are opaque and light, "
                            f"it needs its own light background to be legible")
    chapter = int(PurePosixPath(rel).name[:2])
    expected = [f"Figure {chapter}.{k}" for k in range(1, len(facts["numbers"]) + 1)]
    if facts["numbers"] != expected:
        problems.append(f"figures numbered {facts['numbers']}, expected {expected}")


def check_search(page, base: str, report: Report) -> int:
    """Search the site for SEARCH_TERM; returns the number of results."""
    page.goto(f"{base}search.html?q={SEARCH_TERM}", wait_until="load", timeout=TIMEOUT_MS)
    try:
        page.wait_for_function(
            "() => { const s = document.querySelector('#search-results .search-summary, #search-results p');"
            " return s && /found|did not match/i.test(s.textContent); }", timeout=TIMEOUT_MS)
    except Exception:  # noqa: BLE001
        report.fail("search.html", f"searching for {SEARCH_TERM!r} never finished")
        return 0
    hits = page.eval_on_selector_all("#search-results ul.search li a", "els => els.map(a => a.href)")
    if not hits:
        report.fail("search.html", f"searching for {SEARCH_TERM!r} found no result")
    elif not any("/chapters/" in h for h in hits):
        report.fail("search.html", f"searching for {SEARCH_TERM!r} found no chapter: {hits}")
    return len(hits)


def pages_of(site: Path) -> list[str]:
    pages = []
    for path in sorted(site.rglob("*.html")):
        rel = path.relative_to(site).as_posix()
        if not rel.startswith(NOT_PAGES):
            pages.append(rel)
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, default=ROOT / "_build" / "html", help="the built site")
    parser.add_argument("--only", nargs="*", default=None, help="check only these pages (paths in the site)")
    parser.add_argument("--verbose", action="store_true", help="print each page and its time")
    parser.add_argument("--chromium", default=CHROMIUM, help="the Chromium executable")
    args = parser.parse_args(argv)

    site = args.site.resolve()
    if not (site / "index.html").is_file():
        print(f"browser test: no built site in {site} (run bash scripts/book.sh first)", file=sys.stderr)
        return 2
    if not Path(args.chromium).is_file():
        print(f"browser test: {args.chromium} not found (bash scripts/chromium.sh installs it)", file=sys.stderr)
        return 2
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("browser test: Playwright for Python is not installed (pip install -r requirements.txt)",
              file=sys.stderr)
        return 2

    chapters = {f"chapters/{p.stem}.html": expected_colab_url(p.stem) for p in toc_chapters()}
    pages = args.only if args.only is not None else pages_of(site)
    report = Report()
    if args.only is None:
        for rel in chapters:
            if not (site / rel).is_file():
                report.fail(rel, "chapter page missing from the build")

    t0 = time.perf_counter()
    server, base = serve(site)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=args.chromium, headless=True,
                                         chromium_sandbox=False, args=CHROMIUM_ARGS)
            for rel in pages:
                # A fresh context per page: every page is a first visit, with empty browser storage.
                context = browser.new_context(viewport={"width": 1280, "height": 900}, service_workers="block")
                t_page = time.perf_counter()
                try:
                    check_page(context.new_page(), site, base, rel, report, chapters)
                    if args.verbose:
                        print(f"  {rel}: {time.perf_counter() - t_page:.1f} s", flush=True)
                except Exception as exc:  # noqa: BLE001 - one broken page must not hide the others
                    report.fail(rel, f"could not be checked: {exc}")
                finally:
                    context.close()
            results = 0
            if args.only is None:
                for (rel, start), seen in KNOWN_WIDE.items():
                    if not seen:
                        report.fail(rel, f"scripts/wide_outputs.txt lists a too-wide output {start!r} that is "
                                         "no longer there: delete its line")
                context = browser.new_context(service_workers="block")
                results = check_search(context.new_page(), base, report)
                context.close()
            browser.close()
    finally:
        server.shutdown()
    elapsed = time.perf_counter() - t0

    print(f"browser test: {report.pages} pages, {report.links} internal links "
          f"({len(report.link_targets)} distinct targets), {report.external_links} external links not "
          f"followed, {report.equations} equations ({report.rendered} MathJax renderings), "
          f"{report.images} images, {report.diagrams} diagrams in two themes, {report.details} collapsible "
          f"blocks, {report.colab} Colab links, {report.outputs} cell outputs checked for width, "
          f"search for {SEARCH_TERM!r}: {results} results; {elapsed:.1f} s")
    if report.failures:
        print(f"browser test: {len(report.failures)} failure(s):")
        for failure in report.failures:
            print(f"  - {failure}")
        return 1
    print("browser test: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
