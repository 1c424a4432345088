"""Settings as files and run folders: --config FILE, show-preset --format, --resume with the
recorded settings, preset names (issue 20 items 5, 6 and 15)."""
import dataclasses
import json

import pytest

from rsmooth.cli import build_parser, main, train_config_from_args
from rsmooth.engine import TrainConfig, read_checkpoint, train
from rsmooth.engine.runconfig import config_fields, conflicts
from rsmooth.engine.trainconfig import _FIXED_ON_RESUME, _check_resume
from rsmooth.errors import RsmoothError
from rsmooth.methods import create_method
from rsmooth.presets import PRESETS, get_preset

QUIET = dict(progress=False, log=lambda s: None)


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def config_of(*argv):
    """The TrainConfig that ``rsmooth train ARGV`` would train, without training."""
    return train_config_from_args(build_parser().parse_args(["train", *map(str, argv)]))


def full(config):
    """``config`` resolved, with every hyperparameter of its method (as a run records it)."""
    c = config.resolved()
    c.hparams = create_method(c.method, **c.hparams).hparams()
    return c


def recorded_run(folder, **fields):
    """A run folder whose config.json records ``fields`` (what a run writes when it starts)."""
    c = full(TrainConfig(**fields))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"config": c.to_dict(), "world_size": 1}))
    return c


# -- preset names (item 15) -------------------------------------------------------------------

def test_preset_names_are_normalised_and_unknown_ones_suggest(capsys):
    assert get_preset("fashion-mnist/catrs/0.5").name == "fashion-mnist/catrs/0.50"
    assert get_preset(" Fashion-MNIST/CatRS/0.500").name == "fashion-mnist/catrs/0.50"
    code, out, _ = run(capsys, "show-preset", "fashion-mnist/catrs/0.5")
    assert code == 0 and "preset   fashion-mnist/catrs/0.50" in out
    code, _, err = run(capsys, "show-preset", "fashion-mnst/smoothmix/0.50")
    assert code == 2 and len(err.splitlines()) == 1 and len(err) < 300
    assert "did you mean 'fashion-mnist/smoothmix/0.50'" in err and "'rsmooth list presets' lists all" in err
    code, _, err = run(capsys, "show-preset", "fashion-mnist/catrs/0.7")
    assert code == 2 and "(fashion-mnist/catrs has sigma 0.25, 0.50, 1.00)" in err
    assert sum(name in err for name in PRESETS.names()) <= 3  # never the whole list
    # --preset on train resolves names the same way
    assert config_of("--preset", "mnist/gaussian/1", "--out", "x").hparams["sigma"] == 1.0
    with pytest.raises(RsmoothError, match="did you mean 'mnist/smoothmix/0.25'"):
        config_of("--preset", "mnist/smoothmx/0.25", "--out", "x")


# -- config files (item 6) --------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_show_preset_file_round_trips_through_train_config(tmp_path, capsys, fmt):
    name = "mnist/smoothmix/0.50"
    code, text, _ = run(capsys, "show-preset", name, "--format", fmt)
    assert code == 0
    path = tmp_path / f"preset.{fmt}"
    path.write_text(text)
    preset = full(TrainConfig(**get_preset(name).train_config()))
    assert TrainConfig.from_file(path) == preset
    assert config_of("--config", path, "--out", tmp_path / "r") == preset
    # flags override the file (a method hyperparameter too), the rest stays the file's
    c = config_of("--config", path, "--epochs", 3, "--eta", 2, "--no-compile", "--out", tmp_path / "r")
    assert c == dataclasses.replace(preset, epochs=3, hparams={**preset.hparams, "eta": 2.0})
    if fmt == "yaml":
        assert text.startswith(f"# preset {name}: Jeong et al.") and "\nhparams:\n  sigma: 0.5\n" in text


def test_a_preset_of_every_method_round_trips_through_yaml(tmp_path):
    from rsmooth.engine.runconfig import dump_config

    path = tmp_path / "p.yaml"
    for name in {get_preset(n).method: n for n in PRESETS.names()}.values():
        preset = full(TrainConfig(**get_preset(name).train_config()))
        path.write_text(dump_config(preset.to_dict(), "yaml"))
        assert TrainConfig.from_file(path) == preset, name


