"""Bad input (issue 21, section 5): each a one-line RsmoothError saying what is wrong and how to fix
it, checked before any work; never a traceback, a silent wrong answer or a refused valid input."""
import pytest
import torch

from rsmooth import RsmoothError, Smooth


class Linear4(torch.nn.Module):
    """Three logits from 1 x 2 x 2 images."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))

    def forward(self, x):
        return self.net(x)


# -- certify_batch: labels and indices are integers in range, never truncated or wrapped -------
@pytest.mark.parametrize("kw, message", [
    (dict(labels=["cat", "dog"]), r"labels\[0\] is 'cat', not a class in 0..2 \(num_classes=3\): pass class indices"),
    (dict(labels="ab"), r"labels must be a sequence of 2 integers, got str"),
    (dict(labels=[0, 3]), r"labels\[1\] is 3, not a class in 0..2"),
    (dict(labels=[0, -1]), r"labels\[1\] is -1, not a class in 0..2"),
    (dict(labels=[0]), r"labels has 1 entries for 2 images"),
    (dict(indices=[0.5, 1.7]), r"indices\[0\] is 0.5, not a dataset index \(an integer >= 0\)"),
    (dict(indices=[3, -1]), r"indices\[1\] is -1, not a dataset index"),
    (dict(indices=torch.tensor([1.0, 2.5])), r"indices\[1\] is 2.5, not a dataset index"),
])
def test_certify_batch_refuses_bad_labels_and_indices(kw, message):
    with pytest.raises(RsmoothError, match=message):
        Smooth(Linear4(), 3, 0.25).certify_batch(torch.rand(2, 1, 2, 2), 5, 10, 0.01, 10, **kw)


def test_certify_batch_takes_integer_arrays_and_tensors():
    s = Smooth(Linear4(), 3, 0.25)
    records = s.certify_batch(torch.rand(2, 1, 2, 2), 5, 10, 0.01, 10, labels=torch.tensor([2, 0]),
                              indices=[4.0, 7])
    assert [(r["index"], r["label"]) for r in records] == [(4, 2), (7, 0)]


# -- a factory whose logits ignore the batch size fails at creation, not in training -------------
class OneRow(torch.nn.Module):
    """Logits [1, 10] for any batch: the mean over the batch."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(x.flatten(1)).mean(0, keepdim=True)


def test_a_factory_returning_one_row_for_any_batch_is_refused(monkeypatch):
    import rsmooth
    from rsmooth.models import MODELS, create_model

    monkeypatch.setattr(MODELS, "_items", dict(MODELS._items))  # the registration ends with the test
    rsmooth.register_model("_one_row", lambda: OneRow())
    with pytest.raises(RsmoothError, match=r"architecture _one_row must return logits \[B, K\], one row per "
                                           r"input; for an input \[2, 1, 8, 8\] it returned \(1, 10\)"):
        create_model("_one_row", "digits")


# -- --mean/--std: finite, std > 0, checked before any data is read ------------------------------
NORM = r"--mean/--std must be finite numbers with std > 0 \(per channel, in \[0,1\] pixel units"


@pytest.mark.parametrize("mean, std", [([0.5], [float("inf")]), ([float("nan")], [0.25]), ([0.5], [0.0]),
                                       ([float("-inf")], [1.0])])
def test_train_refuses_non_finite_normalisation_before_reading_data(mean, std, tmp_path, monkeypatch):
    import rsmooth.data
    from rsmooth.engine import TrainConfig, train

    monkeypatch.setattr(rsmooth.data, "get_dataset", lambda *a, **k: pytest.fail("data read before the check"))
    config = TrainConfig(dataset="digits", arch="digits_cnn", epochs=1, mean=mean, std=std, hparams={"sigma": 0.25})
    with pytest.raises(RsmoothError, match=NORM):
        train(config, tmp_path / "run", progress=False, log=lambda s: None)


def test_a_model_with_infinite_std_is_refused():
    from rsmooth.models import create_model

    with pytest.raises(RsmoothError, match=NORM + r".*got mean \[0.5\] and std \[inf\]"):
        create_model("digits_cnn", "digits", mean=[0.5], std=[float("inf")])


