"""l1 noises (issue 38 item 4): uniform and Laplace radii against rs4a's formulas evaluated
independently, their draws against scipy, training with them, and certify -> analyze saying l1."""
import json

import mpmath
import numpy as np
import pytest
import torch
from scipy import stats

from conftest import QUIET
from rsmooth.cli import main
from rsmooth.engine import TrainConfig, train
from rsmooth.engine.runconfig import conflicts
from rsmooth.errors import RsmoothError
from rsmooth.methods import StepContext, create_method
from rsmooth.report import summarize
from rsmooth.report.plots import radius_label
from rsmooth.report.tables import format_table
from rsmooth.smoothing.l1 import Laplace, Uniform, _laplace
from rsmooth.smoothing.noises import NOISES, make_noise, noise_from_spec

mpmath.mp.dps = 30
PS = [0.5, 0.6, 0.75, 0.9, 0.99, 0.999987]


def _rs4a_uniform(sigma, p):
    """rs4a Uniform: lambd = sigma / 3^-0.5, certify_l1 = 2 lambd (p - 1/2) (mpmath)."""
    lam = mpmath.mpf(sigma) / mpmath.power(3, mpmath.mpf(-0.5))
    return float(2 * lam * (mpmath.mpf(p) - mpmath.mpf("0.5")))


def _rs4a_laplace(sigma, p):
    """rs4a Laplace: lambd = sigma / 2^0.5, certify_l1 = -lambd log(2 (1 - p)) (mpmath)."""
    lam = mpmath.mpf(sigma) / mpmath.sqrt(2)
    return float(-lam * mpmath.log(2 * (1 - mpmath.mpf(p))))


@pytest.mark.parametrize("sigma", [0.12, 0.5, 1.0])
def test_one_sided_radii_are_rs4a_formulas(sigma):
    for p in PS:
        assert Uniform(sigma).radius(p) == pytest.approx(_rs4a_uniform(sigma, p), rel=1e-12, abs=1e-15)
        assert Laplace(sigma).radius(p) == pytest.approx(_rs4a_laplace(sigma, p), rel=1e-12, abs=1e-15)
    # written out by hand: sigma 0.5, p_A 0.9 -> 2 * 0.5 sqrt(3) * 0.4 and -(0.5 / sqrt(2)) log(0.2)
    assert Uniform(0.5).radius(0.9) == pytest.approx(0.692820323027551, rel=1e-13)
    assert Laplace(0.5).radius(0.9) == pytest.approx(0.569022230890437, rel=1e-13)
    arr = Uniform(sigma).radius(np.array(PS))
    assert arr.shape == (len(PS),) and isinstance(Uniform(sigma).radius(0.7), float)


def test_registry_spec_norm_and_sigma_is_the_std():
    assert {"uniform", "laplace"} <= set(NOISES.names())
    for name, cls, lam in [("uniform", Uniform, 0.5 * 3 ** 0.5), ("laplace", Laplace, 0.5 / 2 ** 0.5)]:
        noise = make_noise(name, 0.5)
        assert isinstance(noise, cls) and noise.norm == "l1" and noise.lam == pytest.approx(lam)
        assert noise_from_spec(noise.spec()) == noise and noise.describe() == f"{name} sigma=0.5 (l1)"
    assert stats.uniform(loc=-0.5 * 3 ** 0.5, scale=3 ** 0.5).std() == pytest.approx(0.5)
    assert stats.laplace(scale=0.5 / 2 ** 0.5).std() == pytest.approx(0.5)


@pytest.mark.parametrize("cls", [Uniform, Laplace])
def test_level_inverts_the_one_sided_radius(cls):
    noise = cls(0.5)
    radii = np.array([0.0, 0.1, 0.3, 0.6])
    assert np.allclose(noise.radius(noise.level(radii)), radii, atol=1e-12)
    assert noise.level(0.0) == pytest.approx(0.5)
    assert noise.radius(0.5) == pytest.approx(0.0, abs=1e-15)


def test_uniform_level_beyond_lambda_is_unreachable():
    u = Uniform(0.5)
    assert u.radius(1.0) == pytest.approx(u.lam) and u.level(2 * u.lam) == 1.0


def test_two_sided_radii():
    """Uniform: lambda (p_A - p_B) (the non-overlap argument of smoothing/l1.py); both reduce to
    the one-sided radius at p_B = 1 - p_A; Laplace's is Teng et al.'s published
    max(lambda/2 log(p_A / p_B), -lambda log(1 - p_A + p_B)) (mpmath)."""
    for cls in (Uniform, Laplace):
        noise = cls(0.5)
        for p in PS[1:-1]:
            assert noise.radius(p, 1 - p) == pytest.approx(noise.radius(p), rel=1e-12)
    u, lap = Uniform(0.5), Laplace(0.5)
    for pa, pb in [(0.6, 0.1), (0.9, 0.05), (0.4, 0.3), (0.55, 0.45)]:
        assert u.radius(pa, pb) == pytest.approx(float(mpmath.sqrt(3) * 0.5 * (mpmath.mpf(pa) - mpmath.mpf(pb))))
        teng = max(lap.lam / 2 * mpmath.log(mpmath.mpf(pa) / pb), -lap.lam * mpmath.log(1 - mpmath.mpf(pa) + pb))
        assert lap.radius(pa, pb) == pytest.approx(float(teng), rel=1e-12)


