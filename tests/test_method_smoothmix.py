"""SmoothMix (papers/003 Algorithm 1; SPEC.md 2): target, loss, lambda, adversary, schedule, CLI."""
import math

import pytest
import torch
from torch import nn

from rsmooth import RsmoothError
from rsmooth.cli import main
from rsmooth.engine import TrainConfig, read_checkpoint
from rsmooth.methods import Batch, StepContext, create_method
from rsmooth.methods.smoothmix import (mix_inputs, mixed_target, sample_lambda, smoothmix_adversary,
                                       smoothmix_loss, smoothmix_terms)



# -- reference computations: explicit loops over python floats / scalar tensors -------------------

def _softmax_row(row):
    mx = max(float(v.detach()) for v in row)
    e = [torch.exp(v - mx) for v in row]
    s = sum(e)
    return [v / s for v in e]


def _reference_loss(lc, lm, y, lam, eta, variant):
    """Algorithm 1 of papers/003 (variant 'paper') or the authors' code (variant 'code'), by loops."""
    B, m, K = lc.shape
    ce, reg = 0.0, 0.0
    for b in range(B):
        soft = [_softmax_row(lc[b, i]) for i in range(m)]
        for i in range(m):
            ce = ce - torch.log(soft[i][int(y[b])])
        p_hat = [sum(soft[i][k] for i in range(m)) / m for k in range(K)]
        top = max(range(K), key=lambda k: float(p_hat[k].detach()))
        correct = 1.0 if top == int(y[b]) else 0.0
        target = [(1 - lam[b]) * p_hat[k] + lam[b] / K for k in range(K)]
        for i in range(m):
            q = _softmax_row(lm[b, i])
            if variant == "paper":
                reg = reg - sum(target[k] * torch.log(q[k]) for k in range(K))
            else:
                reg = reg + correct * sum(target[k] * (torch.log(target[k]) - torch.log(q[k])) for k in range(K))
    return ce / (B * m) + eta * reg / (B * m)


def _fixed_logits(seed=0, B=5, m=3, K=4):
    g = torch.Generator().manual_seed(seed)
    lc = (2 * torch.randn(B, m, K, generator=g, dtype=torch.float64)).requires_grad_(True)
    lm = (2 * torch.randn(B, m, K, generator=g, dtype=torch.float64)).requires_grad_(True)
    y = torch.randint(0, K, (B,), generator=g)
    lam = torch.rand(B, generator=g, dtype=torch.float64) / 2
    return lc, lm, y, lam


# -- target and mixed inputs ----------------------------------------------------------------

def test_mixed_target_is_its_definition():
    g = torch.Generator().manual_seed(1)
    probs = torch.rand(6, 5, generator=g, dtype=torch.float64)
    probs = probs / probs.sum(1, keepdim=True)
    lam = torch.tensor([0.0, 0.5, 0.1, 0.25, 0.4, 0.33], dtype=torch.float64)
    t = mixed_target(probs, lam)
    for b in range(6):
        for k in range(5):
            assert float(t[b, k]) == pytest.approx((1 - float(lam[b])) * float(probs[b, k]) + float(lam[b]) / 5, abs=1e-15)
    assert torch.allclose(t.sum(1), torch.ones(6, dtype=torch.float64))
    assert torch.equal(mixed_target(probs, torch.zeros(6, dtype=torch.float64)), probs)


def test_mix_inputs_is_its_definition():
    g = torch.Generator().manual_seed(2)
    x, xa = torch.rand(3, 1, 2, 2, generator=g), torch.rand(3, 1, 2, 2, generator=g)
    lam = torch.tensor([0.0, 0.5, 0.2])
    out = mix_inputs(x, xa, lam)
    for b in range(3):
        assert torch.allclose(out[b], (1 - lam[b]) * x[b] + lam[b] * xa[b])
    assert torch.equal(out[0], x[0])


