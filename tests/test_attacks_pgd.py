"""The shared attack primitives, PGD and DDN on the soft-smoothed classifier (SPEC.md 2, SmoothAdv)."""
import math

import pytest
import torch
from torch import nn

from rsmooth import RsmoothError
from rsmooth.attacks import (ddn_smoothed_input, ddn_step_sizes, l2_normalize, pgd_smoothed_input,
                             project_l2, smoothed_log_prob, smoothed_vote)
from rsmooth.attacks.ddn import quantize_toward_zero

B, M, K, SHAPE = 5, 3, 4, (1, 3, 3)


def _linear(seed=0, bn=False):
    torch.manual_seed(seed)
    layers = [nn.Flatten(), nn.Linear(9, K)]
    if bn:
        layers.append(nn.BatchNorm1d(K))
    return nn.Sequential(*layers)


def _data(seed=1, sigma=0.25):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(B, *SHAPE, generator=g)
    y = torch.randint(0, K, (B,), generator=g)
    noises = torch.randn(B * M, *SHAPE, generator=g) * sigma
    return x, y, noises


def _attacked_loss64(model, x, y, noises):
    """-log((1/m) sum_i softmax(f(x_b + delta_{b,i}))_y) per image, float64, explicit loops."""
    lin = model[1]
    w, b0 = lin.weight.detach().double(), lin.bias.detach().double()
    out = []
    for b in range(x.shape[0]):
        total = 0.0
        for i in range(M):
            z = w @ (x[b].double() + noises[b * M + i].double()).flatten() + b0
            total += float(torch.softmax(z, 0)[y[b]])
        out.append(-math.log(total / M))
    return torch.tensor(out, dtype=torch.float64)


def _norms(t):
    return t.flatten(1).norm(dim=1)


# ---- primitives ------------------------------------------------------------------------

def test_l2_normalize_against_a_loop():
    g = torch.randn(4, 2, 3, 3, dtype=torch.float64)
    g[2] = 0
    out = l2_normalize(g)
    for b in range(4):
        n = math.sqrt(sum(float(v) ** 2 for v in g[b].flatten()))
        expected = g[b] / n if n > 0 else torch.zeros_like(g[b])
        assert torch.allclose(out[b], expected, atol=1e-12)
    assert torch.equal(out[2], torch.zeros_like(out[2]))  # zero row: no NaN


def test_project_l2_against_a_loop_and_renorm():
    d = torch.randn(6, 1, 4, 4, dtype=torch.float64) * torch.tensor([0.1, 0.5, 1, 2, 4, 0.0],
                                                                      dtype=torch.float64).view(-1, 1, 1, 1)
    eps = 1.5
    out = project_l2(d, eps)
    for b in range(6):
        n = math.sqrt(sum(float(v) ** 2 for v in d[b].flatten()))
        expected = d[b] * (eps / (n + 1e-7)) if n > eps else d[b]
        assert torch.allclose(out[b], expected, atol=1e-12)
    assert torch.allclose(out, d.renorm(p=2, dim=0, maxnorm=eps), atol=1e-12)
    assert (_norms(out) <= eps).all()
    # one radius per example
    radii = torch.tensor([0.05, 0.05, 3.0, 3.0, 1.0, 1.0], dtype=torch.float64)
    out = project_l2(d, radii)
    for b in range(6):
        assert torch.allclose(out[b], project_l2(d[b:b + 1], float(radii[b]))[0], atol=1e-12)


def test_smoothed_log_prob_against_a_loop():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(B, M, K, generator=g, dtype=torch.float64) * 5
    y = torch.randint(0, K, (B,), generator=g)
    out = smoothed_log_prob(logits, y)
    for b in range(B):
        p = sum(math.exp(logits[b, i, y[b]]) / sum(math.exp(v) for v in logits[b, i]) for i in range(M))
        assert float(out[b]) == pytest.approx(math.log(p / M), rel=1e-12)
    assert torch.equal(smoothed_log_prob(logits.reshape(B * M, K), y), out)  # image-major 2-D form
    with pytest.raises(RsmoothError):
        smoothed_log_prob(logits.reshape(B * M, K)[:-1], y)
    # no clamping: a tiny probability keeps its exact log
    assert float(smoothed_log_prob(torch.tensor([[[0.0, 100.0]]], dtype=torch.float64), torch.tensor([0]))) \
        == pytest.approx(-100.0)


def test_smoothed_vote_is_the_majority_with_ties_to_the_lowest_class():
    logits = torch.full((3, 4, 5), -1.0)
    votes = [[2, 2, 1, 3], [4, 1, 1, 4], [0, 3, 3, 3]]
    for b, row in enumerate(votes):
        for i, c in enumerate(row):
            logits[b, i, c] = 1.0
    assert smoothed_vote(logits).tolist() == [2, 1, 3]


# ---- PGD -------------------------------------------------------------------------------

