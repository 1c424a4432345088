"""MkDocs hook: the docstrings' Sphinx roles (:func:`x`, :class:`~a.b.C`) rendered as code.

rsmooth's docstrings are read in terminals (``help()``) as well as on the site, and name other
objects with Sphinx roles; mkdocstrings renders Markdown, where ``:meth:`x``` would show the role
literally.  This drops the role and, for ``~a.b.C``, keeps the last component, as Sphinx does.
"""
import re

ROLE = re.compile(r":(?:py:)?(?:meth|class|mod|func|data|attr|exc|obj):<code>(~?)([^<]*)</code>")


def _code(match: "re.Match[str]") -> str:
    name = match.group(2).rsplit(".", 1)[-1] if match.group(1) else match.group(2)
    return f"<code>{name}</code>"


def on_page_content(html: str, **kwargs) -> str:
    return ROLE.sub(_code, html)
