"""The demo's printed report and its reproducibility setting (issue 20, item 1b); the plot's caption."""
from pathlib import Path

import pytest
import torch

from rsmooth import demo
from rsmooth.report.plots import PLOT_TITLE, approximate_caption
from rsmooth.report.summary import FileSummary

TABLE = """| model | sigma | examples | ACR | 0.00 | 0.25 | 0.50 | 0.75 |
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| Gaussian sigma=0.25 | 0.25 | 360 | 0.434 | 96.7 | 84.4 | 46.1 | 0.0 |"""


def test_demo_report_says_what_columns_cells_and_acr_are_and_where_the_files_are():
    root = Path("demo_out")
    text = demo.demo_report(TABLE, root, [root / "gaussian_0.25", root / "gaussian_0.50"])
    assert TABLE in text
    first = text.splitlines()[0]
    assert "columns 0.00 0.25 0.50 0.75: r in [0, 1] pixel units" in first and "l2 radius" in first
    assert "Certified accuracy (%)" in first and "ACR = average certified radius" in first
    assert "approximate certified accuracy" in text and "certified radius >= r" in text
    assert "1 - alpha = 0.999" in text and "arXiv 1902.02918" in text
    assert "counted as 0 where the smoothed classifier is wrong or abstains" in text
    assert f"run folders (checkpoint.pt, train.log, certify.tsv): {root / 'gaussian_0.25'}, " \
           f"{root / 'gaussian_0.50'}" in text
    assert f"table: {root / 'table.md'}; plot: {root / 'certified_accuracy.png'}" in text


def test_radius_columns_of_a_table_without_radii():
    assert demo._radius_columns("| model | ACR |\n| --- | ---: |") == []
    assert demo._radius_columns(TABLE) == ["0.00", "0.25", "0.50", "0.75"]


def test_intra_op_threads_sets_and_restores_the_count():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError):
        with demo.intra_op_threads(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError("restored even on an error")
    assert torch.get_num_threads() == before


def test_demo_trains_and_certifies_on_fixed_threads_whatever_the_callers_count(tmp_path, monkeypatch):
    """The thread count changes float sums in training, so the demo fixes it (demo.THREADS)."""
    seen = []
    monkeypatch.setattr(demo, "_run", lambda *a: seen.append(torch.get_num_threads()) or "report")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert demo.run_demo(str(tmp_path / "d"), log=lambda s: None) == "report"
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert seen == [demo.THREADS] == [2]


def _summary(alpha):
    return FileSummary(path="x.tsv", label="x", num_examples=1, acr=0.0, certified_accuracy={},
                       meta=None if alpha is None else {"alpha": alpha})


def test_plot_caption_says_what_approximate_means():
    text = approximate_caption([_summary(0.001), _summary(0.001)])
    assert "classified correctly with certified radius ≥ r" in text
    assert "Monte-Carlo" in text and "1 − α = 0.999" in text and "arXiv 1902.02918, Sec. 4" in text
    assert "1 − α (arXiv" in approximate_caption([_summary(0.001), _summary(0.01)])  # no one alpha
    assert "1 − α (arXiv" in approximate_caption([_summary(None)])
    assert PLOT_TITLE.startswith("Approximate certified accuracy") and "Cohen" in PLOT_TITLE


def test_a_demo_from_before_the_thread_setting_is_named_as_the_difference(tmp_path):
    out = tmp_path / "d"
    out.mkdir()
    (out / "demo.json").write_text('{"sigmas": [0.25, 0.5], "n": 1000, "epochs": 30, "seed": 0}\n')
    with pytest.raises(demo.RsmoothError, match=r"seed=0 \(now threads=2\); pass overwrite=True"):
        demo.run_demo(str(out), log=lambda s: None)


def test_an_out_that_is_a_file_is_refused_in_one_line(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(demo.RsmoothError, match=r"out='.*f' is an existing file; it must name a folder"):
        demo.run_demo(str(tmp_path / "f"), log=lambda s: None)
