"""Every public name of ``rsmooth.__all__`` is documented as a reference (issue 27, item 4).

The rule, checked on ``inspect.getdoc`` (Google style, the sections mkdocstrings renders in
docs/api.md):

- every public function, class and public method (defined on the class, not starting with ``_``)
  has a docstring whose first line is a sentence;
- each of its parameters (``self`` and ``*args``/``**kwargs`` aside; for a class, its
  constructor's) is named at the start of a line of an ``Args:`` section (``Attributes:`` for a
  dataclass's fields);
- a function or method that returns something (its annotation is not ``None``) has ``Returns:``;
- every function and class has an ``Example:`` (or ``Example::``) section with code under it;
- where rsmooth gives a statistical guarantee (PREDICT and the certify methods), the docstring
  states it (``Guarantee:``).
"""
import dataclasses
import inspect
import re

import pytest

import rsmooth
from rsmooth import Smooth

CALLABLES = [n for n in rsmooth.__all__ if callable(getattr(rsmooth, n))]
GUARANTEED = [Smooth.predict, Smooth.certify, Smooth.certify_sequential, Smooth.certify_adaptive, Smooth.certify_batch]


def _methods():
    for name in CALLABLES:
        obj = getattr(rsmooth, name)
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for attr, value in vars(obj).items():
                if not attr.startswith("_") and inspect.isfunction(value):
                    yield f"{name}.{attr}", value


def _section(doc: str, title: str) -> str:
    """The lines under ``title:`` up to the next unindented line (empty if there is no such section)."""
    match = re.search(rf"^{title}::?\n((?:[ \t]+.*\n|\n)*)", doc + "\n", re.M)
    return match.group(1) if match else ""


def _parameters(obj) -> list:
    try:
        sig = inspect.signature(obj)
    except ValueError:  # an exception class: BaseException's own constructor
        return []
    kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [p.name for p in sig.parameters.values() if p.name != "self" and p.kind not in kinds]


def _check(obj, name: str, *, example: bool) -> None:
    doc = inspect.getdoc(obj)
    assert doc and re.match(r"[A-Z`(]", doc), f"{name}: no docstring"
    sections = _section(doc, "Args") + _section(doc, "Attributes")
    missing = [p for p in _parameters(obj) if not re.search(rf"^ +{p}( \(.*?\))?:", sections, re.M)]
    assert not missing, f"{name}: Args does not name {missing}"
    returns = inspect.signature(obj).return_annotation if not inspect.isclass(obj) else None
    if not inspect.isclass(obj) and returns not in (None, "None"):
        assert _section(doc, "Returns").strip(), f"{name}: no Returns section"
    if example:
        assert _section(doc, "Example").strip(), f"{name}: no Example section"


def test_the_public_api_is_what_the_reference_documents():
    assert CALLABLES == ["RsmoothError", "Smooth", "create_model", "register_model", "get_dataset",
                         "load_model", "summarize", "records", "FileSummary", "analyze"]
    page = (rsmooth.__file__.rsplit("/src/", 1)[0] + "/docs/api.md")
    text = open(page).read()
    assert all(f"::: rsmooth.{n}\n" in text for n in CALLABLES) and "rsmooth.__version__" in text
    assert isinstance(rsmooth.__version__, str) and re.fullmatch(r"\d+\.\d+\.\d+", rsmooth.__version__)


@pytest.mark.parametrize("name", CALLABLES)
def test_public_name_is_documented(name):
    _check(getattr(rsmooth, name), name, example=True)


@pytest.mark.parametrize("name,method", list(_methods()), ids=[n for n, _ in _methods()])
def test_public_method_is_documented(name, method):
    _check(method, name, example=False)


@pytest.mark.parametrize("method", GUARANTEED, ids=lambda m: m.__name__)
def test_the_guarantee_is_stated(method):
    assert "Guarantee:" in inspect.getdoc(method) or "guarantee" in inspect.getdoc(method).lower()


def test_a_dataclass_documents_its_fields_as_attributes():
    assert dataclasses.is_dataclass(rsmooth.FileSummary)
    assert _section(inspect.getdoc(rsmooth.FileSummary), "Attributes")


def test_the_rule_catches_what_it_should():
    """The checker itself fails on a missing Args entry, Returns or Example (independent cases)."""
    def f(a, b):
        """Do it.

        Args:
            a: one.

        Returns:
            x.

        Example::

            f(1, 2)
        """
    def g(a) -> None:
        """Do it.

        Args:
            a: one.
        """
        del a

    with pytest.raises(AssertionError, match=r"does not name \['b'\]"):
        _check(f, "f", example=True)
    with pytest.raises(AssertionError, match="no Example"):
        _check(g, "g", example=True)
    g.__annotations__["return"] = int
    with pytest.raises(AssertionError, match="no Returns"):
        _check(g, "g", example=False)


def test_the_sites_hook_shows_sphinx_roles_as_code():
    """docs/hooks.py: ``:meth:`x``` and ``:class:`~a.b.C``` in rendered docstrings become code, as
    Sphinx shows them (mkdocstrings would print the role)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "docs" / "hooks.py"
    spec = importlib.util.spec_from_file_location("rsmooth_docs_hooks", path)
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    html = "see :meth:<code>certify</code> and :class:<code>~rsmooth.methods.StepContext</code>, :py:func:<code>a.b</code>"
    assert hooks.on_page_content(html) == "see <code>certify</code> and <code>StepContext</code>, <code>a.b</code>"
