"""CAT-RS, both versions (papers/000 Algorithm 1; papers/001 eq. 7, 8, 10; SPEC.md 2): pieces, loss, CLI."""
import math

import numpy as np
import pytest
import torch
from scipy import stats
from torch import nn

from rsmooth import RsmoothError
from rsmooth.cli import build_parser, main
from rsmooth.engine import TrainConfig, read_checkpoint, train
from rsmooth.methods import METHODS, Batch, StepContext, create_method, hyperparameters
from rsmooth.methods.catrs import bottom_k_loss, catrs_loss, kl_to_target, sample_k_plus

QUIET = dict(progress=False, log=lambda s: None)




# -- independent reference computations: float64, explicit loops --------------------------------

def _log_softmax_row(row):
    """[K] tensor -> list of K scalar tensors (differentiable)."""
    mx = max(float(v.detach()) for v in row)
    logz = mx + torch.log(sum(torch.exp(v - mx) for v in row))
    return [v - logz for v in row]


def _kl_row(target, logits_row):
    """KL(target || softmax(logits_row)) with 0 log 0 = 0."""
    lp = _log_softmax_row(logits_row)
    return sum(t * (math.log(t) - lp[k]) for k, t in enumerate([float(v) for v in target]) if t > 0)


def _ce_row(logits_row, y):
    return -_log_softmax_row(logits_row)[int(y)]


def _renorm_row(ds, d, mode):
    a, b = ds.flatten().tolist(), d.flatten().tolist()
    n = len(a)
    mu_a, mu_b = sum(a) / n, sum(b) / n
    if mode == "rms":
        s_a, s_b = math.sqrt(sum(v * v for v in a) / n), math.sqrt(sum(v * v for v in b) / n)
    else:
        s_a = math.sqrt(sum((v - mu_a) ** 2 for v in a) / n)
        s_b = math.sqrt(sum((v - mu_b) ** 2 for v in b) / n)
    return torch.tensor([(v - mu_a) / s_a * s_b + mu_b for v in a], dtype=torch.float64).reshape(d.shape)


def _worst_noise(model, x_row, d, objective, eps, steps, mode):
    """One noise: T steps of 2 eps / T along g / ||g||, projection of d* - d to the ball, renorm."""
    ds = d.clone()
    for _ in range(steps):
        ds = ds.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(objective(model((x_row + ds)[None])[0]), [ds])
        norm = math.sqrt(sum(v * v for v in g.flatten().tolist()))
        eta = ds.detach() + (2 * eps / steps) * g / norm - d
        n = math.sqrt(sum(v * v for v in eta.flatten().tolist()))
        if n > eps:
            eta = eta * (eps / n)
        ds = _renorm_row(d + eta, d, mode)
    return ds.detach()


