"""MACER (Zhai et al. 2020; papers/004 App. E.2 eq. 8, the authors' code form): formula, masks, training."""
import math

import pytest
import torch
from scipy.stats import norm

from rsmooth import RsmoothError
from rsmooth.cli import main
from rsmooth.engine import TrainConfig
from rsmooth.methods import Batch, StepContext, create_method
from rsmooth.methods.macer import macer_loss


# [B=6, k=2, K=3] fixed logits and labels; the comment says which case each example exercises
LOGITS = [
    [[2.0, 0.0, -1.0], [1.5, 0.5, 0.0]],        # correct, inside the hinge
    [[2.0, 0.0, -1.0], [1.5, 0.5, 0.0]],        # misclassified (label 1): masked out
    [[6.0, 0.0, 0.0], [5.0, 0.0, 0.0]],         # correct, finite gap xi > gamma: hinge is 0
    [[400.0, 0.0, 0.0], [400.0, 0.0, 0.0]],     # correct, p2 = 0 exactly: d = -inf, dropped
    [[0.3, 0.2, 0.0], [0.1, 0.25, 0.0]],        # correct (label 1), small gap
    [[0.0, 0.0, 1.0], [0.0, 1.0, 1.2]],         # correct (label 2)
]
LABELS = [0, 1, 0, 0, 1, 2]
SIGMA, GAMMA, BETA = 0.5, 3.0, 2.0


def _softmax(row):
    mx = max(row)
    e = [math.exp(v - mx) for v in row]
    s = sum(e)
    return [v / s for v in e]


def _mean_softmax(copies, scale=1.0):
    probs = [_softmax([scale * v for v in row]) for row in copies]
    return [sum(p[c] for p in probs) / len(probs) for c in range(len(probs[0]))]


def _reference(logits, labels, sigma, lbd, gamma, beta):
    """MACER's objective by hand: the hinge (sigma/2) max(gamma - xi, 0) on correct examples."""
    cls = rob = 0.0
    cases = []
    for copies, y in zip(logits, labels):
        cls += -math.log(_mean_softmax(copies)[y] + 1e-10)
        g = _mean_softmax(copies, beta)
        order = sorted(range(len(g)), key=lambda c: -g[c])
        if order[0] != y:
            cases.append("misclassified")
            continue
        xi = norm.ppf(g[order[0]]) - norm.ppf(g[order[1]])
        if not math.isfinite(xi):
            cases.append("non-finite")
            continue
        cases.append("hinge" if xi <= gamma else "beyond")
        rob += sigma / 2 * max(gamma - xi, 0.0)
    b = len(labels)
    return (cls + lbd * rob) / b, cls / b, rob / b, cases


@pytest.mark.parametrize("lbd", [0.0, 1.0, 7.0])
def test_loss_matches_hand_computation(lbd):
    logits, y = torch.tensor(LOGITS, dtype=torch.float64), torch.tensor(LABELS)
    loss, parts = macer_loss(logits, y, SIGMA, lbd, GAMMA, BETA)
    ref, cls, rob, cases = _reference(LOGITS, LABELS, SIGMA, lbd, GAMMA, BETA)
    # the batch exercises every branch of the mask
    assert cases == ["hinge", "misclassified", "beyond", "non-finite", "hinge", "hinge"]
    assert loss.item() == pytest.approx(ref, rel=1e-10)
    assert parts["loss_cls"].item() == pytest.approx(cls, rel=1e-10)
    assert parts["loss_rob"].item() == pytest.approx(rob, rel=1e-10) and rob > 0
    assert parts["frac_hinge"].item() == pytest.approx(3 / 6)