@pytest.mark.parametrize("eps", [0.3, 1.0])
def test_pgd_stays_in_the_ball_and_box_and_increases_the_loss(eps):
    model = _linear()
    x, y, noises = _data()
    adv = pgd_smoothed_input(model, x, y, noises, eps=eps, num_steps=5)
    assert adv.shape == x.shape and not adv.requires_grad
    assert (_norms(adv - x) <= eps + 1e-6).all()
    assert adv.min() >= 0 and adv.max() <= 1
    before, after = _attacked_loss64(model, x, y, noises), _attacked_loss64(model, adv, y, noises)
    assert (after > before).all()


def test_pgd_one_step_is_the_formula():
    """T = 1: x' = x + project(clamp(x + 2 eps g/||g||) - x), g the float64 gradient of the objective."""
    model = _linear()
    x, y, noises = _data()
    eps = 0.4
    adv = pgd_smoothed_input(model, x, y, noises, eps=eps, num_steps=1)
    x64 = x.double().requires_grad_(True)
    lin = model[1]
    w, b0 = lin.weight.double().detach(), lin.bias.double().detach()
    total = 0
    for b in range(B):
        p = sum(torch.softmax(w @ (x64[b] + noises[b * M + i].double()).flatten() + b0, 0)[y[b]]
                for i in range(M))
        total = total - torch.log(p / M)
    (g,) = torch.autograd.grad(total, [x64])
    for b in range(B):
        step = x[b].double() + 2 * eps * g[b] / g[b].norm()
        d = step.clamp(0, 1) - x[b].double()
        n = d.norm()
        if n > eps:
            d = d * eps / (n + 1e-7)
        assert torch.allclose(adv[b].double(), x[b].double() + d, atol=1e-5)


def test_pgd_leaves_the_model_as_it_was():
    model = _linear(bn=True)
    model.train()
    x, y, noises = _data()
    model(x).sum().backward()  # some gradient the optimiser has not used yet
    grads = [p.grad.clone() for p in model.parameters()]
    params = [p.detach().clone() for p in model.parameters()]
    stats = model[2].running_mean.clone()
    pgd_smoothed_input(model, x, y, noises, eps=0.5, num_steps=3)
    assert all(m.training for m in model.modules())
    assert all(p.requires_grad for p in model.parameters())
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads))
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), params))
    assert torch.equal(model[2].running_mean, stats)  # eval mode during the attack


def test_pgd_without_a_ball():
    model = _linear()
    x, y, noises = _data()
    x = x * 0.5 + 0.25  # room to move before the clamp
    with pytest.raises(RsmoothError, match="step_size"):
        pgd_smoothed_input(model, x, y, noises, eps=None, num_steps=1)
    one = pgd_smoothed_input(model, x, y, noises, eps=None, num_steps=1, step_size=0.1)
    assert torch.allclose(_norms(one - x), torch.full((B,), 0.1), atol=1e-6)
    far = pgd_smoothed_input(model, x, y, noises, eps=None, num_steps=8, step_size=0.5)
    assert far.min() >= 0 and far.max() <= 1
    assert (_norms(far - x) > 1.0).any()  # not held to any ball
    before, after = _attacked_loss64(model, x, y, noises), _attacked_loss64(model, far, y, noises)
    assert (after > before).all()


def test_pgd_zero_gradient_random_direction_only_with_a_generator():
    const = nn.Sequential(nn.Flatten(), nn.Linear(9, K))
    nn.init.zeros_(const[1].weight)  # constant classifier: the input gradient is exactly zero
    x, y, noises = _data()
    assert torch.equal(pgd_smoothed_input(const, x, y, noises, eps=0.5, num_steps=2), x)
    g = torch.Generator().manual_seed(0)
    adv = pgd_smoothed_input(const, x, y, noises, eps=0.5, num_steps=2, generator=g)
    assert (_norms(adv - x) > 0).all() and (_norms(adv - x) <= 0.5 + 1e-6).all()
    assert adv.min() >= 0 and adv.max() <= 1


def test_pgd_errors_and_trivial_radius():
    model = _linear()
    x, y, noises = _data()
    with pytest.raises(RsmoothError, match="num_steps"):
        pgd_smoothed_input(model, x, y, noises, eps=0.5, num_steps=0)
    with pytest.raises(RsmoothError, match="eps"):
        pgd_smoothed_input(model, x, y, noises, eps=-0.1, num_steps=1)
    with pytest.raises(RsmoothError, match="noises"):
        pgd_smoothed_input(model, x, y, noises[:-1], eps=0.5, num_steps=1)
    assert torch.equal(pgd_smoothed_input(model, x, y, noises, eps=0.0, num_steps=3), x)


# ---- DDN -------------------------------------------------------------------------------

def test_ddn_step_sizes_are_the_reference_scheduler():
    delta = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([delta], lr=1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=7, eta_min=0.01)
    expected = []
    for _ in range(7):  # the reference steps the scheduler at the start of each iteration
        opt.step()
        sched.step()
        expected.append(opt.param_groups[0]["lr"])
    assert ddn_step_sizes(7) == pytest.approx(expected, rel=1e-9)
    assert ddn_step_sizes(7)[-1] == pytest.approx(0.01)


