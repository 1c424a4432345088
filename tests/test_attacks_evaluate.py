"""SmoothAdv's evaluation attack (attacks/evaluate.py): its steps equal the reference's
``code/attacks.py`` replayed in float64 on the same noises, to 1e-12 (issue 40).

The reference below is Hadisalman/smoothing-adversarial ``code/attacks.py``
(``PGD_L2._attack_mutlinoise`` and ``DDN._attack_mutlinoise``) transcribed line by line, with
what ``code/predict.py`` passes it (``max_norm=eps``, DDN's ``init_norm`` and ``gamma``).  The
replay is in float64: the tensors the reference creates as float32 (``torch.zeros`` for delta,
``dtype=torch.float`` for DDN's norm, ``is_adv.float()``) are created in the inputs' dtype; the
callback and device arguments are dropped.  Nothing else is changed.
"""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn, optim

from rsmooth import RsmoothError
from rsmooth.attacks.evaluate import (DDN_INIT_NORM, EVAL_NUM_NOISE, EVAL_STEPS, attack_smoothed, attack_with_noises,
                                      ddn_gamma, draw_noises)
from rsmooth.smoothing.noises import make_noise

pytestmark = pytest.mark.filterwarnings("ignore:Detected call of")  # the reference's order

B, M, K, SHAPE = 3, 5, 2, (3, 4, 4)  # M odd, K = 2: no tied majority votes (torch.mode's tie rule is undocumented)


def ref_pgd(model, inputs, labels, noise, num_noise_vectors, steps, max_norm, targeted=False):
    """PGD_L2._attack_mutlinoise (self.* as arguments)."""
    if inputs.min() < 0 or inputs.max() > 1: raise ValueError('Input values should be in the [0, 1] range.')  # noqa: E701
    batch_size = labels.shape[0]
    multiplier = 1 if targeted else -1
    delta = torch.zeros((len(labels), *inputs.shape[1:]), requires_grad=True, dtype=inputs.dtype)
    optimizer = optim.SGD([delta], lr=max_norm / steps * 2)
    for i in range(steps):
        adv = inputs + delta.repeat(1, num_noise_vectors, 1, 1).view_as(inputs)
        if noise is not None:
            adv = adv + noise
        logits = model(adv)
        softmax = F.softmax(logits, dim=1)
        average_softmax = softmax.reshape(-1, num_noise_vectors, logits.shape[-1]).mean(1, keepdim=True).squeeze(1)
        logsoftmax = torch.log(average_softmax.clamp(min=1e-20))
        ce_loss = F.nll_loss(logsoftmax, labels)
        loss = multiplier * ce_loss
        optimizer.zero_grad()
        loss.backward()
        grad_norms = delta.grad.view(batch_size, -1).norm(p=2, dim=1)
        delta.grad.div_(grad_norms.view(-1, 1, 1, 1))
        if (grad_norms == 0).any():
            delta.grad[grad_norms == 0] = torch.randn_like(delta.grad[grad_norms == 0])
        optimizer.step()
        delta.data.add_(inputs[::num_noise_vectors])
        delta.data.clamp_(0, 1).sub_(inputs[::num_noise_vectors])
        delta.data.renorm_(p=2, dim=0, maxnorm=max_norm)
    return inputs + delta.repeat(1, num_noise_vectors, 1, 1).view_as(inputs)


