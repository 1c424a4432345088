"""Many images per forward pass (issue 23): every mode's result on an image equals certifying that
image alone with the published per-image algorithm (written out here: noise in blocks of 256 copies
from the image's generator, each block classified, Clopper-Pearson or the confidence sequences
recomputed look by look), whatever the batch size and whatever shares the passes."""
import time

import numpy as np
import pytest
import torch
from scipy.stats import beta, binom, norm
from torch import nn

from rsmooth import RsmoothError
from rsmooth.smoothing import Smooth
from rsmooth.smoothing.packing import NOISE_BLOCK
from rsmooth.smoothing.procedures import ABSTAIN, Adaptive, Certify, Predict, Sequential
from rsmooth.smoothing.sequential import (Bounds, Decision, anytime_lower, anytime_upper, check_points, decide,
                                          radius_gain, radius_of, thresholds)
from rsmooth.smoothing.tuning import Tuning, fastest

SIGMA, K = 0.5, 4


def net(channels=1):
    torch.manual_seed(3)
    model = nn.Sequential(nn.Conv2d(channels, 6, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(K))
    model(torch.zeros(1, channels, 8, 8) if channels == 1 else torch.zeros(1, channels, 5, 5))
    with torch.no_grad():
        model[-1].weight.mul_(40.0)  # confident on some images, torn on others
    return model.eval()


def images(count, shape=(1, 8, 8)):
    return torch.rand((count, *shape), generator=torch.Generator().manual_seed(1))


def gen(i):
    return torch.Generator().manual_seed(1000 + i)


# -- the per-image algorithm, written out -----------------------------------------------------

def ref_counts(model, x, num, g):
    counts = np.zeros(K, dtype=np.int64)
    for done in range(0, num, NOISE_BLOCK):
        block = min(NOISE_BLOCK, num - done)
        noise = torch.empty((block, *x.shape)).normal_(0.0, SIGMA, generator=g)
        with torch.inference_mode():
            counts += np.bincount(model(noise + x).argmax(1).numpy(), minlength=K)
    return counts


def ref_predict(model, x, g, n, alpha):
    counts = ref_counts(model, x, n, g)
    top = np.argsort(-counts, kind="stable")[:2]
    from scipy.stats import binomtest
    p = binomtest(int(counts[top[0]]), int(counts[top[0]] + counts[top[1]]), 0.5).pvalue
    return ABSTAIN if p > alpha else int(top[0])


def ref_certify(model, x, g, n0, n, alpha):
    c_a = int(np.argmax(ref_counts(model, x, n0, g)))
    n_a = int(ref_counts(model, x, n, g)[c_a])
    p = beta.ppf(alpha, n_a, n - n_a + 1) if n_a else 0.0
    return (ABSTAIN, 0.0) if p < 0.5 else (c_a, SIGMA * norm.ppf(p))


def ref_sequence(model, x, g, n0, alpha, n_max, futility, done):
    """Select c_A, then look at ceil(32 * 1.1^k) samples with the scalar bounds of each look (the
    anytime bounds alone: issue 39's ``alpha_share=1``; tests/test_alpha_split.py checks the split)."""
    c_a = int(np.argmax(ref_counts(model, x, n0, g)))
    n = n_a = 0
    lower, upper = 0.0, 1.0
    for t in check_points(n_max):
        n_a += int(ref_counts(model, x, t - n, g)[c_a])
        n = t
        upper = min(upper, float(anytime_upper(n_a, n, futility)))
        future = float(binom.ppf(1 - futility, n_max - n, upper)) if n < n_max else 0.0
        lo, projected = anytime_lower([n_a, n_a + future], [n, n_max], alpha)
        lower = max(lower, float(lo))
        bounds = Bounds(n, n_a, lower, upper, max(lower, float(projected)))
        if done(bounds):
            return c_a, bounds
    return c_a, bounds


def ref_sequential(model, x, g, radii, **kw):
    levels = thresholds(radii, SIGMA)
    c_a, b = ref_sequence(model, x, g, done=lambda b: Decision.OPEN not in decide(b, levels), **kw)
    robust = [r for r, d in zip(radii, decide(b, levels)) if d is Decision.ROBUST]
    return (c_a, max(robust), b) if robust else (ABSTAIN, 0.0, b)


def ref_adaptive(model, x, g, tol, **kw):
    c_a, b = ref_sequence(model, x, g, done=lambda b: radius_gain(b, SIGMA) <= tol, **kw)
    return (c_a, radius_of(b.lower, SIGMA), b) if b.lower > 0.5 else (ABSTAIN, 0.0, b)


SEQ = dict(n0=50, alpha=0.001, n_max=3000, futility=0.05)
PROCEDURES = {
    "predict": (Predict(700, 0.01), lambda m, x, g: ref_predict(m, x, g, 700, 0.01)),
    "certify": (Certify(50, 700, 0.001), lambda m, x, g: ref_certify(m, x, g, 50, 700, 0.001)),
    "sequential": (Sequential(50, 0.001, 3000, 0.05, (0.1, 0.25), alpha_share=1.0),
                   lambda m, x, g: ref_sequential(m, x, g, (0.1, 0.25), **SEQ)),
    "adaptive": (Adaptive(50, 0.001, 3000, 0.05, 0.05, alpha_share=1.0), lambda m, x, g: ref_adaptive(m, x, g, 0.05, **SEQ)),
}


def same(result, ref):
    """A procedure's result equals the reference's (radii to float rounding of the same formula)."""
    if isinstance(result, int):
        return result == ref
    if isinstance(result, tuple):
        return result[0] == ref[0] and result[1] == pytest.approx(ref[1], rel=1e-12, abs=0)
    pred, radius, b = ref
    return (result.prediction == pred and result.radius == pytest.approx(radius, rel=1e-12, abs=0)
            and (result.n, result.n_a, result.p_lower, result.p_upper) == (b.n, b.n_a, b.lower, b.upper))


@pytest.fixture(scope="module")
def refs():
    model, xs = net(), images(12)
    return {mode: [ref(model, xs[i], gen(i)) for i in range(len(xs))] for mode, (_, ref) in PROCEDURES.items()}


@pytest.mark.parametrize("mode", list(PROCEDURES))
@pytest.mark.parametrize("batch_size", [13, 256, 1000])
def test_packed_images_equal_each_image_alone_by_the_per_image_algorithm(refs, mode, batch_size):
    procedure, _ = PROCEDURES[mode]
    model, xs = net(), images(12)
    smooth = Smooth(model, K, SIGMA)
    got = {i: r for i, r, _ in smooth.stream(procedure, ((i, xs[i], gen(i)) for i in range(12)), batch_size)}
    assert sorted(got) == list(range(12))
    assert all(same(got[i], refs[mode][i]) for i in range(12)), (got, refs[mode])
    outcomes = {(r if isinstance(r, int) else r[0] if isinstance(r, tuple) else r.prediction) for r in got.values()}
    assert len(outcomes) >= 2  # the images are not all alike (classes and abstentions mix)


def test_the_single_image_methods_are_the_same_procedures(refs):
    model, xs = net(), images(3)
    smooth = Smooth(model, K, SIGMA)
    for i in range(3):
        assert same(smooth.predict(xs[i], 700, 0.01, 256, gen(i)), refs["predict"][i])
        assert same(smooth.certify(xs[i], 50, 700, 0.001, 64, gen(i)), refs["certify"][i])
        assert same(smooth.certify_sequential(xs[i], 50, (0.1, 0.25), 0.001, 3000, 33, gen(i), alpha_share=1.0),
                    refs["sequential"][i])
        assert same(smooth.certify_adaptive(xs[i], 50, 0.001, 0.05, 3000, 1000, gen(i), alpha_share=1.0),
                    refs["adaptive"][i])


def test_noise_does_not_depend_on_the_batch_size_for_any_image_size():
    """3 x 5 x 5 = 75 values per copy: torch's CPU normal_ draws differ when a draw is split at other
    sizes than multiples of 16 values, so blocks of 256 copies are what keeps results fixed."""
    model, xs = net(3), images(5, (3, 5, 5))
    smooth = Smooth(model, K, SIGMA)
    expected = [ref_certify(model, xs[i], gen(i), 30, 900, 0.01) for i in range(5)]
    for batch_size in (16, 100, 999):
        got = dict((i, r) for i, r, _ in smooth.stream(Certify(30, 900, 0.01), ((i, xs[i], gen(i)) for i in range(5)),
                                                       batch_size))
        assert all(same(got[i], expected[i]) for i in range(5))


def test_each_image_gets_its_share_of_the_wall_time():
    model, xs = net(), images(10)
    t0 = time.perf_counter()
    times = [s for _, _, s in Smooth(model, K, SIGMA).stream(Certify(50, 2000, 0.001),
                                                           ((i, xs[i], gen(i)) for i in range(10)), 512)]
    wall = time.perf_counter() - t0
    assert len(times) == 10 and all(s > 0 for s in times) and sum(times) <= wall * 1.001
    assert sum(times) > 0.5 * wall


def test_bad_images_and_generators_are_refused_in_one_line():
    smooth = Smooth(net(), K, SIGMA)
    with pytest.raises(RsmoothError, match=r"x must have 3 dimensions"):
        list(smooth.stream(Certify(10, 10, 0.1), [(0, images(2), None)], 64))
    with pytest.raises(RsmoothError, match="x contains NaN"):
        list(smooth.stream(Certify(10, 10, 0.1), [(0, torch.full((1, 8, 8), float("nan")), None)], 64))
    with pytest.raises(RsmoothError, match="generator must be a torch.Generator"):
        list(smooth.stream(Certify(10, 10, 0.1), [(0, images(1)[0], 5)], 64))
    with pytest.raises(RsmoothError, match="n0 must be >= 1"):
        Certify(0, 10, 0.1)
    with pytest.raises(RsmoothError, match="batch_size must be >= 1"):
        list(smooth.stream(Certify(10, 10, 0.1), [], 0))
    with pytest.raises(RsmoothError, match=r"each item must be a \(key, image \[C x H x W\], torch.Generator or None\) "
                                           r"triple \(or with the label fourth\), got Tensor"):
        list(smooth.stream(Certify(10, 10, 0.1), [images(1)[0]], 64))
    with pytest.raises(RsmoothError, match="procedure must be a Predict, Certify, Sequential or Adaptive .* got str"):
        list(smooth.stream("certify", [(0, images(1)[0], None)], 64))


def test_non_finite_logits_stop_the_stream():
    class Broken(nn.Module):
        def forward(self, x):
            out = torch.zeros(len(x), K)
            out[x.flatten(1).mean(1) > 0.6] = float("nan")
            return out

    xs = torch.cat([torch.zeros(1, 1, 8, 8), torch.ones(1, 1, 8, 8)])
    with pytest.raises(RsmoothError, match="returned NaN/inf logits for"):
        list(Smooth(Broken(), K, 0.01).stream(Certify(10, 10, 0.1), ((i, xs[i], None) for i in range(2)), 64))


# -- the batch size and memory format measured for the machine -----------------------------------

def test_fastest_measures_both_formats_or_keeps_what_is_given():
    model, x = net(), images(1)[0]
    smooth, tuning = fastest(model, K, SIGMA, x, samples=10 ** 7)
    assert tuning.how == {"batch_size": "measured", "channels_last": "measured"}
    assert tuning.batch_size in {64, 128, 256, 512, 1024} and smooth.channels_last == tuning.channels_last
    assert {k.split()[0] for k in tuning.rates} == {"nchw", "channels_last"}
    assert tuning.record()["samples_per_s"]
    smooth, tuning = fastest(model, K, SIGMA, x, batch_size=333, channels_last=False, samples=10 ** 7)
    assert (tuning.batch_size, tuning.channels_last, tuning.rates) == (333, False, {})
    smooth, tuning = fastest(model, K, SIGMA, x, samples=1000)  # too small to be worth measuring
    assert (tuning.batch_size, tuning.channels_last) == (256, False)
    assert tuning.how == {"batch_size": "default", "channels_last": "default"}


def test_channels_last_that_changes_votes_is_not_chosen(monkeypatch):
    import rsmooth.smoothing.tuning as tuning_module

    monkeypatch.setattr(tuning_module, "_rate", lambda smooth, x, b: 2.0 * b if smooth.channels_last else 1.0 * b)
    monkeypatch.setattr(tuning_module, "_same_votes", lambda a, b, x, size: 3)
    smooth, tuning = fastest(net(), K, SIGMA, images(1)[0], samples=10 ** 7)
    assert not tuning.channels_last and not smooth.channels_last
    assert "channels-last classified 3 of 1024 noisy inputs differently; kept NCHW" == tuning.note
    assert isinstance(tuning, Tuning) and tuning.batch_size == 1024


def test_each_size_is_timed_over_min_time_not_three_passes(monkeypatch):
    """On an H100 a LeNet pass takes well under a millisecond: three timed passes per size measured
    launches and clock ramps, and kept batch 1,024 at 2.0M samples/s where 16,384 gives 3.1M.
    With a clock on which every pass takes 1 ms, 50 ms is 50 timed passes after the warm-up."""
    import itertools
    import types

    import rsmooth.smoothing.tuning as tuning_module

    ticks = itertools.count()
    monkeypatch.setattr(tuning_module, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks) / 1000))
    calls = []

    class Counting(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = net()

        def forward(self, x):
            calls.append(len(x))
            return self.inner(x)

    smooth = Smooth(Counting(), K, SIGMA)
    assert tuning_module._rate(smooth, images(1)[0], 4, min_time=0.05) == pytest.approx(4 / 0.001)
    assert calls == [4] * 51
    calls.clear()
    tuning_module._rate(smooth, images(1)[0], 4, min_time=0.0)
    assert calls == [4] * 4  # a warm-up and the 3 timed passes that are the least


def test_smoothing_noise_is_drawn_in_one_place():
    """Issue 38: every noisy sample of the smoothing package (the packer's passes, count_votes, the
    tuner's timed passes) comes from a noise's ``draw`` (the modules of the NOISES classes): no other
    module of the package draws random numbers, and only the packer calls ``draw`` (the tuner's comparison of
    two formats draws one batch for both)."""
    import ast
    from pathlib import Path

    import rsmooth.smoothing as smoothing

    import inspect

    from rsmooth.smoothing.noises import NOISES

    noise_modules = {Path(inspect.getfile(NOISES.get(name))).name for name in NOISES.names()}
    assert "noises.py" in noise_modules
    rng = {"normal_", "randn", "randn_like", "normal", "rand", "rand_like", "randint", "uniform_", "exponential_"}
    found, calls = [], []
    for path in sorted(Path(smoothing.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in rng and path.name not in noise_modules:
                    found.append(f"{path.name}:{node.lineno}")
                if node.func.attr == "draw":
                    calls.append(path.name)
    assert not found, found
    assert set(calls) == {"packing.py", "tuning.py"} and calls.count("tuning.py") == 1, calls