@pytest.mark.parametrize("quantize", [True, False])
def test_ddn_result_in_the_ball_and_box(quantize):
    model = _linear()
    x, y, noises = _data()
    x = (x * 255).round() / 255  # 8-bit images, as the reference assumes
    eps = 0.3
    adv = ddn_smoothed_input(model, x, y, noises, eps=eps, num_steps=20, quantize=quantize)
    assert (_norms(adv - x) <= eps + 1e-6).all()
    assert adv.min() >= 0 and adv.max() <= 1
    if quantize:
        assert torch.allclose(adv * 255, (adv * 255).round(), atol=1e-3)


def test_ddn_keeps_an_on_grid_delta_inside_the_ball_exactly():
    """A result already on the 8-bit grid and inside the eps-ball is not re-quantised (it used to
    lose a level on most pixels through trunc(k/255 - j/255))."""
    model = _linear(seed=3)
    x, y, noises = _data()
    x = (x * 255).round() / 255
    free = ddn_smoothed_input(model, x, y, noises, eps=None, num_steps=20)
    assert (_norms(free - x) > 0).any()
    assert torch.equal(ddn_smoothed_input(model, x, y, noises, eps=100.0, num_steps=20), free)


def test_quantize_toward_zero_keeps_grid_values_and_truncates_the_rest():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (4, 3, 8, 8), generator=g).float() / 255
    target = torch.randint(0, 256, x.shape, generator=g).float() / 255
    delta = target - x                                           # on the grid up to float error
    levels = delta.double() * 255
    assert (levels - levels.round()).abs().max() > 0             # ... but not exactly
    assert torch.equal(quantize_toward_zero(delta, 255.0) * 255, (delta * 255).round())
    assert ((delta * 255).trunc() != (delta * 255).round()).float().mean() > 0.3  # what trunc did

    scaled = project_l2(delta, 0.5)                              # every row is projected
    out = quantize_toward_zero(scaled, 255.0)
    assert (_norms(out) <= 0.5 + 1e-6).all()
    assert (x + out).min() >= 0 and (x + out).max() <= 1
    assert torch.allclose(out * 255, (out * 255).round(), atol=1e-4)
    assert ((out - scaled).abs() < 1 / 255).all() and (out.abs() <= scaled.abs() + 1e-5).all()


def test_ddn_projected_rows_stay_in_the_ball_and_box_on_the_grid():
    model = _linear(seed=3)
    x, y, noises = _data()
    x = (x * 255).round() / 255
    free = ddn_smoothed_input(model, x, y, noises, eps=None, num_steps=20)
    norms = _norms(free - x)
    eps = float(norms[norms > 0].min()) / 2                      # every moved row gets projected
    adv = ddn_smoothed_input(model, x, y, noises, eps=eps, num_steps=20)
    assert (_norms(adv - x) <= eps + 1e-6).all()
    assert adv.min() >= 0 and adv.max() <= 1
    assert torch.allclose(adv * 255, (adv * 255).round(), atol=1e-3)


def test_ddn_returns_the_smallest_adversarial_found_or_the_clean_input():
    model = _linear(seed=3)
    model[1].weight.data *= 20  # a confident model, so the noise rarely flips its vote
    x, y, noises = _data(sigma=0.05)
    with torch.no_grad():
        y = smoothed_vote(model(x.repeat_interleave(M, 0) + noises).reshape(B, M, K))  # correct at x
    adv = ddn_smoothed_input(model, x, y, noises, eps=None, num_steps=30, init_norm=0.5, quantize=False)
    moved = _norms(adv - x) > 0
    assert moved.any()
    with torch.no_grad():
        vote = smoothed_vote(model(adv.repeat_interleave(M, 0) + noises).reshape(B, M, K))
    assert (vote[moved] != y[moved]).all()      # what it returns is adversarial
    assert torch.equal(adv[~moved], x[~moved])  # or the clean input

    const = _linear()
    nn.init.zeros_(const[1].weight)
    with torch.no_grad():
        const[1].bias.copy_(torch.arange(K, dtype=torch.float32))  # always predicts K - 1
    y0 = torch.zeros(B, dtype=torch.long)
    const.train()
    out = ddn_smoothed_input(const, x, y0, noises, eps=0.5, num_steps=5,
                             generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, x)  # already adversarial at delta = 0: the smallest norm is 0
    assert const.training
    yk = torch.full((B,), K - 1)
    out = ddn_smoothed_input(const, x, yk, noises, eps=0.5, num_steps=5,
                             generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, x)  # nothing adversarial found: the clean input


def test_ddn_errors():
    model = _linear()
    x, y, noises = _data()
    with pytest.raises(RsmoothError, match="num_steps"):
        ddn_smoothed_input(model, x, y, noises, eps=0.5, num_steps=0)
    with pytest.raises(RsmoothError, match="eps"):
        ddn_smoothed_input(model, x, y, noises, eps=-1.0, num_steps=2)
