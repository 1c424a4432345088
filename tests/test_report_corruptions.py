"""Corruption tables (rsmooth.report.corruptions) against hand computations, and the paper's
numbers of Jeong, Kim, Shin 2023 (CAT-RS, arXiv 2212.09000) Tables 13-25 shipped in the package."""
import csv
import io
import json
import re
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

from rsmooth.errors import RsmoothError
from rsmooth.metrics import CertifyWriter, write_sidecar
from rsmooth.report import corruption_tables
from rsmooth.report import corruptions as rc

PAPER_TEXT = Path("/work/shared/papers/000_c4abfb847bae29f0.txt")


def _write(path, rows, meta=None):
    """rows: (radius, correct) per example; label 1, predicted 1 when correct, 0 otherwise."""
    with CertifyWriter(path) as w:
        for i, (radius, correct) in enumerate(rows):
            w.write(i, 1, 1 if correct else 0, radius, correct, 0.1)
    if meta is not None:
        write_sidecar(path, meta)
    return path


def _meta(method, name, severity, dataset="cifar10-c", sigma=0.25, source="published", suite=None):
    corruption = {"name": name, "severity": severity, "source": source}
    if suite:
        corruption.update(suite=suite, seed=0)
    return {"dataset": dataset, "sigma": sigma, "method": method, "corruption": corruption}


# Two models on a two-corruption benchmark (gaussian_noise, fog; speckle_noise held out), 4
# examples per file:
#   A: gaussian_noise (any s): correct at 1.0 and 0.2, one wrong, one abstention -> ACR 0.3, 50 %
#      fog at s: correct at 0.2 s, three wrong                                  -> ACR 0.05 s, 25 %
#      speckle_noise at s = 1: four correct at 2.0                              -> ACR 2.0, 100 %
#   => mACR(s) = (0.3 + 0.05 s) / 2 = 0.175, 0.2, 0.225, 0.25, 0.275; mACR = 0.225; mAcc 37.5
#   B: gaussian_noise: four correct at 0.5 -> ACR 0.5, 100 %; fog: two correct at 0.2 -> 0.1, 50 %;
#      no fog at s = 5
#   => mACR(s) = 0.3, mAcc(s) = 75 for s = 1..4, '-' at s = 5 and for the means over severities
def _model_a(severity):
    return {"gaussian_noise": [(1.0, 1), (0.2, 1), (0.9, 0), (0.0, 0)],
            "fog": [(0.2 * severity, 1), (0.4, 0), (0.1, 0), (0.0, 0)]}


MODEL_B = {"gaussian_noise": [(0.5, 1)] * 4, "fog": [(0.2, 1), (0.2, 1), (0.3, 0), (0.0, 0)]}


@pytest.fixture
def small_benchmark(monkeypatch):
    monkeypatch.setitem(rc.BENCHMARK, "cifar10-c", ("gaussian_noise", "fog"))
    monkeypatch.setitem(rc.HELD_OUT, "cifar10-c", ("speckle_noise",))
    monkeypatch.setitem(rc.BENCHMARK, "mnist-c", ("shot_noise", "fog", "stripe"))


@pytest.fixture
def cifar(tmp_path, small_benchmark):
    a, b = tmp_path / "run_a", tmp_path / "run_b"
    a.mkdir()
    b.mkdir()
    for s in range(1, 6):
        for name, rows in _model_a(s).items():
            _write(a / f"{name}-s{s}.tsv", rows, _meta("gaussian", name, s))
        for name, rows in MODEL_B.items():
            if (name, s) != ("fog", 5):
                _write(b / f"{name}-s{s}.tsv", rows, _meta("catrs", name, s))
    _write(a / "speckle_noise-s1.tsv", [(2.0, 1)] * 4, _meta("gaussian", "speckle_noise", 1))
    _write(a / "fog-s1.shard-0-of-2.tsv", [(9.0, 1)] * 4)  # a shard: skipped
    # the samples file of a --sequential run of an earlier version (OUT.seq.tsv): skipped
    (a / "fog-s2.tsv.seq.tsv").write_text("idx\tc_a\tsamples\tn\tn_a\tp_lower\tp_upper\tcapped\tdecisions\n")
    return [a, b]