def _reference_loss(model, x, y, targets, seed, sigma, cfg, version, epoch=0):
    """papers/000 Algorithm 1 (version 'catrs', the authors' code's choices) or papers/001
    Algorithm 1 ('v1'), one image at a time.  Draw order: the B*M noises, then B x M uniforms."""
    B, M = x.shape[0], cfg.get("num_noise", 4)
    lbd, low, high = cfg.get("lbd", 1.0), cfg.get("low", "bottom-k"), cfg.get("high", "max")
    use_mask, steps, eps = cfg.get("mask", True), cfg.get("num_steps", 4), cfg.get("eps", 1.0)
    double = cfg.get("eps_double_epoch", 0)
    if double and epoch >= double:
        eps = 2 * eps
    mode = cfg.get("renorm", "std" if version == "v1" else "rms")
    g = torch.Generator().manual_seed(seed)
    noises = torch.randn((B * M,) + tuple(x.shape[1:]), generator=g, dtype=torch.float64) * sigma
    u = torch.rand((B, M), generator=g, dtype=torch.float64)
    total = 0.0
    model.train()
    for b in range(B):
        logits = [model((x[b] + noises[b * M + i])[None])[0] for i in range(M)]
        ce = [_ce_row(lg, y[b]) for lg in logits]
        p_hat = sum(1.0 for lg in logits if int(lg.argmax()) == int(y[b])) / M
        prob = float(targets[b, int(y[b])]) if cfg.get("confidence_mask") else p_hat
        k_plus = max(1, sum(1 for i in range(M) if float(u[b, i]) < prob))
        order = sorted(range(M), key=lambda i: float(ce[i].detach()))
        if low == "bottom-k":
            l_low = sum(ce[order[j]] for j in range(k_plus))
            if version == "v1":
                for j in range(k_plus, M):
                    v = ce[order[j]] + math.log(cfg.get("p0", 0.2))
                    l_low = l_low + (v if float(v.detach()) > 0 else 0.0)
            l_low = l_low / M
        elif low == "gaussian":
            l_low = sum(ce) / M
        else:
            l_low = 0.0
        l_high = 0.0
        if high != "none":
            if version == "v1":
                objective = lambda lg: _ce_row(lg, y[b])  # noqa: E731
            else:
                target = cfg.get("target", "consistency")
                if target == "consistency":
                    t = targets[b].tolist()
                elif target == "smoothed":  # F_hat(x), detached
                    probs = [[math.exp(float(v)) for v in _log_softmax_row(lg.detach())] for lg in logits]
                    t = [sum(p[k] for p in probs) / M for k in range(len(probs[0]))]
                else:
                    t = [1.0 if k == int(y[b]) else 0.0 for k in range(logits[0].shape[0])]
                objective = lambda lg, t=t: _kl_row(t, lg)  # noqa: E731
            model.eval()
            for p in model.parameters():
                p.requires_grad_(False)
            worst = [_worst_noise(model, x[b], noises[b * M + i], objective, eps, steps, mode) for i in range(M)]
            model.train()
            for p in model.parameters():
                p.requires_grad_(True)
            terms = [objective(model((x[b] + w)[None])[0]) for w in worst]
            if high == "max":
                l_high = terms[max(range(M), key=lambda i: float(terms[i].detach()))]
            else:
                l_high = sum(terms) / M
            if use_mask:
                gate = (k_plus == M) if version == "catrs" else (p_hat == 1.0)
                l_high = l_high * (1.0 if gate else 0.0)
        total = total + l_low + lbd * l_high
    return total / B


def _net(seed=0, k=5):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(12, 9), nn.Tanh(), nn.Linear(9, k)).double()


