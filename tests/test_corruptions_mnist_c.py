"""MNIST-C's corruptions: registry, determinism, shapes, and numbers against references."""
import colorsys
import math

import numpy as np
import pytest
from scipy import ndimage
from sklearn.datasets import load_digits

from rsmooth.corruptions import BENCHMARK, SUITES, corrupt
from rsmooth.errors import RsmoothError

SUITE = SUITES["mnist-c"]
NAMES = SUITE.names()
#: the corruptions that draw from the generator
RANDOM = ("shot_noise", "impulse_noise", "glass_blur", "motion_blur", "shear", "rotate", "translate", "fog",
          "spatter", "dotted_line", "zigzag")
#: the authors' function defaults, i.e. the severities of the published MNIST-C
DEFAULTS = dict(shot_noise=5, impulse_noise=4, glass_blur=1, motion_blur=1, shear=2, scale=3, rotate=2,
                brightness=5, translate=3, fog=5, spatter=4)

_DIGITS = load_digits().images[:6] / 16.0


def digits(size=28, channels=1):
    """Six sklearn digits, upscaled to ``size`` (bilinear) and repeated over channels, uint8 [N, C, H, W]."""
    x = np.stack([ndimage.zoom(im, size / 8.0, order=1) for im in _DIGITS]).clip(0, 1)
    return (np.repeat(x[:, None], channels, axis=1) * 255).astype(np.uint8)


def run(images, name, severity=None, seed=0, indices=None):
    idx = range(len(images)) if indices is None else indices
    return corrupt(images, name, severity, suite="mnist-c", seed=seed, indices=idx)


def test_the_suite_is_the_authors_list_with_their_severities():
    assert NAMES == ["identity", *BENCHMARK["mnist-c"]]
    for name in NAMES:
        c = SUITE.get(name)
        if name in DEFAULTS:
            assert c.severities == (1, 2, 3, 4, 5) and c.default == DEFAULTS[name]
        else:
            assert c.severities == () and c.default is None
        assert c.fn.__doc__, name


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("size, channels", [(28, 1), (8, 1), (32, 3)])
def test_corruption_is_deterministic_keeps_shape_and_changes_the_image(name, size, channels):
    x = digits(size, channels)
    y = run(x, name)
    assert y.shape == x.shape and y.dtype == np.uint8
    np.testing.assert_array_equal(y, run(x, name))
    if name != "identity":
        assert (np.abs(y.astype(int) - x) > 2).any(), name
    # an image's corruption depends on its index, not on the batch it is in
    np.testing.assert_array_equal(run(x[3:4], name, indices=[3]), y[3:4])


@pytest.mark.parametrize("name", RANDOM)
def test_random_corruptions_draw_per_index_and_seed(name):
    x = np.repeat(digits()[:1], 8, axis=0)
    y = run(x, name)
    assert any(not np.array_equal(y[0], y[k]) for k in range(1, 8)), name
    assert not np.array_equal(run(x, name, seed=1), y)


@pytest.mark.parametrize("name", sorted(set(NAMES) - set(RANDOM) - {"identity"}))
def test_deterministic_corruptions_do_not_depend_on_the_index(name):
    x = np.repeat(digits()[:1], 3, axis=0)
    y = run(x, name)
    assert np.array_equal(y[0], y[1]) and np.array_equal(y[0], y[2])


def test_severities_are_validated():
    x = digits()[:1]
    with pytest.raises(RsmoothError, match="severities 1, 2, 3, 4, 5, not 6"):
        run(x, "fog", 6)
    with pytest.raises(RsmoothError, match="no severity levels"):
        run(x, "stripe", 1)
    with pytest.raises(RsmoothError, match="unknown corruption"):
        run(x, "frost")
    assert not np.array_equal(run(x, "rotate", 1), run(x, "rotate", 5))


def _call(name, x, severity, seed=0):
    return SUITE.get(name).fn(x, severity, np.random.default_rng(seed))


@pytest.mark.parametrize("severity, c", [(1, 60), (5, 3)])
def test_shot_noise_mean_and_variance(severity, c):
    x = np.full((100, 100, 1), 0.3)
    y = _call("shot_noise", x, severity)
    assert abs(y.mean() - 0.3) < 4 * math.sqrt(0.3 / c / y.size)
    assert abs(y.var() / (0.3 / c) - 1) < 0.05


@pytest.mark.parametrize("severity, amount", [(1, .03), (5, .27)])
def test_impulse_noise_fraction(severity, amount):
    x = np.full((200, 200, 1), 0.5)
    y = _call("impulse_noise", x, severity)
    assert set(np.unique(y)) <= {0.0, 0.5, 1.0}
    tol = 4 * math.sqrt(amount * (1 - amount) / x.size)
    assert abs((y != 0.5).mean() - amount) < tol
    assert abs((y == 1).mean() - amount / 2) < tol


def test_brightness_equals_the_authors_hsv_round_trip():
    x = np.random.default_rng(0).random((6, 7, 1))
    for severity, c in [(1, .1), (5, .5)]:
        ref = np.empty_like(x)
        for (r, col), v in np.ndenumerate(x[:, :, 0]):
            h, s, val = colorsys.rgb_to_hsv(v, v, v)
            rgb = colorsys.hsv_to_rgb(h, s, min(val + c, 1.0))
            ref[r, col, 0] = 0.2125 * rgb[0] + 0.7154 * rgb[1] + 0.0721 * rgb[2]  # skimage rgb2gray
        np.testing.assert_allclose(_call("brightness", x, severity), ref, atol=1e-12)


