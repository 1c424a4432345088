"""Results as data and figures that do not mislead: records, the public API, unfinished runs,
sequential side files caught by globs, radii a mode did not decide, default labels."""
import csv
import importlib
import io
import json
import typing
import warnings

import pytest

import rsmooth
from rsmooth.cli import main
from rsmooth.errors import RsmoothError
from rsmooth.metrics import CertifyWriter, write_sidecar
from rsmooth.report import analyze, format_table, plot_certified_accuracy, records, summarize
from rsmooth.report import plots
from rsmooth.smoothing.sequential import largest_radius

ROWS = [(1, 1, 0.5), (2, 2, 0.25), (3, -1, 0.0), (4, 4, 0.75)]  # (label, predict, radius)
SEQ_HEADER = "idx\tc_a\tsamples\tn\tn_a\tp_lower\tp_upper\tcapped\tdecisions\n"


def _result(path, rows=ROWS, **meta):
    path.parent.mkdir(parents=True, exist_ok=True)
    with CertifyWriter(path) as w:
        for i, (label, pred, radius) in enumerate(rows):
            w.write(i, label, pred, radius, pred == label, 0.1)
    if meta:
        write_sidecar(path, {"complete": True, "num_examples": len(rows), **meta})
    return path


# -- item 9: the Python API returns data ---------------------------------------------------------
def test_public_api_lists_only_rsmooth_objects():
    typing_names = set(dir(typing))
    for name in rsmooth.__all__:
        value = getattr(importlib.import_module("rsmooth"), name)  # importable
        assert name == "__version__" or getattr(value, "__module__", "").startswith("rsmooth"), name
        assert name not in typing_names or name == "__version__", name
    assert {"summarize", "records", "FileSummary", "analyze"} <= set(rsmooth.__all__)
    assert not {"Any", "List", "TYPE_CHECKING"} & set(dir(rsmooth))
    assert all(not n.startswith("_") or n == "__version__" for n in dir(rsmooth))
    ns = {}
    exec("from rsmooth import *", ns)
    assert set(ns) - {"__builtins__"} == set(rsmooth.__all__)


def test_records_are_plain_dicts(tmp_path):
    a = _result(tmp_path / "a" / "certify.tsv", mode="certify", sigma=0.25, n=1000, n0=100, alpha=0.001,
                dataset="digits", method="gaussian")
    b = _result(tmp_path / "public.tsv")  # no sidecar
    summaries = rsmooth.summarize([a, b], radii=[0, 0.5], ci=0.95)
    assert isinstance(summaries[0], rsmooth.FileSummary)
    recs = rsmooth.records(summaries)
    assert recs[0] == {**recs[0], "label": "certify", "path": str(a), "mode": "certify", "dataset": "digits",
                       "method": "gaussian", "sigma": 0.25, "n0": 100, "n": 1000, "n_max": None, "alpha": 0.001,
                       "examples": 4, "examples_planned": 4, "complete": True, "acr": 0.375,
                       "acc@0": 0.75, "acc@0.5": 0.5}
    assert 0 < recs[0]["acc@0.5_lo"] < 0.5 < recs[0]["acc@0.5_hi"] and recs[0]["acc@0.5_hp"] is not None
    assert recs[1]["mode"] is recs[1]["complete"] is recs[1]["sigma"] is None and recs[1]["acc@0"] == 0.75
    assert recs[1]["acc@0_hp"] is None  # no alpha known
    assert json.loads(json.dumps(recs)) == recs  # plain values only
    assert recs == [s.to_dict() for s in summaries] and records(summaries) == recs
    assert len({tuple(r) for r in recs}) == 1  # the same columns: a DataFrame without gaps


