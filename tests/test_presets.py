"""Paper presets: every preset builds its method and config; spot checks against the papers; CLI."""
import dataclasses
import re

import pytest

from rsmooth.cli import build_parser, main, train_config_from_args
from rsmooth.data import DATASETS
from rsmooth.engine import TrainConfig
from rsmooth.engine.train import lr_factor
from rsmooth.errors import RsmoothError
from rsmooth.methods import METHODS, create_method
from rsmooth.presets import PRESETS, Preset, add_preset, get_preset
from rsmooth.presets_table import CATRS_ROWS, ROWS

NAMES = PRESETS.names()


@pytest.mark.parametrize("name", NAMES)
def test_preset_builds_method_and_config(name):
    p = get_preset(name)
    kw = p.train_config()
    method = create_method(p.method, **kw["hparams"])  # unknown or bad hyperparameters raise
    assert method.sigma == p.sigma
    c = TrainConfig(**kw).resolved()
    assert (c.dataset, c.method) == (p.dataset, p.method)
    assert c.epochs >= 1 and c.lr > 0 and c.arch


def test_names_unique_and_well_formed():
    denoisers = [n for n in NAMES if "/denoise-" in n]  # Salman et al. 2020: 2 methods x 2 datasets x 4 sigmas
    assert len(denoisers) == 16
    assert len(NAMES) - len(denoisers) == len(ROWS) + len(CATRS_ROWS) == len(
        {(d, m, s) for d, m, s, *_ in ROWS + CATRS_ROWS})
    for name in NAMES:
        p = get_preset(name)
        assert re.fullmatch(r"[a-z0-9-]+/[a-z0-9-]+/\d\.\d\d", name)
        assert name == f"{p.dataset}/{p.method}/{p.sigma:.2f}" == p.name
        assert p.dataset in DATASETS and p.method in METHODS
        assert p.sigma in ((0.12, 0.25, 0.5, 1.0) if name in denoisers else (0.25, 0.5, 1.0))
        assert "sigma" not in p.hparams  # sigma lives in the name
        assert set(p.config) <= {f.name for f in dataclasses.fields(TrainConfig)}
        assert re.search(r"arXiv \d{4}\.\d{5}|OpenReview \w+", p.source)  # a citation users can follow


def test_coverage():
    """Six baselines x three sigmas on MNIST, Fashion-MNIST, CIFAR-10/100; ImageNet sigma 1.0."""
    baselines = {"gaussian", "stability", "smoothadv", "macer", "consistency", "smoothmix", "catrs"}
    v1 = {"mnist", "cifar10"}  # papers/001 covers MNIST and CIFAR-10 only
    for dataset in ("mnist", "fashion-mnist", "cifar10", "cifar100"):
        have = {(p.method, p.sigma) for p in map(get_preset, NAMES) if p.dataset == dataset
                and not p.method.startswith("denoise-")}
        methods = baselines | ({"catrs-v1"} if dataset in v1 else set())
        assert have == {(m, s) for m in methods for s in (0.25, 0.5, 1.0)}, dataset
    assert {p.method for p in map(get_preset, NAMES) if p.dataset == "imagenet"} == \
        {"gaussian", "consistency", "smoothadv", "smoothmix", "catrs", "denoise-mse", "denoise-stab"}


def test_denoiser_presets_are_the_authors_settings():
    # microsoft/denoised-smoothing train_denoiser.py: Adam 1e-3, 90 epochs, step 30; Stab+MSE Adam 1e-5, 20
    mse, stab = get_preset("cifar10/denoise-mse/0.25"), get_preset("cifar10/denoise-stab/0.50")
    assert (mse.config["optimizer"], mse.config["lr"], mse.config["epochs"], mse.config["arch"]) == \
        ("adam", 1e-3, 90, "dncnn")
    assert (stab.config["lr"], stab.config["epochs"]) == (1e-5, 20) and "--init" in stab.note
    assert "2003.01908" in mse.source


def test_catrs_presets_follow_the_appendices():
    # papers/000 App. C.5: M = 4, T = 4, eps = 1.0; lambda 1.0 (MNIST/F-MNIST), 0.5/1.0/2.0 (CIFAR)
    assert _hp("fashion-mnist/catrs/0.50") == {"num_noise": 4, "num_steps": 4, "eps": 1.0, "lbd": 1.0}
    assert [_hp(f"cifar100/catrs/{s}")["lbd"] for s in ("0.25", "0.50", "1.00")] == [0.5, 1.0, 2.0]
    imagenet = get_preset("imagenet/catrs/1.00")
    assert imagenet.hparams["confidence_mask"] and imagenet.hparams["eps_double_epoch"] == 80
    assert (imagenet.hparams["num_noise"], imagenet.hparams["num_steps"], imagenet.hparams["lbd"]) == (2, 1, 2.0)
    assert "2212.09000" in imagenet.note and "85-89" in imagenet.note
    # papers/001 App. B.2: p0 1/5 (MNIST); lambda 0.5, p0 1/20 at CIFAR sigma 0.25; 2.0, 1/10 above
    assert _hp("mnist/catrs-v1/1.00")["p0"] == pytest.approx(0.2)
    assert (_hp("cifar10/catrs-v1/0.25")["lbd"], _hp("cifar10/catrs-v1/0.25")["p0"]) == (0.5, 1 / 20)
    assert (_hp("cifar10/catrs-v1/1.00")["lbd"], _hp("cifar10/catrs-v1/1.00")["p0"]) == (2.0, 1 / 10)
    # CAT-RS's own LeNet schedule: 150 epochs, step 50
    assert get_preset("mnist/catrs/0.25").config["epochs"] == 150


