"""Summaries, tables (markdown/latex/csv), JSON, plot and analyze()."""
import csv
import math
import io
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

from rsmooth.errors import RsmoothError
from rsmooth.metrics import CertifyWriter, write_sidecar
from rsmooth.report import (
    FileSummary,
    analyze,
    format_table,
    plot_certified_accuracy,
    summarize,
    to_json,
)
from rsmooth.report.summary import parse_radii

# two small result files with hand-checkable numbers
# a: radii of correct examples 0.1, 0.3, 0.6, 1.2; one wrong, one abstention; n = 6
A = [(0, 1, 1, 0.1, 1), (1, 1, 1, 0.3, 1), (2, 2, 2, 0.6, 1), (3, 2, 2, 1.2, 1),
     (4, 3, 5, 0.9, 0), (5, 3, -1, 0.0, 0)]
# b: radii 0.25, 0.5 correct; n = 4
B = [(0, 1, 1, 0.25, 1), (1, 1, 1, 0.5, 1), (2, 1, 0, 0.4, 0), (3, 1, -1, 0.0, 0)]


def _write(path, rows):
    with CertifyWriter(path) as w:
        for row in rows:
            w.write(*row, 0.5)
    return path


@pytest.fixture
def files(tmp_path):
    return [_write(tmp_path / "gauss_s025.tsv", A), _write(tmp_path / "cat_rs.tsv", B)]


def test_summarize_numbers_and_default_radii(files):
    a, b = summarize(files)
    assert isinstance(a, FileSummary)
    assert (a.label, a.num_examples, b.label, b.num_examples) == ("gauss_s025", 6, "cat_rs", 4)
    assert a.acr == pytest.approx((0.1 + 0.3 + 0.6 + 1.2) / 6)
    assert b.acr == pytest.approx(0.75 / 4)
    # max radius over all files is 1.2 (a wrong example's 0.9 does not matter) -> 0..1.0
    assert list(a.certified_accuracy) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert list(a.certified_accuracy.values()) == pytest.approx([4 / 6, 3 / 6, 2 / 6, 1 / 6, 1 / 6])
    assert list(b.certified_accuracy.values()) == pytest.approx([0.5, 0.5, 0.25, 0.0, 0.0])
    assert a.sigma is None and a.meta is None


def test_summarize_radii_labels_and_sidecar(files):
    write_sidecar(files[1], {"sigma": 0.5, "n": 100000})
    a, b = summarize(files, radii=[0.3, 2.0], labels=["Gaussian", "CAT-RS"])
    assert (a.label, b.label) == ("Gaussian", "CAT-RS")
    assert a.certified_accuracy == pytest.approx({0.3: 3 / 6, 2.0: 0.0})  # 0.3 itself counts
    assert (a.sigma, b.sigma, b.meta["n"]) == (None, 0.5, 100000)
    assert summarize(files[0], radii="0:0.5:0.25")[0].certified_accuracy.keys() == {0, 0.25, 0.5}
    for bad in ([-1.0, 0.25], [float("nan")], "0,-0.5"):
        with pytest.raises(RsmoothError, match=r"radii must be finite and >= 0 \(l2 radii in \[0, 1\] pixel units\)"):
            summarize(files[0], radii=bad)


def test_default_labels_are_the_names_or_the_run_folders_when_names_repeat(tmp_path, monkeypatch):
    p1 = _write(tmp_path / "run1" / "certify.tsv", A)
    p2 = _write(tmp_path / "run2" / "certify.tsv", B)
    assert [s.label for s in summarize([p1, p2])] == ["run1", "run2"]
    assert [s.label for s in summarize([p1])] == ["run1"]                # generic stem alone
    p3 = _write(tmp_path / "cifar" / "run1" / "certify.tsv", B)         # folders collide
    assert [s.label for s in summarize([p1, p3])] == [f"{tmp_path.name}/run1", "cifar/run1"]
    p4 = _write(tmp_path / "run1" / "other.tsv", B)                     # one folder, two files
    assert [s.label for s in summarize([p1, p4])] == ["certify", "other"]
    p5 = _write(tmp_path / "run2" / "gauss.tsv", B)
    assert [s.label for s in summarize([p4, p5])] == ["other", "gauss"]  # distinct stems
    assert [s.label for s in summarize([p1, p5])] == ["certify", "gauss"]  # distinct, one generic: still the names
    monkeypatch.chdir(tmp_path / "run1")
    assert [s.label for s in summarize(["certify.tsv"])] == ["run1"]    # relative path


