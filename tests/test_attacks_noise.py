"""PGD on the Gaussian noise (CAT-RS; papers/000 App. C.4; SPEC.md 2): re-normalisation, steps, ball."""
import math

import pytest
import torch
from torch import nn

import rsmooth.attacks.noise as noise_mod
from rsmooth import RsmoothError
from rsmooth.attacks.noise import pgd_on_noise, renormalize


# -- independent reference computations (float64, explicit loops) --------------------------------

def _ref_renorm_row(ds, d, mode):
    """One example: d* <- (d* - mu(d*)) / s(d*) * s(d) + mu(d), coordinates by a Python loop."""
    a, b = [float(v) for v in ds.flatten()], [float(v) for v in d.flatten()]
    n = len(a)
    mu_a, mu_b = sum(a) / n, sum(b) / n
    if mode == "rms":
        s_a, s_b = math.sqrt(sum(v * v for v in a) / n), math.sqrt(sum(v * v for v in b) / n)
    else:
        s_a = math.sqrt(sum((v - mu_a) ** 2 for v in a) / n)
        s_b = math.sqrt(sum((v - mu_b) ** 2 for v in b) / n)
    return torch.tensor([(v - mu_a) / s_a * s_b + mu_b for v in a], dtype=torch.float64).reshape(ds.shape)