# -- integer weights are not silently cast ---------------------------------------------------------
def test_a_safetensors_file_with_integer_weights_is_refused(tmp_path):
    from safetensors.torch import save_file

    from rsmooth.engine import load_model
    from rsmooth.models import create_model

    state = {k: v.contiguous() for k, v in create_model("digits_cnn", "digits").state_dict().items()}
    first = next(k for k, v in state.items() if k.startswith("1.") and v.is_floating_point())
    state[first] = (state[first] * 100).to(torch.int32)
    path = tmp_path / "int.safetensors"
    save_file(state, str(path), metadata={"arch": "digits_cnn", "dataset": "digits"})
    with pytest.raises(RsmoothError, match=rf"checkpoint {path}: the checkpoint holds non-floating-point weights "
                                           rf"where 'digits_cnn' has floating-point ones: {first} \(torch.int32\); "
                                           r".*save them as float32"):
        load_model(path)


# -- certify --sequential/--adaptive --n: refused, not ignored ---------------------------------------
@pytest.mark.parametrize("mode", [["--sequential", "--radii", "0.25"], ["--adaptive"]])
def test_cli_sequential_refuses_n_instead_of_ignoring_it(mode, tmp_path, capsys):
    from rsmooth.cli import main

    assert main(["certify", "--checkpoint", str(tmp_path / "none"), "--out", str(tmp_path / "c.tsv"),
                 *mode, "--n", "500"]) == 2
    assert capsys.readouterr().err == (
        f"rsmooth: error: --n goes with fixed-sample certification; {mode[0]} draws samples until it can stop, "
        f"at most --n-max (default 100000): pass --n-max 500 instead of --n\n")
    assert list(tmp_path.iterdir()) == []


# -- a denoiser run with another --arch: refused, not ignored -------------------------------------------
@pytest.fixture(scope="module")
def denoiser_run(tmp_path_factory):
    from rsmooth.engine import TrainConfig, train

    root = tmp_path_factory.mktemp("den")
    quiet = dict(progress=False, log=lambda s: None)
    small = dict(dataset="digits", epochs=1, train_subset=256, eval_examples=0)
    train(TrainConfig(method="standard", **small), root / "clf", **quiet)
    train(TrainConfig(method="denoise-mse", classifier=str(root / "clf"), optimizer="adam", lr=1e-3,
                      hparams={"sigma": 0.25}, **small), root / "den", **quiet)
    return root / "den"


@pytest.mark.slow
def test_a_denoiser_run_refuses_another_arch(denoiser_run):
    from rsmooth.engine import load_model

    with pytest.raises(RsmoothError, match=r"is a denoiser run: it rebuilds its denoiser \(dncnn_small\) and the "
                                           r"classifier it records, so --arch digits_cnn would be ignored; drop --arch"):
        load_model(denoiser_run, arch="digits_cnn")
    assert load_model(denoiser_run, arch="dncnn_small").arch == load_model(denoiser_run).arch  # its own: accepted