def test_errors(files, tmp_path):
    with pytest.raises(RsmoothError, match="2 labels for 1 result files"):
        summarize(files[:1], labels=["x", "y"])
    with pytest.raises(RsmoothError, match="labels"):
        analyze(files, labels=["only-one"])
    with pytest.raises(RsmoothError, match="no result files"):
        summarize([])
    empty = tmp_path / "empty.tsv"
    _write(empty, [])
    with pytest.raises(RsmoothError, match="no certified examples"):
        summarize([empty])
    with pytest.raises(RsmoothError, match="unknown table format 'html'"):
        analyze(files, fmt="html")
    with pytest.raises(RsmoothError, match="radii"):
        parse_radii("0,abc")


def test_markdown_table(files):
    text = format_table(summarize(files), fmt="markdown")
    lines = text.splitlines()
    assert lines[0] == "| model | examples | ACR | 0.00 | 0.25 | 0.50 | 0.75 | 1.00 |"
    assert lines[1].startswith("| --- | ---: |")
    assert lines[2] == "| gauss_s025 | 6 | 0.367 | 66.7 | 50.0 | 33.3 | 16.7 | 16.7 |"
    assert lines[3] == "| cat_rs | 4 | 0.188 | 50.0 | 50.0 | 25.0 | 0.0 | 0.0 |"
    assert analyze(files) == text  # markdown is the default


def test_csv_table_full_precision_and_sigma_column(files):
    write_sidecar(files[0], {"sigma": 0.25})
    text = analyze(files, radii=[0, 0.5], fmt="csv", labels=["Gaussian", "CAT, RS"])
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["model", "sigma", "examples", "ACR", "0.00", "0.50"]
    assert rows[1][:3] == ["Gaussian", "0.25", "6"] and rows[2][:3] == ["CAT, RS", "", "4"]
    assert [float(v) for v in rows[1][3:]] == [(0.1 + 0.3 + 0.6 + 1.2) / 6, 400 / 6, 200 / 6]
    assert [float(v) for v in rows[2][3:]] == [0.75 / 4, 50.0, 25.0]
    assert rows[1][4] == repr(400 / 6)  # 66.66666666666667, not the markdown's 66.7


def test_latex_table_booktabs_and_bold_best(files):
    text = analyze(files, radii=[0.0, 0.25, 0.5, 2.0], fmt="latex", labels=["Gauss_1", "CAT-RS"])
    assert text.startswith(r"\begin{tabular}{lrrrrrr}")
    for rule in (r"\toprule", r"\midrule", r"\bottomrule", r"\cmidrule(lr){4-7}"):
        assert rule in text
    assert r"model & examples & ACR & 0.00 & 0.25 & 0.50 & 2.00 \\" in text
    # best per column bold, ties both bold, an all-zero column not bold, label escaped
    assert (r"Gauss\_1 & 6 & \textbf{0.367} & \textbf{66.7} & \textbf{50.0} & \textbf{33.3}"
            r" & 0.0 \\") in text
    assert r"CAT-RS & 4 & 0.188 & 50.0 & \textbf{50.0} & 25.0 & 0.0 \\" in text
    assert text.rstrip().endswith(r"\end{tabular}")