def _hp(name):
    return get_preset(name).hparams


def test_spot_checks_against_the_papers():
    # SmoothAdv CIFAR: the papers disagree at sigma 0.5 (SPEC.md 2); each follows its table.
    assert _hp("cifar10/smoothadv/0.50") == dict(eps=2.0, num_noise=2, num_steps=10, warmup=10, attack="pgd")  # 001 App. B.2
    assert _hp("cifar100/smoothadv/0.50")["eps"] == 1.0 and _hp("cifar100/smoothadv/0.50")["num_noise"] == 8  # 000 App. C.5
    assert _hp("cifar100/smoothadv/1.00")["eps"] == 2.0 and _hp("cifar100/smoothadv/1.00")["num_noise"] == 2
    assert "papers disagree" in get_preset("cifar10/smoothadv/0.50").note
    assert _hp("mnist/smoothadv/0.25")["eps"] == 255 / 256  # --epsilon 255 in 1/256 units
    assert _hp("cifar10/smoothadv/0.25")["eps"] == 255 / 256  # 004 App. A.3 Table 1: 255, m 4
    # MACER: 001 App. B.2 / 000 App. C.5
    assert _hp("mnist/macer/1.00")["lbd"] == 6.0 and _hp("mnist/macer/0.50")["lbd"] == 16.0
    assert [_hp(f"fashion-mnist/macer/{s}")["lbd"] for s in ("0.25", "0.50", "1.00")] == [16.0, 8.0, 2.0]
    assert _hp("cifar10/macer/0.50")["lbd"] == 4.0
    assert _hp("cifar10/macer/1.00")["lbd"] == 12.0 and _hp("cifar10/macer/1.00")["deferred"] is True
    assert dict(_hp("cifar10/macer/0.25"), lbd=None) == dict(num_noise=16, gamma=8.0, beta=16.0, lbd=None)
    assert get_preset("cifar10/macer/0.25").config["batch_size"] == 64
    # Stability: gamma 2, except CIFAR sigma 1.0 -> 1
    assert _hp("cifar10/stability/1.00") == {"gamma": 1.0} and _hp("cifar100/stability/0.50") == {"gamma": 2.0}
    # Consistency: lambda 10 / 5 / 5 (MNIST family), 20 / 10 / 10 (CIFAR); entropy weight 0.5
    assert [_hp(f"mnist/consistency/{s}")["lbd"] for s in ("0.25", "0.50", "1.00")] == [10.0, 5.0, 5.0]
    assert [_hp(f"cifar10/consistency/{s}")["lbd"] for s in ("0.25", "0.50", "1.00")] == [20.0, 10.0, 10.0]
    assert _hp("cifar10/consistency/0.25")["eta"] == 0.5 and _hp("cifar10/consistency/0.25")["num_noise"] == 2
    # SmoothMix: MNIST eta 5, alpha 1, m 4, T = 2 / 4 / 8; CIFAR m 2, T 4, alpha 0.5 / 1 / 2, one-step at 0.5, 1.0
    assert [_hp(f"mnist/smoothmix/{s}")["num_steps"] for s in ("0.25", "0.50", "1.00")] == [2, 4, 8]
    assert dict(_hp("mnist/smoothmix/1.00")) == dict(eta=5.0, alpha_step=1.0, num_noise=4, num_steps=8)
    assert [(_hp(f"cifar10/smoothmix/{s}")["alpha_step"], _hp(f"cifar10/smoothmix/{s}")["mix_step"])
            for s in ("0.25", "0.50", "1.00")] == [(0.5, 0), (1.0, 1), (2.0, 1)]


def test_imagenet_catrs_lr_of_every_epoch():
    """Jeong, Kim, Shin 2023 (arXiv 2212.09000) App. F: x0.1 every 30 epochs and for the last 5."""
    c = TrainConfig(**get_preset("imagenet/catrs/1.00").train_config()).resolved()
    assert c.epochs == 90 and c.lr_timing == "catrs"
    expected = [0.1] * 31 + [0.01] * 30 + [1e-3] * 24 + [1e-4] * 5  # 0-30, 31-60, 61-84, 85-89
    assert [c.lr * lr_factor(e, c) for e in range(90)] == pytest.approx(expected, rel=1e-12)