def _json(folders, **kw):
    return json.loads(corruption_tables(folders, as_json=True, **kw))


def _values(table):
    return {row["label"]: [c["value"] for c in row["cells"]] for row in table["rows"]}


def _assert_rows_approx(got, want):
    """``got == want`` for dicts of lists of numbers (or None), each list compared with pytest.approx
    (which no longer takes nested dicts, pytest 9.2)."""
    assert list(got) == list(want)
    for label, values in want.items():
        assert got[label] == pytest.approx(values), label


def _marks(table):
    return {row["label"]: ["B" if c["best"] else "U" if c["runner_up"] else "" for c in row["cells"]]
            for row in table["rows"]}


def test_severity_means_by_hand(cifar):
    out = _json(cifar, paper="never")
    assert out["layout"] == "severities" and [m["label"] for m in out["models"]] == ["Gaussian", "CAT-RS"]
    t13 = out["tables"][0]
    assert [c["label"] for c in t13["columns"]] == ["ACR 1", "ACR 2", "ACR 3", "ACR 4", "ACR 5", "mACR",
                                                    "Acc 1", "Acc 2", "Acc 3", "Acc 4", "Acc 5", "mAcc"]
    a, b = _values(t13)["Gaussian"], _values(t13)["CAT-RS"]
    assert a == pytest.approx([0.175, 0.2, 0.225, 0.25, 0.275, 0.225] + [37.5] * 6)
    assert b[:4] == pytest.approx([0.3] * 4) and b[4:6] == [None, None]
    assert b[6:10] == pytest.approx([75.0] * 4) and b[10:] == [None, None]
    # per severity: an ACR and an accuracy table for each of 1..5
    assert [(t["metric"], t["severity"]) for t in out["tables"][1:]] == \
        [(m, s) for s in range(1, 6) for m in ("acr", "acc")]
    acr1, acc1 = out["tables"][1], out["tables"][2]
    assert [c["label"] for c in acr1["columns"]] == ["Gaussian", "CAT-RS"]
    assert [(r["label"], r["kind"]) for r in acr1["rows"]] == [
        ("gaussian_noise", "benchmark"), ("fog", "benchmark"), ("speckle_noise", "held-out"), ("mACR", "mean")]
    _assert_rows_approx(_values(acr1), {"gaussian_noise": [0.3, 0.5], "fog": [0.05, 0.1],
                                        "speckle_noise": [2.0, None], "mACR": [0.175, 0.3]})
    _assert_rows_approx(_values(acc1), {"gaussian_noise": [50.0, 100.0], "fog": [25.0, 50.0],
                                        "speckle_noise": [100.0, None], "mAcc": [37.5, 75.0]})
    acr5 = out["tables"][9]
    assert _values(acr5)["fog"] == pytest.approx([0.25, None]) and _values(acr5)["mACR"] == [0.275, None]


def test_missing_cells_held_out_and_notes_in_markdown(cifar):
    text = corruption_tables(cifar, paper="never")
    lines = text.splitlines()
    assert "| Gaussian | 0.175 | 0.200 | 0.225 | 0.250 | 0.275 | 0.225 | 37.5 | 37.5 | 37.5 | 37.5 | 37.5 | 37.5 |" \
        in [ln.replace("**", "") for ln in lines]
    assert any(ln.startswith("| CAT-RS |") and ln.endswith("| - | - | **75.0** | **75.0** | **75.0** | **75.0** | - | - |")
               for ln in lines)
    assert "| speckle_noise (held out) | 2.000 | - |" in lines  # one value: no marks
    notes = [ln for ln in lines if ln.startswith("Note: ")]
    assert any("CAT-RS has no result for fog (s5)" in n and "'-'" in n for n in notes)
    assert any("(held out)" in n and "outside mACR/mAcc" in n for n in notes)
    assert not any("Gaussian has no result" in n for n in notes)