def test_json_keys_exact(files):
    out = json.loads(analyze(files, radii=[0, 0.5, 1], as_json=True))
    assert list(out) == ["files"] and len(out["files"]) == 2
    f = out["files"][0]
    assert {"path", "num_examples", "acr", "certified_accuracy"} <= set(f)
    assert set(f) - {"path", "num_examples", "acr", "certified_accuracy"} <= {
        "label", "sigma", "mode", "complete", "examples_done", "examples_planned"}
    assert f["path"] == str(files[0]) and f["num_examples"] == f["examples_done"] == 6
    assert f["complete"] is f["examples_planned"] is f["mode"] is None  # no sidecar
    assert f["acr"] == (0.1 + 0.3 + 0.6 + 1.2) / 6  # full precision
    assert list(f["certified_accuracy"]) == ["0.0", "0.5", "1.0"]
    assert f["certified_accuracy"]["0.5"] == pytest.approx(2 / 6)
    assert to_json(summarize(files, radii=[0.5]))["files"][1]["certified_accuracy"] == {"0.5": 0.25}


def test_predict_run_in_the_table_warns(files, tmp_path):
    pred = _write(tmp_path / "pred.tsv", [(0, 1, 1, 0.0, 1), (1, 2, 0, 0.0, 0)])
    write_sidecar(pred, {"mode": "predict", "sigma": 0.5})
    with pytest.warns(UserWarning, match=r"pred\.tsv: predict run") as caught:
        analyze([files[0], pred])
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    bare = _write(tmp_path / "bare.tsv", [(0, 1, 1, 0.0, 1), (1, 2, 0, 0.0, 0)])  # no sidecar
    with pytest.warns(UserWarning, match="bare.tsv: predict run"):
        summarize([files[0], bare])
    write_sidecar(files[1], {"mode": "certify", "sigma": 0.5})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summarize(files)  # certify runs: no warning


@pytest.mark.parametrize("name, magic", [("acc.png", b"\x89PNG\r\n\x1a\n"), ("acc.PDF", b"%PDF"),
                                         ("acc.svg", b"<?xml"), ("acc", b"\x89PNG")])
def test_plot_format_from_the_extension(files, tmp_path, name, magic):
    out = tmp_path / name
    analyze(files, plot=out)
    data = out.read_bytes()
    assert data.startswith(magic)
    if name.endswith("svg"):
        assert b"<svg" in data[:1000]


def test_plot_unknown_extension_or_unwritable_folder_is_one_line(files, tmp_path):
    with pytest.raises(RsmoothError, match=r"\.jpeg .*\.png, \.pdf, \.svg"):
        analyze(files, plot=tmp_path / "acc.jpeg")
    assert not (tmp_path / "acc.jpeg").exists()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for out in (blocker / "sub" / "acc.png", "/proc/rsmooth_no_such/acc.png", tmp_path):
        with pytest.raises(RsmoothError, match="cannot write the plot .*folder you can write") as e:
            analyze(files, plot=out)
        assert str(out) in str(e.value) and "\n" not in str(e.value)