def _shift_loss(shift, h):
    """One coordinate of Laplace(0, 1) noise shifted by ``shift``: the log-likelihood ratio
    L = |x| - |x - shift| on a grid of step ``h`` and its masses under the unshifted noise."""
    n = max(int(round(2 * shift / h)), 1)
    grid = -shift + 2 * shift / n * np.arange(n + 1)
    mass = np.zeros(n + 1)
    mass[0], mass[-1] = 0.5, 0.5 * np.exp(-shift)  # x <= 0 and x >= shift
    x = (grid[1:-1] + shift) / 2  # 0 < x < shift: L = 2x - shift, density e^-x / 2, dx = dL / 2
    mass[1:-1] = np.exp(-x) / 4 * (2 * shift / n)
    return grid, mass / mass.sum()


def _np_margin(shifts, p_a, p_b, h=2e-3):
    """Neyman-Pearson: the least P'(c_A) minus the largest P'(c_B) under the shifted noise, given
    P(c_A) = p_A and P(c_B) = p_B (a brute-force evaluation on the likelihood-ratio grid)."""
    grid, mass = _shift_loss(shifts[0], h)
    for s in shifts[1:]:
        g2, m2 = _shift_loss(s, h)
        mass = np.convolve(mass, m2)
        grid = np.linspace(grid[0] + g2[0], grid[-1] + g2[-1], len(mass))
    q = mass * np.exp(grid)
    q = q / q.sum()

    def least(p):  # fill the set with the smallest likelihood ratios first
        cm = np.cumsum(mass)
        i = int(np.searchsorted(cm, p))
        return q[:i].sum() + (p - (cm[i - 1] if i else 0.0)) / mass[i] * q[i]

    return least(p_a) - (1 - least(1 - p_b))


@pytest.mark.parametrize("p_a, p_b", [(0.6, 0.1), (0.9, 0.05), (0.55, 0.3)])
def test_laplace_two_sided_radius_by_neyman_pearson(p_a, p_b):
    """Below the radius every shift tried (one coordinate, or split over two) keeps c_A ahead; the
    one-coordinate Neyman-Pearson limit, (Q(p_A) - Q(p_B)) / 2, is at or above it."""
    lap = Laplace(2 ** 0.5)  # lambda = 1
    r = lap.radius(p_a, p_b)
    for split in (1.0, 0.5, 0.3):
        shifts = [0.98 * r * split] + ([0.98 * r * (1 - split)] if split < 1 else [])
        assert _np_margin(shifts, p_a, p_b) > 0
    limit = (lap.quantile(np.float64(p_a)) - lap.quantile(np.float64(p_b))) / 2
    assert r <= limit + 1e-12 and _np_margin([1.02 * limit], p_a, p_b) < 0


@pytest.mark.parametrize("cls, dist", [(Uniform, lambda lam: stats.uniform(loc=-lam, scale=2 * lam)),
                                       (Laplace, lambda lam: stats.laplace(scale=lam))])
def test_draws_follow_the_distribution(cls, dist):
    noise = cls(0.5)
    x = torch.full((3, 4, 4), 0.25)
    out = torch.empty((2000, 3, 4, 4)).to(memory_format=torch.channels_last)
    a = noise.draw(out, x, torch.Generator().manual_seed(0))
    assert a is out and a.is_contiguous(memory_format=torch.channels_last)
    d = (a - x).flatten().double().numpy()
    assert stats.kstest(d[:20000], dist(noise.lam).cdf).pvalue > 1e-3
    assert abs(d.mean()) < 0.01 and d.std() == pytest.approx(0.5, rel=0.02) and np.isfinite(d).all()
    again = torch.empty((2000, 3, 4, 4)).to(memory_format=torch.channels_last)
    assert torch.equal(noise.draw(again, x, torch.Generator().manual_seed(0)), a)  # the generator decides
    ctx = StepContext(generator=torch.Generator().manual_seed(1))
    t = noise.like(torch.zeros(4000, 8), ctx).flatten().double().numpy()
    assert stats.kstest(t, dist(noise.lam).cdf).pvalue > 1e-3 and t.std() == pytest.approx(0.5, rel=0.03)


def test_laplace_of_the_lowest_uniform_is_finite():
    u = torch.tensor([-1.0, -0.5, 0.0, 0.5, 1 - 2 ** -23])
    v = _laplace(u, 1.0, torch.empty_like(u))
    assert torch.isfinite(v).all() and v[2] == 0
    assert v[1].item() == pytest.approx(-np.log(2)) and v[3].item() == pytest.approx(np.log(2))