def test_one_severity_prints_its_two_tables(cifar):
    out = _json(cifar, severity=2, paper="never")
    assert [(t["metric"], t["severity"]) for t in out["tables"]] == [("acr", 2), ("acc", 2)]
    assert _values(out["tables"][0])["mACR"] == pytest.approx([0.2, 0.3])
    assert [r["label"] for r in out["tables"][0]["rows"]] == ["gaussian_noise", "fog", "mACR"]
    assert "severity 5" not in corruption_tables(cifar, severity="2", paper="never")
    assert len(_json(cifar, severity="all")["tables"]) == 11
    with pytest.raises(RsmoothError, match="severity 7"):
        corruption_tables(cifar, severity=7)
    missing = cifar[1]
    for p in missing.glob("*-s4.tsv"):
        p.unlink()
        Path(str(p) + ".json").unlink()
    for p in cifar[0].glob("*-s4.tsv"):
        p.unlink()
    with pytest.raises(RsmoothError, match="no result at severity 4"):
        corruption_tables(cifar, severity=4)


def test_marks_and_ties(tmp_path, small_benchmark):
    """Per row among our models: ties share bold; the runner-up is the second distinct value
    (underlined only with three or more values); paper columns are never marked."""
    accs = {"shot_noise": (4, 3, 2), "fog": (4, 4, 2), "stripe": (3, 2, 2)}  # correct of 4
    folders = []
    for k, method in enumerate(("gaussian", "consistency", "catrs")):
        d = tmp_path / method
        d.mkdir()
        for name, counts in accs.items():
            rows = [(0.5, 1)] * counts[k] + [(0.0, 0)] * (4 - counts[k])
            _write(d / f"{name}.tsv", rows, _meta(method, name, None, dataset="mnist-c"))
        folders.append(d)
    out = _json(folders, paper="auto")
    acc = out["tables"][1]
    assert [c["kind"] for c in acc["columns"]] == ["model"] * 3 + ["paper"] * 3
    marks = _marks(acc)
    assert marks["shot_noise"] == ["B", "U", ""] + [""] * 3
    assert marks["fog"] == ["B", "B", "U"] + [""] * 3
    assert marks["stripe"] == ["B", "U", "U"] + [""] * 3
    assert _values(acc)["mAcc"][:3] == pytest.approx([(100 + 100 + 75) / 3, (75 + 100 + 50) / 3, 50.0])
    md = corruption_tables(folders, paper="auto").splitlines()
    assert "| fog | **100.0** | **100.0** | <u>50.0</u> | 54.7 | 35.0 | 35.8 |" in md
    tex = corruption_tables(folders, fmt="latex", paper="never")
    assert r"fog & \textbf{100.0} & \textbf{100.0} & \underline{50.0} \\" in tex
    # two models: bold only
    two = _marks(_json(folders[:2], paper="never")["tables"][1])
    assert two["shot_noise"] == ["B", ""] and two["fog"] == ["B", "B"]


def test_table13_marks_per_column(cifar, tmp_path):
    third = tmp_path / "run_c"
    third.mkdir()
    for s in range(1, 6):
        for name, rows in _model_a(s).items():
            _write(third / f"{name}-s{s}.tsv", rows, _meta("macer", name, s))
    marks = _marks(_json(cifar + [third], paper="never")["tables"][0])
    # ACR 1: A = C = 0.175 < B = 0.3; ACR 5: B missing, A = C tie for best
    assert [m[0] for m in marks.values()] == ["U", "B", "U"]
    assert [m[4] for m in marks.values()] == ["B", "", "B"]