def test_schedules():
    c10 = get_preset("cifar10/gaussian/0.25").config
    assert (c10["arch"], c10["lr"], c10["epochs"], c10["lr_step"]) == ("cifar_resnet110", 0.1, 150, 50)
    inet = get_preset("imagenet/gaussian/1.00").config
    assert (inet["arch"], inet["lr"], inet["epochs"], inet["lr_step"]) == ("resnet50", 0.1, 90, 30)
    # LeNet rows were trained 90 epochs, x0.1 every 30 (papers/003 App. C; released logs)
    for name in ("mnist/smoothmix/0.25", "fashion-mnist/gaussian/0.50"):
        c = get_preset(name).config
        assert (c["arch"], c["lr"], c["epochs"], c["lr_step"], c["nesterov"]) == ("lenet", 0.01, 90, 30, False)
    for name in NAMES:
        c = get_preset(name).config
        assert c.get("momentum", 0.9) == 0.9 and c["weight_decay"] == 1e-4  # (Adam: no momentum)
        assert c["batch_size"] == (64 if get_preset(name).method == "macer" else 256)


def test_sources_match_the_tables():
    catrs, first = "Jeong et al. 2023 (CAT-RS, arXiv 2212.09000)", "Jeong et al. 2022 (CAT-RS first version"
    assert get_preset("mnist/gaussian/0.25").source == f"{catrs} Table 3"  # papers/000
    assert get_preset("fashion-mnist/smoothmix/0.50").source == f"{catrs} Table 4"
    assert get_preset("cifar10/smoothmix/0.50").source.startswith(first)  # papers/001 Table 2
    assert get_preset("cifar10/smoothmix/0.50").source.endswith("Table 2")
    assert get_preset("cifar100/macer/0.25").source == f"{catrs} Table 5"
    assert "App. C.5" in get_preset("cifar100/macer/1.00").source  # no sigma 1.0 column in Table 5


def test_duplicate_and_unknown():
    with pytest.raises(ValueError, match="already registered"):
        add_preset(Preset("mnist", "gaussian", 0.25))
    with pytest.raises(RsmoothError, match="unknown preset .*mnist/gaussian/0.25"):
        get_preset("digits/gaussian/0.25")


def test_cli_unknown_preset_is_one_line(tmp_path, capsys):
    code = main(["train", "--preset", "digits-incompatible/nothing/0.25", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("rsmooth: error: unknown preset")
    assert "'rsmooth list presets' lists all" in err and "cifar10/smoothadv/0.50" not in err  # not all 113
    assert not (tmp_path / "r").exists()


def test_cli_flags_override_the_preset():
    name = "mnist/consistency/0.25"
    args = build_parser().parse_args(["train", "--preset", name, "--lbd", "3", "--epochs", "2", "--out", "x"])
    c = train_config_from_args(args)
    assert c.hparams["lbd"] == 3.0 and c.epochs == 2  # overridden
    p = get_preset(name)
    assert c.hparams == {"sigma": 0.25, "num_noise": 2, "eta": 0.5, "lbd": 3.0}  # the rest from the preset
    assert (c.dataset, c.method, c.arch, c.lr, c.lr_step, c.batch_size, c.nesterov) == \
        (p.dataset, p.method, p.config["arch"], 0.01, 30, 256, False)
    assert c.resolved().epochs == 2


# -- issue 37, item 17: a plain `train --dataset D` trains D's Gaussian preset's schedule ----------

@pytest.mark.parametrize("dataset", ["mnist", "fashion-mnist", "cifar10", "cifar100", "imagenet"])
def test_i37_plain_train_defaults_are_the_gaussian_presets_schedule(dataset):
    preset = get_preset(f"{dataset}/gaussian/{'1.00' if dataset == 'imagenet' else '0.25'}").config
    parser = build_parser()
    plain = train_config_from_args(parser.parse_args(["train", "--dataset", dataset, "--out", "x"])).resolved()
    assert (plain.arch, plain.lr, plain.epochs, plain.lr_step) == (
        preset["arch"], preset["lr"], preset["epochs"], preset["lr_step"])


def test_i37_fashion_mnist_defaults_are_90_epochs_and_explicit_values_are_kept():
    assert (TrainConfig(dataset="fashion-mnist").resolved().epochs, TrainConfig(dataset="mnist").resolved().lr_step) \
        == (90, 30)
    kept = TrainConfig(dataset="fashion-mnist", epochs=150, lr_step=50).resolved()
    assert (kept.epochs, kept.lr_step) == (150, 50)  # what a reproduction that passed them trains
    assert (get_preset("fashion-mnist/catrs/0.50").config["epochs"], get_preset("mnist/catrs/0.25").config["lr_step"]) \
        == (150, 50)  # CAT-RS's own schedule, unchanged
    assert TrainConfig(dataset="digits").resolved().epochs == 30
