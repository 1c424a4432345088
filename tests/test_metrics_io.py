"""Certify TSV writer/reader, resume semantics, public-codebase files, sidecar JSON."""
import datetime
import json

import numpy as np
import pytest

from rsmooth.errors import RsmoothError
from rsmooth.metrics import (
    TSV_HEADER,
    CertifyResult,
    CertifyWriter,
    read_certify_tsv,
    read_sidecar,
    sidecar_path,
    write_sidecar,
)


def _rows(n, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        label = int(rng.integers(0, 10))
        predict = label if rng.random() < 0.7 else int(rng.choice([-1, (label + 1) % 10]))
        radius = float(rng.random() * 1.9) if predict == label else 0.0
        rows.append((3 * i, label, predict, radius, predict == label, float(rng.random())))
    return rows


def test_header_is_exact():
    assert TSV_HEADER == "idx\tlabel\tpredict\tradius\tcorrect\ttime"


def test_round_trip_full_precision(tmp_path):
    path = tmp_path / "sub" / "out.tsv"
    rows = _rows(40)
    rows.append((999, 1, 1, 0.1 + 0.2, True, 12.3456789))  # 0.30000000000000004
    rows.append((1000, 1, 1, np.float32(0.7), np.bool_(True), datetime.timedelta(seconds=1.5)))
    with CertifyWriter(path) as w:
        for row in rows:
            w.write(*row)
    lines = path.read_text().splitlines()
    assert lines[0] == TSV_HEADER and len(lines) == len(rows) + 1
    assert lines[-2].split("\t")[3] == "0.30000000000000004"
    assert lines[-2].split("\t")[4:] == ["1", "12.3457"]
    res = read_certify_tsv(path)
    assert isinstance(res, CertifyResult) and res.n == len(res) == len(rows)
    assert res.path == path
    assert res.idx.tolist() == [r[0] for r in rows]
    assert res.label.tolist() == [r[1] for r in rows]
    assert res.predict.tolist() == [r[2] for r in rows]
    assert res.radius.tolist() == [float(r[3]) for r in rows]  # bit-exact
    assert res.correct.dtype == bool and res.correct.tolist() == [bool(r[4]) for r in rows]
    np.testing.assert_allclose(res.time[:-1], [r[5] for r in rows[:-1]], atol=5e-5)
    assert res.time[-1] == 1.5


def test_rows_are_flushed_while_open(tmp_path):
    path = tmp_path / "out.tsv"
    with CertifyWriter(path) as w:
        w.write(0, 1, 1, 0.5, 1, 0.1)
        assert read_certify_tsv(path).idx.tolist() == [0]  # readable mid-run
        with pytest.raises(RsmoothError, match="already certified"):
            w.write(0, 1, 1, 0.5, 1, 0.1)


def test_reads_cohen_format(tmp_path):
    # as written by locuslab/smoothing certify.py: "{:.3}" radius, str(timedelta) time
    text = "idx\tlabel\tpredict\tradius\tcorrect\ttime\n"
    rows = [(0, 3, 3, 0.7137, 1, 1.234567), (20, 8, -1, 0.0, 0, 0.5), (40, 8, 1, 1.2345, 0, 61.0),
            (60, 0, 0, 12.345, 1, 90061.25)]
    for i, label, pred, radius, corr, sec in rows:
        elapsed = datetime.timedelta(seconds=sec)
        text += f"{i}\t{label}\t{pred}\t{radius:.3}\t{corr}\t{elapsed}\n"
    assert "0:00:01.234567" in text and "1 day, 1:01:01.250000" in text and "\t12.3\t" in text
    path = tmp_path / "cohen.tsv"
    path.write_text(text)
    res = read_certify_tsv(path)
    assert res.idx.tolist() == [0, 20, 40, 60]
    assert res.predict.tolist() == [3, -1, 1, 0]
    assert res.radius.tolist() == [0.714, 0.0, 1.23, 12.3]
    assert res.correct.tolist() == [True, False, False, True]
    np.testing.assert_allclose(res.time, [1.234567, 0.5, 61.0, 90061.25])


def test_header_only_file_is_empty_result(tmp_path):
    path = tmp_path / "h.tsv"
    path.write_text(TSV_HEADER + "\n")
    res = read_certify_tsv(path)
    assert res.n == 0 and res.radius.dtype == np.float64


@pytest.mark.parametrize("content,match", [
    ("", "empty file"),
    ("idx label predict radius correct time\n", "line 1: not a certify TSV"),
    (TSV_HEADER + "\n0\t1\t1\t0.5\t1\n", "line 2: malformed row: expected 6"),
    (TSV_HEADER + "\n0\t1\t1\t0.5\t1\t0.1\n1\t1\tx\t0.5\t1\t0.1\n", "line 3: .*integers"),
    (TSV_HEADER + "\n0\t1\t1\tabc\t1\t0.1\n", "line 2: .*radius 'abc'"),
    (TSV_HEADER + "\n0\t1\t1\t-0.5\t1\t0.1\n", "line 2: .*>= 0"),
    (TSV_HEADER + "\n0\t1\t1\t0.5\t2\t0.1\n", "line 2: .*correct '2'"),
    (TSV_HEADER + "\n0\t1\t1\t0.5\t0\t0.1\n", r"line 2: .*correct 0 contradicts predict 1 and label 1 \(correct is"),
    (TSV_HEADER + "\n0\t1\t-1\t0.0\t1\t0.1\n", "line 2: .*correct 1 contradicts predict -1 and label 1"),
    (TSV_HEADER + "\n0\t1\t1\t0.5\t1\tsoon\n", "line 2: .*time 'soon'"),
    (TSV_HEADER + "\n-3\t1\t1\t0.5\t1\t0.1\n", "line 2: .*idx -3 and label 1 must be >= 0"),
    (TSV_HEADER + "\n3\t-2\t-2\t0.5\t1\t0.1\n", "line 2: .*idx 3 and label -2 must be >= 0"),
    (TSV_HEADER + "\n3\t1\t-2\t0.0\t0\t0.1\n", r"line 2: .*predict -2 must be a class \(>= 0\) or -1"),
    (TSV_HEADER + "\n3\t1\t-1\t0.5\t0\t0.1\n", r"line 2: .*an abstention \(predict -1\) certifies no radius"),
    (TSV_HEADER + "\n5\t1\t1\t0.5\t1\t0.1\n\n5\t1\t1\t0.5\t1\t0.1\n", "line 4: duplicate idx 5"),
])
def test_read_errors_are_one_line(tmp_path, content, match):
    path = tmp_path / "bad.tsv"
    path.write_text(content)
    with pytest.raises(RsmoothError, match=match) as err:
        read_certify_tsv(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_impossible_rows_are_not_written(tmp_path):
    with CertifyWriter(tmp_path / "w.tsv") as w:
        for row, match in (((0, 1, -1, 0.5), "idx 0: an abstention"), ((-1, 1, 1, 0.5), "idx -1: idx -1 and label 1"),
                           ((2, 1, 1, float("nan")), "idx 2: radius nan must be finite")):
            with pytest.raises(RsmoothError, match=match):
                w.write(*row, False, 0.1)
        w.write(0, 1, -1, 0.0, False, 0.1)  # an abstention as Cohen et al.'s CERTIFY returns it
    assert read_certify_tsv(tmp_path / "w.tsv").predict.tolist() == [-1]


def test_missing_file(tmp_path):
    with pytest.raises(RsmoothError, match="not found"):
        read_certify_tsv(tmp_path / "nope.tsv")


def test_resume_drops_partial_line_and_reports_done(tmp_path):
    path = tmp_path / "out.tsv"
    with CertifyWriter(path) as w:
        for i in (0, 1, 2):
            w.write(i, 1, 1, 0.25 * i, 1, 0.1)
    complete = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b"3\t1\t1\t0.12")  # killed mid-write
    with CertifyWriter(path, resume=True) as w:
        assert w.done_indices == {0, 1, 2}
        assert w.dropped_bytes == len(b"3\t1\t1\t0.12")
        assert path.read_bytes() == complete  # cut before anything is appended
        for i in (1, 3, 4):
            if i not in w.done_indices:
                w.write(i, 1, 1, 1.0, 1, 0.2)
    res = read_certify_tsv(path)
    assert res.idx.tolist() == [0, 1, 2, 3, 4]
    assert res.radius.tolist() == [0.0, 0.25, 0.5, 1.0, 1.0]
    assert path.read_text().count(TSV_HEADER) == 1
    assert not [p for p in tmp_path.iterdir() if p.name != "out.tsv"]  # no temp files left


def test_resume_on_missing_empty_or_partial_header_starts_fresh(tmp_path):
    for content in (None, "", "idx\tlab"):
        path = tmp_path / "fresh.tsv"
        if path.exists():
            path.unlink()
        if content is not None:
            path.write_text(content)
        with CertifyWriter(path, resume=True) as w:
            assert w.done_indices == set()
            w.write(7, 0, 0, 0.5, 1, 0.1)
        assert path.read_text() == TSV_HEADER + "\n7\t0\t0\t0.5\t1\t0.1000\n"


def test_resume_refuses_foreign_or_corrupt_file(tmp_path):
    path = tmp_path / "other.tsv"
    path.write_text("a\tb\n1\t2\n")
    with pytest.raises(RsmoothError, match="line 1: not a certify TSV"):
        CertifyWriter(path, resume=True)
    assert path.read_text() == "a\tb\n1\t2\n"  # untouched
    path.write_text(TSV_HEADER + "\n0\t1\t1\t0.5\t1\t0.1\nbroken\n")
    with pytest.raises(RsmoothError, match="line 3"):
        CertifyWriter(path, resume=True)


def test_no_resume_truncates(tmp_path):
    path = tmp_path / "out.tsv"
    with CertifyWriter(path) as w:
        w.write(0, 1, 1, 0.5, 1, 0.1)
    with CertifyWriter(path) as w:
        assert w.done_indices == set()
    assert path.read_text() == TSV_HEADER + "\n"


def test_writer_rejects_bad_radius(tmp_path):
    with CertifyWriter(tmp_path / "o.tsv") as w:
        with pytest.raises(RsmoothError, match="radius"):
            w.write(0, 1, 1, float("nan"), 1, 0.1)


def test_sidecar_round_trip(tmp_path):
    tsv = tmp_path / "out.tsv"
    assert sidecar_path(tsv) == tmp_path / "out.tsv.json"
    assert sidecar_path("runs/x.tsv").as_posix() == "runs/x.tsv.json"
    assert read_sidecar(tsv) is None
    meta = {"sigma": 0.25, "n0": 100, "n": 100000, "alpha": 0.001, "seed": np.int64(3),
            "subset": {"skip": 20, "max": None}, "versions": {"rsmooth": "0.1.0"}}
    written = write_sidecar(tsv, meta)
    assert written == sidecar_path(tsv)
    back = read_sidecar(tsv)
    assert back == {**meta, "seed": 3}
    assert json.loads(written.read_text())["n"] == 100000
    write_sidecar(tsv, {"sigma": 0.5})  # overwrite in place, atomically
    assert read_sidecar(tsv) == {"sigma": 0.5}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.tsv.json"]


def test_sidecar_errors(tmp_path):
    tsv = tmp_path / "out.tsv"
    sidecar_path(tsv).write_text("{not json")
    with pytest.raises(RsmoothError, match="invalid sidecar JSON"):
        read_sidecar(tsv)
    sidecar_path(tsv).write_text("[1, 2]")
    with pytest.raises(RsmoothError, match="must be an object"):
        read_sidecar(tsv)
    with pytest.raises(RsmoothError, match="cannot write sidecar"):
        write_sidecar(tsv, {"x": object()})
    assert sidecar_path(tsv).read_text() == "[1, 2]"  # failed write leaves the old file


@pytest.mark.parametrize("field,value,need", [
    ("sigma", -1, "sigma -1 must be a number > 0"), ("sigma", True, "sigma True must be a number > 0"),
    ("alpha", 5, r"alpha 5 must be a number in \(0, 1\)"), ("n", "big", "n 'big' must be an integer >= 1"),
    ("n0", 0, "n0 0 must be an integer >= 1"), ("n_max", 2.5, "n_max 2.5 must be an integer >= 1"),
    ("num_examples", -1, "num_examples -1 must be an integer >= 0"),
    ("radii", "x", "radii 'x' must be a list of numbers >= 0"), ("radii", [0.5, -1], "radii .* numbers >= 0"),
    ("complete", "yes", "complete 'yes' must be true or false"), ("mode", 3, "mode 3 must be a string"),
    ("sessions", "x", "sessions 'x' must be a list of objects"),
])
def test_a_damaged_sidecar_is_one_line(tmp_path, field, value, need):
    """The fields readers compute with are checked when read (a hand-edited or damaged file)."""
    tsv = tmp_path / "out.tsv"
    sidecar_path(tsv).write_text(json.dumps({"sigma": 0.25, "n0": 100, "n": 1000, "alpha": 0.001, field: value}))
    with pytest.raises(RsmoothError, match=f"out.tsv.json: damaged sidecar: {need}.*; rerun the certify command"):
        read_sidecar(tsv)
    sidecar_path(tsv).write_text(json.dumps({"sigma": 0.25, "n0": None, "radii": None, field: None}))
    assert read_sidecar(tsv)[field] is None  # null: not recorded (predict has no n0)
