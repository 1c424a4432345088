"""Consistency regularisation (papers/004 eq. 7, 12, 13): formula, gradient, variants, training."""
import math

import pytest
import torch

from rsmooth import RsmoothError
from rsmooth.cli import main
from rsmooth.engine import TrainConfig
from rsmooth.methods import Batch, StepContext, create_method
from rsmooth.methods.consistency import consistency_loss, consistency_regularizer



def _logits(b=4, m=3, k=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (3 * torch.randn(b, m, k, generator=g, dtype=torch.float64))


def _softmax(row):
    mx = max(row)
    e = [math.exp(v - mx) for v in row]
    s = sum(e)
    return [v / s for v in e]


def _reference(logits, lbd, eta, variant):
    """Direct formula, explicit loops, float64."""
    total = 0.0
    for per_image in logits.tolist():
        probs = [_softmax(row) for row in per_image]
        m, k = len(probs), len(probs[0])
        avg = [sum(p[c] for p in probs) / m for c in range(k)]
        kl = sum(sum(avg[c] * (math.log(avg[c]) - math.log(p[c])) for c in range(k)) for p in probs) / m
        ent = -sum(a * math.log(a) for a in avg)
        if variant == "default":
            total += lbd * kl + eta * ent
        elif variant == "kl":
            total += lbd * kl
        elif variant == "ce":
            ce = sum(-sum(avg[c] * math.log(p[c]) for c in range(k)) for p in probs) / m
            total += lbd * ce
        elif variant == "mse":
            total += lbd * sum((probs[1][c] - probs[0][c]) ** 2 for c in range(k))
    return total / len(logits)


@pytest.mark.parametrize("variant", ["default", "kl", "mse", "ce"])
@pytest.mark.parametrize("m", [2, 3])
def test_regularizer_matches_direct_formula(variant, m):
    logits = _logits(m=m)
    got = consistency_regularizer(logits, lbd=7.0, eta=0.3, variant=variant)
    assert got.shape == () and got.item() == pytest.approx(_reference(logits, 7.0, 0.3, variant), rel=1e-12)


def test_ce_variant_is_default_with_eta_equal_lambda():
    logits = _logits()
    ce = consistency_regularizer(logits, 2.5, 0.0, "ce")
    assert ce.item() == pytest.approx(consistency_regularizer(logits, 2.5, 2.5, "default").item(), rel=1e-12)
    # eta is ignored by ce, kl and mse
    for v in ("ce", "kl", "mse"):
        assert consistency_regularizer(logits, 2.5, 9.0, v) == consistency_regularizer(logits, 2.5, 0.0, v)


def test_identical_copies_leave_only_the_entropy():
    row = torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64)
    logits = row.expand(2, 3).unsqueeze(0)  # [1, 2, 3], both copies equal
    p = _softmax(row[0].tolist())
    assert consistency_regularizer(logits, 10.0, 0.5, "kl").item() == pytest.approx(0.0, abs=1e-15)
    assert consistency_regularizer(logits, 10.0, 0.5, "mse").item() == 0.0
    assert consistency_regularizer(logits, 10.0, 0.5).item() == pytest.approx(
        -0.5 * sum(v * math.log(v) for v in p), rel=1e-12)


def _detached_kl(logits):
    """KL term with F_hat detached: what the reference would compute if the target were a constant."""
    p = torch.softmax(logits, 2)
    avg = p.mean(1, keepdim=True).detach()
    return (avg * (avg.log() - p.log())).sum(2).mean(1).mean()


@pytest.mark.parametrize("variant", ["default", "kl", "mse", "ce"])
def test_gradient_flows_through_f_hat(variant):
    logits = _logits(b=2, m=3, k=4).requires_grad_()
    # autograd against central finite differences (float64)
    assert torch.autograd.gradcheck(lambda z: consistency_regularizer(z, 3.0, 0.7, variant), (logits,))


def test_f_hat_is_not_detached():
    logits = _logits(b=2, m=3, k=4).requires_grad_()
    g_full, = torch.autograd.grad(consistency_regularizer(logits, 1.0, 0.0, "kl"), logits)
    g_det, = torch.autograd.grad(_detached_kl(logits), logits)
    # same value, different gradient: F_hat receives the KL term's gradient
    assert consistency_regularizer(logits, 1.0, 0.0, "kl").item() == pytest.approx(_detached_kl(logits).item())
    assert (g_full - g_det).abs().max() > 1e-3
    # explicit formula: d/dF_hat of (1/m) sum_i KL(F_hat || F_i) is (log F_hat + 1 - mean_i log F_i);
    # chaining through F_hat = mean_i softmax(z_i) gives the difference of the two gradients
    p = torch.softmax(logits.detach(), 2)
    avg = p.mean(1, keepdim=True)
    d_avg = avg.log() + 1 - p.log().mean(1, keepdim=True)              # [B, 1, K]
    # softmax Jacobian: dp_k/dz_j = p_k (delta_kj - p_j); F_hat gets 1/m of each copy; 1/B from the mean
    via_avg = p * (d_avg - (d_avg * p).sum(2, keepdim=True)) / p.shape[1] / p.shape[0]
    torch.testing.assert_close(g_full - g_det, via_avg)


