"""The published tables shipped in the package (rsmooth.report.paper) against the reference
transcription and the papers' text, and `rsmooth analyze --paper TABLE` beside our rows."""
import csv
import io
import json
import tomllib
from pathlib import Path

import pytest

from rsmooth.cli import main
from rsmooth.errors import RsmoothError
from rsmooth.metrics import CertifyWriter, write_sidecar
from rsmooth.report import analyze
from rsmooth.report import paper as rp

REFERENCE = Path("/work/shared/reference/paper_results.tsv")
PAPERS = {"catrs": Path("/work/shared/papers/000_c4abfb847bae29f0.txt"),
          "catrs-v1": Path("/work/shared/papers/001_2c9b5b2dd36ea1a3.txt")}
NAMES = {"Gaussian": "gaussian", "Stability": "stability", "SmoothAdv": "smoothadv", "MACER": "macer",
         "Consistency": "consistency", "SmoothMix": "smoothmix", "CAT-RS": "catrs",
         "CAT-RS (first version)": "catrs-v1"}


def test_tables_complete_and_shaped():
    cells = rp.paper_cells()
    assert {f"{c.paper}:{c.table}" for c in cells} == set(rp.PAPER_TABLES)
    for table_id, n_sigmas, radii in (("catrs:table3", 3, 11), ("catrs:table4", 3, 11),
                                      ("catrs:table5", 2, 8), ("catrs-v1:table2", 3, 11)):
        rows = rp.paper_table(table_id)
        assert len(rows) == 7 * n_sigmas
        assert all(len(r.accuracy) == radii and r.acr == r.acr for r in rows), table_id
        assert [r.method for r in rows[:7]] == ["gaussian", "stability", "smoothadv", "macer", "consistency",
                                                "smoothmix", "catrs-v1" if "v1" in table_id else "catrs"]
    fm = {(r.method, r.sigma): r for r in rp.paper_table("catrs:table4")}
    assert fm[("catrs", 1.0)].acr == 1.607 and fm[("catrs", 1.0)].accuracy[2.5] == 31.7  # typed by hand
    assert fm[("gaussian", 0.25)].row == "Gaussian [5]" and fm[("gaussian", 0.25)].arch == "lenet"


@pytest.mark.skipif(not REFERENCE.exists(), reason="the reference transcription is not here")
def test_every_reference_value_is_in_the_package():
    lines = [ln for ln in REFERENCE.read_text(encoding="utf-8").splitlines() if not ln.startswith("#")]
    ours = {(c.paper, c.table, c.dataset, c.arch, c.method, c.sigma, c.column): c.value for c in rp.paper_cells()}
    seen = 0
    for r in csv.DictReader(lines, delimiter="\t"):
        file, table = r["source"].split(":")
        key = ("catrs" if file == "000" else "catrs-v1", table.lower(), r["dataset"], r["arch"],
               NAMES[r["method"]], float(r["sigma"]))
        for col in ["acr"] + [k for k in r if k.startswith("r=")]:
            if r[col]:
                assert ours[key + (col if col == "acr" else col[2:],)] == float(r[col]), (key, col)
                seen += 1
    assert seen == len(ours) == len(rp.paper_cells())


def _printed_rows(paper, table):
    """The data lines (tab-separated cells, marks stripped) of a table in the paper's text."""
    text = PAPERS[paper].read_text(encoding="utf-8").replace("<u>", "").replace("</u>", "")
    n = table[len("table"):]
    if paper == "catrs":  # caption above the table
        body = text.split(f"\nTable {n}. ", 1)[1].split("\nσ\tMethods", 1)[1]
    else:  # caption below
        body = text.split(f"\nTable {n}: ", 1)[0].rsplit("\nσ\tMethods", 1)[1]
    rows = []
    for line in body.splitlines()[1:]:
        cells = line.split("\t")
        if len(cells) < 9:
            break
        rows.append(cells)
    return rows


@pytest.mark.skipif(not all(p.exists() for p in PAPERS.values()), reason="the papers' text is not here")
@pytest.mark.parametrize("table_id", list(rp.PAPER_TABLES))
def test_every_value_matches_the_paper_text(table_id):
    rows = rp.paper_table(table_id)
    printed = _printed_rows(*table_id.split(":"))
    assert len(printed) == len(rows)
    for k, (row, cells) in enumerate(zip(rows, printed)):
        assert cells[1] == row.row
        assert float(cells[2]) == row.acr, row.label
        assert [float(c) for c in cells[3:]] == list(row.accuracy.values()), row.label
        block = [c[0] for c in printed[k - k % 7:k - k % 7 + 7] if c[0]]
        assert [float(s) for s in block] == [row.sigma], row.label  # the sigma printed in its block


def test_unknown_table():
    with pytest.raises(RsmoothError, match="catrs:table9: unknown table; choose one of catrs:table3, "):
        rp.paper_table("catrs:table9")


def test_the_tables_ship_in_the_wheel():
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    assert "paper_tables.tsv" in data["rsmooth.report"]


