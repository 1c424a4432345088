"""CIFAR-10-C's corruptions generated on the fly (rsmooth.corruptions.cifar_c), against
references computed independently (colorsys, Pillow, hand formulas)."""
import colorsys
import io

import numpy as np
import pytest
from PIL import Image

from rsmooth.corruptions import BENCHMARK, HELD_OUT, corrupt, get_suite
from rsmooth.corruptions import cifar_c, ops

SUITE = get_suite("cifar10-c")
NAMES = SUITE.names()
NOISES = ["gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise"]


def scene(h=32, w=32, channels=3):
    """A real-looking image: smooth colour gradients, a bright disc, a dark square, a thin line."""
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    img = np.stack([0.2 + 0.5 * xx, 0.3 + 0.4 * yy, 0.6 - 0.3 * xx * yy], axis=-1)
    img[(yy - 0.35) ** 2 + (xx - 0.6) ** 2 < 0.04] = [0.95, 0.85, 0.3]
    img[int(0.6 * h):int(0.85 * h), int(0.1 * w):int(0.4 * w)] = [0.1, 0.15, 0.35]
    img[int(0.2 * h), :] = [0.9, 0.9, 0.9]
    if channels == 1:
        img = img @ np.array([0.299, 0.587, 0.114])[:, None]
    return img


def as_batch(img):
    """[H, W, C] float -> [1, C, H, W] uint8, as corrupt() is fed by the datasets."""
    return np.round(img * 255).astype(np.uint8).transpose(2, 0, 1)[None]


