"""User-facing text cites papers by authors, year and arXiv / OpenReview id (issue 7 item 24).

Docstrings, ``--help`` strings and preset notes/sources all live in the package's .py files, so
those must not point at files users do not have (the project's internal paper folder, spec and
style guide); presets, shown one at a time by ``rsmooth show-preset``, must carry the id of every
paper they name.
"""
import re
from pathlib import Path

import pytest

import rsmooth
from rsmooth.presets import PRESETS

PACKAGE = Path(rsmooth.__file__).parent
INTERNAL = ("papers/0", "SPEC.md", "STYLE.md", "shared/")

#: how the package names each work (docs/REFERENCES.md) -> the id that must come with it
WORKS = {
    r"Cohen\b": "1902.02918",
    r"Salman\b(?!,? Sun| et al\. 2020)": "1906.04584",
    r"Salman(, Sun| et al\. 2020)": "2003.01908",
    r"Zhai\b": "2001.02378",
    r"\bLi et al": "1809.03113",
    r"Rony\b": "1811.09600",
    r"Jeong & Shin": "2006.04062",
    r"Jeong et al\. 2021": "2111.09277",
    r"Jeong et al\. 2022": "qLqeb9AjD2o",
    r"Jeong et al\. 2023|Jeong, Kim,? (and |& )?Shin": "2212.09000",
}
AUTHORS = re.compile(r"\b(Cohen|Salman|Zhai|Li|Rony|Jeong|LeCun|He|Huang|Xiao)\b( et al\.|,|'s| &)")
IDS = re.compile(r"arXiv \d{4}\.\d{4,5}|OpenReview \w+")


def _sources():
    return sorted(PACKAGE.rglob("*.py"))


def test_the_package_is_found():
    names = {p.relative_to(PACKAGE).as_posix() for p in _sources()}
    assert {"cli/__init__.py", "presets_table.py", "methods/catrs.py"} <= names


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_internal_file_is_cited(path):
    text = path.read_text(encoding="utf-8")
    hits = [f"{path.name}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
            if any(s in line for s in INTERNAL)]
    assert not hits, "cite the paper (docs/REFERENCES.md), not an internal file:\n" + "\n".join(hits)


def _preset_texts():
    for name in PRESETS.names():
        p = PRESETS.get(name)
        for kind in ("source", "note"):
            text = getattr(p, kind)
            if text:
                yield f"{name} {kind}", text


def test_preset_texts_exist():
    kinds = [what.split()[1] for what, _ in _preset_texts()]
    assert kinds.count("source") == len(PRESETS) and "note" in kinds


def _missing_ids(text):
    """What ``text`` cites without an id: [] when every named paper carries its id."""
    problems = [] if not AUTHORS.search(text) or IDS.search(text) else ["no arXiv or OpenReview id"]
    return problems + [f"missing {paper_id}" for work, paper_id in WORKS.items()
                       if re.search(work, text) and paper_id not in text]


@pytest.mark.parametrize("what,text", list(_preset_texts()), ids=lambda v: v if len(v) < 60 else "")
def test_preset_citations_carry_their_ids(what, text):
    assert not _missing_ids(text), f"{what}: {_missing_ids(text)} in {text!r}"


def test_the_checks_catch_bare_citations():
    """The checks above reject the forms they are meant to reject, and accept the long forms."""
    assert _missing_ids("schedule as Jeong et al. 2021 App. C states") == [
        "no arXiv or OpenReview id", "missing 2111.09277"]
    catrs = "Jeong et al. 2023 (CAT-RS, arXiv 2212.09000) Table 3"
    assert _missing_ids(f"{catrs}; see Jeong et al. 2021 App. G") == ["missing 2111.09277"]
    salman = "the released model of Salman et al. 2019 (Jeong & Shin 2020, arXiv 2006.04062)"
    assert _missing_ids(salman) == ["missing 1906.04584"]
    assert _missing_ids("Jeong et al. 2022 (CAT-RS first version, OpenReview qLqeb9AjD2o) Table 2") == []
    assert _missing_ids("the authors' code (alinlab/smoothing-catrs ``train_catrs.py``)") == []
    assert any(s in "see shared/SPEC.md section 3" for s in INTERNAL)