# -- item 10: unfinished certifications ----------------------------------------------------------
def test_incomplete_run_is_named_in_table_json_and_records(tmp_path):
    done = _result(tmp_path / "done.tsv", mode="certify")
    part = _result(tmp_path / "part.tsv", ROWS[:2], mode="certify")
    write_sidecar(part, {"mode": "certify", "num_examples": 20, "complete": False})
    text = analyze([done, part], radii=[0, 0.5])
    assert "| part | 2 of 20 |" in text and "| done | 4 |" in text
    assert "Note: part: incomplete: 2 of 20 examples" in text and "done: incomplete" not in text
    out = json.loads(analyze([done, part], radii=[0, 0.5], as_json=True))
    f = out["files"][1]
    assert (f["complete"], f["examples_done"], f["examples_planned"]) == (False, 2, 20)
    assert out["files"][0]["complete"] is True
    assert any("part: incomplete: 2 of 20 examples" in n for n in out["notes"])
    rows = list(csv.reader(io.StringIO(analyze([done, part], radii=[0, 0.5], fmt="csv"))))
    assert rows[2][:2] == ["part", "2"] and any("incomplete: 2 of 20" in r[0] for r in rows[3:] if r)
    assert "2 of 20" in analyze([done, part], radii=[0, 0.5], fmt="latex")
    s = summarize([part])[0]
    assert (s.complete, s.num_examples, s.examples_planned) == (False, 2, 20)
    assert s.to_dict()["complete"] is False