def _ref_pgd(model, x, noises, targets, eps, steps, mode):
    """Row by row: T steps of 2 eps / T along g / ||g||, projection to the eps-ball, re-normalisation."""
    b = x.shape[0]
    m = noises.shape[0] // b
    model.eval()
    out = []
    for r in range(noises.shape[0]):
        d = noises[r].clone()
        ds = d.clone()
        for _ in range(steps):
            ds = ds.detach().requires_grad_(True)
            logits = model((x[r // m] + ds)[None])[0]
            logz = torch.logsumexp(logits, 0)
            obj = sum(t * (math.log(t) - (logits[k] - logz)) for k, t in enumerate(targets[r // m].tolist()) if t > 0)
            (g,) = torch.autograd.grad(obj, [ds])
            norm = math.sqrt(sum(float(v) ** 2 for v in g.flatten()))
            moved = ds.detach() + (2 * eps / steps) * g / norm
            eta = moved - d
            n = math.sqrt(sum(float(v) ** 2 for v in eta.flatten()))
            if n > eps:
                eta = eta * (eps / n)
            ds = _ref_renorm_row(d + eta, d, mode)
        out.append(ds.detach())
    return torch.stack(out)


def _model(seed=0, d=12, k=5):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Flatten(), nn.Linear(d, 7), nn.BatchNorm1d(7), nn.Tanh(), nn.Linear(7, k)).double()
    with torch.no_grad():  # non-trivial running statistics: eval mode is visible in the result
        net[2].running_mean.uniform_(-0.5, 0.5)
        net[2].running_var.uniform_(0.5, 2.0)
    return net.train()


def _fixture(seed=1, b=3, m=4, k=5, sigma=0.5):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(b, 1, 3, 4, generator=g, dtype=torch.float64)
    noises = sigma * torch.randn(b * m, 1, 3, 4, generator=g, dtype=torch.float64) + 0.1  # non-zero means
    targets = torch.softmax(2 * torch.randn(b, k, generator=g, dtype=torch.float64), 1)
    targets[0, 1] = 0.0  # a zero entry: 0 log 0 = 0
    targets[0] /= targets[0].sum()
    return x, noises, targets


def _kl_fn(targets, m):
    t = targets.repeat_interleave(m, 0)
    return lambda lg: torch.nn.functional.kl_div(torch.log_softmax(lg, 1), t, reduction="none").sum(1)


# -- renormalize -------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["rms", "std"])
def test_renormalize_is_the_formula(mode):
    g = torch.Generator().manual_seed(0)
    d = 0.7 * torch.randn(5, 2, 3, 3, generator=g, dtype=torch.float64) + 0.3
    ds = 1.3 * torch.randn(5, 2, 3, 3, generator=g, dtype=torch.float64) - 0.4
    got = renormalize(ds, d, mode)
    for r in range(5):
        assert torch.allclose(got[r], _ref_renorm_row(ds[r], d[r], mode), atol=1e-12)
    # both keep the mean of d; only "std" keeps its std; "rms" keeps the RMS only for a zero-mean d*
    assert torch.allclose(got.flatten(1).mean(1), d.flatten(1).mean(1), atol=1e-12)
    if mode == "std":
        assert torch.allclose(got.flatten(1).std(1), d.flatten(1).std(1), atol=1e-12)
    else:
        rms = lambda t: t.flatten(1).pow(2).mean(1).sqrt()  # noqa: E731
        assert not torch.allclose(rms(got), rms(d), atol=1e-6)
        centred = ds - ds.flatten(1).mean(1).reshape(-1, 1, 1, 1)
        zero_mean = renormalize(centred, d, "rms")
        assert torch.allclose(zero_mean.flatten(1).std(1, correction=0), rms(d), atol=1e-12)


def test_renormalize_rejects_bad_input():
    with pytest.raises(RsmoothError, match="renorm must be one of rms, std"):
        renormalize(torch.ones(2, 3), torch.ones(2, 3), "var")
    with pytest.raises(RsmoothError, match="one shape"):
        renormalize(torch.ones(2, 3), torch.ones(2, 4))


# -- the attack ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mode,steps,eps", [("rms", 4, 1.0), ("std", 3, 0.5), ("rms", 1, 2.0)])
def test_pgd_on_noise_matches_row_by_row_reference(mode, steps, eps):
    model = _model()
    x, noises, targets = _fixture()
    got = pgd_on_noise(model, x, noises, _kl_fn(targets, 4), eps=eps, num_steps=steps, renorm=mode)
    ref = _ref_pgd(_model(), x, noises, targets, eps, steps, mode)
    assert got.shape == noises.shape and not got.requires_grad
    assert torch.allclose(got, ref, atol=1e-6), (got - ref).abs().max()


def test_each_projected_step_is_in_the_ball_before_renormalisation(monkeypatch):
    seen = []
    real = noise_mod.renormalize

    def spy(d_star, d, mode="rms"):
        seen.append((d_star.detach().clone(), d.detach().clone()))
        return real(d_star, d, mode)

    monkeypatch.setattr(noise_mod, "renormalize", spy)
    model = _model()
    x, noises, targets = _fixture()
    eps = 0.3
    out = pgd_on_noise(model, x, noises, _kl_fn(targets, 4), eps=eps, num_steps=4)
    assert len(seen) == 4  # re-normalised after every step
    for d_star, d in seen:
        assert torch.equal(d, noises)
        dist = (d_star - d).flatten(1).norm(dim=1)
        assert bool((dist <= eps + 1e-9).all())
        assert bool((dist >= 0.5 * eps - 1e-9).all())  # it moved: the first step alone is 2 eps / T
    assert torch.allclose(out, real(*seen[-1], "rms"))


def test_kl_increases_and_model_state_is_restored():
    model = _model()
    x, noises, targets = _fixture(seed=3)
    fn = _kl_fn(targets, 4)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    flags = [p.requires_grad for p in model.parameters()]
    stats = model[2].running_mean.clone()
    out = pgd_on_noise(model, x, noises, fn, eps=1.0, num_steps=4)
    assert model.training and [p.requires_grad for p in model.parameters()] == flags
    assert all(bool((p.grad == 0).all()) for p in model.parameters())
    assert torch.equal(model[2].running_mean, stats)  # eval mode: no statistics update
    model.eval()
    with torch.no_grad():
        x_rep = x.repeat_interleave(4, 0)
        before, after = fn(model(x_rep + noises)), fn(model(x_rep + out))
    assert float(after.sum()) > float(before.sum())
    assert float((after > before).double().mean()) >= 0.75


def test_image_major_layout():
    """Rows b*M .. b*M+M-1 are image b's: attacking one image alone gives the same rows."""
    model = _model()
    x, noises, targets = _fixture()
    full = pgd_on_noise(model, x, noises, _kl_fn(targets, 4), eps=1.0, num_steps=2)
    one = pgd_on_noise(model, x[1:2], noises[4:8], _kl_fn(targets[1:2], 4), eps=1.0, num_steps=2)
    assert torch.allclose(full[4:8], one, atol=1e-12)


def test_zero_radius_and_errors():
    model = _model()
    x, noises, targets = _fixture()
    fn = _kl_fn(targets, 4)
    assert torch.equal(pgd_on_noise(model, x, noises, fn, eps=0.0, num_steps=3), noises)
    with pytest.raises(RsmoothError, match="num_steps must be >= 1"):
        pgd_on_noise(model, x, noises, fn, eps=1.0, num_steps=0)
    with pytest.raises(RsmoothError, match="eps must be >= 0"):
        pgd_on_noise(model, x, noises, fn, eps=-1.0, num_steps=1)
    with pytest.raises(RsmoothError, match="renorm must be one of"):
        pgd_on_noise(model, x, noises, fn, eps=1.0, num_steps=1, renorm="l2")
    with pytest.raises(RsmoothError, match="not M noises per image"):
        pgd_on_noise(model, x, noises[:5], fn, eps=1.0, num_steps=1)
    with pytest.raises(RsmoothError, match="one value per noisy copy"):
        pgd_on_noise(model, x, noises, lambda lg: fn(lg).sum(), eps=1.0, num_steps=1)
