"""The published tables shipped in the package (rsmooth.report.paper) against the reference
transcription and the papers' text, and `rsmooth analyze --paper TABLE` beside our rows."""
import csv
import io
import json
import math
import re
import tomllib
from pathlib import Path

import pytest

from rsmooth.cli import main
from rsmooth.errors import RsmoothError
from rsmooth.methods import METHODS, create_method
from rsmooth.metrics import CertifyWriter, write_sidecar
from rsmooth.presets import get_preset
from rsmooth.report import analyze
from rsmooth.report import paper as rp

REFERENCE = Path("/work/shared/reference/paper_results.tsv")
PAPERS = {"catrs": Path("/work/shared/papers/000_c4abfb847bae29f0.txt"),
          "catrs-v1": Path("/work/shared/papers/001_2c9b5b2dd36ea1a3.txt"),
          "consistency": Path("/work/shared/papers/004_a649db84f08f5752.txt")}
needs_papers = pytest.mark.skipif(not all(p.exists() for p in PAPERS.values()), reason="the papers' text is not here")
#: the tables of Jeong, Kim, Shin 2023 / 2022 with seven methods per sigma, checked as printed
SEVEN = ["catrs:table3", "catrs:table4", "catrs:table5", "catrs-v1:table2"]
NAMES = {"Gaussian": "gaussian", "Stability": "stability", "SmoothAdv": "smoothadv", "MACER": "macer",
         "Consistency": "consistency", "SmoothMix": "smoothmix", "CAT-RS": "catrs",
         "CAT-RS (first version)": "catrs-v1"}


def test_tables_complete_and_shaped():
    cells = rp.paper_cells()
    assert {f"{c.paper}:{c.table}" for c in cells} == set(rp.PAPER_TABLES) == set(rp.TABLE_INFO)
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
    # the new tables: rows, radii per row, 5-seed tables of ACR mean +- std
    for table_id, n_rows, radii in (("catrs:table6", 5, 8), ("catrs:table12", 28, 0), ("consistency:table1", 22, 10),
                                    ("consistency:table2", 6, 8), ("consistency:tableB2", 18, 11),
                                    ("consistency:tableB3", 18, 0)):
        info, rows = rp.TABLE_INFO[table_id], rp.paper_table(table_id)
        assert len(rows) == n_rows and all(len(r.accuracy) == radii and r.acr == r.acr for r in rows), table_id
        assert info.acr_only == (radii == 0) and info.seeds == (5 if radii == 0 else 1)
        assert all((r.acr_std is not None) == (info.seeds > 1) for r in rows), table_id
        assert {r.dataset for r in rows} == set(info.datasets)
    t12 = {(r.dataset, r.method, r.sigma): r for r in rp.paper_table("catrs:table12")}
    assert (t12[("cifar10", "catrs", 0.5)].acr, t12[("cifar10", "catrs", 0.5)].acr_std) == (0.7525, 0.0028)
    assert t12[("cifar10", "catrs", 0.5)].arch == "cifar_resnet110" and t12[("mnist", "macer", 1.0)].arch == "lenet"
    c1 = [r for r in rp.paper_table("consistency:table1") if r.sigma == 0.25 and r.method == "consistency"]
    assert [(r.hparams, r.acr) for r in c1] == [({"lbd": 10}, 0.544), ({"lbd": 20}, 0.552)]  # typed by hand


@pytest.mark.skipif(not REFERENCE.exists(), reason="the reference transcription is not here")
def test_every_reference_value_is_in_the_package():
    lines = [ln for ln in REFERENCE.read_text(encoding="utf-8").splitlines() if not ln.startswith("#")]
    cells = [c for c in rp.paper_cells() if f"{c.paper}:{c.table}" in SEVEN]  # the tables it holds
    ours = {(c.paper, c.table, c.dataset, c.arch, c.method, c.sigma, c.column): c.value for c in cells}
    seen = 0
    for r in csv.DictReader(lines, delimiter="\t"):
        file, table = r["source"].split(":")
        key = ("catrs" if file == "000" else "catrs-v1", table.lower(), r["dataset"], r["arch"],
               NAMES[r["method"]], float(r["sigma"]))
        for col in ["acr"] + [k for k in r if k.startswith("r=")]:
            if r[col]:
                assert ours[key + (col if col == "acr" else col[2:],)] == float(r[col]), (key, col)
                seen += 1
    assert seen == len(ours) == len(cells)


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


