"""Certified accuracy, ACR and default radii against explicit float64 Python loops."""
import numpy as np
import pytest

from rsmooth.errors import RsmoothError
from rsmooth.metrics import acr, certified_accuracy, default_radii


def _random_results(seed, n):
    """Radii with ties and abstentions (predict -1 -> radius 0, correct 0)."""
    rng = np.random.default_rng(seed)
    label = rng.integers(0, 10, n)
    predict = np.where(rng.random(n) < 0.8, label, rng.integers(0, 10, n))
    abstain = rng.random(n) < 0.15
    predict[abstain] = -1
    radius = np.round(rng.random(n) * 2.0, 2)  # rounding creates ties with the grid
    radius[abstain] = 0.0
    correct = predict == label
    return radius, correct


def _loop_certified_accuracy(radius, correct, r):
    hits = 0
    for rad, ok in zip(radius.tolist(), correct.tolist()):
        if ok and rad >= r:
            hits += 1
    return hits / len(radius)


def _loop_acr(radius, correct):
    total = 0.0
    for rad, ok in zip(radius.tolist(), correct.tolist()):
        total += rad * (1.0 if ok else 0.0)
    return total / len(radius)


@pytest.mark.parametrize("seed,n", [(0, 1), (1, 7), (2, 500), (3, 2000)])
def test_against_loops(seed, n):
    radius, correct = _random_results(seed, n)
    radii = np.concatenate([np.arange(0, 2.25, 0.25), [0.01, 1.37, radius.max(), 5.0]])
    got = certified_accuracy(radius, correct, radii)
    want = [_loop_certified_accuracy(radius, correct, r) for r in radii]
    assert got.dtype == np.float64 and got.shape == radii.shape
    assert got.tolist() == want  # counts / n: exact
    np.testing.assert_allclose(acr(radius, correct), _loop_acr(radius, correct),
                               rtol=1e-12, atol=0)
    # 0/1 ints and bools give the same answer
    assert certified_accuracy(radius, correct.astype(int), radii).tolist() == want


def test_abstentions_count_as_wrong_and_denominator_is_all():
    radius = np.array([0.5, 0.0, 1.0, 0.0])
    correct = np.array([1, 0, 1, 0])  # two abstentions
    np.testing.assert_array_equal(certified_accuracy(radius, correct, [0.0, 0.5, 0.75, 1.0, 1.1]),
                                  [0.5, 0.5, 0.25, 0.25, 0.0])
    assert acr(radius, correct) == pytest.approx(1.5 / 4)
    # a wrong prediction with a positive radius counts for neither metric
    assert acr([2.0, 1.0], [0, 1]) == 0.5
    assert certified_accuracy([2.0, 1.0], [0, 1], 1.5).item() == 0.0


def test_scalar_radius_and_boundary_inclusive():
    assert certified_accuracy([0.25, 0.3], [1, 1], 0.25).item() == 1.0  # radius >= r


@pytest.mark.parametrize("args,match", [
    (([], [], [0.0]), "no certified examples"),
    (([0.1, 0.2], [1], [0.0]), "differ in length"),
    (([0.1], [2], [0.0]), "0/1"),
    (([np.nan], [1], [0.0]), "NaN"),
    (([0.1], [1], [np.nan]), "NaN"),
])
def test_certified_accuracy_errors(args, match):
    with pytest.raises(RsmoothError, match=match):
        certified_accuracy(*args)


def test_acr_empty():
    with pytest.raises(RsmoothError, match="no certified examples"):
        acr([], [])


@pytest.mark.parametrize("max_radius,want", [
    (0.0, [0.0]),
    (0.2, [0.0]),
    (0.25, [0.0, 0.25]),
    (0.953, [0.0, 0.25, 0.5, 0.75]),
    (1.906, [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75]),
    (2.5, [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5]),
])
def test_default_radii(max_radius, want):
    assert default_radii(max_radius).tolist() == want


def test_default_radii_step_and_errors():
    assert [str(float(r)) for r in default_radii(0.3, step=0.1)] == ["0.0", "0.1", "0.2", "0.3"]
    with pytest.raises(RsmoothError, match="step"):
        default_radii(1.0, step=0)
    with pytest.raises(RsmoothError, match="max radius"):
        default_radii(-1.0)