# -- item 11: OUT.seq.tsv of earlier versions caught by a *.tsv glob -------------------------------
def test_analyze_skips_old_sequential_side_files_with_a_note(tmp_path, capsys):
    seq = _result(tmp_path / "seq.tsv", mode="sequential", radii=[0.25, 0.5])
    (tmp_path / "seq.tsv.seq.tsv").write_text(SEQ_HEADER + "0\t1\t900\t800\t790\t0.97\t0.99\t0\trobust,robust\n")
    fixed = _result(tmp_path / "fixed.tsv", mode="certify")
    files = sorted(tmp_path.glob("*.tsv"))  # what the shell's folder/*.tsv gives
    assert [p.name for p in files] == ["fixed.tsv", "seq.tsv", "seq.tsv.seq.tsv"]
    text = analyze(files, labels=["F", "S", "side"])  # a label per file given: the side file's dropped
    assert "| F |" in text and "| S |" in text and "side" not in text.split("Note:")[0]
    assert "Note: skipped " in text and "seq.tsv.seq.tsv: the per-example samples and decisions" in text
    with pytest.warns(UserWarning, match="skipped .*seq.tsv.seq.tsv"):
        assert [s.label for s in summarize(files)] == ["fixed", "seq"]
    assert main(["analyze", *map(str, files), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [f["label"] for f in out["files"]] == ["fixed", "seq"] and "skipped" in out["notes"][0]
    with pytest.raises(RsmoothError, match=r"per-example samples .* analyze its certify TSV \(.*seq.tsv\)"):
        summarize([files[2]])
    assert fixed.exists() and seq.exists()


# -- item 12: radii a mode did not decide ---------------------------------------------------------
def test_sequential_without_zero_leaves_undecided_columns_blank(tmp_path):
    seq = _result(tmp_path / "seq.tsv", [(1, 1, 0.5), (2, 2, 0.25), (3, -1, 0.0), (4, 4, 0.5)],
                  mode="sequential", radii=[0.25, 0.5], sigma=0.25, alpha=0.001)
    fixed = _result(tmp_path / "fixed.tsv", mode="certify", sigma=0.25)
    s, f = summarize([seq, fixed])  # default columns 0, 0.25, 0.5, 0.75
    assert list(s.certified_accuracy.items()) == [(0.0, None), (0.25, 0.75), (0.5, 0.5), (0.75, None)]
    assert f.certified_accuracy[0.0] == 0.75 and not s.decides(0) and s.decides(0.5)
    text = analyze([seq, fixed])
    assert "| seq | 0.25 | 4 | 0.312 | - | 75.0 | 50.0 | - |" in text
    assert "| fixed | 0.25 | 4 | 0.375 | 75.0 | 75.0 | 50.0 | 25.0 |" in text
    assert "decided only radii 0.25, 0.5" in text and "here 0, 0.75); add 0 to --radii" in text
    rows = list(csv.reader(io.StringIO(analyze([seq, fixed], fmt="csv"))))
    assert rows[1][4:8] == ["", "75.0", "50.0", ""]
    js = json.loads(analyze([seq, fixed], as_json=True))
    assert js["files"][0]["certified_accuracy"] == {"0.0": None, "0.25": 0.75, "0.5": 0.5, "0.75": None}
    assert s.to_dict()["acc@0"] is None
    latex = analyze([seq, fixed], fmt="latex")
    assert r"\textbf{75.0}" in latex and " & - & " in latex
    ci = analyze([seq, fixed], ci=0.95)  # no interval for a radius not decided
    assert "| seq | 0.25 | 4 | 0.312 | - | 75.0 [" in ci
    only_undecided = json.loads(analyze([seq, fixed], radii=[0.75], ci=0.95, as_json=True))
    assert "ci" not in only_undecided["files"][0] and "Clopper-Pearson" in only_undecided["notes"][0]
    ci_csv = list(csv.reader(io.StringIO(analyze([seq, fixed], fmt="csv", ci=0.95))))
    head = ci_csv[0]
    assert ci_csv[1][head.index("acc@0.00_lo")] == "" and ci_csv[1][head.index("acc@0.25_lo")] != ""
    # with 0 decided its column is the smoothed accuracy; radii off the 0.25 grid are columns too
    seq0 = _result(tmp_path / "seq0.tsv", [(1, 1, 0.3), (2, 2, 0.0), (3, -1, 0.0)], mode="sequential",
                   radii=[0.0, 0.3])
    (s0,) = summarize([seq0])
    assert s0.certified_accuracy == pytest.approx({0.0: 2 / 3, 0.25: None, 0.3: 1 / 3})
    assert format_table([s0], radii=[0, 0.3]).splitlines()[2] == "| seq0 | 3 | 0.100 | 66.7 | 33.3 |"


def test_adaptive_leaves_radii_beyond_its_reach_blank(tmp_path):
    meta = dict(mode="adaptive", n_max=1000, alpha=0.001, sigma=0.25, radius_tol=0.05)
    limit = largest_radius(1000, 0.001, 0.25)
    assert 0.5 < limit < 0.75
    ada = _result(tmp_path / "ada.tsv", [(1, 1, 0.58), (2, 2, 0.2), (3, -1, 0.0)], **meta)
    fixed = _result(tmp_path / "fixed.tsv", [(1, 1, 0.9), (2, 2, 0.2)], mode="certify", sigma=0.25)
    a, f = summarize([ada, fixed])
    assert list(a.certified_accuracy) == [0.0, 0.25, 0.5, 0.75]
    assert a.certified_accuracy[0.75] is None and f.certified_accuracy[0.75] == 0.5
    assert a.certified_accuracy[0.5] == pytest.approx(1 / 3)
    text = analyze([ada, fixed])
    assert "| ada | 0.25 | 3 | 0.260 | 66.7 | 33.3 | 33.3 | - |" in text
    assert f"certifies no radius above {limit:.4g}" in text and "raise --n-max" in text


def test_plots_skip_points_a_run_did_not_decide(tmp_path, monkeypatch):
    seq = _result(tmp_path / "seq.tsv", [(1, 1, 0.5), (2, 2, 0.25), (3, -1, 0.0)], mode="sequential",
                  radii=[0.25, 0.5])
    ada = _result(tmp_path / "ada.tsv", [(1, 1, 0.58), (2, 2, 0.2)], mode="adaptive", n_max=1000, alpha=0.001,
                  sigma=0.25)
    fixed = _result(tmp_path / "fixed.tsv", [(1, 1, 0.9)], mode="certify")
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, out, fmt: figures.append(fig) or out)
    plot_certified_accuracy(summarize([seq, ada, fixed]), tmp_path / "p.png")
    lines = {ln.get_label(): ln for ln in figures[0].axes[0].get_lines()}
    assert list(lines["seq"].get_xdata()) == [0.25, 0.5] and lines["seq"].get_linestyle() == "None"
    assert max(lines["ada"].get_xdata()) <= largest_radius(1000, 0.001, 0.25)
    assert max(lines["fixed"].get_xdata()) == pytest.approx(1.05 * 0.9)


# -- item 15: default labels --------------------------------------------------------------------
def test_labels_are_the_file_names_when_they_differ(tmp_path):
    a = _result(tmp_path / "fm025" / "certify.tsv")
    b = _result(tmp_path / "fm050" / "seq.tsv")
    c = _result(tmp_path / "fm050" / "certify.tsv")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert [s.label for s in summarize([a, b])] == ["certify", "seq"]
        assert [s.label for s in summarize([a, c])] == ["fm025", "fm050"]  # names repeat: the folders
        # names repeat within a folder: the shortest distinguishing ends of the paths
        assert [s.label for s in summarize([a, b, c])] == ["fm025/certify", "seq", "fm050/certify"]
        assert [s.label for s in summarize([a])] == ["fm025"]  # one generic name: its folder