@needs_papers
@pytest.mark.parametrize("table_id", SEVEN)
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


def _text(paper):
    return PAPERS[paper].read_text(encoding="utf-8")


def _after(text, start, header):
    """The tab-separated lines from the first line starting with ``header`` after ``start`` to the
    next blank line."""
    lines = text.split(start, 1)[1].splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith(header))
    body = []
    for ln in lines[first:]:
        if not ln.strip():
            break
        body.append(ln.split("\t"))
    return body


@needs_papers
def test_catrs_table6_matches_the_paper_text():
    head, *printed = _after(_text("catrs"), "\nTable 6. ", "Methods\tACR")
    rows = rp.paper_table("catrs:table6")
    assert len(printed) == len(rows) == 5
    for row, cells in zip(rows, printed):
        cells = [re.sub(r"</?u>", "", c) for c in cells]
        assert (cells[0], float(cells[1])) == (row.row, row.acr)
        assert {float(r): float(v) for r, v in zip(head[2:], cells[2:])} == row.accuracy, row.label
        assert (row.dataset, row.arch, row.sigma) == ("imagenet", "resnet50", 1.0)
    assert "ImageNet [31] dataset for $\\sigma = 1.0$" in _text("catrs")


@needs_papers
def test_catrs_table12_matches_the_paper_text():
    datasets, sigmas, *printed = _after(_text("catrs"), "\nTable 12. ", "Dataset\t")
    names = {"MNIST": "mnist", "CIFAR-10": "cifar10"}
    columns, current = [], None
    for d, s in zip(datasets[1:], sigmas[1:]):
        current = names[d] if d else current
        columns.append((current, float(re.search(r"[\d.]+", s).group())))
    assert columns == [("mnist", 0.25), ("mnist", 0.5), ("mnist", 1.0), ("cifar10", 0.5)]
    expected = [(d, s, cells[0], *map(float, cells[1 + j].split(" ± ")))
                for j, (d, s) in enumerate(columns) for cells in printed]
    assert [(r.dataset, r.sigma, r.row, r.acr, r.acr_std) for r in rp.paper_table("catrs:table12")] == expected


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _label(cell):
    """A printed row label with its TeX lambda written out."""
    return re.sub(r"\(\s*\$\\lambda = ([\d.]+)\$\s*\)", r"(lambda = \1)", cell).strip()


def _unmerge(cells):
    """The rows of one printed line: the extraction merges two rows into one line, a cell then
    holding both rows' numbers (one number where both rows print the same)."""
    numbers = [_NUMBER.findall(c) for c in cells]
    k = max(map(len, numbers))
    assert all(len(n) in (1, k) for n in numbers), cells
    return [[float(n[min(i, len(n) - 1)]) for n in numbers] for i in range(k)]


def _check_label(line_label, rows):
    """The package's rows of one printed line carry its label (a sub-row prefixed with its parent)."""
    if len(rows) == 1:
        assert rows[0].row.endswith(line_label), (rows[0].row, line_label)
    else:
        assert line_label.startswith(rows[0].row) and line_label.endswith(rows[1].row), (line_label, rows)
    for r in rows:  # the lambda of a "+ Consistency (lambda = X)" row is its lbd
        lam = re.search(r"lambda = ([\d.]+)", r.row)
        assert r.hparams.get("lbd") == (float(lam.group(1)) if lam else None), r.label


