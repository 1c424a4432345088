"""Bad input (issue 7, items 10-17, 19, 28): each a one-line RsmoothError naming the fix,
never a traceback and never a silent wrong answer."""
import errno
import json
import re
import time
import zipfile

import numpy as np
import pytest
import torch
from scipy.stats import beta, norm

from rsmooth import RsmoothError, Smooth
from rsmooth.cli import main
from rsmooth.data import get_dataset
from rsmooth.engine import TrainConfig, load_model, read_checkpoint, run_certification, train
from rsmooth.engine.checkpoint import (DIGEST_KEY, available_devices, checkpoint_digest, resolve_device, seal,
                                      state_digest)
from rsmooth.engine.pipeline import run_pipeline
from rsmooth.engine.targets import compute_targets, load_targets
from rsmooth.paths import check_output_dir, check_output_file
from rsmooth.smoothing import max_certifiable_radius, validate_sigma

QUIET = dict(progress=False, log=lambda s: None)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """A digits model trained for one epoch: its folder."""
    out = tmp_path_factory.mktemp("run")
    train(TrainConfig(dataset="digits", epochs=1, batch_size=128, hparams={"sigma": 0.25}), out, **QUIET)
    return out


def _certify(ckpt, out, **kw):
    args = dict(n0=10, n=100, max=2, batch_size=100, **QUIET)
    args.update(kw)
    return run_certification(str(ckpt), str(out), **args)


# -- 10: non-finite logits, absurd sigma ------------------------------------------------------
class NaNAbove(torch.nn.Module):
    """Logits [-s, s] from pixel 0 (s = x - 0.5), NaN where that pixel exceeds ``limit``."""

    def __init__(self, limit=float("-inf")):
        super().__init__()
        self.limit = limit
        self.w = torch.nn.Parameter(torch.ones(1))

    def forward(self, x):
        v = x.flatten(1)[:, 0]
        s = (v - 0.5) * self.w.to(x.dtype)
        s = torch.where(v > self.limit, torch.full_like(s, float("nan")), s)
        return torch.stack([-s, s], 1)


@pytest.mark.parametrize("mode", [{}, dict(precision="bf16", channels_last=True)])
def test_nan_logits_are_refused_not_certified(mode):
    s = Smooth(NaNAbove(), 2, 0.25, **mode)
    with pytest.raises(RsmoothError, match=r"NaN/inf logits for 10 of 10 noisy inputs"):
        s.certify(torch.full((1, 3, 3), 0.5), 10, 100, 0.001, 50)


def test_some_nan_logits_are_counted_in_every_path():
    """NaN only on noisy inputs whose pixel 0 exceeds 1.0: about 2% of them at sigma 0.25."""
    s = Smooth(NaNAbove(limit=1.0), 2, 0.25)
    xs = torch.full((4, 1, 2, 2), 0.5)
    for num, batch_size in [(1000, 128), (50, 200)]:  # one image per pass / several per pass
        with pytest.raises(RsmoothError, match=rf"NaN/inf logits for \d+ of {4 * num} noisy inputs"):
            s.count_votes(xs, num, batch_size, generator=torch.Generator().manual_seed(0))


@pytest.mark.slow
def test_nan_logits_refused_in_compiled_mode():
    s = Smooth(NaNAbove(), 2, 0.25, compile=True)
    with pytest.raises(RsmoothError, match="NaN/inf logits"):
        s.count_votes(torch.rand(1, 1, 2, 2), 64, 32)


def test_nan_weights_checkpoint_is_refused(ckpt, tmp_path):
    ck = read_checkpoint(ckpt)
    first = next(k for k, v in ck["state_dict"].items() if v.is_floating_point() and not k.startswith("0."))
    ck["state_dict"][first].fill_(float("nan"))
    bad = tmp_path / "nan.pt"
    torch.save(seal(ck), bad)
    with pytest.raises(RsmoothError, match="NaN/inf logits .* check the checkpoint"):
        _certify(bad, tmp_path / "c.tsv")


