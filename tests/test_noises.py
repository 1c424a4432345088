"""Smoothing noises as objects (issue 38): the registry, the Gaussian's radii, what files record,
and Gaussian rows byte-identical to the release before noises became objects."""
import json

import numpy as np
import pytest
import torch
from scipy.stats import norm

import release_rows
from rsmooth.errors import RsmoothError
from rsmooth.smoothing import Smooth
from rsmooth.smoothing.noises import NOISES, Gaussian, Noise, as_noise, make_noise, noise_from_spec


def test_gaussian_rows_equal_the_release_before_noise_objects():
    """certify, predict, sequential and adaptive rows (class, radius, samples, bound, decisions) equal
    those release 9cbe766 wrote (tests/release_rows.py made the stored file with it)."""
    stored = json.loads(release_rows.FILE.read_text())
    assert stored["settings"] == release_rows.SETTINGS
    assert release_rows.rows() == stored["rows"]


def test_gaussian_radius_is_cohens_theorem():
    g = Gaussian(0.5)
    assert g.radius(0.9) == pytest.approx(0.5 * norm.ppf(0.9), rel=1e-15)
    assert g.radius(0.9, 0.05) == pytest.approx(0.25 * (norm.ppf(0.9) - norm.ppf(0.05)), rel=1e-15)
    assert g.radius(0.9, 0.1) == pytest.approx(g.radius(0.9), rel=1e-12)  # p_B = 1 - p_A: the one-sided form
    radii = np.array([0.0, 0.25, 1.0])
    assert np.allclose(g.radius(g.level(radii)), radii)
    assert isinstance(g.radius(0.7), float) and g.radius(np.array([0.7, 0.8])).shape == (2,)


def test_registry_and_records():
    assert "gaussian" in NOISES and isinstance(make_noise("gaussian", 0.25), Gaussian)
    assert Gaussian(0.25).spec() == {"noise": "gaussian", "sigma": 0.25}
    assert noise_from_spec({"sigma": 0.5, "n": 10}) == Gaussian(0.5)  # sidecars before noises: Gaussian
    assert noise_from_spec(Gaussian(0.12).spec()) == Gaussian(0.12)
    assert as_noise(0.25) == Gaussian(0.25) and as_noise(Gaussian(1.0)) == Gaussian(1.0)
    assert Gaussian(0.25).describe() == "gaussian sigma=0.25 (l2)"


@pytest.mark.parametrize("call, match", [
    (lambda: make_noise("gauss", 0.25), "unknown noise 'gauss'; choose one of: .*gaussian"),
    (lambda: make_noise("gaussian", -1), "sigma must be > 0"),
    (lambda: noise_from_spec({"noise": "gaussian", "sigma": 0.25, "noise_params": {"bits": 3}}),
     "parameters this version does not know"),
    (lambda: Smooth(torch.nn.Linear(4, 2), 2, "0.25"), "sigma must be a number > 0, got '0.25'"),
])
def test_bad_noises_are_one_line(call, match):
    with pytest.raises(RsmoothError, match=match):
        call()


def test_smooth_takes_a_noise_object_in_place_of_sigma():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2))
    x = torch.rand(1, 2, 2)
    a = Smooth(model, 2, 0.25).certify(x, 10, 100, 0.01, 64, generator=torch.Generator().manual_seed(1))
    b = Smooth(model, 2, Gaussian(0.25)).certify(x, 10, 100, 0.01, 64, generator=torch.Generator().manual_seed(1))
    assert a == b
    assert issubclass(NOISES.get("gaussian"), Noise)
