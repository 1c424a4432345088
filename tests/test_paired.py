"""rsmooth analyze A B --paired (metrics/paired.py): two certifications compared image by image,
against references computed another way (a loop over images, the binomial sum written out)."""
import math
import statistics
from pathlib import Path

import numpy as np
import pytest

from rsmooth.cli import main
from rsmooth.errors import RsmoothError
from rsmooth.metrics import CertifyResult, format_row, read_certify_tsv
from rsmooth.metrics.certify_io import TSV_HEADER
from rsmooth.metrics.paired import compare_paired, mcnemar_p, printed_radii
from rsmooth.report.paired import compare


def result(idx, label, predict, radius, path=None):
    idx, label, predict = (np.asarray(v, dtype=np.int64) for v in (idx, label, predict))
    radius = np.where(predict < 0, 0.0, np.asarray(radius, dtype=float))
    return CertifyResult(idx, label, predict, radius, predict == label, np.zeros(len(idx)), path)


def random_pair(seed, n=300):
    """A on every 2nd image of 0..2n, B on every 3rd (shared: every 6th), the same labels."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, 2 * n)

    def one(idx):
        pred = np.where(rng.random(len(idx)) < 0.8, labels[idx], rng.integers(-1, 10, len(idx)))
        return result(idx, labels[idx], pred, rng.random(len(idx)) * 1.9)
    return one(np.arange(0, 2 * n, 2)), one(np.arange(0, 2 * n, 3))


def exact_two_sided(b, c):
    """The binomial test at 1/2 written out: twice the smaller tail, at most 1."""
    n = b + c
    return 1.0 if n == 0 else min(1.0, 2 * sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2 ** n)


@pytest.mark.parametrize("seed", range(4))
def test_counts_tests_and_acr_interval_against_a_loop_over_images(seed):
    a, b = random_pair(seed)
    radii = [0.0, 0.5, 1.0, 1.5]
    c = compare_paired(a, b, radii)
    rows_a = {int(i): (bool(k), float(r)) for i, k, r in zip(a.idx, a.correct, a.radius)}
    rows_b = {int(i): (bool(k), float(r)) for i, k, r in zip(b.idx, b.correct, b.radius)}
    shared = sorted(set(rows_a) & set(rows_b))
    assert c.images == len(shared) == 100 and (c.images_a, c.images_b) == (300, 200)
    for r, row in zip(radii, c.radii):
        ok_a = [rows_a[i][0] and rows_a[i][1] >= r for i in shared]
        ok_b = [rows_b[i][0] and rows_b[i][1] >= r for i in shared]
        only_a = sum(x and not y for x, y in zip(ok_a, ok_b))
        only_b = sum(y and not x for x, y in zip(ok_a, ok_b))
        assert (row.only_a, row.only_b) == (only_a, only_b)
        assert row.accuracy_a == pytest.approx(sum(ok_a) / len(shared))
        assert row.accuracy_b == pytest.approx(sum(ok_b) / len(shared))
        assert row.p_value == pytest.approx(exact_two_sided(only_a, only_b), rel=1e-9)
    d = [rows_a[i][0] * rows_a[i][1] - rows_b[i][0] * rows_b[i][1] for i in shared]
    half = 1.959963984540054 * statistics.stdev(d) / math.sqrt(len(d))
    assert c.acr_difference == pytest.approx(statistics.fmean(d))
    assert c.acr_interval == pytest.approx((statistics.fmean(d) - half, statistics.fmean(d) + half))
    assert c.acr_a - c.acr_b == pytest.approx(c.acr_difference)


def test_row_order_does_not_matter():
    a, b = random_pair(7)
    perm = np.random.default_rng(0).permutation(b.n)
    shuffled = result(b.idx[perm], b.label[perm], b.predict[perm], b.radius[perm])
    assert compare_paired(a, shuffled, [0, 1]) == compare_paired(a, b, [0, 1])


def test_mcnemar_edges():
    assert mcnemar_p(0, 0) == 1.0 and mcnemar_p(5, 5) == 1.0
    assert mcnemar_p(10, 0) == pytest.approx(2 / 2 ** 10) and mcnemar_p(0, 10) == mcnemar_p(10, 0)


def test_printed_radii_round_as_the_public_scripts_print():
    assert printed_radii(np.array([1.7496, 0.000123456, 1.0, 0.9528641, 0.0])).tolist() == \
        [1.75, 0.000123, 1.0, 0.953, 0.0]


def test_other_test_sets_are_refused_in_one_line():
    a = result([0, 1, 2], [3, 4, 5], [3, 4, 5], [0.1, 0.2, 0.3])
    with pytest.raises(RsmoothError, match="give test image 1 the labels 4 and 9: not the same test set"):
        compare_paired(a, result([1, 2], [9, 5], [9, 5], [0.1, 0.2]), [0])
    with pytest.raises(RsmoothError, match="certify no test image in common"):
        compare_paired(a, result([7], [1], [1], [0.1]), [0])
    with pytest.raises(RsmoothError, match="level must be in"):
        compare_paired(a, a, [0], level=1.5)


def write(path, res):
    path.write_text(TSV_HEADER + "\n" + "".join(
        format_row(int(i), int(y), int(p), float(r), bool(k), 1.0) + "\n"
        for i, y, p, r, k in zip(res.idx, res.label, res.predict, res.radius, res.correct)))
    return path


def test_cli_prints_the_comparison_and_refuses_what_does_not_go_with_it(tmp_path, capsys):
    a, b = random_pair(3)
    pa, pb = write(tmp_path / "a.tsv", a), write(tmp_path / "b.tsv", b)
    assert main(["analyze", str(pa), str(pb), "--paired", "--labels", "ours", "theirs", "--radii", "0", "1"]) == 0
    out = capsys.readouterr().out
    c = compare_paired(read_certify_tsv(pa), read_certify_tsv(pb), [0, 1])
    assert out.splitlines()[0] == "| radius | ours | theirs | certified by ours only | by theirs only | exact McNemar p |"
    assert f"| 1 | {100 * c.radii[1].accuracy_a:.1f} | {100 * c.radii[1].accuracy_b:.1f} | " in out
    assert "100 test images in both files (300 in ours, 200 in theirs)" in out
    assert main(["analyze", str(pa), str(pb), "--paired", "--format", "csv", "--as-printed"]) == 0
    assert capsys.readouterr().out.startswith("radius,accuracy_a,accuracy_b,only_a,only_b,mcnemar_p\n0,")
    for flags, says in ((["--paired"], "--paired compares two certify files, got 1"),
                        (["--paired", "--ci"], "--ci goes with the tables"),
                        ([str(pb), "--paired", "--format", "latex"], "--paired prints markdown or csv"),
                        ([str(pb), "--as-printed"], "--as-printed goes with --paired")):
        assert main(["analyze", str(pa), *flags]) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1, err
    assert "--as-printed" not in out  # both at full precision: no hint
    printed = write(tmp_path / "p.tsv", CertifyResult(b.idx, b.label, b.predict, printed_radii(b.radius), b.correct,
                                                      b.time))
    assert main(["analyze", str(pa), str(printed), "--paired"]) == 0
    assert capsys.readouterr().out.endswith("p.tsv's radii have at most 3 significant digits (a public codebase's "
                                            "file), the other's more: pass --as-printed to count both as printed\n")
    text = compare([pa, pb], radii=[0.5], as_json=True, level=0.9)
    assert '"level": 0.9' in text and '"only_a"' in text