def ref_ddn(model, inputs, labels, noise, num_noise_vectors, steps, max_norm, init_norm, gamma, quantize=True,
            levels=256, targeted=False):
    """DDN._attack_mutlinoise (self.* as arguments)."""
    if inputs.min() < 0 or inputs.max() > 1: raise ValueError('Input values should be in the [0, 1] range.')  # noqa: E701
    batch_size = labels.shape[0]
    multiplier = 1 if targeted else -1
    delta = torch.zeros((len(labels), *inputs.shape[1:]), requires_grad=True, dtype=inputs.dtype)
    norm = torch.full((batch_size,), init_norm, dtype=inputs.dtype)
    worst_norm = torch.max(inputs[::num_noise_vectors], 1 - inputs[::num_noise_vectors]).view(batch_size, -1).norm(
        p=2, dim=1)
    optimizer = optim.SGD([delta], lr=1)
    scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps, eta_min=0.01)
    best_l2 = worst_norm.clone()
    best_delta = torch.zeros_like(inputs[::num_noise_vectors])
    adv_found = torch.zeros(inputs[::num_noise_vectors].size(0), dtype=torch.uint8)
    for i in range(steps):
        scheduler.step()
        l2 = delta.data.view(batch_size, -1).norm(p=2, dim=1)
        adv = inputs + delta.repeat(1, num_noise_vectors, 1, 1).view_as(inputs)
        if noise is not None:
            adv = adv + noise
        logits = model(adv)
        pred_labels = logits.argmax(1).reshape(-1, num_noise_vectors).mode(1)[0]
        softmax = F.softmax(logits, dim=1)
        average_softmax = softmax.reshape(-1, num_noise_vectors, logits.shape[-1]).mean(1, keepdim=True).squeeze(1)
        logsoftmax = torch.log(average_softmax.clamp(min=1e-20))
        ce_loss = F.nll_loss(logsoftmax, labels)
        loss = multiplier * ce_loss
        is_adv = (pred_labels == labels) if targeted else (pred_labels != labels)
        is_smaller = l2 < best_l2
        is_both = is_adv * is_smaller
        adv_found[is_both] = 1
        best_l2[is_both] = l2[is_both]
        best_delta[is_both] = delta.data[is_both]
        optimizer.zero_grad()
        loss.backward()
        grad_norms = delta.grad.view(batch_size, -1).norm(p=2, dim=1)
        delta.grad.div_(grad_norms.view(-1, 1, 1, 1))
        if (grad_norms == 0).any():
            delta.grad[grad_norms == 0] = torch.randn_like(delta.grad[grad_norms == 0])
        optimizer.step()
        norm.mul_(1 - (2 * is_adv.to(inputs.dtype) - 1) * gamma)
        norm = torch.min(norm, worst_norm)
        delta.data.mul_((norm / delta.data.view(batch_size, -1).norm(2, 1)).view(-1, 1, 1, 1))
        delta.data.add_(inputs[::num_noise_vectors])
        if quantize:
            delta.data.mul_(levels - 1).round_().div_(levels - 1)
        delta.data.clamp_(0, 1).sub_(inputs[::num_noise_vectors])
    if max_norm is not None:
        best_delta.renorm_(p=2, dim=0, maxnorm=max_norm)
        if quantize:
            best_delta.mul_(levels - 1).round_().div_(levels - 1)
    return inputs + best_delta.repeat(1, num_noise_vectors, 1, 1).view_as(inputs)


def _model(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(SHAPE), 16), nn.Tanh(), nn.Linear(16, K)).double()
    model.eval().requires_grad_(False)  # predict.py: base_classifier.eval(); requires_grad_(.., False)
    return model


