"""Every local link of the built site resolves: ``python .ci/check_links.py SITE_DIR``.

``mkdocs build --strict`` checks the links of Markdown pages, not those of HTML it did not write
(the tutorial notebooks, rendered by mkdocs-jupyter).  This reads every ``.html`` file under
SITE_DIR and checks each relative ``href`` and ``src``: the file it names exists, and an
``#anchor`` names an ``id`` (or ``name``) in that file.  Links with a scheme (``https:``,
``mailto:``, ``data:``) or starting with ``/`` are not local and are skipped, except that no script
or stylesheet may load from the network (the site, search included, works opened as files with no
connection).  Prints one line per broken link and exits 1 if there is any.  Standard library only.
"""
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Dict, List, Set, Tuple
from urllib.parse import unquote, urlsplit

EXTERNAL = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|//|/)")
REMOTE = re.compile(r"^(?:https?:)?//", re.I)


class _Page(HTMLParser):
    """The links (href, src) and anchors (id, name) of one HTML file."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: List[str] = []
        self.anchors: Set[str] = set()
        self.remote: List[str] = []  # scripts and stylesheets loaded from the network

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, str]]) -> None:
        found = dict(attrs)
        asset = found.get("src") if tag == "script" else found.get("href") if found.get("rel") == "stylesheet" else None
        if asset and REMOTE.match(asset):
            self.remote.append(asset)
        for name, value in attrs:
            if value is None:
                continue
            if name in ("href", "src"):
                self.links.append(value)
            elif name == "id" or (name == "name" and tag == "a"):
                self.anchors.add(value)


def _read(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    return page


def broken_links(site: Path) -> List[str]:
    """``"page: link (why)"`` for each local link under ``site`` that does not resolve."""
    site = Path(site).resolve()
    pages: Dict[Path, _Page] = {p: _read(p) for p in sorted(site.rglob("*.html"))}
    broken = []
    for path, page in pages.items():
        broken += [f"{path.relative_to(site)}: {url} (loaded from the network)" for url in page.remote]
        for link in page.links:
            if not link or EXTERNAL.match(link):
                continue
            parts = urlsplit(link)
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            where = f"{path.relative_to(site)}: {link}"
            if site not in target.parents and target != site:
                broken.append(f"{where} (outside the site)")
            elif not target.is_file():
                broken.append(f"{where} (no such file)")
            elif parts.fragment and target.suffix == ".html":
                anchors = (pages.get(target) or _read(target)).anchors
                if unquote(parts.fragment) not in anchors:
                    broken.append(f"{where} (no anchor '{parts.fragment}')")
    return broken


def main(argv: List[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python .ci/check_links.py SITE_DIR", file=sys.stderr)
        return 2
    broken = broken_links(Path(argv[0]))
    for line in broken:
        print(f"broken link: {line}")
    print(f"check_links: {len(broken)} broken link(s) in {argv[0]}", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