def test_formats_parse(cifar):
    rows = list(csv.reader(io.StringIO(corruption_tables(cifar, fmt="csv", paper="never"))))
    blocks, block = [], []
    for row in rows + [[]]:
        if row:
            block.append(row)
        elif block:
            blocks.append(block)
            block = []
    assert len(blocks) == 1 + 10 + 1  # Table 13, 2 per severity, the notes
    title, head, *body = blocks[0]
    assert head[0] == "model" and len(head) == 13 and len(title) == 1
    a = dict((r[0], r[1:]) for r in body)["Gaussian"]
    assert float(a[5]) == pytest.approx(0.225) and float(a[11]) == 37.5
    assert dict((r[0], r[1:]) for r in body)["CAT-RS"][5] == ""  # missing: empty in CSV
    assert all(r[0].startswith("note: ") for r in blocks[-1])
    tex = corruption_tables(cifar, fmt="latex", paper="never")
    assert tex.count(r"\begin{tabular}") == tex.count(r"\end{tabular}") == 11
    assert r"\multicolumn{6}{c}{ACR}" in tex and r"gaussian\_noise" in tex and "% note:" in tex
    assert r"speckle\_noise (held out) & 2.000 & - \\" in tex
    json.loads(corruption_tables(cifar, as_json=True))
    with pytest.raises(RsmoothError, match="unknown table format"):
        corruption_tables(cifar, fmt="html")
    with pytest.raises(RsmoothError, match="paper mode"):
        corruption_tables(cifar, paper="sometimes")


def test_labels_and_file_name_fallback(tmp_path, small_benchmark):
    """No sidecar: corruption and severity from the file names, label the folder name; repeated
    labels get the folder path; given labels win."""
    folders = []
    for parent in ("x", "y"):
        d = tmp_path / parent / "resnet"
        d.mkdir(parents=True)
        for s in (1, 2):
            _write(d / f"fog-s{s}.tsv", [(0.4, 1), (0.0, 0)])
            _write(d / f"gaussian_noise-s{s}.tsv", [(0.2, 1), (0.2, 1)])
        folders.append(d)
    out = _json(folders)
    assert [m["label"] for m in out["models"]] == ["x/resnet", "y/resnet"]
    assert out["suite"] == "cifar10-c" and out["models"][0]["method"] is None
    assert _values(out["tables"][1])["mACR"] == pytest.approx([0.2, 0.2])
    assert not any(c["kind"] == "paper" for c in out["tables"][1]["columns"])  # settings unknown
    assert [m["label"] for m in _json(folders, labels=["A", "B"])["models"]] == ["A", "B"]
    assert [m["label"] for m in _json(folders, labels=["A", "A"])["models"]] == ["A (x/resnet)", "A (y/resnet)"]
    with pytest.raises(RsmoothError, match="2 folders"):
        corruption_tables(folders, labels=["A"])
    for d in folders:  # same method in both: the method's name, then the folders
        for p in d.glob("*.tsv"):
            name, s = p.stem.rsplit("-s", 1)
            write_sidecar(p, _meta("smoothmix", name, int(s)))
    assert [m["label"] for m in _json(folders)["models"]] == ["SmoothMix (x/resnet)", "SmoothMix (y/resnet)"]
    one = tmp_path / "plain"
    one.mkdir()
    _write(one / "fog.tsv", [(0.4, 1)])
    assert _json([one])["layout"] == "corruptions" and _json([one])["models"][0]["label"] == "plain"


def _cifar_folder(tmp_path, name, meta_kw, benchmark=rc.BENCHMARK["cifar10-c"]):
    d = tmp_path / name
    d.mkdir()
    for c in benchmark:
        for s in (1, 2):
            _write(d / f"{c}-s{s}.tsv", [(0.5, 1), (0.0, 0)], _meta(name, c, s, **meta_kw))
    return d


