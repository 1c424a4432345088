"""Stability training (Li et al. 2019, the Consistency authors' version): formula, gradient, training."""
import math

import pytest
import torch

from rsmooth import RsmoothError
from rsmooth.cli import main
from rsmooth.methods import Batch, StepContext, create_method
from rsmooth.methods.stability import stability_loss


def _softmax(row):
    mx = max(row)
    e = [math.exp(v - mx) for v in row]
    s = sum(e)
    return [v / s for v in e]


def _fixed(seed=0, b=4, k=5):
    g = torch.Generator().manual_seed(seed)
    clean = 2 * torch.randn(b, k, generator=g, dtype=torch.float64)
    noisy = 2 * torch.randn(b, k, generator=g, dtype=torch.float64)
    y = torch.randint(0, k, (b,), generator=g)
    return clean, noisy, y


def test_loss_matches_loops():
    clean, noisy, y = _fixed()
    loss, parts = stability_loss(clean, noisy, y, gamma=1.5)
    ce = stab = 0.0
    for zc, zn, t in zip(clean.tolist(), noisy.tolist(), y.tolist()):
        p, q = _softmax(zc), _softmax(zn)
        ce += -math.log(p[t])
        stab += -sum(p[k] * math.log(q[k]) for k in range(len(p)))   # soft CE, target softmax(f(x))
    ce, stab = ce / len(y), stab / len(y)
    assert parts["loss_ce"].item() == pytest.approx(ce, rel=1e-12)
    assert parts["loss_stab"].item() == pytest.approx(stab, rel=1e-12)
    assert loss.item() == pytest.approx(ce + 1.5 * stab, rel=1e-12)


def test_target_is_not_detached():
    clean, noisy, y = _fixed(1)
    clean.requires_grad_()
    _, parts = stability_loss(clean, noisy, y, gamma=1.0)
    g, = torch.autograd.grad(parts["loss_stab"], clean)
    assert g.abs().max() > 1e-3
    # explicit: d/dz_j of -sum_k p_k log q_k with p = softmax(z) is -p_j (log q_j - sum_k p_k log q_k)
    p, logq = torch.softmax(clean.detach(), 1), torch.log_softmax(noisy, 1)
    expected = -p * (logq - (p * logq).sum(1, keepdim=True)) / len(y)
    torch.testing.assert_close(g, expected)


def test_gamma_zero_is_clean_cross_entropy():
    clean, noisy, y = _fixed(2)
    loss, _ = stability_loss(clean, noisy, y, gamma=0.0)
    assert loss.item() == pytest.approx(torch.nn.functional.cross_entropy(clean, y).item(), rel=1e-14)


def test_method_loss_clean_and_one_noise_per_image():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 5)).double()
    x = torch.rand(3, 1, 3, 4, dtype=torch.float64)
    y = torch.tensor([1, 0, 4])
    method = create_method("stability", sigma=0.5)
    assert method.gamma == 2.0 and method.num_chunks == 1
    loss, stats = method.loss(model, Batch(x, y, torch.arange(3)), StepContext(torch.Generator().manual_seed(5)))
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 0.5
    expected, _ = stability_loss(model(x), model(x + noise), y, 2.0)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)
    assert set(stats) == {"loss_ce", "loss_stab", "acc_noisy"}


@pytest.mark.parametrize("gamma", [-1.0, float("nan")])
def test_bad_gamma(gamma):
    with pytest.raises(RsmoothError, match="gamma must be >= 0 for stability"):
        create_method("stability", gamma=gamma)


@pytest.mark.slow
def test_cli_train_and_certify(tmp_path):
    assert main(["train", "--dataset", "digits", "--method", "stability", "--stability-gamma", "1", "--epochs", "2",
                 "--batch-size", "128", "--out", str(tmp_path / "r")]) == 0
    assert main(["certify", "--checkpoint", str(tmp_path / "r"), "--n", "200", "--max", "3",
                 "--out", str(tmp_path / "c.tsv")]) == 0
    assert len((tmp_path / "c.tsv").read_text().splitlines()) == 4