def test_config_file_overrides_preset_and_flags_override_both(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("epochs: 5\nweight_decay: 5e-4\ncompile: true\nhparams:\n  eta: 3\n")  # 5e-4: a number
    c = config_of("--preset", "mnist/smoothmix/0.50", "--config", path, "--out", tmp_path / "r")
    assert (c.epochs, c.weight_decay, c.compile, c.lr_step) == (5, 5e-4, True, 30)
    assert c.hparams["eta"] == 3.0 and c.hparams["num_noise"] == 4  # hyperparameters merged one by one
    c = config_of("--preset", "mnist/smoothmix/0.50", "--config", path, "--epochs", 7, "--no-compile",
                  "--out", tmp_path / "r")
    assert (c.epochs, c.compile) == (7, False)
    path.write_text("method: macer\n")
    with pytest.raises(RsmoothError, match="--method macer conflicts with preset mnist/smoothmix/0.50"):
        config_of("--preset", "mnist/smoothmix/0.50", "--config", path, "--out", tmp_path / "r")


@pytest.mark.parametrize("text, message", [
    ("epoch: 3\nlr: 0.1\nsigma: 0.5\n", "unknown keys 'epoch' (did you mean 'epochs'?), 'sigma' (a method "
                                        "hyperparameter: put it under hparams); the keys are TrainConfig fields"),
    ("lr: fast\n", "lr must be a number or null, got 'fast'"),
    ("milestones: [30, x]\n", "milestones must be a list of integers or null, got [30, 'x']"),
    ("nesterov: 1\n", "nesterov must be true or false, got 1"),
    ("method: smoothmix\nhparams: {num_nose: 4}\n", "method smoothmix has no hyperparameter 'num_nose' "
                                                    "(did you mean 'num_noise' or"),
    ("method: smoothmix\nhparams: {num_noise: four}\n", "hparams: num_noise must be an integer, got 'four'"),
    ("- 1\n- 2\n", "holds list, not a mapping of TrainConfig fields"),
    ("epochs: [\n", "cannot read config file"),
])
def test_config_file_errors_are_one_line(tmp_path, capsys, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, _, err = run(capsys, "train", "--config", path, "--out", tmp_path / "r")
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "r").exists()


def test_missing_config_file(tmp_path, capsys):
    code, _, err = run(capsys, "train", "--config", tmp_path / "nope.yaml", "--out", tmp_path / "r")
    assert code == 2 and "config file" in err and "does not exist" in err and "--format yaml" in err


def test_new_fields_need_no_change():
    """Config files and the resume check read the dataclass's fields: a new one just works."""
    @dataclasses.dataclass
    class Newer(TrainConfig):
        future_knob: int = 0

    assert config_fields({"future_knob": 5, "lr": 1}, Newer, "f") == {"future_knob": 5, "lr": 1.0}
    with pytest.raises(RsmoothError, match="future_knob must be an integer"):
        config_fields({"future_knob": "5"}, Newer, "f")
    with pytest.raises(RsmoothError, match=r"'future_knb' \(did you mean 'future_knob'\?\)"):
        config_fields({"future_knb": 5}, Newer, "f")
    saved = TrainConfig(lr=0.1).to_dict()  # recorded before the field existed: it had its default
    assert conflicts(saved, Newer(lr=0.1), [*_FIXED_ON_RESUME, "future_knob"]) == []
    assert conflicts(saved, Newer(lr=0.1, future_knob=3), ["future_knob"]) == [
        ("--future-knob 0", "--future-knob 3")]


# -- --resume with the recorded settings (item 5) -----------------------------------------------

def test_resume_takes_the_recorded_settings_and_refuses_other_flags_together(tmp_path):
    run_dir = tmp_path / "run"
    rec = recorded_run(run_dir, dataset="digits", method="macer", epochs=4, batch_size=64, train_subset=600,
                       hparams={"sigma": 0.5, "gamma": 4.0}, lr_timing="cohen")
    assert config_of("--out", run_dir, "--resume") == rec == TrainConfig.from_run(run_dir)
    # flags that may change, or that agree (a default value given explicitly included)
    c = config_of("--out", run_dir, "--resume", "--epochs", 9, "--device", "cpu", "--workers", 2,
                  "--data-dir", tmp_path, "--sigma", 0.5, "--macer-gamma", 4, "--lr-timing", "cohen")
    assert c == dataclasses.replace(rec, epochs=9, device="cpu", num_workers=2, data_dir=str(tmp_path))
    # every disagreement at once, named as flags; a default given explicitly disagrees too
    with pytest.raises(RsmoothError) as e:
        config_of("--out", run_dir, "--resume", "--sigma", 0.25, "--batch-size", 256, "--macer-gamma", 8,
                  "--lr-timing", "cohen", "--nesterov")
    assert str(e.value) == (f"{run_dir} was trained with --macer-gamma 4.0 --sigma 0.5 --batch-size 64 "
                            f"--no-nesterov; you passed --macer-gamma 8.0 --sigma 0.25 --batch-size 256 --nesterov: "
                            f"drop them to continue the run with its recorded settings, or use a new --out")
    with pytest.raises(RsmoothError, match=r"trained with --method macer; you passed --method gaussian: drop it"):
        config_of("--out", run_dir, "--resume", "--method", "gaussian")
    with pytest.raises(RsmoothError, match=r"trained with no --targets; you passed --targets t.npy"):
        config_of("--out", run_dir, "--resume", "--targets", "t.npy")
    (tmp_path / "c.json").write_text(json.dumps({"train_subset": 500}))  # a --config file is given too
    with pytest.raises(RsmoothError, match=r"trained with --train-subset 600; you passed --train-subset 500"):
        config_of("--out", run_dir, "--resume", "--config", tmp_path / "c.json")
    # the Python API: overrides as fields
    assert TrainConfig.from_run(run_dir, epochs=6, hparams={"sigma": 0.5}).epochs == 6
    with pytest.raises(RsmoothError, match="you passed --sigma 1.0 --lr 0.3: drop them"):
        TrainConfig.from_run(run_dir, lr=0.3, hparams={"sigma": 1.0})


def test_resume_without_a_run_starts_one_from_the_flags(tmp_path, capsys):
    assert config_of("--out", tmp_path / "new", "--resume", "--sigma", 0.5) == TrainConfig(hparams={"sigma": 0.5})
    with pytest.raises(RsmoothError, match="holds no run to resume .*; give the run's settings"):
        TrainConfig.from_run(tmp_path / "new")
    with pytest.raises(RsmoothError, match=r"train\(None, out\) continues the run recorded in out: pass resume=True"):
        train(None, tmp_path / "new", **QUIET)


def test_check_resume_names_every_difference_as_flags(tmp_path):
    saved = full(TrainConfig(dataset="digits", lr=0.05, train_subset=600)).to_dict()
    with pytest.raises(RsmoothError) as e:
        _check_resume(saved, full(TrainConfig(dataset="digits", lr=0.1, hparams={"sigma": 0.5})), tmp_path)
    assert str(e.value).startswith(f"cannot resume {tmp_path}: it was trained with --sigma 0.25 --lr 0.05 "
                                   f"--train-subset 600, not --sigma 0.5 --lr 0.1 no --train-subset; continue with the recorded")


def test_resume_continues_a_run_from_its_folder_alone(tmp_path, capsys):
    out = tmp_path / "run"
    flags = ["--dataset", "digits", "--sigma", "0.5", "--train-subset", "64", "--batch-size", "32",
             "--lr", "0.02", "--seed", "4"]
    assert main(["train", *flags, "--epochs", "1", "--out", str(out)]) == 0
    first = read_checkpoint(out)["config"]
    # item 6: a run's config.json is a config file giving the same settings
    assert TrainConfig.from_file(out / "config.json") == TrainConfig(**first) == TrainConfig.from_run(out)
    assert config_of("--config", out / "config.json", "--out", tmp_path / "other") == TrainConfig(**first)
    capsys.readouterr()
    assert main(["train", "--out", str(out), "--resume", "--epochs", "2"]) == 0
    assert "resuming" in capsys.readouterr().out
    ck = read_checkpoint(out)
    assert ck["epoch"] == 2 and ck["config"] == {**first, "epochs": 2}
    # a run folder without config.json (an older run) resumes from its checkpoint's config
    (out / "config.json").unlink()
    assert TrainConfig.from_run(out) == TrainConfig(**ck["config"])
    assert train(None, out, resume=True, **QUIET).history == ck["history"]  # done: nothing to train
    code, _, err = run(capsys, "train", "--out", out, "--resume", "--lr", "0.05")
    assert code == 2 and "trained with --lr 0.02; you passed --lr 0.05" in err


def test_cli_resume_on_an_empty_folder_says_it_starts(tmp_path, capsys, monkeypatch):
    import rsmooth.engine

    got = []
    monkeypatch.setattr(rsmooth.engine, "train", lambda c, out, resume, **kw: got.append((c, resume)) or
                        type("R", (), {"checkpoint": "x"})())
    assert main(["train", "--out", str(tmp_path / "new"), "--resume", "--epochs", "2"]) == 0
    assert f"{tmp_path / 'new'} holds no run yet: starting it" in capsys.readouterr().out
    assert got == [(TrainConfig(epochs=2), True)]


def test_i37_a_yaml_alias_bomb_is_refused_quickly(tmp_path, capsys):
    """524 bytes of YAML aliases unfold into 9**9 values: refused in one line, not walked."""
    lines = ["arch_kwargs:", '  a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    assert len(bomb.read_bytes()) < 600
    code = main(["train", "--config", str(bomb), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"config file {bomb} holds more than 100000 values" in err, err
    assert not (tmp_path / "run").exists()