# -- loss -----------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["code", "paper"])
def test_loss_and_gradient_match_reference(variant):
    lc, lm, y, lam = _fixed_logits()
    # make image 0 certainly wrong under F_hat and image 1 certainly right, so the mask matters
    with torch.no_grad():
        lc[0, :, int(y[0])] -= 20.0
        lc[1, :, int(y[1])] += 20.0
    loss = smoothmix_loss(lc, lm, y, lam, eta=1.7, variant=variant)
    ref = _reference_loss(lc, lm, y, lam, 1.7, variant)
    assert float(loss.detach()) == pytest.approx(float(ref.detach()), rel=1e-12)
    g_impl = torch.autograd.grad(loss, [lc, lm])
    g_ref = torch.autograd.grad(ref, [lc, lm])
    for a, b in zip(g_impl, g_ref):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def test_target_is_not_detached_and_mask_zeroes_wrong_examples():
    lc, lm, y, lam = _fixed_logits(seed=3)
    with torch.no_grad():  # images 0-2 right under F_hat, 3-4 wrong
        lc[:3, :, :] += 8.0 * nn.functional.one_hot(y[:3], 4).unsqueeze(1)
        lc[3:, :, :] -= 8.0 * nn.functional.one_hot(y[3:], 4).unsqueeze(1)
    ce, mix, mask = smoothmix_terms(lc, lm, y, lam)
    # the regulariser alone has a gradient w.r.t. the clean logits: it flows through y_mix
    g, = torch.autograd.grad(mix, [lc], allow_unused=True)
    correct = mask.bool()
    assert correct.tolist() == [True, True, True, False, False]
    assert g is not None and g[correct].abs().sum() > 0
    assert torch.all(g[~correct] == 0)  # masked-out images contribute nothing ("code" variant)
    # the paper's form has no mask: every image's clean logits get a gradient from the CE to y_mix
    _, mix_p, _ = smoothmix_terms(lc, lm, y, lam, "paper")
    g_p, = torch.autograd.grad(mix_p, [lc])
    assert torch.all(g_p.abs().sum((1, 2)) > 0)
    # KL and cross-entropy differ by the entropy of y_mix, which has a gradient as well
    assert not torch.allclose(g_p[correct], g[correct])
    # eta = 0: pure mean cross-entropy over the m noisy copies
    with torch.no_grad():
        assert float(smoothmix_loss(lc, lm, y, lam, 0.0)) == pytest.approx(
            float(nn.functional.cross_entropy(lc.reshape(-1, 4), y.repeat_interleave(3))), rel=1e-12)


def test_kl_is_finite_when_a_target_entry_is_zero():
    lc = torch.tensor([[[0.0, 200.0, 0.0]]], requires_grad=True)  # softmax underflows to exact zeros
    lm = torch.zeros(1, 1, 3, requires_grad=True)
    loss = smoothmix_loss(lc, lm, torch.tensor([1]), torch.zeros(1), eta=1.0)
    loss.backward()
    assert math.isfinite(loss.item()) and torch.isfinite(lc.grad).all() and torch.isfinite(lm.grad).all()
    assert loss.item() == pytest.approx(math.log(3), rel=1e-5)  # KL(e_1 || uniform)


# -- lambda ---------------------------------------------------------------------------------

def test_lambda_is_uniform_on_zero_half_from_the_generator():
    lam = sample_lambda(200_000, torch.Generator().manual_seed(0))
    assert lam.shape == (200_000,) and float(lam.min()) >= 0 and float(lam.max()) <= 0.5
    assert float(lam.mean()) == pytest.approx(0.25, abs=0.002)  # std of the mean ~ 3e-4
    assert float(lam.var()) == pytest.approx(1 / 48, rel=0.02)
    assert float((lam < 0.125).float().mean()) == pytest.approx(0.25, abs=0.005)
    assert torch.equal(sample_lambda(7, torch.Generator().manual_seed(5)),
                       sample_lambda(7, torch.Generator().manual_seed(5)))


# -- adversary ------------------------------------------------------------------------------

def _bn_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                         nn.Linear(8 * 8 * 8, 10))


def _smoothed_nll(model, x, y, noise):
    """-log F_hat_y(x) per example with the given noises, eval mode, float64, by a loop over m."""
    model = model.double().eval()
    m = noise.shape[1]
    with torch.no_grad():
        p = sum(torch.softmax(model((x + noise[:, i]).double()), 1) for i in range(m)) / m
    return -torch.log(p.gather(1, y.view(-1, 1)).squeeze(1))


def test_adversary_increases_loss_stays_in_box_and_leaves_model_alone():
    model = _bn_model()
    model.train()
    g = torch.Generator().manual_seed(0)
    x = torch.rand(16, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (16,), generator=g)
    noise = 0.25 * torch.randn(16, 2, 1, 8, 8, generator=g)
    model(x)  # a BatchNorm update so running statistics are not the defaults
    before = {k: v.clone() for k, v in model.state_dict().items()}
    side, adv = smoothmix_adversary(model, x, y, noise, alpha=0.5, num_steps=4)
    assert torch.equal(side, x)  # mix_step = 0: the clean side is x
    assert float(adv.min()) >= 0 and float(adv.max()) <= 1 and not adv.requires_grad
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert model.training and all(mod.training for mod in model.modules())
    assert all(p.requires_grad and p.grad is None for p in model.parameters())
    import copy
    ref = copy.deepcopy(model)
    nll_x, nll_adv = _smoothed_nll(ref, x, y, noise), _smoothed_nll(ref, adv, y, noise)
    assert float(nll_adv.mean()) > float(nll_x.mean()) + 0.1
    assert int((nll_adv > nll_x).sum()) >= 14
    # no ball: T steps of size alpha move at most alpha * T
    assert float((adv - x).flatten(1).norm(dim=1).max()) <= 0.5 * 4 + 1e-5