# -- every corruption and severity is checked before the first is certified -----------------------------
@pytest.mark.parametrize("suite", ["mnist-c", "cifar10-c"])
def test_certify_checks_every_severity_before_any_work(suite, tmp_path, capsys):
    from rsmooth.cli import main

    out = tmp_path / "c"
    assert main(["certify", "--checkpoint", str(tmp_path / "run"), "--dataset", "digits", "--corruption",
                 "shot_noise", "--corruption-suite", suite, "--severity", "1,6", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (f"rsmooth: error: corruption shot_noise ({suite}) has severities 1, 2, 3, 4, "
                                       f"5, not 6; pass --severity among them or 'all'\n")
    assert not out.exists()


def test_a_published_set_without_levels_refuses_severity_in_the_plan():
    from rsmooth.engine import corruption_plan

    with pytest.raises(RsmoothError, match=r"shot_noise \(mnist-c\) has one published level; drop --severity"):
        corruption_plan("mnist-c", "shot_noise,fog", "1")


# -- reproduce --device: checked before any step ----------------------------------------------------------
def test_reproduce_checks_the_device_before_any_work(tmp_path, capsys):
    from rsmooth.cli import main

    out = tmp_path / "r"
    assert main(["reproduce", "rsmooth:digits", "--budget", "smoke", "--out", str(out), "--device", "cuda:7"]) == 2
    assert capsys.readouterr().err.startswith("rsmooth: error: device 'cuda:7' is not available on this machine; "
                                              "use one of: cpu")
    assert not out.exists()


# -- certify_adaptive(radius_tol=inf): a valid tolerance (stop at the first look), not refused -------------
def test_adaptive_accepts_an_infinite_tolerance_and_stops_at_the_first_look():
    from rsmooth.smoothing.sequential import FIRST_LOOK

    s = Smooth(Linear4(), 3, 0.25)
    g = torch.Generator().manual_seed(0)
    cert = s.certify_adaptive(torch.rand(1, 2, 2), 10, 0.01, radius_tol=float("inf"), n_max=1000, generator=g)
    assert cert.n == FIRST_LOOK
    with pytest.raises(RsmoothError, match=r"radius_tol must be >= 0 \(e.g. 0.05; inf stops at the first look\), "
                                           r"got nan"):
        s.certify_adaptive(torch.rand(1, 2, 2), 10, 0.01, radius_tol=float("nan"))


# -- analyze --corruptions: unfinished and --sequential files are told, not averaged silently -------------
def _corruption_file(folder, name, rows, **meta):
    from rsmooth.metrics import CertifyWriter, write_sidecar

    path = folder / f"{name}.tsv"
    with CertifyWriter(path) as w:
        for i, (radius, correct) in enumerate(rows):
            w.write(i, 1, 1 if correct else 0, radius, correct, 0.1)
    corruption = {"name": name, "severity": None, "source": "generated", "suite": "mnist-c", "seed": 0}
    write_sidecar(path, {"dataset": "digits", "sigma": 0.25, "method": "gaussian", "corruption": corruption, **meta})


def test_analyze_corruptions_notes_unfinished_and_sequential_files(tmp_path, monkeypatch):
    import json

    from rsmooth.report import corruption_tables
    from rsmooth.report import corruptions as rc

    monkeypatch.setitem(rc.BENCHMARK, "mnist-c", ("shot_noise", "fog", "stripe"))
    _corruption_file(tmp_path, "shot_noise", [(0.5, 1), (0.0, 0)], complete=False, num_examples=10)
    _corruption_file(tmp_path, "fog", [(0.25, 1), (0.0, 0)], complete=True, num_examples=2, mode="sequential",
                     radii=[0.25])
    _corruption_file(tmp_path, "stripe", [(0.25, 1), (0.0, 0)], complete=True, num_examples=2, mode="sequential",
                     radii=[0.0, 0.25])
    (tmp_path / "fog.tsv.seq").write_text("the side file of fog.tsv\n")
    out = json.loads(corruption_tables([tmp_path], as_json=True))
    acr, acc = ({row["label"]: row["cells"][0]["value"] for row in t["rows"]} for t in out["tables"])
    assert acr == {"shot_noise": 0.25, "fog": None, "stripe": None, "mACR": None}
    assert acc == {"shot_noise": 50.0, "fog": None, "stripe": 50.0, "mAcc": None}
    assert "Gaussian shot_noise.tsv: incomplete: 2 of 10 examples (stopped, or still running; rerun its certify " \
           "command to finish it); its figures are over the examples done" in out["notes"]
    assert "Gaussian: fog.tsv, stripe.tsv: --sequential results decide robustness at their --radii only, so they " \
           "have no ACR ('-') and no accuracy at r = 0 where 0 is not among their --radii; certify or --adaptive " \
           "estimates every radius" in out["notes"]


@pytest.mark.slow
def test_analyze_corruptions_reads_a_folder_of_certify_corruption_sequential(tmp_path, capsys):
    from rsmooth.cli import main
    from rsmooth.engine import TrainConfig, train

    train(TrainConfig(dataset="digits", epochs=1, train_subset=256, eval_examples=0, hparams={"sigma": 0.25}),
          tmp_path / "run", progress=False, log=lambda s: None)
    folder = tmp_path / "c"
    assert main(["certify", "--checkpoint", str(tmp_path / "run"), "--corruption", "shot_noise,fog", "--sequential",
                 "--radii", "0", "0.25", "--n0", "10", "--n-max", "100", "--max", "3", "--out", str(folder)]) == 0
    assert sorted(p.name for p in folder.glob("*.seq")) == ["fog.tsv.seq", "shot_noise.tsv.seq"]
    (folder / "fog.tsv.seq").rename(folder / "fog.tsv.seq.tsv")  # the name earlier versions wrote
    capsys.readouterr()
    assert main(["analyze", "--corruptions", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "| shot_noise | - |" in out and "| fog | - |" in out  # ACR
    assert "Gaussian: fog.tsv, shot_noise.tsv: --sequential results decide robustness at their --radii only" in out