def _data(seed=0, B=4, k=5):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(B, 1, 3, 4, generator=g, dtype=torch.float64)
    with torch.no_grad():
        pred = _net(k=k)(x).argmax(1)
    y = torch.randint(0, k, (B,), generator=g)
    y[: B // 2] = pred[: B // 2]  # half the images are classified correctly: masks on and off
    targets = torch.softmax(3 * torch.randn(B, k, generator=g, dtype=torch.float64), 1)
    targets[1, 0] = 0.0
    targets[1] /= targets[1].sum()
    return x, y, targets


# -- K ~ Bin(M, p), K+ = max(K, 1) --------------------------------------------------------------

@pytest.mark.parametrize("m", [1, 4])
def test_k_plus_is_a_clamped_binomial(m):
    n = 40_000
    g = torch.Generator().manual_seed(0)
    for p in (0.0, 0.3, 0.75, 1.0):
        k = sample_k_plus(torch.full((n,), p, dtype=torch.float64), m, g)
        assert k.dtype == torch.int64 and int(k.min()) >= 1 and int(k.max()) <= m
        pmf = stats.binom.pmf(np.arange(m + 1), m, p)
        expect = np.array([0.0, pmf[0] + pmf[1]] + list(pmf[2:]))      # P(K+ = j), j = 0..m
        freq = np.bincount(k.numpy(), minlength=m + 1) / n
        assert np.abs(freq - expect).max() < 0.015
        # E[K+] = M p + P(K = 0); the unclamped mean is M p
        assert abs(float(k.double().mean()) - (m * p + (1 - p) ** m)) < 0.03
        if p in (0.0, 1.0):
            assert bool((k == (1 if p == 0 else m)).all())


def test_k_plus_comes_from_the_generator():
    p = torch.rand(50, generator=torch.Generator().manual_seed(1))
    a = sample_k_plus(p, 4, torch.Generator().manual_seed(7))
    b = sample_k_plus(p, 4, torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


# -- pure losses ----------------------------------------------------------------------------------

def _ref_bottom_k(ce, k_plus, p0=None):
    out = []
    for b in range(ce.shape[0]):
        row = sorted(ce[b].tolist())
        m = len(row)
        s = sum(row[: int(k_plus[b])])
        if p0 is not None:
            s += sum(max(0.0, v + math.log(p0)) for v in row[int(k_plus[b]):])
        out.append(s / m)  # divided by M, not K+
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("p0", [None, 0.2, 0.05, 1.0])
def test_bottom_k_loss_by_loops(p0):
    g = torch.Generator().manual_seed(2)
    ce = 3 * torch.rand(6, 5, generator=g, dtype=torch.float64)
    k_plus = torch.tensor([1, 2, 3, 4, 5, 1])  # K+ = 1 (a clamped K = 0) ... K+ = M
    got = bottom_k_loss(ce, k_plus, p0)
    assert torch.allclose(got, _ref_bottom_k(ce, k_plus, p0), atol=1e-12)
    if p0 == 1.0:  # papers/001: p0 -> 1 is Gaussian training
        assert torch.allclose(got, ce.mean(1), atol=1e-12)
    if p0 is None:  # K+ = M: the mean CE
        assert torch.allclose(got[4], ce[4].mean())
    # K = 0 clamped to 1: the smallest CE over M
    k0 = sample_k_plus(torch.zeros(6, dtype=torch.float64), 5, torch.Generator().manual_seed(0))
    assert torch.allclose(bottom_k_loss(ce, k0), ce.min(1).values / 5)


def test_kl_direction_is_target_first():
    g = torch.Generator().manual_seed(3)
    logits = 2 * torch.randn(4, 6, generator=g, dtype=torch.float64)
    t = torch.softmax(torch.randn(4, 6, generator=g, dtype=torch.float64), 1)
    t[0] = torch.tensor([0.0, 0.5, 0.5, 0.0, 0.0, 0.0], dtype=torch.float64)
    got = kl_to_target(logits, t)
    for r in range(4):
        assert abs(float(got[r]) - float(_kl_row(t[r].tolist(), logits[r]))) < 1e-12
    # not the reverse KL(F || t) that papers/000 Algorithm 1 writes
    q = torch.softmax(logits[1:], 1)
    reverse = (q * (q.log() - t[1:].log())).sum(1)
    assert not torch.allclose(got[1:], reverse, atol=1e-3)
    # a one-hot target gives the cross-entropy
    y = torch.tensor([2, 0, 5, 1])
    one_hot = torch.nn.functional.one_hot(y, 6).double()
    assert torch.allclose(kl_to_target(logits, one_hot),
                          torch.nn.functional.cross_entropy(logits, y, reduction="none"), atol=1e-12)


@pytest.mark.parametrize("low", ["bottom-k", "gaussian", "none"])
@pytest.mark.parametrize("high", ["max", "mean", "none"])
@pytest.mark.parametrize("masked", [True, False])
def test_catrs_loss_by_loops(low, high, masked):
    g = torch.Generator().manual_seed(4)
    B, M = 5, 4
    ce = 2 * torch.rand(B, M, generator=g, dtype=torch.float64)
    terms = torch.rand(B, M, generator=g, dtype=torch.float64)
    k_plus = torch.tensor([1, 4, 2, 4, 3])
    mask = (k_plus == M) if masked else None
    lbd = 0.7
    loss, parts = catrs_loss(ce, k_plus, None if high == "none" else terms, mask, lbd=lbd, low=low,
                             high=high, p0=0.1)
    ref = 0.0
    for b in range(B):
        row = sorted(ce[b].tolist())
        if low == "bottom-k":
            lo = (sum(row[: int(k_plus[b])]) + sum(max(0.0, v + math.log(0.1)) for v in row[int(k_plus[b]):])) / M
        elif low == "gaussian":
            lo = sum(row) / M
        else:
            lo = 0.0
        hi = 0.0
        if high != "none":
            hi = max(terms[b].tolist()) if high == "max" else sum(terms[b].tolist()) / M
            if masked:
                hi *= 1.0 if int(k_plus[b]) == M else 0.0
        ref += lo + lbd * hi
    assert abs(float(loss) - ref / B) < 1e-12
    assert "loss_low" in parts and (("mask_frac" in parts) == (high != "none"))


def test_average_and_max_differ_only_in_the_reduction():
    terms = torch.tensor([[0.1, 0.9, 0.2, 0.4]], dtype=torch.float64)
    ce = torch.zeros(1, 4, dtype=torch.float64)
    k = torch.tensor([4])
    mx, _ = catrs_loss(ce, k, terms, None, lbd=1.0, low="none", high="max")
    avg, _ = catrs_loss(ce, k, terms, None, lbd=1.0, low="none", high="mean")
    assert float(mx) == pytest.approx(0.9) and float(avg) == pytest.approx(0.4)


# -- the methods against the explicit reference ----------------------------------------------------

CASES = [
    ("catrs", {}, 0.5),
    ("catrs", {}, 0.05),
    ("catrs", {"confidence_mask": True}, 0.5),
    ("catrs", {"target": "smoothed", "lbd": 2.0}, 0.5),
    ("catrs", {"target": "hard", "high": "mean", "mask": False}, 0.5),
    ("catrs", {"low": "gaussian", "renorm": "std", "num_steps": 2}, 0.5),
    ("catrs", {"low": "none", "mask": False, "eps": 0.5}, 0.5),
    ("catrs", {"high": "none"}, 0.5),
    ("catrs", {"num_noise": 1}, 0.5),
    ("catrs-v1", {}, 0.5),
    ("catrs-v1", {}, 0.05),
    ("catrs-v1", {"high": "mean", "p0": 0.05, "renorm": "rms"}, 0.5),
    ("catrs-v1", {"mask": False, "num_noise": 3}, 0.5),
]


@pytest.mark.parametrize("name,cfg,sigma", CASES)
def test_method_loss_matches_reference(name, cfg, sigma):
    x, y, targets = _data()
    method = create_method(name, sigma=sigma, **cfg)
    net = _net()
    batch = Batch(x, y, torch.arange(len(y)), {"targets": targets} if name == "catrs" else {})
    loss, st = method.loss(net, batch, StepContext(torch.Generator().manual_seed(11)))
    grads = torch.autograd.grad(loss, list(net.parameters()))
    ref_net = _net()
    ref = _reference_loss(ref_net, x, y, targets, 11, sigma, cfg, "v1" if name == "catrs-v1" else "catrs")
    ref_grads = torch.autograd.grad(ref, list(ref_net.parameters()))
    assert float(loss.detach()) == pytest.approx(float(ref.detach()), abs=1e-7)
    for a, b in zip(grads, ref_grads):
        assert torch.allclose(a, b, atol=1e-6)
    assert net.training and all(p.requires_grad for p in net.parameters())
    if cfg.get("high") != "none":
        assert 0 <= float(st["mask_frac"]) <= 1


def test_masks_of_the_two_versions():
    """catrs gates L_high by 1[K+ = M], catrs-v1 by 1[p_hat = 1]."""
    k_plus = torch.tensor([4, 3, 1, 4, 2, 4])
    p_hat = torch.tensor([1.0, 1.0, 0.0, 0.75, 0.25, 1.0], dtype=torch.float64)
    assert create_method("catrs").high_mask(p_hat, k_plus).tolist() == [True, False, False, True, False, True]
    assert create_method("catrs-v1").high_mask(p_hat, k_plus).tolist() == [True, True, False, False, False, True]


def test_eps_doubling_by_epoch():
    x, y, targets = _data()
    m = create_method("catrs", eps_double_epoch=3)
    assert [m.current_eps(StepContext(torch.Generator(), epoch=e, num_epochs=6)) for e in range(6)] == \
        [1.0, 1.0, 1.0, 2.0, 2.0, 2.0]
    assert create_method("catrs").current_eps(StepContext(torch.Generator(), epoch=99)) == 1.0
    cfg = {"eps_double_epoch": 2, "eps": 0.4, "mask": False}
    loss, _ = create_method("catrs", sigma=0.5, **cfg).loss(
        _net(), Batch(x, y, torch.arange(len(y)), {"targets": targets}),
        StepContext(torch.Generator().manual_seed(5), epoch=2, num_epochs=3))
    ref = _reference_loss(_net(), x, y, targets, 5, 0.5, cfg, "catrs", epoch=2)
    undoubled = _reference_loss(_net(), x, y, targets, 5, 0.5, {"eps": 0.4, "mask": False}, "catrs")
    assert float(loss.detach()) == pytest.approx(float(ref.detach()), abs=1e-7)
    assert float(ref.detach()) != pytest.approx(float(undoubled.detach()), abs=1e-4)


@pytest.mark.parametrize("high,passes", [("max", 2), ("none", 1)])
def test_train_mode_forward_passes(high, passes):
    """The Gaussian and the worst-case copies each go through one train-mode forward; the attack
    (eval mode) does not touch BatchNorm statistics."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 5)).double()
    x, y, targets = _data()
    create_method("catrs", high=high).loss(net, Batch(x, y, torch.arange(len(y)), {"targets": targets}),
                                           StepContext(torch.Generator().manual_seed(0)))
    assert int(net[2].num_batches_tracked) == passes


def test_requires_depends_on_the_configuration():
    assert create_method("catrs").requires == ("targets",)
    assert create_method("catrs", target="hard").requires == ()
    assert create_method("catrs", target="smoothed").requires == ()
    assert create_method("catrs", target="smoothed", confidence_mask=True).requires == ("targets",)
    assert create_method("catrs", high="none").requires == ()
    assert create_method("catrs-v1").requires == ()


@pytest.mark.parametrize("name,hp,msg", [
    ("catrs", {"num_noise": 0}, "num_noise must be >= 1"),
    ("catrs-v1", {"num_noise": 0}, "num_noise must be >= 1"),
    ("catrs", {"eps": -0.5}, "eps must be >= 0"),
    ("catrs", {"eps": float("nan")}, "eps must be >= 0"),
    ("catrs", {"num_steps": 0}, "num_steps must be >= 1"),
    ("catrs", {"lbd": -1.0}, "lbd must be >= 0"),
    ("catrs-v1", {"lbd": -1.0}, "lbd must be >= 0"),
    ("catrs-v1", {"p0": 0.0}, r"p0 must be in \(0, 1\]"),
    ("catrs-v1", {"p0": 1.5}, r"p0 must be in \(0, 1\]"),
    ("catrs", {"low": "top-k"}, "low must be one of bottom-k, gaussian, none"),
    ("catrs", {"high": "min"}, "high must be one of max, mean, none"),
    ("catrs", {"target": "soft"}, "target must be one of consistency, smoothed, hard"),
    ("catrs", {"renorm": "l2"}, "renorm must be one of rms, std"),
    ("catrs", {"low": "none", "high": "none"}, "has no loss"),
    ("catrs", {"eps_double_epoch": -1}, "eps_double_epoch must be >= 0"),
    ("catrs", {"p0": 0.5}, "has no hyperparameter p0"),
])
def test_bad_hyperparameters(name, hp, msg):
    with pytest.raises(RsmoothError, match=msg) as e:
        create_method(name, **hp)
    assert "\n" not in str(e.value)


def test_missing_targets_is_an_error(tmp_path):
    x, y, _ = _data()
    with pytest.raises(RsmoothError, match="pass --targets FILE"):
        create_method("catrs").loss(_net(), Batch(x, y, torch.arange(len(y))), StepContext(torch.Generator()))
    with pytest.raises(RsmoothError, match="pass --targets FILE"):
        create_method("catrs", target="hard", confidence_mask=True).loss(
            _net(), Batch(x, y, torch.arange(len(y))), StepContext(torch.Generator()))
    with pytest.raises(RsmoothError, match="needs --targets FILE"):
        train(TrainConfig(dataset="digits", method="catrs", epochs=1), tmp_path / "r", **QUIET)


def test_cli_flags_and_shared_field_types():
    text = build_parser()._subparsers._group_actions[0].choices["train"].format_help()
    for flag in ("--low", "--high", "--mask", "--no-mask", "--target", "--renorm", "--p0",
                 "--confidence-mask", "--eps-double-epoch", "--num-noise", "--num-steps", "--eps", "--lbd"):
        assert flag in text
    types = {}
    for name in METHODS.names():
        for f in hyperparameters(METHODS.get(name)):
            t = f.type if isinstance(f.type, str) else f.type.__name__
            assert types.setdefault(f.name, t) == t, f"{f.name} is {t} in {name} but {types[f.name]} elsewhere"
    d = create_method("catrs").hparams()
    assert (d["num_noise"], d["num_steps"], d["eps"], d["lbd"], d["renorm"]) == (4, 4, 1.0, 1.0, "rms")
    d = create_method("catrs-v1").hparams()
    assert (d["p0"], d["lbd"], d["renorm"]) == (0.2, 1.0, "std")


# -- end to end on digits ------------------------------------------------------------------------

E2E_HPARAMS = {"num_noise": 2, "num_steps": 1, "eps_double_epoch": 1}  # small, and eps doubles at epoch 1


@pytest.fixture(scope="module")
def catrs_run(tmp_path_factory):
    """Gaussian model (2 epochs) -> targets (20 noises) -> 'rsmooth train --method catrs' (2 epochs)."""
    root = tmp_path_factory.mktemp("catrs")
    assert main(["train", "--dataset", "digits", "--epochs", "2", "--batch-size", "128",
                 "--out", str(root / "gauss")]) == 0
    assert main(["targets", "--checkpoint", str(root / "gauss"), "--num-samples", "20",
                 "--out", str(root / "t.npy")]) == 0
    assert main(["train", "--dataset", "digits", "--method", "catrs", "--targets", str(root / "t.npy"),
                 "--epochs", "2", "--batch-size", "128", "--num-noise", "2", "--num-steps", "1",
                 "--eps-double-epoch", "1", "--out", str(root / "r")]) == 0
    return root


@pytest.mark.slow
def test_cli_catrs_train_then_certify(catrs_run, tmp_path):
    assert main(["certify", "--checkpoint", str(catrs_run / "r"), "--n", "200", "--max", "3",
                 "--out", str(tmp_path / "c.tsv")]) == 0
    assert len((tmp_path / "c.tsv").read_text().splitlines()) == 4
    ck = read_checkpoint(catrs_run / "r" / "checkpoint.pt")
    assert ck["method"] == "catrs" and ck["config"]["targets"] == str(catrs_run / "t.npy")
    assert {k: ck["config"]["hparams"][k] for k in E2E_HPARAMS} == E2E_HPARAMS
    assert all(math.isfinite(h["loss_high"]) and 0 <= h["mask_frac"] <= 1 for h in ck["history"])


@pytest.mark.slow
def test_catrs_resume_is_bit_identical(catrs_run, check_resume):
    """Stopped after epoch 1 and resumed: the same weights as the uninterrupted CLI run."""
    cfg = TrainConfig(dataset="digits", method="catrs", epochs=2, batch_size=128,
                      targets=str(catrs_run / "t.npy"), hparams=dict(E2E_HPARAMS))
    check_resume(cfg, catrs_run / "r")


@pytest.mark.slow
def test_cli_catrs_v1_without_targets(tmp_path):
    assert main(["train", "--dataset", "digits", "--method", "catrs-v1", "--p0", "0.1", "--no-mask",
                 "--epochs", "2", "--batch-size", "128", "--num-noise", "2", "--num-steps", "1",
                 "--out", str(tmp_path / "r")]) == 0
    assert main(["certify", "--checkpoint", str(tmp_path / "r"), "--n", "200", "--max", "3",
                 "--out", str(tmp_path / "c.tsv")]) == 0