def test_first_step_and_one_step_side_against_reference():
    model = _bn_model(1)
    g = torch.Generator().manual_seed(4)
    x = torch.rand(8, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (8,), generator=g)
    noise = 0.5 * torch.randn(8, 3, 1, 8, 8, generator=g)
    # one normalised-gradient step, computed independently in float64
    import copy
    ref = copy.deepcopy(model).double().eval()
    xd = x.double().requires_grad_(True)
    p = sum(torch.softmax(ref(xd + noise[:, i].double()), 1) for i in range(3)) / 3
    (-torch.log(p[torch.arange(8), y]).sum()).backward()
    gr = xd.grad
    step1 = (x.double() + 0.3 * gr / gr.flatten(1).norm(dim=1).view(-1, 1, 1, 1)).clamp(0, 1)
    side, adv1 = smoothmix_adversary(model, x, y, noise, alpha=0.3, num_steps=1)
    assert torch.allclose(adv1.double(), step1, atol=1e-5)
    # mix_step = 1: the clean side is x~(1), projected to mix_radius around x
    side, adv = smoothmix_adversary(model, x, y, noise, alpha=0.3, num_steps=3, mix_step=1, mix_radius=0.3)
    assert torch.allclose(side.double(), step1, atol=1e-5) and not torch.allclose(adv, side)
    side, _ = smoothmix_adversary(model, x, y, noise, alpha=0.3, num_steps=3, mix_step=1, mix_radius=0.1)
    norms = (side - x).flatten(1).norm(dim=1)
    assert float(norms.max()) <= 0.1 + 1e-5 and float(norms.min()) > 0.05
    assert float(side.min()) >= 0 and float(side.max()) <= 1
    # mix_step = T: the clean side is x~(T) itself (paper semantics)
    side, adv = smoothmix_adversary(model, x, y, noise, alpha=0.3, num_steps=2, mix_step=2)
    assert torch.equal(side, adv)
    # an eps ball bounds every iterate
    _, adv = smoothmix_adversary(model, x, y, noise, alpha=1.0, num_steps=3, eps=0.4)
    assert float((adv - x).flatten(1).norm(dim=1).max()) <= 0.4 + 1e-5