def test_order_and_coverage():
    """The authors' order; every published corruption but frost (it needs the authors' photographs)."""
    published = [n for n in BENCHMARK["cifar10-c"] + HELD_OUT["cifar10-c"] if n != "frost"]
    done = [n for n in published if n in NAMES]
    assert NAMES == done
    assert all(SUITE.get(n).severities == (1, 2, 3, 4, 5) for n in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_shape_range_and_changes(name):
    x = np.concatenate([as_batch(scene()), as_batch(scene()[::-1].copy())])
    for severity in range(1, 6):
        y = corrupt(x, name, severity, suite="cifar10-c", seed=3, indices=[5, 9])
        assert y.dtype == np.uint8 and y.shape == x.shape
        # the same (seed, index) gives the same image, whatever the batch
        np.testing.assert_array_equal(y, corrupt(x, name, severity, suite="cifar10-c", seed=3, indices=[5, 9]))
        np.testing.assert_array_equal(y[1:], corrupt(x[1:], name, severity, suite="cifar10-c", seed=3, indices=[9]))
        assert np.abs(y.astype(int) - x).mean() > 0.1, (name, severity)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", [(28, 28, 1), (8, 8, 3), (8, 8, 1), (20, 27, 3)])
def test_other_sizes_and_grey(name, shape):
    h, w, c = shape
    x = as_batch(scene(h, w, c))
    y = corrupt(x, name, 5, suite="cifar10-c", seed=0, indices=[0])
    assert y.shape == x.shape and y.dtype == np.uint8
    for severity in range(1, 6):  # the function itself: finite, in [0, 1] (a NaN would pass corrupt())
        z = SUITE.get(name).fn(scene(h, w, c), severity, np.random.default_rng(severity))
        assert z.shape == shape and np.all((z >= 0) & (z <= 1)), (name, severity)


def test_random_corruptions_depend_on_seed_and_index():
    x = np.repeat(as_batch(scene()), 2, axis=0)
    y = corrupt(x, "gaussian_noise", 3, suite="cifar10-c", seed=0, indices=[0, 1])
    assert not np.array_equal(y[0], y[1])
    assert not np.array_equal(y[0], corrupt(x[:1], "gaussian_noise", 3, suite="cifar10-c", seed=1, indices=[0])[0])


@pytest.mark.parametrize("severity,c", list(enumerate([0.04, 0.06, 0.08, 0.09, 0.10], start=1)))
def test_gaussian_noise_std(severity, c):
    x = np.full((64, 64, 3), 0.5)
    y = cifar_c.gaussian_noise(x, severity, np.random.default_rng(0))
    assert np.std(y - x) == pytest.approx(c, rel=0.05)
    assert abs(np.mean(y - x)) < 3 * c / np.sqrt(x.size)


def test_shot_noise_is_poisson():
    x = np.full((64, 64, 3), 0.4)
    y = cifar_c.shot_noise(x, 3, np.random.default_rng(0))  # c = 100
    assert np.allclose(y * 100, np.round(y * 100))
    assert np.mean(y) == pytest.approx(0.4, abs=0.01)
    assert np.var(y) == pytest.approx(0.4 / 100, rel=0.1)


def test_impulse_noise_fraction():
    x = np.full((64, 64, 3), 0.5)
    y = cifar_c.impulse_noise(x, 5, np.random.default_rng(0))  # amount 0.07
    flipped = y != 0.5
    assert set(np.unique(y[flipped])) <= {0.0, 1.0}
    assert flipped.mean() == pytest.approx(0.07, rel=0.1)
    assert (y[flipped] == 1.0).mean() == pytest.approx(0.5, abs=0.06)


def test_noises_grow_with_severity():
    x = scene()
    for name in NOISES:
        fn = SUITE.get(name).fn
        dist = [np.mean([np.abs(fn(x, s, np.random.default_rng(k)) - x).mean() for k in range(3)]) for s in (1, 5)]
        assert dist[1] >= dist[0], name


@pytest.mark.parametrize("severity,c", list(enumerate([0.75, 0.5, 0.4, 0.3, 0.15], start=1)))
def test_contrast_by_hand(severity, c):
    x = scene()
    expected = np.empty_like(x)
    for k in range(3):
        m = x[..., k].sum() / x[..., k].size
        expected[..., k] = (x[..., k] - m) * c + m
    np.testing.assert_allclose(cifar_c.contrast(x, severity, None), np.clip(expected, 0, 1), atol=1e-12)


def random_pixels(n=500, seed=0):
    rng = np.random.default_rng(seed)
    px = rng.random((n, 3))
    px[:6] = [[1, 1, 0], [0, 1, 1], [1, 0, 1], [0.5, 0.5, 0.5], [0, 0, 0], [1, 1, 1]]  # ties and greys
    px[6:40] = np.round(px[6:40] * 4) / 4  # more ties
    return px


def test_hsv_matches_colorsys_and_round_trips():
    px = random_pixels()
    hsv = cifar_c._rgb_to_hsv(px[None])[0]
    ref = np.array([colorsys.rgb_to_hsv(*p) for p in px])
    np.testing.assert_allclose(hsv, ref, atol=1e-12)
    np.testing.assert_allclose(cifar_c._hsv_to_rgb(hsv[None])[0], px, atol=1e-12)
    back = np.array([colorsys.hsv_to_rgb(*p) for p in hsv])
    np.testing.assert_allclose(cifar_c._hsv_to_rgb(hsv[None])[0], back, atol=1e-12)


@pytest.mark.parametrize("severity,c", list(enumerate([0.05, 0.1, 0.15, 0.2, 0.3], start=1)))
def test_brightness_adds_c_to_value(severity, c):
    px = random_pixels(seed=severity)
    y = cifar_c.brightness(px[None], severity, None)[0]
    before = np.array([colorsys.rgb_to_hsv(*p) for p in px])
    after = np.array([colorsys.rgb_to_hsv(*p) for p in y])
    np.testing.assert_allclose(after[:, 2], np.minimum(before[:, 2] + c, 1.0), atol=1e-12)
    coloured = before[:, 1] > 0
    np.testing.assert_allclose(after[coloured, :2], before[coloured, :2], atol=1e-9)


def test_saturate_scales_saturation():
    px = random_pixels()
    before = np.array([colorsys.rgb_to_hsv(*p) for p in px])
    after = np.array([colorsys.rgb_to_hsv(*p) for p in cifar_c.saturate(px[None], 4, None)[0]])  # 2 s + 0.1
    lit = before[:, 2] > 0  # black stays black, whatever its saturation
    np.testing.assert_allclose(after[lit, 1], np.clip(2 * before[lit, 1] + 0.1, 0, 1), atol=1e-9)
    np.testing.assert_allclose(after[:, 2], before[:, 2], atol=1e-12)
    grey = scene(channels=1)
    np.testing.assert_array_equal(cifar_c.saturate(grey, 5, None), grey)


@pytest.mark.parametrize("severity,c", list(enumerate([0.95, 0.9, 0.85, 0.75, 0.65], start=1)))
def test_pixelate_is_pillow_box(severity, c):
    x = scene()
    u = np.round(x * 255).astype(np.uint8)
    small = Image.fromarray(u).resize((int(32 * c), int(32 * c)), Image.BOX)
    expected = np.asarray(small.resize((32, 32), Image.BOX)) / 255.0
    np.testing.assert_array_equal(cifar_c.pixelate(x, severity, None), expected)
    grey = u[..., :1]
    ref = Image.fromarray(grey[..., 0]).resize((int(32 * c),) * 2, Image.BOX).resize((32, 32), Image.BOX)
    np.testing.assert_array_equal(cifar_c.pixelate(grey / 255.0, severity, None)[..., 0], np.asarray(ref) / 255.0)


def test_jpeg_is_pillow_and_lower_quality_errs_more():
    x = scene()
    buf = io.BytesIO()
    Image.fromarray(np.round(x * 255).astype(np.uint8)).save(buf, "JPEG", quality=80)
    np.testing.assert_array_equal(cifar_c.jpeg_compression(x, 1, None), np.asarray(Image.open(buf)) / 255.0)
    errors = [np.abs(cifar_c.jpeg_compression(x, s, None) - x).mean() for s in range(1, 6)]
    assert errors[0] < errors[2] < errors[4]


@pytest.mark.parametrize("radius,alias_blur", [(0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)])
def test_defocus_kernel(radius, alias_blur):
    k = cifar_c.disk_kernel(radius, alias_blur)
    assert k.shape == (17, 17) and cifar_c.disk_kernel(9, 0.5).shape == (19, 19)
    assert k.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(k, k.T, atol=1e-15)
    np.testing.assert_allclose(k, k[::-1, ::-1], atol=1e-15)


def test_defocus_small_radius_is_the_gaussian():
    """Radius < 1 keeps only the centre of the disk, so the kernel is OpenCV's 3x3 Gaussian."""
    g = np.exp(-np.array([1.0, 0.0, 1.0]) / (2 * 0.4 ** 2))
    g /= g.sum()
    k = cifar_c.disk_kernel(0.3, 0.4)
    np.testing.assert_allclose(k[7:10, 7:10], np.outer(g, g), atol=1e-15)
    assert k.sum() - k[7:10, 7:10].sum() == 0
    x = scene()
    y = cifar_c.defocus_blur(x, 1, None)
    padded = np.pad(x, ((1, 1), (1, 1), (0, 0)), mode="reflect")  # numpy 'reflect' = reflect-101
    ref = sum(np.outer(g, g)[i, j] * padded[i:i + 32, j:j + 32] for i in range(3) for j in range(3))
    np.testing.assert_allclose(y, ref, atol=1e-12)


class FixedUniform:
    """A stand-in generator: its first ``uniform`` call returns ``first``, later ones zeros."""

    def __init__(self, first):
        self.first = first

    def uniform(self, low, high, size):
        out, self.first = (self.first, None) if self.first is not None else (np.zeros(size), None)
        return out


def test_elastic_affine_part():
    """cv2.getAffineTransform + warpAffine semantics: the three points (col, row) = (26, 26),
    (26, 6), (6, 6) moved by a translation shift the image; moved onto their transposes, transpose it."""
    x = scene()
    src = np.array([[26, 26], [26, 6], [6, 6]], dtype=float)
    y = cifar_c.elastic_transform(x, 1, FixedUniform(np.tile([[2.0, 1.0]], (3, 1))))  # +2 cols, +1 row
    expected = np.pad(x, ((1, 0), (2, 0), (0, 0)), mode="reflect")[:32, :32]  # reflect-101 border
    np.testing.assert_allclose(y, expected, atol=1e-12)
    y = cifar_c.elastic_transform(x, 1, FixedUniform(src[:, ::-1] - src))
    np.testing.assert_allclose(y, x.transpose(1, 0, 2), atol=1e-12)
    # a shift of 0.3 column: OpenCV samples 10/32 of a pixel to the left (positions in 1/32 pixel)
    y = cifar_c.elastic_transform(x, 1, FixedUniform(np.tile([[0.3, 0.0]], (3, 1))))
    np.testing.assert_allclose(y[:, 1:], (22 / 32) * x[:, 1:] + (10 / 32) * x[:, :-1], atol=1e-12)


@pytest.mark.parametrize("severity,sigma", list(enumerate([0.4, 0.6, 0.7, 0.8, 1.0], start=1)))
def test_gaussian_blur_against_a_hand_kernel(severity, sigma):
    """skimage.filters.gaussian: separable, truncated at 4 sigma, border 'nearest'."""
    x = scene()
    r = int(4 * sigma + 0.5)
    g = np.exp(-np.arange(-r, r + 1) ** 2 / (2 * sigma ** 2))
    g /= g.sum()
    p = np.pad(x, ((r, r), (r, r), (0, 0)), mode="edge")
    rows = sum(g[i] * p[i:i + 32] for i in range(2 * r + 1))
    ref = sum(g[j] * rows[:, j:j + 32] for j in range(2 * r + 1))
    np.testing.assert_allclose(cifar_c.gaussian_blur(x, severity, None), ref, atol=1e-12)


def test_glass_blur_moves_pixels_up_left_by_at_most_one():
    """Severity 1 (sigma 0.05: the blurs are the identity): each pixel is the uint8 image at itself
    or one row and/or column up-left, as the authors' copying "swap" leaves it."""
    x = np.random.default_rng(0).random((32, 32, 3))
    u = (x * 255).astype(np.uint8)
    y = np.round(cifar_c.glass_blur(x, 1, np.random.default_rng(1)) * 255).astype(np.uint8)
    moved = 0
    for r in range(32):
        for c in range(32):
            sources = [u[r - a, c - b] for a in (0, 1) for b in (0, 1) if r - a >= 0 and c - b >= 0]
            assert any(np.array_equal(y[r, c], s) for s in sources), (r, c)
            moved += not np.array_equal(y[r, c], u[r, c])
    assert moved > 32 * 32 / 2  # 3 of the 4 (dx, dy) draws move a pixel


def test_glass_blur_is_the_authors_sequential_loop():
    """The gather equals the authors' loop, their tuple "swap" of NumPy views included."""
    from rsmooth.corruptions import ops

    x = scene()
    for severity, (sigma, iterations) in [(2, (0.25, 1)), (5, (0.4, 2))]:
        rng = np.random.default_rng(7)
        u = np.uint8(ops.gaussian(x, sigma) * 255)
        for _ in range(iterations):
            d = rng.integers(-1, 1, size=(30, 30, 2))
            for i, h in enumerate(range(32 - 1, 1, -1)):
                for j, w in enumerate(range(32 - 1, 1, -1)):
                    dx, dy = d[i, j]
                    h_prime, w_prime = h + dy, w + dx
                    u[h, w], u[h_prime, w_prime] = u[h_prime, w_prime], u[h, w]
        ref = np.clip(ops.gaussian(u / 255.0, sigma), 0, 1)
        np.testing.assert_array_equal(cifar_c.glass_blur(x, severity, np.random.default_rng(7)), ref)


def test_blurs_keep_a_constant_image():
    x = np.full((32, 32, 3), 100 / 255)
    for name in ["defocus_blur", "motion_blur", "zoom_blur", "gaussian_blur", "glass_blur", "elastic_transform"]:
        for severity in (1, 5):
            y = SUITE.get(name).fn(x, severity, np.random.default_rng(0))
            np.testing.assert_allclose(y, x, atol=1e-9, err_msg=name)


def _imagemagick_levels(y):
    """The 8-bit levels ImageMagick (Q16) writes for ``y`` in [0, 1], in integers: floor(round(65535 y) / 257)."""
    return (np.floor(np.clip(y, 0, 1) * 65535 + 0.5).astype(np.int64)) // 257


@pytest.mark.parametrize("severity", [1, 5])
def test_motion_blur_is_imagemagicks_8_bit_export(severity):
    """The blur read back as ImageMagick's 8-bit PNG, level for level, through corrupt()'s uint8."""
    radius, sigma = [(6, 1), None, None, None, (9, 2.5)][severity - 1]
    x = as_batch(scene())
    y = cifar_c.motion_blur(x[0].transpose(1, 2, 0) / 255, severity, np.random.default_rng(4))
    blurred = ops.motion_blur(x[0].transpose(1, 2, 0) / 255, radius, sigma, np.random.default_rng(4).uniform(-45, 45))
    ref = _imagemagick_levels(blurred)
    np.testing.assert_array_equal(np.clip(y, 0, 1) * 255, ref)
    assert (ref != np.round(blurred * 255)).mean() > 0.2  # rounding would be a level high on many values


def test_snow_layer_is_imagemagicks_8_bit_export():
    """On a black image: (1 - blend) 0.5 plus the blurred layer and its 180-degree turn, the layer
    drawn as snow draws it and exported by ImageMagick (integers)."""
    x = np.zeros((32, 32, 3))
    for severity in (2, 5):
        mean, std, zoom, thr, radius, sigma, blend = [None, (0.1, 0.2, 1, 0.5, 10, 4, 0.9), None, None,
                                                      (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8)][severity - 1]
        rng = np.random.default_rng(severity)
        layer = ops.clipped_zoom(rng.normal(mean, std, (32, 32, 1)), zoom)
        layer = np.floor(np.clip(np.where(layer < thr, 0, layer), 0, 1) * 255) / 255
        levels = _imagemagick_levels(ops.motion_blur(layer, radius, sigma, rng.uniform(-135, -45))) / 255
        ref = np.clip((1 - blend) * 0.5 + levels + levels[::-1, ::-1], 0, 1)
        y = cifar_c.snow(x, severity, np.random.default_rng(severity))
        np.testing.assert_allclose(y, np.broadcast_to(ref, y.shape), atol=1e-12)


def test_snow_only_adds_to_the_brightened_image():
    x = scene()
    for severity, blend in enumerate([0.95, 0.9, 0.9, 0.85, 0.8], start=1):
        lum = (0.299 * x[..., 0] + 0.587 * x[..., 1] + 0.114 * x[..., 2])[..., None]
        base = np.clip(blend * x + (1 - blend) * np.maximum(x, lum * 1.5 + 0.5), 0, 1)
        y = cifar_c.snow(x, severity, np.random.default_rng(severity))
        assert np.all(y >= base - 1e-12)
        unclipped = (y < 1).all(-1)
        flakes = (y - base)[unclipped]  # one grey layer, the same in every channel
        np.testing.assert_allclose(flakes, flakes[:, :1].repeat(3, 1), atol=1e-12)
        assert (y > base + 1e-3).any()


def test_fog_stays_below_the_image_maximum():
    x = scene()
    for severity, a in enumerate([0.2, 0.5, 0.75, 1, 1.5], start=1):
        y = cifar_c.fog(x, severity, np.random.default_rng(severity))
        top = x.max()
        assert y.max() <= top + 1e-12
        assert np.all(y >= x * top / (top + a) - 1e-12)
        assert y.max() > x.max() * top / (top + a) + 1e-3  # the haze is visible


def test_spatter_paints_water_and_mud_colours():
    x = scene()
    for severity in range(1, 6):
        y = cifar_c.spatter(x, severity, np.random.default_rng(severity))
        d = y - x
        changed = np.abs(d).max(-1) > 1e-12
        assert changed.any(), severity
        if severity <= 3:  # pale turquoise (175, 238, 238) added, before clipping at 1
            unclipped = changed & (y < 1).all(-1)
            t = d[unclipped] / np.array([175, 238, 238]) * 255
            np.testing.assert_allclose(t, t[:, :1].repeat(3, 1), atol=1e-9)
            assert np.all(d >= -1e-12)
        else:  # x (1 - m) + m brown (63, 42, 20), m in (0.8, 1]
            brown = np.array([63, 42, 20]) / 255
            m = d[changed] / (brown - x[changed])
            np.testing.assert_allclose(m, m[:, :1].repeat(3, 1), atol=1e-9)
            assert np.all((m >= 0.8 - 1e-9) & (m <= 1 + 1e-9))


def test_equalize_hist_as_opencv():
    u = np.array([[0, 0, 1], [1, 1, 3]], dtype=np.uint8)  # 255 / 4 per level above the lowest
    np.testing.assert_array_equal(cifar_c._equalize_hist(u), [[0, 0, 191], [191, 191, 255]])
    np.testing.assert_array_equal(cifar_c._equalize_hist(np.full((3, 3), 7, np.uint8)), np.full((3, 3), 7))


# make_cifar_c's water (spatter severities 1-3) on hand-made liquid layers (8x10; a 4x5 block of
# drops rising by 0.02 (A) or 0.03 from 0.95 (B: every drop >= 256/255, so the authors' uint8 cast
# wraps it to 24..78) on an image of constant level 40, intensity 0.5): the green channel
# (40 + 238 m) as the authors' code computes it with OpenCV (opencv-python-headless 5.0, with and
# without IPP alike), rows 2-5 of columns 3-7 (the rest stays 40).
_WATER_A = [[40, 40, 40, 53, 92], [40, 40, 40, 68, 111], [53, 67, 81, 111, 141], [80, 109, 125, 141, 159]]
_WATER_B = [[40, 40, 40, 48, 79], [40, 40, 40, 61, 99], [47, 58, 71, 99, 133], [66, 92, 110, 133, 159]]


@pytest.mark.parametrize("base, rise, ref", [(0.7, 0.02, _WATER_A), (0.95, 0.03, _WATER_B)])
def test_water_equals_the_authors_opencv_pipeline(base, rise, ref):
    r, c = np.mgrid[0:8, 0:10]
    block = (r >= 2) & (r <= 5) & (c >= 3) & (c <= 7)
    liquid = np.where(block, base + rise * (r + c), 0.0)
    y = (cifar_c._water(np.full((8, 10, 3), 40 / 255), liquid, 0.5) * 255).astype(np.uint8)
    expected = np.full((8, 10), 40)
    expected[2:6, 3:8] = ref
    np.testing.assert_array_equal(y[..., 1], expected)


def _opencv_water(x8, liquid, k, cv2):
    """The water of make_cifar_c's spatter with OpenCV (float32, as there), as uint8."""
    drops = (np.floor(liquid * 255) % 256).astype(np.uint8)
    far = cv2.distanceTransform(np.where(cv2.Canny(drops, 50, 150) > 0, 0, 255).astype(np.uint8), cv2.DIST_L2, 5)
    shade = cv2.equalizeHist(cv2.blur(np.minimum(far, np.float32(20)), (3, 3)).astype(np.uint8))
    shade = cv2.blur(cv2.filter2D(shade, cv2.CV_8U, np.array([[-2, -1, 0], [-1, 1, 1], [0, 1, 2]])), (3, 3))
    m = drops * shade.astype(np.float32)
    m = m / m.max() * np.float32(k)
    colour = (np.array([175, 238, 238]) / 255.0).astype(np.float32)
    y = np.clip(x8.astype(np.float32) / 255 + m[..., None] * colour, 0, 1) * 255
    return y.astype(np.uint8)


def test_spatter_water_equals_opencv_within_float32_rounding():
    """Severities 1-3 against the same pipeline run by OpenCV where it is installed: equal but for
    float32 against float64 rounding (one level, on a few values in a million)."""
    cv2 = pytest.importorskip("cv2")
    differing = 0
    for severity, (mean, std, sigma, thr) in enumerate([(0.62, 0.1, 0.7, 0.7), (0.65, 0.1, 0.8, 0.7),
                                                        (0.65, 0.3, 1, 0.69)], start=1):
        for seed in range(12):
            x8 = np.random.default_rng(100 + seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)
            liquid = ops.gaussian(np.random.default_rng(seed).normal(mean, std, (32, 32)), sigma)
            liquid[liquid < thr] = 0
            y = cifar_c.spatter(x8 / 255, severity, np.random.default_rng(seed))
            d = np.abs((y * 255).astype(np.uint8).astype(int) - _opencv_water(x8, liquid, 0.5, cv2))
            assert d.max() <= 1
            differing += (d > 0).sum()
    assert differing <= 3
