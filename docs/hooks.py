"""MkDocs hooks: the docstrings' Sphinx roles (:func:`x`, :class:`~a.b.C`) rendered as code, and
the notebooks' links to other pages pointed at the built pages.

rsmooth's docstrings are read in terminals (``help()``) as well as on the site, and name other
objects with Sphinx roles; mkdocstrings renders Markdown, where ``:meth:`x``` would show the role
literally.  This drops the role and, for ``~a.b.C``, keeps the last component, as Sphinx does.

The tutorial notebooks link to ``../guide/certify.md`` (right on GitHub and in Jupyter), but
mkdocs-jupyter renders them to HTML itself, so MkDocs neither rewrites nor checks those links.
Here each becomes the URL of the page it names; one naming no page of the site is a warning,
which fails ``mkdocs build --strict``.
"""
import logging
import posixpath
import re

ROLE = re.compile(r":(?:py:)?(?:meth|class|mod|func|data|attr|exc|obj):<code>(~?)([^<]*)</code>")
#: a relative link to a Markdown file: href="PATH.md" or href="PATH.md#anchor"
MD_LINK = re.compile(r'href="(?![a-zA-Z][a-zA-Z0-9+.-]*:|/|#)([^"#?]+\.md)(#[^"]*)?"')
log = logging.getLogger("mkdocs.hooks.rsmooth")


def _code(match: "re.Match[str]") -> str:
    name = match.group(2).rsplit(".", 1)[-1] if match.group(1) else match.group(2)
    return f"<code>{name}</code>"


def notebook_links(html: str, page, files) -> str:
    """``html`` with each relative ``.md`` link of ``page`` pointing at that page's built URL."""
    def fix(match: "re.Match[str]") -> str:
        target = posixpath.normpath(posixpath.join(posixpath.dirname(page.file.src_uri), match.group(1)))
        file = files.get_file_from_path(target)
        if file is None:
            log.warning("%s links to '%s', which is not a page of the site", page.file.src_uri, match.group(1))
            return match.group(0)
        return f'href="{file.url_relative_to(page.file)}{match.group(2) or ""}"'

    return MD_LINK.sub(fix, html)


def on_page_content(html: str, page=None, files=None, **kwargs) -> str:
    if page is not None and page.file.src_uri.endswith(".ipynb"):
        html = notebook_links(html, page, files)
    return ROLE.sub(_code, html)