def test_examples_below_the_reference_floor_stop_moving():
    """F_hat_y < 1e-20 has a zero gradient in the reference attack (its clamp): no step."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    with torch.no_grad():
        model[1].bias.copy_(torch.tensor([-100.0] + [0.0] * 9))
    x = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(0)) * 0.5 + 0.25
    y = torch.tensor([0, 1])
    _, adv = smoothmix_adversary(model, x, y, torch.zeros(2, 2, 1, 8, 8), alpha=0.2, num_steps=2)
    assert torch.equal(adv[0], x[0])
    assert float((adv[1] - x[1]).norm()) == pytest.approx(0.4, rel=1e-4)  # two steps of 0.2, inside the box


# -- the method: schedule, errors, one step ----------------------------------------------------

def test_warmup_of_eta_and_one_step_radius():
    sm = create_method("smoothmix", eta=5.0, alpha_step=0.5, mix_step=1, warmup=10)
    sched = [sm.schedule(StepContext(torch.Generator(), epoch=e)) for e in (0, 4, 9, 10, 50)]
    assert [s["eta"] for s in sched] == pytest.approx([0.5, 2.5, 5.0, 5.0, 5.0])
    assert [s["mix_radius"] for s in sched] == pytest.approx([0.05, 0.25, 0.5, 0.5, 0.5])
    sm = create_method("smoothmix", eta=2.0, mix_eps=1.0, mix_step=1, warmup=4, alpha_step=8.0)
    s = sm.schedule(StepContext(torch.Generator(), epoch=1))
    assert s["eta"] == pytest.approx(1.0) and s["mix_radius"] == pytest.approx(0.5)
    s = create_method("smoothmix", eta=2.0, warmup=0).schedule(StepContext(torch.Generator(), epoch=0))
    assert s == {"eta": 2.0, "mix_radius": 0.0}


def test_defaults_and_chunks():
    sm = create_method("smoothmix")
    assert (sm.num_noise, sm.num_steps, sm.alpha_step, sm.eta, sm.mix_step, sm.eps, sm.warmup,
            sm.variant) == (4, 8, 1.0, 1.0, 0, 0.0, 10, "code")
    assert create_method("smoothmix", num_noise=2).num_chunks == 2


@pytest.mark.parametrize("kw,match", [
    (dict(num_noise=0), "num_noise must be >= 1, got 0"),
    (dict(num_steps=0), "num_steps must be >= 1, got 0"),
    (dict(alpha_step=0.0), "alpha_step must be > 0"),
    (dict(alpha_step=-1.0), "alpha_step must be > 0"),
    (dict(eta=-0.1), "eta must be >= 0"),
    (dict(mix_step=3, num_steps=2), r"mix_step must be in \[0, num_steps=2\], got 3"),
    (dict(mix_step=-1), "mix_step must be in"),
    (dict(eps=-1.0), "eps must be >= 0"),
    (dict(mix_eps=-1.0), "mix_eps must be >= 0"),
    (dict(warmup=-1), "warmup must be >= 0"),
    (dict(variant="nope"), "variant must be one of code, paper, got 'nope'"),
    (dict(sigma=0.0), "sigma must be > 0"),
])
def test_bad_hyperparameters(kw, match):
    with pytest.raises(RsmoothError, match=match) as e:
        create_method("smoothmix", **kw)
    assert "\n" not in str(e.value)


def test_method_loss_matches_an_independent_step():
    """One chunk's loss equals Algorithm 1 recomputed from the same draws, as the code batches it.

    The reference concatenates the noisy copies noise-major in two train-mode passes (clean, then
    mixed) like the authors' code; BatchNorm batch statistics do not depend on the row order.
    """
    import copy
    model = _bn_model(2)
    model.train()
    ref_model = copy.deepcopy(model)
    gx = torch.Generator().manual_seed(9)
    x, y = torch.rand(6, 1, 8, 8, generator=gx), torch.randint(0, 10, (6,), generator=gx)
    sm = create_method("smoothmix", sigma=0.5, num_noise=2, num_steps=2, alpha_step=0.5, eta=3.0,
                       mix_step=1, warmup=2)
    loss, stats = sm.loss(model, Batch(x, y, torch.arange(6)), StepContext(torch.Generator().manual_seed(11)))
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    assert set(stats) >= {"ce", "mix", "mask", "acc_noisy", "adv_norm"}
    # the draws: noise [B x m x C x H x W], then lambda [B], both from ctx.generator
    g = torch.Generator().manual_seed(11)
    noise = 0.5 * torch.randn(6, 2, 1, 8, 8, generator=g)
    side, adv = smoothmix_adversary(ref_model, x, y, noise, alpha=0.5, num_steps=2, mix_step=1,
                                    mix_radius=0.5 * 0.5)  # radius alpha * 1 warmed up by 1/2
    lam = torch.rand(6, generator=g) / 2
    xm = (1 - lam.view(-1, 1, 1, 1)) * side + lam.view(-1, 1, 1, 1) * adv

    def noise_major_pass(inp):
        out = ref_model(torch.cat([inp + noise[:, i] for i in range(2)]))  # [m*B x K]
        return out.view(2, 6, -1).transpose(0, 1).double()

    lc, lm = noise_major_pass(side), noise_major_pass(xm)
    ref = _reference_loss(lc, lm, y, lam.double(), 3.0 * 0.5, "code")  # eta warmed up by 1/2
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5)
    # both passes updated BatchNorm's running statistics identically
    assert torch.allclose(model[1].running_mean, ref_model[1].running_mean, atol=1e-6)


# -- end to end -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """A 2-epoch SmoothMix run (one-step adversary) on digits through the CLI."""
    out = tmp_path_factory.mktemp("smoothmix") / "r"
    assert main(["train", "--dataset", "digits", "--method", "smoothmix", "--epochs", "2",
                 "--batch-size", "128", "--out", str(out), "--num-noise", "2", "--num-steps", "2",
                 "--alpha-step", "0.5", "--eta", "2.0", "--warmup", "2", "--mix-step", "1"]) == 0
    return out


@pytest.mark.slow
def test_cli_train_then_certify(cli_run, tmp_path):
    ck = read_checkpoint(cli_run / "checkpoint.pt")
    hp = ck["config"]["hparams"]
    assert ck["method"] == "smoothmix" and (hp["num_noise"], hp["mix_step"], hp["variant"]) == (2, 1, "code")
    assert ck["history"][-1]["test_acc"] > 0.3  # chance is 0.1
    assert {"ce", "mix", "mask", "adv_norm"} <= set(ck["history"][-1])
    assert main(["certify", "--checkpoint", str(cli_run), "--n", "200", "--max", "3",
                 "--out", str(tmp_path / "c.tsv")]) == 0


@pytest.mark.slow
def test_resume_is_bit_identical(cli_run, check_resume):
    config = TrainConfig(**read_checkpoint(cli_run / "checkpoint.pt")["config"])  # the CLI run's
    check_resume(config, cli_run)