@needs_papers
@pytest.mark.parametrize("table_id, start", [
    ("consistency:table1", "\nTable 1: Comparison of approximate certified test accuracy (%) on CIFAR-10."),
    ("consistency:table2", "\nTable 2: Comparison of approximate certified test accuracy (%) on ImageNet."),
    ("consistency:tableB2", "\nTable 2: Comparison of approximate certified test accuracy on MNIST dataset."),
])
def test_consistency_accuracy_tables_match_the_paper_text(table_id, start):
    head, *printed = _after(_text("consistency"), start, "$\\sigma$\tModels")
    radii = [float(r) for r in head[3:]]
    rows, k, sigma = rp.paper_table(table_id), 0, None
    blocks = []  # the printed lines of each sigma: a block starts at a Gaussian row
    for cells in printed:
        if _label(cells[1]).startswith("Gaussian"):
            blocks.append([])
        blocks[-1].append(cells)
    for block in blocks:
        (sigma,) = [float(c[0]) for c in block if c[0]]
        for cells in block:
            values = _unmerge(cells[2:])
            mine = rows[k:k + len(values)]
            k += len(values)
            _check_label(_label(cells[1]), mine)
            for row, v in zip(mine, values):
                assert (row.sigma, row.acr, row.accuracy) == (sigma, v[0], dict(zip(radii, v[1:]))), row.label
    assert k == len(rows)