@pytest.mark.parametrize("sigma", [1e300, 10.5, float("inf")])
def test_absurd_sigma_is_refused(sigma):
    with pytest.raises(RsmoothError, match=r"sigma must be (<= 10|> 0)"):
        validate_sigma(sigma)
    assert validate_sigma(10) == 10.0


def test_training_sigma_is_bounded_too(tmp_path):
    with pytest.raises(RsmoothError, match="sigma must be <= 10"):
        train(TrainConfig(dataset="digits", epochs=1, hparams={"sigma": 1e300}), tmp_path, **QUIET)


def test_cli_absurd_sigma_is_one_line(ckpt, tmp_path, capsys):
    assert main(["certify", "--checkpoint", str(ckpt), "--out", str(tmp_path / "c.tsv"),
                 "--sigma", "1e300"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "[0,1] pixel units" in err


# -- 11: devices ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["cuda", "cuda:3", "mps", "meta", "xpu:1", "foo", "cuda:-1"])
def test_unavailable_devices_are_refused(name):
    if name in available_devices() or f"{name}:0" in available_devices():
        pytest.skip(f"this machine has {name}")
    with pytest.raises(RsmoothError, match=rf"device '{name}' is not available on this machine; "
                                           rf"use one of: cpu"):
        resolve_device(name)


def test_available_devices_resolve():
    assert resolve_device("cpu") == torch.device("cpu")
    for name in available_devices():
        assert resolve_device(name) == torch.device(name)


# -- 12: malformed checkpoints and targets ----------------------------------------------------
@pytest.mark.parametrize("key", ["arch", "state_dict", "dataset", "num_classes"])
def test_rsmooth_checkpoint_missing_a_key(ckpt, tmp_path, key):
    ck = read_checkpoint(ckpt)
    del ck[key]
    bad = tmp_path / "bad.pt"
    torch.save(seal(ck), bad)
    with pytest.raises(RsmoothError, match=rf"rsmooth checkpoint without a valid '{key}' \(it has keys"):
        load_model(bad)


def test_public_checkpoint_without_weights(tmp_path):
    bad = tmp_path / "public.pt"
    torch.save({"arch": "cifar_resnet110", "epoch": 90}, bad)
    with pytest.raises(RsmoothError, match=rf"checkpoint {bad}: unrecognised checkpoint.*found keys 'arch', 'epoch'"):
        load_model(bad, dataset="cifar10")


@pytest.fixture(scope="module")
def digits_train():
    return get_dataset("digits", "train")


def _targets(tmp_path, data, arr=None, meta=None):
    p = tmp_path / "t.npy"
    if arr is None:
        arr = np.full((len(data), data.num_classes), 1 / data.num_classes, np.float32)
    np.save(p, arr)
    meta = {"complete": True, "data_fingerprint": data.fingerprint()} if meta is None else meta
    (tmp_path / "t.npy.json").write_text(meta if isinstance(meta, str) else json.dumps(meta))
    return p


def test_valid_targets_load(tmp_path, digits_train):
    assert load_targets(_targets(tmp_path, digits_train), digits_train).shape == (1437, 10)


@pytest.mark.parametrize("meta,match", [
    ([1, 2], "is not an rsmooth targets record"),
    ("{not json", "cannot read the metadata"),
    ({"complete": True, "data_fingerprint": [1]}, "is not an rsmooth targets record"),
])
def test_bad_targets_metadata(tmp_path, digits_train, meta, match):
    with pytest.raises(RsmoothError, match=match):
        load_targets(_targets(tmp_path, digits_train, meta=meta), digits_train)


@pytest.mark.parametrize("keep", [0, 50, 300])
def test_empty_or_truncated_targets_npy(tmp_path, digits_train, keep):
    p = _targets(tmp_path, digits_train)
    p.write_bytes(p.read_bytes()[:keep])
    with pytest.raises(RsmoothError, match="empty, truncated or not a .npy array"):
        load_targets(p, digits_train)


@pytest.mark.parametrize("edit", ["negative", "sum", "int"])
def test_targets_rows_must_be_frequencies(tmp_path, digits_train, edit):
    arr = np.full((1437, 10), 0.1, np.float32)
    if edit == "negative":
        arr[0, :2] = [-0.1, 0.3]  # still sums to 1
    elif edit == "sum":
        arr[5] *= 2
    else:
        arr = np.zeros((1437, 10), np.int64)
        arr[:, 0] = 1
    with pytest.raises(RsmoothError, match=r"does not hold frequencies \(finite, >= 0, rows summing to 1\)"):
        load_targets(_targets(tmp_path, digits_train, arr=arr), digits_train)


# -- 13: output paths, seeds, huge batches ----------------------------------------------------
def test_output_file_checks(tmp_path, monkeypatch):
    with pytest.raises(RsmoothError, match="is a folder; it must name a file"):
        check_output_file(tmp_path)
    (tmp_path / "f").write_text("x")
    with pytest.raises(RsmoothError, match="is a file, not a folder"):
        check_output_file(tmp_path / "f" / "out.tsv")
    for bad in ("/proc/rsmooth_test/out.tsv", "/proc/out.tsv"):
        with pytest.raises(RsmoothError, match=rf"cannot write out='{bad}': /proc is not writable"):
            check_output_file(bad)
    assert check_output_file(tmp_path / "new" / "deeper" / "out.tsv") == tmp_path / "new" / "deeper" / "out.tsv"
    assert list(tmp_path.iterdir()) == [tmp_path / "f"]  # nothing created

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr("tempfile.mkstemp", read_only)
    with pytest.raises(RsmoothError, match=r"is not writable \(Read-only file system\); choose another out$"):
        check_output_dir(tmp_path / "run")


def test_output_dir_checks(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(RsmoothError, match="is an existing file; it must name a folder"):
        check_output_dir(tmp_path / "file")
    with pytest.raises(RsmoothError, match="is an existing file; it must name a folder"):
        train(TrainConfig(dataset="digits", epochs=1), tmp_path / "file", **QUIET)
    with pytest.raises(RsmoothError, match="/proc is not writable"):
        train(TrainConfig(dataset="digits", epochs=1), "/proc/rsmooth_run", **QUIET)


@pytest.mark.parametrize("overwrite", [False, True])
def test_certify_out_is_a_folder(ckpt, tmp_path, overwrite):
    with pytest.raises(RsmoothError, match="is a folder; it must name a file"):
        _certify(ckpt, tmp_path, overwrite=overwrite)


def test_targets_out_is_a_folder_or_the_checkpoint(ckpt, tmp_path):
    with pytest.raises(RsmoothError, match="is a folder; it must name a file"):
        compute_targets(str(ckpt), str(tmp_path), overwrite=True, **QUIET)
    with pytest.raises(RsmoothError, match="is the input file"):
        compute_targets(str(ckpt), str(ckpt / "checkpoint.pt"), overwrite=True, **QUIET)


@pytest.mark.parametrize("seed", [2 ** 80, -1, 1.5, None, True])
def test_bad_seeds_are_refused_before_any_work(tmp_path, seed):
    with pytest.raises(RsmoothError, match="--seed must be"):
        TrainConfig(dataset="digits", seed=seed).resolved()
    with pytest.raises(RsmoothError, match="--seed must be"):
        run_certification(str(tmp_path / "nope.pt"), str(tmp_path / "c.tsv"), seed=seed, **QUIET)
    with pytest.raises(RsmoothError, match="--seed must be"):
        compute_targets(str(tmp_path / "nope.pt"), str(tmp_path / "t.npy"), seed=seed, **QUIET)
    assert TrainConfig(dataset="digits", seed=2 ** 63 - 1).resolved().seed == 2 ** 63 - 1


def test_cli_train_huge_seed_is_one_line(tmp_path, capsys):
    assert main(["train", "--out", str(tmp_path / "r"), "--seed", str(2 ** 80)]) == 2
    assert capsys.readouterr().err == "rsmooth: error: --seed must be at most 2**63 - 1, got " + str(2 ** 80) + "\n"


@pytest.mark.parametrize("batch_size", [10 ** 13, 2 ** 62])
def test_huge_batch_says_what_to_lower(batch_size):
    s = Smooth(NaNAbove(limit=2.0), 2, 0.25)
    with pytest.raises(RsmoothError, match=r"out of memory classifying .* lower batch_size \(--batch-size, now"):
        s.count_votes(torch.rand(1, 1, 4, 4), 2 ** 40, batch_size)  # num: at most 2**40


class OOMOnBigBatches(NaNAbove):
    def forward(self, x):
        if len(x) > 1:
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory")
        return super().forward(x)


def test_out_of_memory_in_the_forward_pass_says_what_to_lower():
    s = Smooth(OOMOnBigBatches(limit=2.0), 2, 0.25)
    with pytest.raises(RsmoothError, match=r"out of memory classifying up to 64 noisy inputs .*--batch-size, now 64"):
        s.certify(torch.rand(1, 2, 2), 10, 100, 0.001, 64)


# -- 14: batch size 0 -------------------------------------------------------------------------
@pytest.mark.parametrize("batch_size", [0, -5])
def test_zero_or_negative_batch_size_is_refused(tmp_path, batch_size):
    with pytest.raises(RsmoothError, match="batch_size must be >= 1"):
        run_certification(str(tmp_path / "nope.pt"), str(tmp_path / "c.tsv"), batch_size=batch_size, **QUIET)
    with pytest.raises(RsmoothError, match="batch_size must be >= 1"):
        compute_targets(str(tmp_path / "nope.pt"), str(tmp_path / "t.npy"), batch_size=batch_size, **QUIET)


# -- 15: --out must not destroy the checkpoint or another file --------------------------------
def test_certify_out_equal_to_the_checkpoint_is_refused(ckpt):
    before = (ckpt / "checkpoint.pt").read_bytes()
    for out in (ckpt / "checkpoint.pt", ckpt / "." / "checkpoint.pt"):
        for overwrite in (False, True):
            with pytest.raises(RsmoothError, match="is the input file .*writing there would destroy it"):
                _certify(ckpt, out, overwrite=overwrite)
    assert (ckpt / "checkpoint.pt").read_bytes() == before


def test_overwrite_replaces_only_a_certify_tsv(ckpt, tmp_path):
    other = tmp_path / "model.pt"
    other.write_bytes(b"PK\x03\x04 a zip")
    with pytest.raises(RsmoothError, match="exists and is not a certify TSV; --overwrite replaces only"):
        _certify(ckpt, other, overwrite=True)
    assert other.read_bytes() == b"PK\x03\x04 a zip"
    out = _certify(ckpt, tmp_path / "c.tsv", max=1)
    assert _certify(ckpt, out, overwrite=True, max=2).read_text().count("\n") == 3  # header + 2 rows


# -- 16: pipeline arguments are checked before any work ---------------------------------------
@pytest.mark.parametrize("kw,match", [
    (dict(alpha=2.0), r"alpha must be in \(0, 1\)"),
    (dict(sigma=1e300), "sigma must be <= 10"),
    (dict(n=0), "n must be >= 1"),
    (dict(n0=None), "n0 must be an integer"),
    (dict(n=50), "--n 50 is below --n0 100: the n0 samples only pick the class"),
    (dict(skip=0), "skip must be >= 1"),
    (dict(max=0), "max must be >= 1"),
    (dict(seed=2 ** 80), "--seed must be at most"),
    (dict(target_samples=0), "target_samples must be >= 1"),
    (dict(dataset="nope"), "unknown dataset 'nope'"),
    (dict(hparams={"nope": 1.0}), "has no hyperparameter nope"),
    (dict(train_overrides={"epochs": 0}), "--epochs must be >= 1"),
    (dict(train_overrides={"epoch": 3}), "unknown training setting epoch"),
    (dict(certify_options={"precision": "fp8"}), "unknown precision 'fp8'"),
    (dict(certify_options={"device": "meta"}), "device 'meta' is not available"),
])
def test_pipeline_validates_everything_first(tmp_path, kw, match):
    t0 = time.perf_counter()
    with pytest.raises(RsmoothError, match=match):
        run_pipeline(str(tmp_path / "p"), **kw, log=QUIET["log"])
    assert time.perf_counter() - t0 < 1.0
    assert list(tmp_path.iterdir()) == []


def test_pipeline_out_is_a_file(tmp_path):
    (tmp_path / "p").write_text("x")
    with pytest.raises(RsmoothError, match="is an existing file; it must name a folder"):
        run_pipeline(str(tmp_path / "p"), log=QUIET["log"])


def test_cli_pipeline_bad_alpha_is_fast_and_writes_nothing(tmp_path, capsys):
    t0 = time.perf_counter()
    assert main(["pipeline", "catrs", "--out", str(tmp_path / "p"), "--alpha", "2"]) == 2
    assert time.perf_counter() - t0 < 1.0 and list(tmp_path.iterdir()) == []
    assert "alpha must be in (0, 1)" in capsys.readouterr().err


# -- 17: the Python API -----------------------------------------------------------------------
class Width10(torch.nn.Module):
    """1 x 4 x 4 images -> 10 logits (a conv needs exactly 1 channel, a linear 16 pixels)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 1, 1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(self.conv(x).flatten(1))


class Flat(Width10):
    def forward(self, x):
        return super().forward(x)[:, 0]


X = torch.rand(1, 4, 4)


@pytest.mark.parametrize("call,match", [
    (lambda: Smooth(Width10(), 10, 0.25).certify(torch.rand(3, 4, 4), 10, 100, 0.001, 10),
     r"fails on an input of shape \(3, 4, 4\) \(C x H x W\): .*pass images of the shape it expects"),
    (lambda: Smooth(Width10(), 10, 0.25).predict(torch.rand(1, 5, 5), 100, 0.001, 10),
     r"fails on an input of shape \(1, 5, 5\)"),
    (lambda: Smooth(Width10(), 5, 0.25).certify(X, 10, 100, 0.001, 10),
     "returns 10 logits per input but num_classes is 5; pass num_classes=10"),
    (lambda: Smooth(Width10(), 12, 0.25).count_votes(X[None], 10, 10),
     "returns 10 logits per input but num_classes is 12"),
    (lambda: Smooth(Width10(), 2.7, 0.25), "num_classes must be an integer, got 2.7"),
    (lambda: Smooth(Width10(), None, 0.25), "num_classes must be an integer, got None"),
    (lambda: Smooth(Width10(), 1, 0.25), "num_classes must be >= 2"),
    (lambda: Smooth(Width10(), 10, 0.25).certify(X, None, 100, 0.001, 10), "n0 must be an integer, got None"),
    (lambda: Smooth(Width10(), 10, 0.25).certify(X, 10, None, 0.001, 10), "n must be an integer, got None"),
    (lambda: Smooth(Width10(), 10, 0.25).certify(X, 100, 50, 0.001, 10), r"n \(50\) is below n0 \(100\)"),
    (lambda: Smooth(Width10(), 10, 0.25).certify_sequential(X, 100, [0.25], 0.001, n_max=50),
     r"n_max \(50\) is below n0 \(100\)"),
    (lambda: Smooth(Width10(), 10, "0.25"), "sigma must be a number > 0, got '0.25'"),
    (lambda: Smooth(Width10(), 10, 0.25).certify(X, 10, 100, 0.001, None), "batch_size must be an integer"),
    (lambda: Smooth(Width10(), 10, 0.25).count_votes(X[None], None, 10), "num must be an integer"),
    (lambda: Smooth(Width10(), 10, 0.25).predict(X, True, 0.001, 10), "n must be an integer, got True"),
    (lambda: Smooth(Width10(), 10, 0.25).certify(X, 10, 100.5, 0.001, 10), "n must be an integer, got 100.5"),
    (lambda: Smooth(Width10(), 10, 0.25).certify(X, 10, "100", 0.001, 10), "n must be an integer, got '100'"),
    (lambda: Smooth(Width10(), 10, 0.25).certify(X, 10, 100, 0.001, 10, generator=0),
     "generator must be a torch.Generator .* got int"),
    (lambda: Smooth(Width10(), 10, 0.25).predict(X, 100, 0.001, 10, generator=np.random.default_rng()),
     "generator must be a torch.Generator"),
    (lambda: Smooth(Flat(), 10, 0.25).certify(X, 10, 100, 0.001, 10),
     r"must return logits \[B x K\]; for an input \[1 x 1 x 4 x 4\] it returned \(1,\)"),
    (lambda: Smooth(lambda x: x.flatten(1), 16, 0.25), "must be a torch.nn.Module, got function; wrap"),
])
def test_python_api_errors(call, match):
    with pytest.raises(RsmoothError, match=match):
        call()


def test_python_api_accepts_numpy_and_integral_counts():
    s = Smooth(Width10(), np.int64(10), 0.25)
    assert s.num_classes == 10 and type(s.num_classes) is int
    counts = s.count_votes(X[None], np.int32(20), 1e1, generator=torch.Generator().manual_seed(0))
    assert counts.shape == (1, 10) and int(counts.sum()) == 20


# -- 19: checkpoint integrity -----------------------------------------------------------------
def _flip_a_weight_byte(src, dst, state):
    """Copy checkpoint ``src`` to ``dst`` with one byte flipped inside the largest weight's record."""
    key = max(state, key=lambda k: state[k].numel())
    want = state[key].contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    data = bytearray(src.read_bytes())
    with zipfile.ZipFile(src) as z:
        info = next(i for i in z.infolist() if "/data/" in i.filename and z.read(i) == want)
    name_len, extra_len = int.from_bytes(data[info.header_offset + 26:info.header_offset + 28], "little"), \
        int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], "little")
    data[info.header_offset + 30 + name_len + extra_len + len(want) // 2] ^= 0x10
    dst.write_bytes(bytes(data))


def test_flipped_byte_in_the_weights_is_detected(ckpt, tmp_path):
    ck = read_checkpoint(ckpt)
    assert ck[DIGEST_KEY] == checkpoint_digest(ck)
    bad = tmp_path / "checkpoint.pt"
    _flip_a_weight_byte(ckpt / "checkpoint.pt", bad, ck["state_dict"])
    message = (rf"checkpoint {bad} is corrupt: its contents do not match the stored sha256 \(a changed or "
               r"flipped bit\); restore it from a copy or retrain")
    with pytest.raises(RsmoothError, match=message):
        load_model(bad)
    with pytest.raises(RsmoothError, match=message):  # resuming reads it the same way
        train(TrainConfig(dataset="digits", epochs=2, batch_size=128, hparams={"sigma": 0.25}),
              tmp_path, resume=True, **QUIET)


def test_checkpoint_without_digest_still_loads(ckpt, tmp_path):
    ck = read_checkpoint(ckpt)
    del ck[DIGEST_KEY]
    torch.save(ck, tmp_path / "old.pt")
    assert load_model(tmp_path / "old.pt").arch == load_model(ckpt).arch


def test_i37_a_flipped_bit_in_the_optimiser_state_is_detected(ckpt, tmp_path):
    """The digest covers the whole checkpoint: a flipped bit in a momentum buffer is refused as
    corrupt on --resume, not trained on until the run 'diverges'."""
    ck = read_checkpoint(ckpt)
    bad = tmp_path / "run" / "checkpoint.pt"
    bad.parent.mkdir()
    _flip_a_weight_byte(ckpt / "checkpoint.pt", bad, {str(i): s["momentum_buffer"]
                                                      for i, s in ck["optimizer"]["state"].items()})
    message = rf"checkpoint {bad} is corrupt: its contents do not match the stored sha256"
    with pytest.raises(RsmoothError, match=message):
        train(TrainConfig(dataset="digits", epochs=2, batch_size=128, hparams={"sigma": 0.25}),
              bad.parent, resume=True, **QUIET)
    with pytest.raises(RsmoothError, match=message):
        load_model(bad)


@pytest.mark.parametrize("change", [lambda ck: ck.update(epoch=0), lambda ck: ck["config"].update(lr=0.5),
                                    lambda ck: ck["rng"]["torch"].__setitem__(7, 1 - ck["rng"]["torch"][7]),
                                    lambda ck: ck["optimizer"]["param_groups"][0].update(momentum=0.8)])
def test_i37_changed_metadata_is_detected(ckpt, tmp_path, change):
    ck = read_checkpoint(ckpt)
    change(ck)
    torch.save(ck, tmp_path / "c.pt")
    with pytest.raises(RsmoothError, match="its contents do not match the stored sha256"):
        read_checkpoint(tmp_path / "c.pt")


def test_i37_an_older_checkpoint_with_the_weights_digest_loads_and_is_checked(ckpt, tmp_path):
    ck = read_checkpoint(ckpt)
    old = {k: v for k, v in ck.items() if k != DIGEST_KEY}
    old["state_sha256"] = state_digest(ck["state_dict"])
    torch.save(old, tmp_path / "old.pt")
    assert load_model(tmp_path / "old.pt").arch == "digits_cnn"
    _flip_a_weight_byte(tmp_path / "old.pt", tmp_path / "bad.pt", ck["state_dict"])
    with pytest.raises(RsmoothError, match="is corrupt: its weights do not match the stored sha256"):
        load_model(tmp_path / "bad.pt")


def test_i37_checkpoint_digest_sees_every_value_and_its_type():
    a = {"w": torch.zeros(2), "o": {"state": {0: {"m": torch.ones(2)}}, "lr": [0.1, 1, None, True, "x"]}}
    d = checkpoint_digest(a)
    assert d == checkpoint_digest(seal(a)) == checkpoint_digest(dict(reversed(list(a.items()))))
    for b in ({**a, "w": torch.zeros(2, dtype=torch.float64)}, {**a, "o": {**a["o"], "lr": [0.1, 1.0, None, True, "x"]}},
              {**a, "o": {**a["o"], "state": {"0": {"m": torch.ones(2)}}}}, {**a, "o": {**a["o"], "lr": [0.1, 1, None, 1, "x"]}},
              {**a, "extra": None}):
        assert checkpoint_digest(b) != d


def test_state_digest_sees_dtype_shape_and_values():
    a = {"w": torch.zeros(2, 3), "b": torch.ones(3, dtype=torch.bfloat16), "n": torch.tensor(0)}
    d = state_digest(a)
    assert d == state_digest(dict(reversed(list(a.items()))))
    for b in ({**a, "w": torch.zeros(3, 2)}, {**a, "w": torch.zeros(2, 3, dtype=torch.float64)},
              {**a, "n": torch.tensor(1)}, {"v": a["w"], "b": a["b"], "n": a["n"]}):
        assert state_digest(b) != d


# -- 28: the largest certifiable radius -------------------------------------------------------
@pytest.mark.parametrize("n,alpha,sigma", [(10, 0.001, 0.25), (100, 0.001, 0.5), (100_000, 0.001, 1.0),
                                           (1000, 0.05, 0.12), (5, 0.001, 0.25)])
def test_max_certifiable_radius_matches_scipy(n, alpha, sigma):
    p = beta.ppf(alpha, n, 1)  # Clopper-Pearson lower bound with all n votes for c_A
    assert p == pytest.approx(alpha ** (1 / n), rel=1e-12)
    assert max_certifiable_radius(n, alpha, sigma) == pytest.approx(sigma * norm.ppf(p), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("n,expected", [
    (10, r"warning: with n=10 and alpha=0.001 the largest certifiable radius is 0.0007\d+ .*raise --n"),
    (5, r"warning: with n=5 and alpha=0.001 no radius can be certified .*raise --n"),
    (1000, None),
])
def test_small_n_warns_with_the_largest_radius(ckpt, tmp_path, n, expected):
    lines = []
    _certify(ckpt, tmp_path / "c.tsv", n0=min(n, 10), n=n, max=1, log=lines.append, progress=False)
    warnings = [ln for ln in lines if ln.startswith("warning:")]
    if expected is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and re.match(expected, warnings[0])