def test_gaussian_training_noise_is_unchanged():
    """The Gaussian method's noise stays ctx.randn(x.shape) * sigma, draw for draw."""
    x = torch.rand(5, 1, 8, 8)
    m = create_method("gaussian", sigma=0.25)
    a = m.noise_like(x, StepContext(generator=torch.Generator().manual_seed(3)))
    b = StepContext(generator=torch.Generator().manual_seed(3)).randn(x.shape, dtype=x.dtype).mul_(0.25)
    assert torch.equal(a, b) and m.hparams() == {"sigma": 0.25, "noise": "gaussian"}
    u = create_method("consistency", sigma=0.5, noise="uniform").noise_like(x, StepContext(torch.Generator()))
    assert u.abs().max() <= 0.5 * 3 ** 0.5


@pytest.mark.parametrize("method", ["smoothadv", "macer", "catrs", "smoothmix"])
def test_gaussian_only_methods_refuse_other_noises(method):
    with pytest.raises(RsmoothError, match=f"{method} trains against Gaussian noise only.*--noise gaussian"):
        create_method(method, noise="uniform")


def test_a_checkpoint_without_noise_resumes_as_gaussian():
    old = {"method": "gaussian", "hparams": {"sigma": 0.25}}
    assert conflicts(old, TrainConfig(method="gaussian", hparams={"sigma": 0.25}), ["hparams"]) == []
    bad = conflicts(old, TrainConfig(method="gaussian", hparams={"sigma": 0.25, "noise": "uniform"}), ["hparams"])
    assert bad == [("--noise gaussian", "--noise uniform")]


@pytest.mark.parametrize("method", ["gaussian", "consistency"])
def test_training_with_uniform_noise(method, tmp_path):
    result = train(TrainConfig(dataset="digits", method=method, hparams={"sigma": 0.5, "noise": "uniform"},
                               epochs=1, train_subset=64, batch_size=32), tmp_path / method, **QUIET)
    assert np.isfinite(result.history[-1]["loss"])


def test_certify_cli_with_uniform_noise_says_l1(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--dataset", "digits", "--noise", "uniform", "--sigma", "0.5", "--epochs", "2",
                 "--train-subset", "256", "--out", str(run)]) == 0
    tsv = tmp_path / "c.tsv"
    assert main(["certify", "--checkpoint", str(run), "--n", "100", "--max", "3", "--out", str(tsv)]) == 0
    meta = json.loads((tmp_path / "c.tsv.json").read_text())
    assert (meta["noise"], meta["norm"], meta["sigma"]) == ("uniform", "l1", 0.5)  # the checkpoint's noise
    capsys.readouterr()
    assert main(["analyze", str(tsv)]) == 0
    table = capsys.readouterr().out
    assert "| ACR (l1) | l1 0.00 |" in table and "certified accuracy (%) at l1 radius r" in table
    (s,) = summarize([str(tsv)])
    assert s.norm == "l1" and radius_label([s]) == "radius (l1, [0,1] pixel units)"
    assert "$\\ell_{1}$ radius $r$" in format_table([s], fmt="latex")
    assert main(["train", "--dataset", "digits", "--method", "macer", "--noise", "uniform",
                 "--out", str(tmp_path / "m")]) != 0
    assert "macer trains against Gaussian noise only" in capsys.readouterr().err


def test_tables_of_l2_files_are_unchanged_and_mixed_norms_are_told():
    from rsmooth.report.common import FileSummary

    def summary(label, norm):
        meta = {"sigma": 0.5, **({"norm": norm} if norm else {})}
        return FileSummary(path=label, label=label, num_examples=10, acr=0.1, certified_accuracy={0.0: 0.5},
                           sigma=0.5, meta=meta)

    l2 = format_table([summary("old", None), summary("g", "l2")])
    assert l2.splitlines()[0] == "| model | sigma | examples | ACR | 0.00 |" and "Note" not in l2
    mixed = format_table([summary("g", "l2"), summary("u", "l1")])
    assert "| ACR | 0.00 |" in mixed and "different norms (l1: u; l2: g)" in mixed
    assert radius_label([summary("g", "l2")]) == "radius (l2, [0,1] pixel units)"


def test_sequential_with_uniform_noise_never_certifies_beyond_lambda():
    from rsmooth.smoothing import Decision, Smooth

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2))
    with torch.no_grad():
        model[1].weight.zero_()
        model[1].bias.copy_(torch.tensor([5.0, 0.0]))  # always class 0: p_A = 1
    s = Smooth(model, 2, Uniform(0.5))  # lambda = 0.866
    cert = s.certify_sequential(torch.rand(1, 2, 2), 10, [0.2, 0.5, 0.9], 0.001, n_max=20000,
                                generator=torch.Generator().manual_seed(0))
    assert cert.decisions == (Decision.ROBUST, Decision.ROBUST, Decision.NOT_CERTIFIABLE)