def test_beta_only_in_the_robustness_term():
    logits, y = torch.tensor(LOGITS, dtype=torch.float64), torch.tensor(LABELS)
    for beta in (1.0, 4.0):
        _, parts = macer_loss(logits, y, SIGMA, 1.0, GAMMA, beta)
        _, cls, rob, _ = _reference(LOGITS, LABELS, SIGMA, 1.0, GAMMA, beta)
        assert parts["loss_cls"].item() == pytest.approx(cls, rel=1e-10)
        assert parts["loss_rob"].item() == pytest.approx(rob, rel=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gradient_is_finite_and_only_from_kept_examples(dtype):
    y = torch.tensor(LABELS)
    grads = []
    for lbd in (0.0, 1.0):
        logits = torch.tensor(LOGITS, dtype=dtype, requires_grad=True)
        macer_loss(logits, y, SIGMA, lbd, GAMMA, BETA)[0].backward()
        assert torch.isfinite(logits.grad).all()
        grads.append(logits.grad)
    rob_grad = (grads[1] - grads[0]).abs().sum((1, 2))
    assert (rob_grad[[1, 2, 3]] == 0).all() and (rob_grad[[0, 4, 5]] > 0).all()


def test_deferred_lambda_waits_for_the_first_lr_drop():
    method = create_method("macer", lbd=5.0, deferred=True, num_noise=2)
    g = torch.Generator()
    assert [method.effective_lbd(StepContext(g, epoch=e, lr_drop_epoch=3)) for e in range(5)] == [0, 0, 0, 5, 5]
    assert method.effective_lbd(StepContext(g, epoch=10, lr_drop_epoch=None)) == 0.0
    plain = create_method("macer", lbd=5.0, num_noise=2)
    assert plain.effective_lbd(StepContext(g, epoch=0, lr_drop_epoch=3)) == 5.0
    # the loss before the drop is the lambda = 0 loss, after it the lambda = 5 loss
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3)).double()
    x, yb = torch.rand(4, 1, 3, 4, dtype=torch.float64), torch.tensor([0, 1, 2, 0])
    batch = Batch(x, yb, torch.arange(4))
    noise = torch.randn((8, 1, 3, 4), generator=torch.Generator().manual_seed(9), dtype=torch.float64) * 0.25
    logits = model(x.repeat_interleave(2, 0) + noise).reshape(4, 2, 3)
    for epoch, lbd in ((2, 0.0), (3, 5.0)):
        ctx = StepContext(torch.Generator().manual_seed(9), epoch=epoch, lr_drop_epoch=3)
        loss, _ = method.loss(model, batch, ctx)
        assert loss.item() == pytest.approx(macer_loss(logits, yb, 0.25, lbd, 8.0, 16.0)[0].item(), rel=1e-12)


@pytest.mark.parametrize("hp, message", [
    ({"num_noise": 0}, "num_noise must be >= 1 for macer, got 0"),
    ({"lbd": -1.0}, "lbd must be a finite number >= 0 for macer"),
    ({"gamma": -8.0}, "gamma must be a finite number >= 0 for macer"),
    ({"beta": 0.0}, "beta must be > 0 for macer"),
    ({"beta": float("inf")}, "beta must be a finite number"),
])
def test_bad_hyperparameters(hp, message):
    with pytest.raises(RsmoothError, match=message):
        create_method("macer", **hp)


def test_defaults():
    m = create_method("macer")
    assert (m.num_noise, m.lbd, m.gamma, m.beta, m.deferred, m.num_chunks) == (16, 12.0, 8.0, 16.0, False, 1)


@pytest.mark.slow
def test_cli_train_and_certify(tmp_path):
    assert main(["train", "--dataset", "digits", "--method", "macer", "--num-noise", "2", "--deferred",
                 "--lr-step", "1", "--epochs", "2", "--batch-size", "128", "--out", str(tmp_path / "r")]) == 0
    assert main(["certify", "--checkpoint", str(tmp_path / "r"), "--n", "200", "--max", "3",
                 "--out", str(tmp_path / "c.tsv")]) == 0
    assert len((tmp_path / "c.tsv").read_text().splitlines()) == 4


@pytest.mark.slow
def test_resume_is_bit_identical(check_resume):
    config = TrainConfig(dataset="digits", method="macer", epochs=2, batch_size=128, lr=0.05, lr_step=1,
                         lr_timing="cohen", seed=2, hparams={"sigma": 0.25, "num_noise": 2, "lbd": 4.0, "deferred": True})
    full, _ = check_resume(config)
    # deferred: lambda = 0 in epoch 0 (loss = L_cls), lambda = 4 after the drop at epoch 1
    h0, h1 = full["history"]
    assert h0["loss"] == pytest.approx(h0["loss_cls"], rel=1e-6)
    assert h1["loss"] == pytest.approx(h1["loss_cls"] + 4.0 * h1["loss_rob"], rel=1e-4) and h1["loss_rob"] > 0
