"""SmoothAdv (papers/004 App. E.1; SPEC.md 2): loss, shared noises, eps warm-up, errors, CLI, resume."""
import math

import pytest
import torch
from torch import nn

from rsmooth import RsmoothError
from rsmooth.cli import main
from rsmooth.engine import TrainConfig
from rsmooth.methods import Batch, StepContext, create_method
from rsmooth.methods import smoothadv as sa
from rsmooth.methods.smoothadv import smoothadv_loss

B, M, K, SHAPE = 4, 3, 5, (1, 2, 2)


def _linear(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(4, K))


def _loss64(model, x_adv, y, noises, lbd=0.0, eta=0.5):
    """Mean CE over the m copies x'_b + delta_{b,i} (+ lbd * mean_i KL(F_hat || F_i) + eta * H(F_hat)),
    float64 with explicit loops; noises image-major (row b*m + i)."""
    w, b0 = model[1].weight.detach().double(), model[1].bias.detach().double()
    ce_sum, reg_sum = 0.0, 0.0
    for b in range(x_adv.shape[0]):
        probs = []
        for i in range(M):
            z = [float(v) for v in w @ (x_adv[b].double() + noises[b * M + i].double()).flatten() + b0]
            lse = math.log(sum(math.exp(v) for v in z))
            ce_sum += lse - z[int(y[b])]
            probs.append([math.exp(v - lse) for v in z])
        avg = [sum(p[k] for p in probs) / M for k in range(K)]
        kl = sum(sum(avg[k] * (math.log(avg[k]) - math.log(p[k])) for k in range(K)) for p in probs) / M
        ent = -sum(a * math.log(a) for a in avg)
        reg_sum += lbd * kl + eta * ent
    n = x_adv.shape[0]
    return ce_sum / (n * M) + (reg_sum / n if lbd > 0 else 0.0)