# ----------------------------------------------------------------------------- analyze --paper


def _certify(path, meta):
    """Four examples: correct at radius 0.6 and 0.3, one wrong, one abstention -> ACR 0.225."""
    with CertifyWriter(path) as w:
        for i, (radius, correct) in enumerate([(0.6, 1), (0.3, 1), (0.1, 0), (0.0, 0)]):
            w.write(i, 1, 1 if correct else 0, radius, correct, 0.1)
    write_sidecar(path, meta)
    return str(path)


@pytest.fixture
def fm025(tmp_path):
    return _certify(tmp_path / "fm.tsv", {"dataset": "fashion-mnist", "sigma": 0.25, "method": "gaussian"})


def test_analyze_prints_the_matching_paper_row(fm025):
    out = analyze([fm025], paper="catrs:table4", radii=[0, 0.25, 0.5, 1.0, 3.0])
    lines = out.splitlines()
    assert lines[2] == "| fm | 0.25 | 4 | 0.225 | 50.0 | 50.0 | 25.0 | 0.0 | 0.0 |"
    assert lines[3] == "| Gaussian sigma=0.25 (paper catrs:table4) | 0.25 |  | 0.670 | 89.5 | 82.0 | 70.8 | 0.0 |  |"
    assert len([ln for ln in lines if ln.startswith("|")]) == 4
    assert "arXiv 2212.09000, Table 4" in out and "shown for reference" not in out


def test_analyze_without_a_match_shows_the_table_for_reference(tmp_path):
    tsv = _certify(tmp_path / "c.tsv", {"dataset": "cifar10", "sigma": 0.25, "method": "gaussian"})
    out = analyze([tsv], paper="catrs:table4", radii=[0, 0.25])
    assert sum("(paper catrs:table4)" in ln for ln in out.splitlines() if ln.startswith("|")) == 21
    assert "Note: no file matches the paper's settings (dataset, sigma, method): shown for reference" in out


def test_formats_parse_with_paper_rows(fm025):
    rows = list(csv.reader(io.StringIO(analyze([fm025], paper="catrs:table4", fmt="csv", radii=[0, 2.75]))))
    assert rows[0] == ["model", "sigma", "examples", "ACR", "0.00", "2.75"]
    assert rows[2] == ["Gaussian sigma=0.25 (paper catrs:table4)", "0.25", "", "0.67", "89.5", ""]
    assert rows[3] == [] and rows[4][0].startswith("note: (paper catrs:table4)")
    tex = analyze([fm025], paper="catrs:table4", fmt="latex", radii=[0])
    assert r"Gaussian sigma=0.25 (paper catrs:table4) & 0.25 &  & 0.670 & 89.5 \\" in tex
    assert tex.splitlines()[-1].startswith("% note: ")
    out = json.loads(analyze([fm025], paper="catrs:table4", as_json=True, radii=[0, 0.25]))
    assert out["paper"]["table"] == "catrs:table4"
    assert out["paper"]["rows"] == [{"label": "Gaussian sigma=0.25 (paper catrs:table4)", "method": "gaussian",
                                     "dataset": "fashion-mnist", "sigma": 0.25, "acr": 0.67,
                                     "certified_accuracy_percent": {"0.0": 89.5, "0.25": 82.0}}]
    assert len(out["files"]) == 1


def test_cli_paper_table_and_list(fm025, capsys):
    assert main(["analyze", fm025, "--paper", "catrs:table4", "--radii", "0"]) == 0
    assert "| Gaussian sigma=0.25 (paper catrs:table4) | 0.25 |  | 0.670 | 89.5 |" in capsys.readouterr().out
    assert main(["analyze", "--paper", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [ln.split(":")[0] + ":" + ln.split(":")[1] for ln in out] == list(rp.PAPER_TABLES)


@pytest.mark.parametrize("argv, message", [
    (["{f}", "--paper", "catrs:table9"], "--paper catrs:table9: unknown table; choose one of catrs:table3"),
    (["{f}", "--paper", "always"], "--paper always goes with --corruptions FOLDER..."),
    (["--corruptions", "{d}", "--paper", "catrs:table4"], "--paper catrs:table4: with --corruptions choose one "
                                                          "of auto, always, never"),
])
def test_cli_paper_errors(fm025, capsys, argv, message):
    argv = [a.format(f=fm025, d=Path(fm025).parent) for a in argv]
    assert main(["analyze", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_a_corrupted_test_set_matches_no_clean_table(tmp_path):
    meta = {"dataset": "fashion-mnist", "sigma": 0.25, "method": "gaussian"}
    fog = _certify(tmp_path / "fog.tsv", {**meta, "corruption": {"name": "fog", "severity": 5}})
    clean = _certify(tmp_path / "id.tsv", {**meta, "corruption": {"name": "identity", "severity": None}})
    assert "shown for reference" in analyze([fog], paper="catrs:table4", radii=[0])
    assert "shown for reference" not in analyze([clean], paper="catrs:table4", radii=[0])
