"""Fast training modes (precision, channels-last, compile) and worker data loading: each is
recorded, resumes bit-identically within itself, and cannot be changed on resume."""
import dataclasses
import importlib
import json

import pytest
import torch

from conftest import trained_module
from rsmooth import RsmoothError
from rsmooth.cli import main
from rsmooth.data import get_dataset
from rsmooth.engine import TrainConfig, load_model, read_checkpoint, train
from rsmooth.engine.checkpoint import seal
from rsmooth.methods import METHODS, Batch, StepContext, create_method
from rsmooth.models import create_model
from rsmooth.smoothing import Smooth

QUIET = dict(progress=False, log=lambda s: None)
train_module = importlib.import_module("rsmooth.engine.train")  # the module, not the function


def _config(**kw):
    base = dict(dataset="digits", epochs=2, batch_size=128, lr=0.05, lr_step=2, seed=5,
                hparams={"sigma": 0.25})
    base.update(kw)
    return TrainConfig(**base)


@pytest.mark.slow
@pytest.mark.parametrize("mode", [dict(precision="bf16"), dict(channels_last=True)])
def test_mode_resumes_bit_identically_and_is_recorded(tmp_path, check_resume, mode):
    full, resumed = check_resume(_config(**mode, train_subset=768, batch_size=64, eval_examples=100))  # bf16 is emulated on most CPUs
    assert all(full["config"][k] == v for k, v in mode.items()) and "scaler" not in full
    assert all(json.loads((tmp_path / "part" / "config.json").read_text())["config"][k] == v
               for k, v in mode.items())
    assert all(h["loss"] < 2.3 for h in full["history"])  # finite and learning (chance: ln 10)
    smooth = Smooth(load_model(tmp_path / "full").model, 10, 0.25)
    x, y = get_dataset("digits", "test").get_batch(torch.arange(3))
    preds = [smooth.certify(x[i], 20, 200, 0.001, 100)[0] for i in range(3)]
    assert sum(p == int(t) for p, t in zip(preds, y)) >= 2


def test_changing_a_mode_on_resume_is_refused(tmp_path):
    train(_config(epochs=1, channels_last=True), tmp_path, **QUIET)
    with pytest.raises(RsmoothError, match=r"cannot resume .*: it was trained with --channels-last, not --no-channels-last; continue with the recorded"):
        train(_config(), tmp_path, resume=True, **QUIET)
    with pytest.raises(RsmoothError, match=r"cannot resume .* trained with --precision fp32, not --precision bf16;"):
        train(_config(channels_last=True, precision="bf16"), tmp_path, resume=True, **QUIET)


@pytest.mark.slow
def test_checkpoint_from_before_the_modes_resumes_as_fp32(tmp_path):
    train(_config(epochs=1), tmp_path, **QUIET)
    ck = read_checkpoint(tmp_path)
    for key in ("precision", "channels_last", "compile"):
        del ck["config"][key]
    torch.save(seal(ck), tmp_path / "checkpoint.pt")
    assert len(train(_config(), tmp_path, resume=True, **QUIET).history) == 2


def test_fp16_needs_cuda(tmp_path):
    with pytest.raises(RsmoothError, match=r"^--precision fp16 needs a CUDA device .*use --precision bf16 or fp32$"):
        train(_config(precision="fp16"), tmp_path / "run", **QUIET)
    assert not (tmp_path / "run").exists()
    with pytest.raises(RsmoothError, match="--precision must be one of fp32, bf16, fp16, got 'fp8'"):
        _config(precision="fp8").resolved()


@pytest.mark.slow
def test_fp16_gradient_scaler_is_checkpointed_and_restored(monkeypatch, check_resume):
    """The CUDA fp16 path (autocast + GradScaler) run on CPU with the device check lifted."""
    monkeypatch.setattr(train_module, "_check_precision", lambda precision, device: None)
    full, _ = check_resume(_config(precision="fp16", train_subset=256, eval_examples=100))  # emulated on CPU: slow
    assert set(full["scaler"]) >= {"scale", "_growth_tracker"} and full["scaler"]["scale"] > 0


@pytest.mark.slow
def test_compile_trains_as_eager_and_keeps_the_plain_keys(tmp_path):
    config = _config(epochs=1, batch_size=479)  # 1437 = 3 x 479 digits: one shape, one compilation
    compiled = train(dataclasses.replace(config, compile=True), tmp_path / "c", **QUIET)
    eager = train(config, tmp_path / "e", **QUIET)
    ck = read_checkpoint(tmp_path / "c")
    assert ck["config"]["compile"] is True
    assert list(ck["state_dict"]) == list(create_model("digits_cnn", "digits").state_dict())
    assert compiled.history[0]["loss"] == pytest.approx(eager.history[0]["loss"], rel=1e-4)
    a, b = eager.model.state_dict(), load_model(tmp_path / "c").model.state_dict()
    assert all(torch.allclose(a[k], b[k], rtol=1e-3, atol=1e-5) for k in a)


def test_bf16_loss_is_close_to_fp32():
    torch.manual_seed(0)
    model = create_model("digits_cnn", "digits")
    x, y = get_dataset("digits", "train").get_batch(torch.arange(128))
    method = create_method("gaussian", sigma=0.25)
    losses = []
    for dtype in (None, torch.bfloat16):
        ctx = StepContext(torch.Generator().manual_seed(1))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is not None):
            losses.append(float(method.loss(model, Batch(x, y, torch.arange(128)), ctx)[0].detach()))
    assert losses[1] == pytest.approx(losses[0], rel=0.02) and losses[0] != losses[1]


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in METHODS.names() if not n.startswith("_")])
def test_every_method_trains_under_bf16_autocast(name):
    torch.manual_seed(0)
    model = create_model("digits_cnn", "digits")
    x, y = get_dataset("digits", "train").get_batch(torch.arange(16))
    method = create_method(name, sigma=0.25)
    model = trained_module(method, model, 1)
    extras = {k: torch.full((16, 10), 0.1) for k in method.requires}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, stats = method.loss(model, Batch(x, y, torch.arange(16), extras),
                                  StepContext(torch.Generator().manual_seed(1), 5, 10, 0, 3))
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())
    assert all(torch.isfinite(torch.as_tensor(v, dtype=torch.float32)) for v in stats.values())


@pytest.mark.slow
def test_worker_processes_give_the_same_run(tmp_path):
    a = train(_config(epochs=1), tmp_path / "a", **QUIET).model.state_dict()
    b = train(_config(epochs=1, num_workers=1), tmp_path / "b", **QUIET).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_cli_flags_are_recorded_and_fp16_is_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--dataset", "digits", "--epochs", "1", "--precision", "bf16",
                 "--channels-last", "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())["config"]
    assert (config["precision"], config["channels_last"], config["compile"]) == ("bf16", True, False)
    assert main(["train", "--dataset", "digits", "--epochs", "1", "--precision", "fp16",
                 "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rsmooth: error: --precision fp16 needs a CUDA device") and err.count("\n") == 1
    help_text = _train_help(capsys)
    assert "--precision" in help_text and "--channels-last" in help_text and "--compile" in help_text


def _train_help(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    return capsys.readouterr().out