def test_consistency_loss_averages_ce_over_all_copies():
    logits = _logits(b=3, m=2, k=4)
    y = torch.tensor([0, 3, 1])
    loss, parts = consistency_loss(logits, y, 5.0, 0.5)
    ce = sum(-math.log(_softmax(logits[b, i].tolist())[y[b]]) for b in range(3) for i in range(2)) / 6
    assert parts["loss_ce"].item() == pytest.approx(ce, rel=1e-12)
    assert loss.item() == pytest.approx(ce + _reference(logits, 5.0, 0.5, "default"), rel=1e-12)


def test_method_loss_uses_image_major_noise_from_the_generator():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 5)).double()
    x = torch.rand(3, 1, 3, 4, dtype=torch.float64)
    y = torch.tensor([1, 0, 4])
    method = create_method("consistency", sigma=0.5, num_noise=3, lbd=4.0, eta=0.2)
    assert method.num_chunks == 3
    loss, stats = method.loss(model, Batch(x, y, torch.arange(3)), StepContext(torch.Generator().manual_seed(5)))
    noise = torch.randn((9, 1, 3, 4), generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 0.5
    logits = torch.stack([torch.stack([model(x[b:b + 1] + noise[3 * b + i:3 * b + i + 1])[0] for i in range(3)])
                          for b in range(3)])
    expected, _ = consistency_loss(logits, y, 4.0, 0.2)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)
    assert set(stats) == {"loss_ce", "loss_con", "acc_noisy"}


@pytest.mark.parametrize("hp, message", [
    ({"num_noise": 1}, "num_noise must be >= 2 for consistency, got 1"),
    ({"lbd": -1.0}, "lbd must be >= 0 for consistency, got -1.0"),
    ({"eta": -0.5}, "eta must be >= 0 for consistency, got -0.5"),
    ({"lbd": float("nan")}, "lbd must be >= 0"),
    ({"variant": "xent"}, "variant must be one of default, kl, mse, ce"),
])
def test_bad_hyperparameters(hp, message):
    with pytest.raises(RsmoothError, match=message):
        create_method("consistency", **hp)


def test_regularizer_rejects_bad_input():
    with pytest.raises(RsmoothError, match="m >= 2"):
        consistency_regularizer(torch.zeros(2, 1, 3), 1.0, 0.5)
    with pytest.raises(RsmoothError, match=r"\[B x m x K\]"):
        consistency_regularizer(torch.zeros(2, 3), 1.0, 0.5)
    with pytest.raises(RsmoothError, match="unknown consistency variant"):
        consistency_regularizer(torch.zeros(2, 2, 3), 1.0, 0.5, "l1")


@pytest.mark.slow
def test_cli_train_and_certify(tmp_path):
    assert main(["train", "--dataset", "digits", "--method", "consistency", "--epochs", "2",
                 "--batch-size", "128", "--num-noise", "2", "--lbd", "5", "--variant", "kl",
                 "--out", str(tmp_path / "r")]) == 0
    assert main(["certify", "--checkpoint", str(tmp_path / "r"), "--n", "200", "--max", "3",
                 "--out", str(tmp_path / "c.tsv")]) == 0
    assert len((tmp_path / "c.tsv").read_text().splitlines()) == 4


@pytest.mark.slow
def test_resume_is_bit_identical(check_resume):
    config = TrainConfig(dataset="digits", method="consistency", epochs=2, batch_size=128, lr=0.05,
                         lr_step=1, seed=1, hparams={"sigma": 0.25, "num_noise": 2, "lbd": 10.0})
    full, _ = check_resume(config)
    assert {"loss_ce", "loss_con", "acc_noisy"} <= set(full["history"][-1])


@pytest.mark.parametrize("variant", ["default", "kl", "mse", "ce"])
def test_saturated_logits_give_finite_gradients(variant):
    # float32 softmax underflows to exactly 0 for the last two classes in both copies
    logits = torch.tensor([[[200.0, 0.0, -10.0], [190.0, 0.0, -10.0]],
                           [[1.0, 2.0, 0.0], [0.0, 1.0, 3.0]]], requires_grad=True)
    reg = consistency_regularizer(logits, 10.0, 0.5, variant)
    g, = torch.autograd.grad(reg, logits)
    assert torch.isfinite(reg) and torch.isfinite(g).all()
    assert reg.item() == pytest.approx(_reference(logits.detach().double()[1:], 10.0, 0.5, variant) / 2, rel=1e-5)