def test_paper_rows_only_when_settings_match(tmp_path):
    gauss = _cifar_folder(tmp_path, "gaussian", {})
    t13 = _json([gauss])["tables"][0]
    assert [r["label"] for r in t13["rows"]] == ["Gaussian", "Gaussian (paper)"]
    assert [c["value"] for c in t13["rows"][1]["cells"]] == [0.392, 0.363, 0.342, 0.319, 0.298, 0.343,
                                                             68.6, 66.4, 64.7, 62.9, 59.6, 64.4]
    assert not any(c["best"] or c["runner_up"] for c in t13["rows"][1]["cells"])
    acr2 = _json([gauss], severity=2)["tables"][0]
    assert [c["label"] for c in acr2["columns"]] == ["Gaussian", "Gaussian (paper)"]
    assert _values(acr2)["fog"] == [0.5 / 2, 0.251] and _values(acr2)["mACR"] == [0.25, 0.363]
    text = corruption_tables([gauss])
    assert "sigma for cifar10-c" in text and "arXiv 2212.09000" in text and "not comparable" not in text
    assert "(paper)" not in corruption_tables([gauss], paper="never")
    # generated corruptions of another dataset: not by default; "always" with a note
    gen = _cifar_folder(tmp_path, "catrs", {"dataset": "cifar10", "source": "generated", "suite": "cifar10-c"})
    assert "(paper)" not in corruption_tables([gen])
    out = _json([gen], paper="always")
    assert [r["label"] for r in out["tables"][0]["rows"]] == ["CAT-RS", "CAT-RS (paper)"]
    assert any(n.startswith("not comparable") and "generated" in n for n in out["notes"])
    # an unknown method: all seven of the paper's with "always", none by default
    own = _cifar_folder(tmp_path, "mine", {})
    assert "(paper)" not in corruption_tables([own])
    rows = [r["label"] for r in _json([own], paper="always")["tables"][0]["rows"]]
    assert rows == ["mine"] + [f"{n} (paper)" for n in rc.PAPER_METHODS.values()]


def test_mnist_paper_needs_sigma_025(tmp_path):
    def folder(name, sigma, dataset="mnist-c"):
        d = tmp_path / f"{name}{sigma}"
        d.mkdir()
        for c in rc.BENCHMARK["mnist-c"]:
            _write(d / f"{c}.tsv", [(0.5, 1)], _meta(name, c, None, dataset=dataset, sigma=sigma))
        return d

    at025, at05 = folder("consistency", 0.25), folder("consistency", 0.5)
    acr = _json([at025])["tables"][0]
    assert [c["label"] for c in acr["columns"]] == ["Consistency", "Consistency (paper)"]
    assert _values(acr)["stripe"] == [0.5, 0.771] and _values(acr)["mACR"] == [0.5, 0.681]
    assert "(paper)" not in corruption_tables([at05])
    both = _json([at025, at05])["tables"][0]
    assert [c["label"] for c in both["columns"]] == ["Consistency (consistency0.25)",
                                                     "Consistency (consistency0.5)", "Consistency (paper)"]
    fashion = tmp_path / "fashion"
    fashion.mkdir()
    for c in rc.BENCHMARK["mnist-c"]:
        _write(fashion / f"{c}.tsv", [(0.5, 1)],
               _meta("catrs", c, 2, dataset="fashion-mnist", source="generated", suite="mnist-c"))
    assert "(paper)" not in corruption_tables([fashion])
    text = corruption_tables([fashion], paper="always")
    assert "| brightness | 0.500 | 0.319 |" in text.splitlines() and "not comparable" in text