def _fixed(seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(B, *SHAPE, generator=g)
    y = torch.randint(0, K, (B,), generator=g)
    noises = torch.randn(B * M, *SHAPE, generator=g) * 0.5
    return x, y, noises


@pytest.mark.parametrize("lbd", [0.0, 2.0])
def test_loss_against_float64_loops(lbd):
    model = _linear()
    x_adv, y, noises = _fixed()
    logits = model(x_adv.repeat_interleave(M, 0) + noises).reshape(B, M, K)
    loss, parts = smoothadv_loss(logits, y, lbd=lbd, eta=0.5)
    assert float(loss.detach()) == pytest.approx(_loss64(model, x_adv, y, noises, lbd, 0.5), rel=1e-5)
    assert ("loss_con" in parts) == (lbd > 0)


@pytest.mark.parametrize("attack", ["pgd", "ddn"])
def test_method_attacks_and_trains_on_the_same_noises(attack, monkeypatch):
    model = _linear()
    x, y, _ = _fixed()
    method = create_method("smoothadv", sigma=0.5, num_noise=M, eps=0.5, num_steps=3, attack=attack,
                           lbd=1.0, warmup=0)
    seen = {}
    real = method.attack_input

    def spy(model_, x_, y_, noises, ctx):
        seen["noises"] = noises.clone()
        seen["adv"] = real(model_, x_, y_, noises, ctx)
        return seen["adv"]

    monkeypatch.setattr(method, "attack_input", spy)
    loss, stats = method.loss(model, Batch(x, y, torch.arange(B)), StepContext(torch.Generator().manual_seed(7)))
    expected_noise = torch.randn(B * M, *SHAPE, generator=torch.Generator().manual_seed(7)) * 0.5
    assert torch.equal(seen["noises"], expected_noise)  # m noises per image, drawn once
    assert (((seen["adv"] - x).flatten(1).norm(dim=1)) <= 0.5 + 1e-6).all()
    assert float(loss.detach()) == pytest.approx(_loss64(model, seen["adv"], y, seen["noises"], 1.0, 0.5), rel=1e-5)
    assert float(stats["adv_l2"]) == pytest.approx(float((seen["adv"] - x).flatten(1).norm(dim=1).mean()))
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_eps_warmup_by_epoch(monkeypatch):
    calls = []

    def fake_pgd(model, x, y, noises, *, eps, num_steps, generator=None):
        calls.append(("pgd", eps, num_steps))
        return x

    def fake_ddn(model, x, y, noises, *, eps, num_steps, init_norm, generator=None):
        calls.append(("ddn", eps, init_norm))
        return x

    monkeypatch.setattr(sa, "pgd_smoothed_input", fake_pgd)
    monkeypatch.setattr(sa, "ddn_smoothed_input", fake_ddn)
    model = _linear()
    x, y, _ = _fixed()
    batch = Batch(x, y, torch.arange(B))
    method = create_method("smoothadv", eps=2.0, num_steps=7)  # warm-up 10 epochs by default
    expected = {0: 0.2, 1: 0.4, 4: 1.0, 8: 1.8, 9: 2.0, 10: 2.0, 60: 2.0}
    for epoch, eps in expected.items():
        ctx = StepContext(torch.Generator().manual_seed(0), epoch=epoch, num_epochs=100)
        assert method.current_eps(ctx) == pytest.approx(eps)
        method.loss(model, batch, ctx)
        assert calls[-1] == ("pgd", pytest.approx(eps), 7)
    ddn = create_method("smoothadv", eps=1.0, warmup=4, attack="ddn")
    ddn.loss(model, batch, StepContext(torch.Generator().manual_seed(0), epoch=1))
    assert calls[-1] == ("ddn", pytest.approx(0.5), pytest.approx(0.5))  # initial norm = warmed-up eps
    no_warmup = create_method("smoothadv", eps=1.5, warmup=0)
    assert no_warmup.current_eps(StepContext(torch.Generator(), epoch=0)) == 1.5


def test_defaults_chunks_and_errors():
    m = create_method("smoothadv")
    assert (m.num_noise, m.eps, m.num_steps, m.attack, m.warmup, m.lbd, m.eta) == (4, 1.0, 10, "pgd", 10, 0.0, 0.5)
    assert m.num_chunks == 4 and create_method("smoothadv", num_noise=2).num_chunks == 2
    for bad, msg in [({"eps": -0.5}, "eps must be >= 0"), ({"num_steps": 0}, "num_steps must be >= 1"),
                     ({"attack": "fgsm"}, "attack must be one of pgd, ddn"),
                     ({"lbd": 1.0, "num_noise": 1}, "num_noise must be >= 2"),
                     ({"num_noise": 0}, "num_noise must be >= 1"), ({"warmup": -1}, "warmup"),
                     ({"eps": float("nan")}, "eps must be >= 0")]:
        with pytest.raises(RsmoothError, match=msg):
            create_method("smoothadv", **bad)
    create_method("smoothadv", num_noise=1)  # plain SmoothAdv with one noise is fine


#: one small configuration for the CLI run and the resume test (T = 1 keeps them fast)
HP = {"num_noise": 2, "num_steps": 1, "eps": 0.5, "warmup": 2, "lbd": 1.0}


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoothadv") / "r"
    flags = [a for k, v in HP.items() for a in ("--" + k.replace("_", "-"), str(v))]
    assert main(["train", "--dataset", "digits", "--method", "smoothadv", "--sigma", "0.25",
                 "--epochs", "2", "--batch-size", "256", "--seed", "5", *flags, "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_cli_train_and_certify(cli_run, tmp_path, capsys):
    assert main(["certify", "--checkpoint", str(cli_run), "--n", "200", "--max", "3",
                 "--out", str(tmp_path / "c.tsv")]) == 0
    assert main(["train", "--dataset", "digits", "--method", "smoothadv", "--eps", "-1",
                 "--out", str(tmp_path / "bad")]) == 2
    assert "eps must be >= 0" in capsys.readouterr().err


@pytest.mark.slow
def test_resume_is_bit_identical(cli_run, check_resume):
    """Stopped after epoch 1 (inside the eps warm-up) and resumed == the uninterrupted CLI run."""
    config = TrainConfig(dataset="digits", method="smoothadv", epochs=2, batch_size=256, seed=5,
                         hparams={"sigma": 0.25, **HP})
    _, resumed = check_resume(config, cli_run)
    assert resumed.history[-1]["adv_l2"] > 0 and resumed.history[-1]["loss_con"] > 0


def test_docstring_names_the_gradient_norm_deviation():
    """The one deviation from the authors' SmoothAdv + Consistency code is written down: their
    normalised gradient divides by ||g|| + 1e-8, rsmooth by max(||g||, 1e-12)."""
    from rsmooth.methods.smoothadv import SmoothAdv

    doc = " ".join(SmoothAdv.__doc__.split())
    assert "1e-8" in doc and "1e-12" in doc and "train_consistency.py" in doc