@pytest.mark.parametrize("size, left, right", [(28, 7, 21), (8, 2, 6), (32, 8, 24)])
def test_stripe_inverts_the_outer_quarters(size, left, right):
    x = np.random.default_rng(0).random((size, size, 2))
    ref = x.copy()
    ref[:, :left] = 1 - x[:, :left]
    ref[:, right:] = 1 - x[:, right:]
    np.testing.assert_allclose(_call("stripe", x, None), ref, atol=1e-15)


def test_stripe_is_255_minus_the_level_for_every_level():
    """The authors' 255 - x in integers: 59 -> 196 (1 - x in floats, truncated, gave 195)."""
    y = run(np.full((1, 1, 28, 28), 59, np.uint8), "stripe")
    assert (y[0, 0, :, :7] == 196).all() and (y[0, 0, :, 7:21] == 59).all() and (y[0, 0, :, 21:] == 196).all()
    u = (np.arange(10 * 28) % 256).astype(np.uint8).reshape(1, 1, 10, 28)
    for k in range(28):  # every level in every column
        v = np.roll(u, k, axis=3)
        ref = v.astype(int)
        ref[..., :7] = 255 - ref[..., :7]
        ref[..., 21:] = 255 - ref[..., 21:]
        np.testing.assert_array_equal(run(v, "stripe"), ref)


@pytest.mark.parametrize("severity", [1, 4])
def test_motion_blur_is_imagemagicks_8_bit_export(severity):
    """The authors read the blur back from ImageMagick's 8-bit PNG: floor(round(65535 y) / 257)."""
    from rsmooth.corruptions.ops import motion_blur
    radius, sigma = {1: (10, 3), 4: (15, 12)}[severity]
    x = digits()[2].transpose(1, 2, 0) / 255
    blurred = motion_blur(x, radius, sigma, np.random.default_rng(3).uniform(-45, 45))
    ref = (np.floor(blurred * 65535 + 0.5).astype(np.int64)) // 257
    y = _call("motion_blur", x, severity, seed=3)
    np.testing.assert_array_equal(y * 255, ref)
    assert (ref != np.round(blurred * 255)).any()


def test_translate_shifts_by_whole_pixels_at_28():
    x = np.random.default_rng(0).random((28, 28, 1))
    y = _call("translate", x, 3)  # 3 pixels along each axis, signs at random
    shifts = []
    for dr in (-3, 3):
        for dc in (-3, 3):
            ref = np.zeros_like(x)
            src = x[max(dr, 0):28 + min(dr, 0), max(dc, 0):28 + min(dc, 0)]
            ref[max(-dr, 0):28 + min(-dr, 0), max(-dc, 0):28 + min(-dc, 0)] = src
            shifts.append(np.allclose(y, ref, atol=1e-12))
    assert sum(shifts) == 1


@pytest.mark.parametrize("name", ["shear", "scale", "rotate"])
def test_geometric_corruptions_keep_the_centre(name):
    r, c = np.mgrid[0:28, 0:28]
    x = np.exp(-((r - 13.5) ** 2 + (c - 13.5) ** 2) / 8.0)[:, :, None]
    y = _call(name, x, 3)[:, :, 0]
    np.testing.assert_allclose(ndimage.center_of_mass(y), (13.5, 13.5), atol=1e-6)
    assert not np.allclose(y, x[:, :, 0], atol=1e-3)


def test_dotted_line_and_zigzag_only_brighten():
    x = digits()[0].transpose(1, 2, 0) / 255.0
    for name in ("dotted_line", "zigzag"):
        y = _call(name, x, None, seed=3)
        assert (y >= x - 1e-12).all() and (y > x + 0.5).any()
    y = _call("dotted_line", np.zeros((28, 28, 1)), None)
    lit = (y[:, :, 0] > 0).any(axis=0)
    assert not lit[[0, 1, 4, 5, 24, 25]].any() and lit[[2, 3, 26]].all()  # 2-pixel dashes from column 2


def test_canny_edges_is_binary():
    y = _call("canny_edges", digits()[0].transpose(1, 2, 0) / 255.0, None)
    assert set(np.unique(y)) == {0.0, 1.0}


def test_glass_blur_blurs_grey_images_vertically_only_as_the_authors_call_does():
    x = np.zeros((28, 28, 1))
    x[:, 14] = 1.0  # a vertical line: the vertical blur keeps it, severity 1 shifts pixels by <= 1 column
    y = _call("glass_blur", x, 1)
    assert np.all(y[:, :12] == 0) and np.all(y[:, 17:] == 0) and y[:, 13:16].sum() > 20
    colour = _call("glass_blur", np.repeat(x, 3, axis=2), 1)  # colour images are blurred in both directions
    assert (colour[:, :12] > 0).any()


@pytest.mark.parametrize("name", ["shear", "scale", "rotate"])
def test_geometric_corruptions_keep_blends_below_the_minimum_as_new_scikit_image(name):
    """scikit-image >= 0.19.3 (documented): pixels blending a grey image of minimum 0.5 with the zero
    outside stay between 0 and 0.5, where the authors' 2019 release raised them to 0.5."""
    y = _call(name, np.full((28, 28, 1), 0.5), 3, seed=1)
    assert ((y > 0.01) & (y < 0.49)).any()
    assert "scikit-image >= 0.19.3" in " ".join(SUITE.get(name).fn.__doc__.split())