def test_plot_writes_png(files, tmp_path):
    summaries = summarize(files)
    out = plot_certified_accuracy(summaries, tmp_path / "plots" / "deep" / "acc.png",
                                  labels=["Gaussian", "CAT-RS"])
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    with pytest.raises(RsmoothError, match="labels"):
        plot_certified_accuracy(summaries, tmp_path / "x.png", labels=["one"])
    png = tmp_path / "via_analyze.png"
    analyze(files, plot=png)
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_import_does_not_load_matplotlib_nor_scipy():
    """Every ``rsmooth`` command (each torchrun rank, each reproduce step) starts without them:
    scipy is imported when a bound or a corruption first needs it (about 1 s saved per start)."""
    code = ("import sys, rsmooth, rsmooth.report, rsmooth.metrics, rsmooth.cli; "
            "from rsmooth.cli import build_parser; build_parser(); "
            "assert 'matplotlib' not in sys.modules, 'matplotlib imported eagerly'; "
            "assert not [m for m in sys.modules if m.startswith('scipy')], 'scipy imported eagerly'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
def test_plot_steps_match_metric(files, tmp_path, monkeypatch):
    """The drawn curve equals certified_accuracy at every radius (exact steps)."""
    import matplotlib.axes

    drawn = []
    real_step = matplotlib.axes.Axes.step

    def spy(self, x, y, *args, **kwargs):
        drawn.append((np.asarray(x), np.asarray(y), kwargs.get("where")))
        return real_step(self, x, y, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "step", spy)
    plot_certified_accuracy(summarize(files[:1]), tmp_path / "p.png")
    (x, y, where), = drawn
    assert where == "pre" and len(x) > 500
    for r in (0.1, 0.3, 0.6, 1.2):  # every drop point is on the grid
        assert r in x.tolist()
    assert y[x.tolist().index(0.6)] == pytest.approx(100 * 2 / 6)
    assert y[-1] == 0.0


# --ci: intervals, the high-probability bound, notes, JSON and error bars

def _cp(k, m, level=0.95):
    """Independent reference: scipy's exact (Clopper-Pearson) interval."""
    from scipy.stats import binomtest
    ci = binomtest(k, m).proportion_ci(confidence_level=level, method="exact")
    return ci.low, ci.high


def _outward(lo, hi):
    return f"[{math.floor(1000 * lo + 1e-7) / 10:.1f}, {math.ceil(1000 * hi - 1e-7) / 10:.1f}]"


def test_ci_markdown_cells_and_notes(files):
    write_sidecar(files[0], {"sigma": 0.25, "alpha": 0.001})
    text = analyze(files, radii=[0, 0.5], ci=True)
    lines = text.splitlines()
    # a: m = 6, counts 4 and 2; q = 0 since P(Binomial(6, 0.001) = 0) = 0.994 >= 0.95, so h = a
    assert lines[2] == (f"| gauss_s025 | 0.25 | 6 | 0.367 | 66.7 {_outward(*_cp(4, 6))} ≥ 66.6 "
                        f"| 33.3 {_outward(*_cp(2, 6))} ≥ 33.3 |")
    # b has no sidecar, so no alpha: interval only
    assert lines[3] == f"| cat_rs |  | 4 | 0.188 | 50.0 {_outward(*_cp(2, 4))} | 25.0 {_outward(*_cp(1, 4))} |"
    notes = [ln for ln in lines if ln.startswith("Note: ")]
    assert len(notes) == 4 and "\n" not in notes[0]
    assert "a [lo, hi]" in notes[0] and "95% Clopper-Pearson" in notes[0]
    assert "sampling of the test examples, not the Monte-Carlo error" in notes[0]
    assert "≥ h" in notes[1] and "Binomial(m, alpha)" in notes[1] and "arXiv 1902.02918" in notes[1]
    assert "gauss_s025: q = 0 (m = 6, alpha = 0.001)" in notes[1]
    assert "no high-probability bound for cat_rs" in notes[2] and "--alpha" in notes[2]
    assert "rounded outward" in notes[3]
    # without ci the table is the one of before
    assert "[" not in analyze(files) and "Note" not in analyze(files)


def test_ci_cells_round_outward():
    from rsmooth.metrics import AccuracyBounds
    from rsmooth.report.tables import TableFormat, _ci_cell

    b = AccuracyBounds(count=82, num_examples=100, level=0.95, lo=0.12345, hi=0.12301, alpha=0.001,
                       wrong_certificates=0, hp=0.82, hp_population=0.7)
    assert _ci_cell(82.0, b, TableFormat.MARKDOWN) == "82.0 [12.3, 12.4] ≥ 82.0"
    assert _ci_cell(82.0, b, TableFormat.LATEX) == r"82.0 [12.3, 12.4] $\geq$ 82.0"


def test_ci_high_probability_bound_with_alpha_and_level(tmp_path):
    """m = 500 at alpha 0.001 (Cohen et al.'s CIFAR-10 protocol): q = 2 at 95%, 3 at 99%."""
    from scipy.stats import binom

    rows = [(i, 0, 0 if i < 412 else -1, 0.6 if i < 412 else 0.0, int(i < 412)) for i in range(500)]
    path = _write(tmp_path / "m500.tsv", rows)
    for level, q in ((0.95, 2), (0.99, 3)):
        assert binom.cdf(q, 500, 0.001) >= level > binom.cdf(q - 1, 500, 0.001)
        (s,) = summarize([path], radii=[0.5], ci=level, alpha=0.001)
        b = s.ci[0.5]
        assert (b.count, b.wrong_certificates, b.hp) == (412, q, (412 - q) / 500)
        assert (b.lo, b.hi) == pytest.approx(_cp(412, 500, level), rel=1e-9)


def test_ci_csv_columns(files):
    write_sidecar(files[0], {"sigma": 0.25, "alpha": 0.001})
    text = analyze(files, radii=[0, 0.5], fmt="csv", ci=0.9, alpha=0.001)  # alpha: for b, without a sidecar
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["model", "sigma", "examples", "ACR", "0.00", "0.50", "acc@0.00_lo", "acc@0.00_hi",
                       "acc@0.00_hp", "acc@0.50_lo", "acc@0.50_hi", "acc@0.50_hp"]
    a_row, b_row = rows[1], rows[2]
    assert [float(v) for v in a_row[4:6]] == [400 / 6, 200 / 6]  # unchanged cells
    lo, hi = _cp(2, 6, 0.9)
    assert [float(v) for v in a_row[9:12]] == pytest.approx([100 * lo, 100 * hi, 200 / 6], rel=1e-9)
    # b (m = 4) with alpha 0.001: P(Binomial(4, 0.001) = 0) = 0.996 >= 0.9, so q = 0 and hp = count
    assert float(b_row[11]) == 25.0 and float(b_row[8]) == 50.0
    assert rows[4][0].startswith("note: acc@r_lo, acc@r_hi: the exact two-sided 90% Clopper-Pearson")
    assert any(r and r[0].startswith("note: acc@r_hp: ") for r in rows)


def test_ci_latex_bolds_by_value(files):
    text = analyze(files, radii=[0.25], fmt="latex", ci=True, alpha=0.001)
    assert r"\textbf{50.0 [" in text and r"$\geq$" in text
    assert text.count(r"\textbf{50.0") == 2  # tie at 0.25: both bold
    assert "% note: a [lo, hi]" in text and r"% note: $\geq$ h" in text


def test_ci_json(files):
    write_sidecar(files[0], {"alpha": 0.001})
    out = json.loads(analyze(files, radii=[0.5], as_json=True, ci=0.9))
    a, b = out["files"]
    assert a["certified_accuracy"] == {"0.5": pytest.approx(2 / 6)}  # unchanged
    assert (a["ci"]["level"], a["ci"]["alpha"], a["ci"]["wrong_certificates"]) == (0.9, 0.001, 0)
    cell = a["ci"]["certified_accuracy"]["0.5"]
    assert cell["count"] == 2 and (cell["lo"], cell["hi"]) == pytest.approx(_cp(2, 6, 0.9), rel=1e-9)
    assert cell["hp"] == pytest.approx(2 / 6)
    # q = 0 at beta/2 as well, so the union bound's one-sided beta/2 end is the interval's lower end
    assert cell["hp_population"] == pytest.approx(cell["lo"], rel=1e-12)
    assert b["ci"]["alpha"] is None and b["ci"]["certified_accuracy"]["0.5"]["hp"] is None
    assert out["notes"][0].startswith("lo, hi: the exact two-sided 90% Clopper-Pearson")
    assert "ci" not in json.loads(analyze(files, as_json=True))["files"][0]


def test_ci_table_at_other_radii_recomputes_bounds(files):
    summaries = summarize(files, radii=[0.5], ci=True, alpha=0.001)
    text = format_table(summaries, radii=[0.25], fmt="markdown")
    assert f"50.0 {_outward(*_cp(3, 6))} ≥ 50.0" in text


def test_ci_errors(files, capsys):
    from rsmooth.cli import main

    write_sidecar(files[0], {"alpha": 0.001})
    with pytest.raises(RsmoothError, match="sidecar records alpha 0.001, not 0.01"):
        summarize(files, ci=True, alpha=0.01)
    for bad in (95, 0, 1.0, "x"):
        with pytest.raises(RsmoothError, match=r"confidence level ci \(--ci-level\) must be"):
            analyze(files, ci=bad)
    with pytest.raises(RsmoothError, match=r"alpha must be in \(0, 1\)"):
        summarize(files, ci=True, alpha=2.0)
    for argv, message in ((["--ci-level", "0.9"], "--ci-level goes with --ci"),
                          (["--alpha", "0.001"], "--alpha goes with --ci"),
                          (["--ci", "--ci-level", "95"], "confidence level")):
        assert main(["analyze", *map(str, files), *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
    assert main(["analyze", "--corruptions", str(files[0].parent), "--ci"]) == 2
    assert "--ci goes with certify files" in capsys.readouterr().err
    assert main(["analyze", *map(str, files), "--ci", "--ci-level", "0.9", "--radii", "0.5"]) == 0
    assert "90% Clopper-Pearson" in capsys.readouterr().out


def test_ci_plot_error_bars(files, tmp_path, monkeypatch):
    import matplotlib.axes

    bars = []
    real = matplotlib.axes.Axes.errorbar

    def spy(self, x, y, *args, **kwargs):
        bars.append((np.asarray(x), np.asarray(y), np.asarray(kwargs["yerr"])))
        return real(self, x, y, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar", spy)
    analyze(files, radii=[0, 0.5], plot=tmp_path / "ci.png", ci=True)
    assert (tmp_path / "ci.png").read_bytes()[:4] == b"\x89PNG"
    assert len(bars) == 2
    x, y, yerr = bars[0]
    assert x.tolist() == [0.0, 0.5] and y.tolist() == pytest.approx([400 / 6, 200 / 6])
    lo, hi = _cp(2, 6)
    assert yerr[:, 1] == pytest.approx([200 / 6 - 100 * lo, 100 * hi - 200 / 6])
    assert bars[1][0][0] > 0  # the second file's bars sit beside the first's
    bars.clear()
    analyze(files, plot=tmp_path / "plain.png")
    assert bars == []  # no --ci, no bars


def test_plot_curves_writes_a_png_of_every_line_and_refuses_empty_ones(tmp_path):
    from PIL import Image

    from rsmooth.report.plots import plot_curves

    out = plot_curves([("ours", [1, 2, 3], [70.0, 77.0, 81.0]), ("authors", [1, 2, 3], [74.0, 77.5, 81.2])],
                      tmp_path / "curve.png", ylabel="noisy test accuracy (%)", title="sigma 0.25")
    with Image.open(out) as img:
        assert img.format == "PNG" and img.size[0] > 300
        colours = {c for _, c in img.convert("RGB").getcolors(1 << 20)}
    assert len(colours) > 10  # lines, labels, grid: not a blank canvas
    for bad in ([], [("x", [], [])], [("x", [1, 2], [3.0])]):
        with pytest.raises(RsmoothError, match="plot_curves needs one or more"):
            plot_curves(bad, tmp_path / "bad.png")
    with pytest.raises(RsmoothError, match=r"cannot write a plot as \.jpg"):
        plot_curves([("x", [1], [2.0])], tmp_path / "c.jpg")
