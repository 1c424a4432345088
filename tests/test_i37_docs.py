"""Issue 37, documentation: the built site's links, offline search, the reference, the pages' code."""
import importlib.util
import logging
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- item 10: every local link of the built HTML resolves ------------------------------------------

@pytest.fixture
def check_links():
    return _load(ROOT / ".ci" / "check_links.py", "rsmooth_check_links")


def _site(root: Path, pages: dict) -> Path:
    for name, html in pages.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(html)
    return root


def test_i37_link_checker_passes_a_site_whose_links_resolve(check_links, tmp_path):
    site = _site(tmp_path, {
        "index.html": '<a href="guide/a.html#usage">a</a> <a href="#top" id="top">top</a> <img src="img/x.png">'
                      '<a href="https://example.org/missing.html">out</a> <a href="mailto:x@y">m</a>'
                      '<link href="assets/s.css"> <a href="guide/">folder</a> <a href="guide/a.html?q=1">q</a>',
        "guide/a.html": '<h2 id="usage">Usage</h2><a href="../index.html">home</a>',
        "guide/index.html": "<p>guide</p>", "img/x.png": "", "assets/s.css": ""})
    assert check_links.broken_links(site) == []
    assert check_links.main([str(site)]) == 0


def test_i37_link_checker_names_each_broken_link(check_links, tmp_path, capsys):
    """A missing page (the notebooks' ``../api.md`` before the fix), a missing anchor, a missing
    image, a link out of the site: each is one line, and the exit status is 1."""
    site = _site(tmp_path / "site", {
        "tutorials/nb.html": '<a href="../api.md">api</a> <a href="../guide.html#nowhere">g</a>'
                             '<img src="missing.png"> <a href="../../secret.html">out</a> <a href="#here">x</a>',
        "guide.html": '<h2 id="somewhere">S</h2>'})
    (tmp_path / "secret.html").write_text("")
    broken = check_links.broken_links(site)
    assert broken == ["tutorials/nb.html: ../api.md (no such file)",
                      "tutorials/nb.html: ../guide.html#nowhere (no anchor 'nowhere')",
                      "tutorials/nb.html: missing.png (no such file)",
                      "tutorials/nb.html: ../../secret.html (outside the site)",
                      "tutorials/nb.html: #here (no anchor 'here')"]
    assert check_links.main([str(site)]) == 1
    assert capsys.readouterr().out.count("broken link: ") == 5


def test_i37_ci_checks_the_built_sites_links_after_building_it():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    build = next(i for i, line in enumerate(ci) if "mkdocs build --strict --site-dir" in line and not line.startswith("#"))
    check = next(i for i, line in enumerate(ci) if line.startswith("python .ci/check_links.py"))
    assert build < check and '"$venv/site"' in ci[check] and '--site-dir "$venv/site"' in ci[build]


def test_i37_the_notebooks_links_point_at_the_built_pages(caplog):
    """docs/hooks.py rewrites a notebook's ``../guide/certify.md#x`` to the page's URL, and warns
    (failing a strict build) on one naming no page; Markdown pages are left to MkDocs."""
    from mkdocs.structure.files import File, Files

    hooks = _load(ROOT / "docs" / "hooks.py", "rsmooth_docs_hooks_i37")
    md = [File(p, "docs", "site", False) for p in ("api.md", "guide/certify.md", "tutorials/other.md")]
    notebook = File("tutorials/nb.ipynb", "docs", "site", False, dest_uri="tutorials/nb.html")
    files = Files([*md, notebook])
    html = ('<a href="../guide/certify.md#modes">c</a> <a href="../api.md">a</a> <a href="other.md">o</a>'
            ' <a href="https://x.org/y.md">x</a> <a href="../missing.md">m</a>')
    with caplog.at_level(logging.WARNING, logger="mkdocs"):
        out = hooks.on_page_content(html, page=SimpleNamespace(file=notebook), files=files)
    assert out == ('<a href="../guide/certify.html#modes">c</a> <a href="../api.html">a</a> <a href="other.html">o</a>'
                   ' <a href="https://x.org/y.md">x</a> <a href="../missing.md">m</a>')
    assert [r.getMessage() for r in caplog.records] == [
        "tutorials/nb.ipynb links to '../missing.md', which is not a page of the site"]
    page = SimpleNamespace(file=File("guide/certify.md", "docs", "site", False))
    assert hooks.on_page_content('<a href="x.md">', page=page, files=files) == '<a href="x.md">'


def test_i37_link_checker_refuses_scripts_and_stylesheets_from_the_network(check_links, tmp_path):
    """As Material's offline plugin would add (``https://unpkg.com/iframe-worker/shim``): the site
    must work opened as files with no connection.  Links out (``<a href>``) are fine."""
    site = _site(tmp_path, {"index.html": '<script src="https://unpkg.com/iframe-worker/shim"></script>'
                                          '<link rel="stylesheet" href="//cdn.x.org/a.css"><a href="https://arxiv.org">p</a>'})
    assert check_links.broken_links(site) == ["index.html: https://unpkg.com/iframe-worker/shim (loaded from the network)",
                                              "index.html: //cdn.x.org/a.css (loaded from the network)"]


# -- item 11: search works in site/index.html opened as a file -------------------------------------

def test_i37_search_works_offline():
    """Material's offline plugin inlines the search index into ``search/search_index.js`` (read by
    a script tag, which file:// allows) and needs a Worker shim for file://, which the site ships
    itself (Material would load it from unpkg.com); file:// needs use_directory_urls: false."""
    config = (ROOT / "mkdocs.yml").read_text()
    plugins = re.search(r"^plugins:\n((?:  .*\n)*)", config, re.M).group(1)
    assert re.search(r"^  - search\n", plugins, re.M) and re.search(r"^  - offline\b", plugins, re.M)
    assert re.search(r"^use_directory_urls: false\b", config, re.M)
    shim = re.search(r"^  polyfills:.*\n    - (\S+)", config, re.M).group(1)
    assert "iframe-worker" in shim and "window.Worker=o" in (ROOT / "docs" / shim).read_text()
    assert "search included" in (ROOT / "README.md").read_text()