def test_bad_input(tmp_path, small_benchmark):
    with pytest.raises(RsmoothError, match="not a folder"):
        corruption_tables([tmp_path / "nope"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RsmoothError, match="no certify TSVs"):
        corruption_tables([empty])
    cif, mn = tmp_path / "cif", tmp_path / "mn"
    cif.mkdir()
    mn.mkdir()
    _write(cif / "fog-s1.tsv", [(0.1, 1)])
    _write(mn / "fog.tsv", [(0.1, 1)])
    with pytest.raises(RsmoothError, match="mix cifar10-c and mnist-c"):
        corruption_tables([cif, mn])
    with pytest.raises(RsmoothError, match="given twice"):
        corruption_tables([cif, cif])
    with pytest.raises(RsmoothError, match="no severities"):
        corruption_tables([mn], severity=1)
    _write(cif / "fog-copy.tsv", [(0.1, 1)], _meta("gaussian", "fog", 1))
    with pytest.raises(RsmoothError, match="two results for fog at severity 1"):
        corruption_tables([cif])
    (cif / "fog-copy.tsv").unlink()
    _write(cif / "snow.tsv", [(0.1, 1)], _meta("gaussian", "snow", None))
    with pytest.raises(RsmoothError, match="no severity"):
        corruption_tables([cif])
    _write(mn / "shot_noise.tsv", [(0.1, 1)], _meta("gaussian", "shot_noise", None, sigma=0.5,
                                                    dataset="mnist-c"))
    _write(mn / "stripe.tsv", [(0.1, 1)], _meta("gaussian", "stripe", None, sigma=0.25, dataset="mnist-c"))
    with pytest.raises(RsmoothError, match="disagree on sigma"):
        corruption_tables([mn])


# ----------------------------------------------------------------------------- the paper's numbers


def _paper_groups():
    groups = defaultdict(dict)
    for v in rc.paper_numbers():
        groups[(v.table, v.method, v.metric, v.severity)][v.corruption] = v.value
    return groups


def test_paper_numbers_complete():
    values = rc.paper_numbers()
    assert len(values) == 7 * 12 + 10 * 16 * 7 + 2 * 16 * 7
    assert {v.method for v in values} == set(rc.PAPER_METHODS)
    for (table, method, metric, severity), cells in _paper_groups().items():
        dataset = "mnist-c" if table >= 24 else "cifar10-c"
        if table == 13:
            assert set(cells) == {"mean"}
        else:
            assert set(cells) == set(rc.BENCHMARK[dataset]) | {"mean"}, table
            assert metric == ("acr" if table % 2 == 0 else "acc")
            assert severity == (None if dataset == "mnist-c" else (table - 14) // 2 + 1)
    assert {v.sigma for v in values if v.dataset == "mnist-c"} == {0.25}
    assert {v.sigma for v in values if v.dataset == "cifar10-c"} == {None}


def test_paper_means_are_consistent():
    """Each mACR/mAcc row is the mean of its 15 rows (to the printed rounding), Table 13 repeats
    the per-severity means of Tables 14-23, and its mACR/mAcc is their mean over severities.
    (The paper passes every check; a failure here is a transcription error.)"""
    groups = _paper_groups()
    tol = {"acr": 0.0015, "acc": 0.15}
    for (table, method, metric, severity), cells in groups.items():
        if table == 13:
            continue
        rest = [v for c, v in cells.items() if c != "mean"]
        assert sum(rest) / 15 == pytest.approx(cells["mean"], abs=tol[metric]), (table, method, metric)
    for method in rc.PAPER_METHODS:
        for metric in ("acr", "acc"):
            per = [groups[(13, method, metric, s)]["mean"] for s in range(1, 6)]
            assert sum(per) / 5 == pytest.approx(groups[(13, method, metric, None)]["mean"], abs=tol[metric])
            for s in range(1, 6):
                table = 14 + 2 * (s - 1) + (metric == "acc")
                assert groups[(table, method, metric, s)]["mean"] == per[s - 1]


@pytest.mark.parametrize("table, corruption, severity, method, metric, value", [
    (13, "mean", 1, "gaussian", "acr", 0.392),
    (13, "mean", None, "gaussian", "acr", 0.343),
    (13, "mean", None, "catrs", "acc", 70.1),
    (14, "jpeg_compression", 1, "smoothadv", "acr", 0.510),
    (17, "contrast", 2, "gaussian", "acc", 49.0),
    (18, "fog", 3, "catrs", "acr", 0.301),
    (21, "impulse_noise", 4, "macer", "acc", 76.0),
    (22, "elastic_transform", 5, "consistency", "acr", 0.466),
    (23, "mean", 5, "gaussian", "acc", 59.6),
    (24, "translate", None, "smoothmix", "acr", 0.449),
    (24, "dotted_line", None, "stability", "acr", 0.865),
    (25, "fog", None, "stability", "acc", 55.8),
    (25, "canny_edges", None, "catrs", "acc", 73.8),
])
def test_paper_spot_checks(table, corruption, severity, method, metric, value):
    """Cells typed from the paper (App. H and I) by hand."""
    hits = [v.value for v in rc.paper_numbers() if (v.table, v.corruption, v.severity, v.method, v.metric)
            == (table, corruption, severity, method, metric)]
    assert hits == [value]


@pytest.mark.skipif(not PAPER_TEXT.exists(), reason="the paper's text is not here")
def test_every_paper_number_matches_the_paper_text():
    """Each table's 16 rows in the paper text (rows in the paper's order, marks stripped) give the
    package's numbers, the row names mapped to the official file names."""
    cifar = {"Gaussian": "gaussian_noise", "Shot": "shot_noise", "Impulse": "impulse_noise",
             "Defocus": "defocus_blur", "Glass": "glass_blur", "Motion": "motion_blur", "Zoom": "zoom_blur",
             "Snow": "snow", "Frost": "frost", "Fog": "fog", "Bright": "brightness", "Contrast": "contrast",
             "Elastic": "elastic_transform", "Pixel": "pixelate", "JPEG": "jpeg_compression",
             "mACR": "mean", "mAcc": "mean"}
    mnist = {"Bright": "brightness", "Line": "dotted_line", "Glass": "glass_blur", "Impulse": "impulse_noise",
             "Rotate": "rotate", "Shear": "shear", "Spatter": "spatter", "Translate": "translate",
             "Edges": "canny_edges", "Fog": "fog", "Motion": "motion_blur", "Scale": "scale",
             "Shot": "shot_noise", "Stripe": "stripe", "Zigzag": "zigzag", "mACR": "mean", "mAcc": "mean"}
    text = PAPER_TEXT.read_text(encoding="utf-8").replace("<u>", "").replace("</u>", "")
    ours = {(v.table, v.method, v.metric, v.corruption, v.severity): v.value for v in rc.paper_numbers()}
    methods = list(rc.PAPER_METHODS)
    seen = 0
    for t in range(13, 26):
        section = text.split(f"\nTable {t}. ", 1)[1].split("\nTable ", 1)[0]
        lines = [ln.split("\t") for ln in section.splitlines() if re.match(r"^\S.*\t\d", ln)]
        if t == 13:
            assert len(lines) == 7
            for method, cells in zip(methods, lines):
                for k, cell in enumerate(cells[1:13]):
                    key = (13, method, "acr" if k < 6 else "acc", "mean", None if k % 6 == 5 else k % 6 + 1)
                    assert ours[key] == float(cell), key
                    seen += 1
            continue
        names = mnist if t >= 24 else cifar
        severity = None if t >= 24 else (t - 14) // 2 + 1
        assert len(lines) == 16 and lines[-1][0] == ("mACR" if t % 2 == 0 else "mAcc")
        for cells in lines:
            assert len(cells) == 8, cells
            for method, cell in zip(methods, cells[1:8]):
                key = (t, method, "acr" if t % 2 == 0 else "acc", names[cells[0]], severity)
                assert ours[key] == float(cell), key
                seen += 1
    assert seen == len(rc.paper_numbers())


def test_generated_without_suite_follows_the_file_names(tmp_path):
    """A sidecar that records a default severity but no suite: files named <corruption>.tsv give
    the layout without severities."""
    d = tmp_path / "fm"
    d.mkdir()
    for c in ("fog", "stripe"):
        _write(d / f"{c}.tsv", [(0.5, 1), (0.0, 0)],
               {"dataset": "fashion-mnist", "sigma": 0.25, "method": "gaussian",
                "corruption": {"name": c, "severity": 3, "source": "generated"}})
    out = _json([d])
    assert out["layout"] == "corruptions" and out["suite"] == "mnist-c"
    assert _values(out["tables"][0])["fog"] == [0.25] and _values(out["tables"][0])["mACR"] == [None]


def test_the_paper_numbers_ship_in_the_wheel():
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    assert "paper_corruptions.tsv" in data["rsmooth.report"]