@needs_papers
def test_consistency_tableB3_matches_the_paper_text():
    head, *printed = _after(_text("consistency"), "\nTable 3: Comparison of ACR for various training methods "
                            "on MNIST.", "ACR (MNIST)")
    sigmas = [float(re.search(r"[\d.]+", c).group()) for c in head[1:]]
    per_sigma = {s: [] for s in sigmas}
    for cells in printed:
        for s, cell in zip(sigmas, cells[1:]):
            numbers = [float(x) for x in _NUMBER.findall(cell)]
            per_sigma[s] += [(s, numbers[i], numbers[i + 1]) for i in range(0, len(numbers), 2)]
    rows = rp.paper_table("consistency:tableB3")
    assert [(r.sigma, r.acr, r.acr_std) for r in rows] == [v for s in sigmas for v in per_sigma[s]]
    labels = [_label(c[0]) for c in printed]
    for i, r in enumerate(rows):  # two rows per printed line, the same lines for each sigma
        line = labels[(i % 6) // 2]
        assert line.startswith(r.row) if i % 2 == 0 else line.endswith(r.row), (r.row, line)
    b2 = {(r.sigma, r.method, r.row.split(" (lambda")[0].replace(" training", "")): r.hparams
          for r in rp.paper_table("consistency:tableB2")}
    assert all(b2[(r.sigma, r.method, r.row)] == r.hparams for r in rows)  # appendix Table 2's models


def test_tables_that_print_the_same_models_agree():
    """CAT-RS Table 6 = Consistency Table 2 at sigma 1.0; CAT-RS Table 12 (MNIST) = appendix
    Table 3 of Consistency but for Gaussian sigma 0.25 (0.9109 there, 0.9108 here)."""
    t6 = rp.paper_table("catrs:table6")
    c2 = [r for r in rp.paper_table("consistency:table2") if r.sigma == 1.0]
    for r in c2:
        (same,) = [s for s in t6 if s.method == r.method.replace("-released", "")]
        assert (same.acr, same.accuracy) == (r.acr, r.accuracy), r.label
    b3 = {(r.sigma, r.method): r for r in rp.paper_table("consistency:tableB3") if "+" not in r.row}
    for r in rp.paper_table("catrs:table12"):
        if r.dataset == "mnist" and (r.sigma, r.method) in b3:
            other = b3[(r.sigma, r.method)]
            expect = (0.9108, 0.0003) if (r.sigma, r.method) == (0.25, "gaussian") else (r.acr, r.acr_std)
            assert (other.acr, other.acr_std) == expect, r.label


def test_rows_rsmooth_trains_have_a_preset_and_valid_hparams():
    """A registered method trains its row: its preset plus the row's hparams make a method; other
    rows are Salman et al. 2019's released SmoothAdv models."""
    for table_id in rp.PAPER_TABLES:
        for r in rp.paper_table(table_id):
            if r.method not in METHODS:
                assert r.method == "smoothadv-released" and "Consistency" not in r.row, r.label
                create_method("smoothadv", sigma=r.sigma, **r.hparams)  # the configuration it lists
                continue
            preset = get_preset(f"{r.dataset}/{r.method}/{r.sigma:.2f}")
            assert preset.config["arch"] == r.arch, r.label
            method = create_method(r.method, sigma=r.sigma, **{**preset.hparams, **r.hparams})
            assert all(getattr(method, k) == v for k, v in r.hparams.items()), r.label
    c1 = {r.row: r for r in rp.paper_table("consistency:table1") if r.sigma == 1.0}
    assert c1["SmoothAdv [32]"].hparams == {"eps": 1.0, "num_noise": 8, "num_steps": 10}  # Sec. 4.2 (a)
    assert c1["SmoothAdv [32] + Consistency (lambda = 1)"].method == "smoothadv"  # SmoothAdv with lbd > 0
    assert c1["SmoothAdv [32] + Hyperparameter search"].method == "smoothadv-released"
    (inet,) = [r for r in rp.paper_table("consistency:table2") if r.sigma == 1.0 and r.method == "consistency"]
    assert inet.hparams == {"lbd": 5, "eta": 0.1}  # "We use eta = 0.1 instead of 0.5 when sigma = 1.0"


def test_parse_hparams():
    assert rp.parse_hparams("") == {}
    out = rp.parse_hparams("lbd=20;eta=0.1;attack=pgd")
    assert out == {"lbd": 20, "eta": 0.1, "attack": "pgd"} and type(out["lbd"]) is int
    for bad in ("lbd", "lbd=", "=3"):
        with pytest.raises(RsmoothError, match="write key=value;key=value"):
            rp.parse_hparams(bad)
    cells = [c for c in rp.paper_cells() if c.table == "tableB3"]
    assert all(c.std == c.std and c.column == "acr" for c in cells)
    assert all(math.isnan(c.std) for c in rp.paper_cells() if c.table == "table1")


def test_table_info_protocols():
    info = rp.TABLE_INFO["catrs:table12"]
    base = {"n0": 100, "n": 100_000, "alpha": 0.001}
    assert info.protocol("mnist") == {**base, "skip": 1, "max": None}
    assert info.protocol("cifar10") == {**base, "skip": 5, "max": 2000}
    for t in ("catrs:table6", "consistency:table2"):
        assert rp.TABLE_INFO[t].protocol("imagenet") == {**base, "skip": 100, "max": 500}
    assert rp.TABLE_INFO["consistency:table1"].protocol("cifar10") == {**base, "skip": 1, "max": None}
    with pytest.raises(RsmoothError, match=r"^cifar10: not in Table 3 of Jeong, Kim, Shin 2023.*; it has mnist$"):
        rp.TABLE_INFO["catrs:table3"].protocol("cifar10")
    assert rp.PAPER_TABLES["consistency:tableB2"].startswith(
        "Jeong & Shin 2020, Consistency Regularization for Certified Robustness of Smoothed Classifiers, "
        "arXiv 2006.04062, Table 2 (appendix): MNIST, LeNet")
    for t, i in rp.TABLE_INFO.items():
        assert rp.PAPER_TABLES[t] == f"{i.citation}, Table {i.number}: {i.description}"


@needs_papers
def test_table_info_protocols_are_the_papers():
    catrs, cons = _text("catrs"), _text("consistency")
    assert "We use $n = 100,000$, $n_0 = 100$, and $\\alpha = 0.001$ for CERTIFY" in catrs
    assert "uniformly-sampled 500 samples in the ImageNet validation dataset" in catrs  # Table 6
    assert "we subsampled test CIFAR-10 of size 2000" in catrs  # Table 12, footnote 9
    assert "with  $n=100,000,n_0=100$  and  $\\alpha=0.001$" in cons
    assert "our evaluation uses the full CIFAR-10 test set" in cons  # Table 1, footnote 8
    assert "subsampled test dataset of 500 samples as done by Cohen et al." in cons  # Table 2


@pytest.mark.parametrize("table_id", list(rp.PAPER_TABLES))
def test_labels_unique_within_a_table(table_id):
    labels = [r.label for r in rp.paper_table(table_id)]
    assert len(set(labels)) == len(labels)
    assert all(not re.search(r"\[\d+\]|Ours", lb) for lb in labels)


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
                                     "dataset": "fashion-mnist", "sigma": 0.25, "acr": 0.67, "acr_std": None,
                                     "hparams": {},
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


def _paper_lines(out, table_id):
    return [ln for ln in out.splitlines() if ln.startswith("|") and f"(paper {table_id})" in ln]


def test_cli_consistency_table1_keeps_every_row_of_a_method_and_sigma(tmp_path, capsys):
    """Without recorded hyperparameters both lambdas match; recorded ones pick the row."""
    meta = {"dataset": "cifar10", "sigma": 0.25, "method": "consistency"}
    tsv = _certify(tmp_path / "c.tsv", meta)
    assert main(["analyze", tsv, "--paper", "consistency:table1", "--radii", "0", "0.25"]) == 0
    out = capsys.readouterr().out
    assert _paper_lines(out, "consistency:table1") == [
        "| Gaussian + Consistency (lambda = 10) sigma=0.25 (paper consistency:table1) | 0.25 |  | 0.544 | 77.8 | 68.8 |",
        "| Gaussian + Consistency (lambda = 20) sigma=0.25 (paper consistency:table1) | 0.25 |  | 0.552 | 75.8 | 67.6 |"]
    assert "arXiv 2006.04062, Table 1; certified with n0 = 100, n = 100,000, alpha = 0.001, full test set" in out
    tsv = _certify(tmp_path / "c20.tsv", {**meta, "config": {"hparams": {"sigma": 0.25, "lbd": 20.0}}})
    assert main(["analyze", tsv, "--paper", "consistency:table1", "--radii", "0"]) == 0
    assert [ln.split(" sigma")[0] for ln in _paper_lines(capsys.readouterr().out, "consistency:table1")] == [
        "| Gaussian + Consistency (lambda = 20)"]
    sadv = {"dataset": "cifar10", "sigma": 0.5, "method": "smoothadv"}
    rows, _ = rp.paper_rows_for([sadv], "consistency:table1")
    assert [r.row for r in rows] == ["SmoothAdv [32]", "SmoothAdv [32] + Consistency (lambda = 1)"]
    rows, _ = rp.paper_rows_for([{**sadv, "hparams": {"eps": 1.0, "num_noise": 8, "lbd": 0.0}}], "consistency:table1")
    assert [r.row for r in rows] == ["SmoothAdv [32]"]


def test_analyze_a_table_of_5_seed_means(tmp_path):
    tsv = _certify(tmp_path / "m.tsv", {"dataset": "mnist", "sigma": 0.25, "method": "catrs"})
    out = analyze([tsv], paper="catrs:table12", radii=[0, 0.25])
    assert _paper_lines(out, "catrs:table12") == ["| CAT-RS mnist sigma=0.25 (paper catrs:table12) | 0.25 |  | 0.933 |  |  |"]
    assert "mnist: full test set; cifar10: one test example in 5, 2,000 in all; the paper prints ACR only" in out
    assert "ACR is the mean over 5 seeds; mean ± std as printed: CAT-RS mnist sigma=0.25 0.9329 ± 0.0001" in out
    row = json.loads(analyze([tsv], paper="catrs:table12", as_json=True, radii=[0]))["paper"]["rows"][0]
    assert (row["acr"], row["acr_std"], row["certified_accuracy_percent"]) == (0.9329, 0.0001, {"0.0": None})


@needs_papers
def test_released_smoothadv_rows_list_the_configurations_of_the_appendix():
    """Jeong & Shin 2020 App. A.3 Table 1: attack, steps, eps in 1/256 units, m of each released model."""
    head, *printed = _after(_text("consistency"), "\nTable 1: Detailed specification of hyperparameters",
                            "Dataset\t")
    listed = {("imagenet" if "imagenet" in c[0].lower() else "cifar10", float(c[1])):
              {"eps": int(c[4]) / 256, "num_noise": int(c[5]), "num_steps": int(c[3])} for c in printed}
    assert {c[2] for c in printed} == {"PGD"} and len(listed) == 5
    released = [r for t in ("consistency:table1", "consistency:table2") for r in rp.paper_table(t)
                if r.method == "smoothadv-released"]
    assert len(released) == 5
    assert all(r.hparams == listed[(r.dataset, r.sigma)] for r in released)
    for (dataset, sigma), hp in listed.items():  # the smoothadv presets use the same configurations
        if (dataset, sigma) != ("imagenet", 0.5):
            preset = get_preset(f"{dataset}/smoothadv/{sigma:.2f}").hparams
            assert {k: preset[k] for k in hp} == hp and preset["attack"] == "pgd"