def _data(seed=1, sigma=0.5):
    """8-bit images, labels, and rsmooth's noise (Gaussian.draw) for M copies of each, float64."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (B, *SHAPE), generator=g).double() / 255
    y = torch.randint(0, K, (B,), generator=g)
    noises = draw_noises(make_noise("gaussian", sigma), (B * M, *SHAPE), g, x)
    return x, y, noises


@pytest.mark.parametrize("eps", [0.1, 0.5, 2.0])
def test_pgd_steps_equal_the_reference(eps):
    model, (x, y, noises) = _model(), _data()
    ours = attack_with_noises(model, x, y, noises, eps=eps, attack="pgd", num_steps=EVAL_STEPS)
    ref = ref_pgd(model, x.repeat_interleave(M, 0), y, noises, M, EVAL_STEPS, eps).detach()[::M]
    assert (ours - x).flatten(1).norm(dim=1).max() > 0.5 * min(eps, 1.0)  # it moved
    assert torch.allclose(ours, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("eps", [0.05, 0.5, 3.0])
def test_ddn_steps_equal_the_reference_before_the_final_projection(eps):
    """predict.py's DDN (init_norm 256/256, gamma 1 - (3/510/eps)^(1/T)); max_norm None (no final
    projection), where rsmooth rounds toward zero instead (the deviation its docstring names)."""
    model, (x, y, noises) = _model(), _data()
    gamma = ddn_gamma(eps, EVAL_STEPS)
    assert gamma == 1 - (3 / 510 / eps) ** (1 / EVAL_STEPS)
    from rsmooth.attacks import ddn_smoothed_input

    ours = ddn_smoothed_input(model, x, y, noises, eps=None, num_steps=EVAL_STEPS, gamma=gamma,
                              init_norm=DDN_INIT_NORM)
    ref = ref_ddn(model, x.repeat_interleave(M, 0), y, noises, M, EVAL_STEPS, None, DDN_INIT_NORM, gamma)[::M]
    assert torch.allclose(ours, ref, rtol=0, atol=1e-12)
    # unquantised, with the final projection: equal to the reference including the projection
    ours = ddn_smoothed_input(model, x, y, noises, eps=eps, num_steps=EVAL_STEPS, gamma=gamma,
                              init_norm=DDN_INIT_NORM, quantize=False)
    ref = ref_ddn(model, x.repeat_interleave(M, 0), y, noises, M, EVAL_STEPS, eps, DDN_INIT_NORM, gamma,
                  quantize=False)[::M]
    assert torch.allclose(ours, ref, rtol=0, atol=1e-12)


def test_ddn_found_something_to_compare():
    """The DDN parity above is not vacuous: on this model and data some image turns adversarial."""
    model, (x, y, noises) = _model(), _data()
    out = attack_with_noises(model, x, y, noises, eps=3.0, attack="ddn")
    assert (out - x).flatten(1).norm(dim=1).max() > 0


def test_evaluation_attack_with_quantisation_stays_in_the_ball_within_a_level_of_the_reference():
    model, (x, y, noises) = _model(), _data()
    eps = 0.3
    ours = attack_with_noises(model, x, y, noises, eps=eps, attack="ddn")
    ref = ref_ddn(model, x.repeat_interleave(M, 0), y, noises, M, EVAL_STEPS, eps, DDN_INIT_NORM,
                  ddn_gamma(eps, EVAL_STEPS))[::M]
    assert ((ours - x).flatten(1).norm(dim=1) <= eps + 1e-9).all()
    assert ((ours - ref).abs() <= 1 / 255 + 1e-12).all()


def test_attack_smoothed_draws_m_noises_once_from_the_generator():
    """attack_smoothed = attack_with_noises on draw_noises((B*m, ...)) from the generator, first."""
    model, (x, y, _) = _model(), _data()
    noise = make_noise("gaussian", 0.5)
    a = attack_smoothed(model, x, y, noise, eps=0.5, num_noise=M, num_steps=4,
                        generator=torch.Generator().manual_seed(7))
    g = torch.Generator().manual_seed(7)
    noises = draw_noises(noise, (B * M, *SHAPE), g, x)
    b = attack_with_noises(model, x, y, noises, eps=0.5, num_steps=4, generator=g)
    assert torch.equal(a, b)
    assert EVAL_STEPS == 20 and EVAL_NUM_NOISE == 32 and DDN_INIT_NORM == 1.0


@pytest.mark.parametrize("kw, says", [(dict(eps=0.0), "--eps"), (dict(eps=-1.0), "--eps"),
                                      (dict(eps=float("nan")), "--eps"), (dict(num_noise=0), "--num-noise"),
                                      (dict(num_steps=0), "--num-steps"), (dict(attack="fgsm"), "attack")])
def test_bad_settings_are_one_line(kw, says):
    model, (x, y, _) = _model(), _data()
    args = {**dict(eps=0.5, num_noise=2, num_steps=2), **kw}
    with pytest.raises(RsmoothError, match=says) as e:
        attack_smoothed(model, x, y, make_noise("gaussian", 0.5), **args)
    assert "\n" not in str(e.value)
