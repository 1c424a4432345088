"""MNIST-C's corruptions (Mu & Gilmer 2019, MNIST-C: A Robustness Benchmark for Computer Vision,
arXiv 1906.02337), written from the authors' generation code for images of any size.

Each takes a float64 ``[H, W, C]`` image in [0, 1], a severity (1-5, or ``None`` for the four
without levels) and a ``numpy.random.Generator``.  On 28x28 grey images they follow the authors'
code; on other sizes, the positions the authors hard-code for 28x28 (the centre 13.5, the last
pixel 27, stripe columns 7 and 21, the lines' rows and columns, the translation in pixels) are
scaled to the image, while blur widths and line thickness stay in pixels.  On colour images,
noise is drawn per value and everything else (angles, shifts, fog, lines) is shared by the channels.
"""
from __future__ import annotations

import numpy as np

from .suites import SUITES
from .ops import affine_about_center, canny, gaussian, imagemagick_8bit, line_from_points, motion_blur as _motion_blur
from .ops import plasma_fractal, warp_affine

suite = SUITES["mnist-c"]


def _coords(x: np.ndarray):
    """Factors mapping the authors' 28x28 pixel coordinates (0..27) onto rows and columns of ``x``."""
    H, W = x.shape[:2]
    return (H - 1) / 27.0, (W - 1) / 27.0


@suite.register("identity", severities=())
def identity(x: np.ndarray, severity, rng: np.random.Generator) -> np.ndarray:
    """The clean image (MNIST-C's ``identity`` folder)."""
    return x.copy()


@suite.register("shot_noise", default=5)
def shot_noise(x, severity, rng):
    """Poisson noise ``Poisson(c x) / c``; c = 60, 25, 12, 5, 3."""
    c = [60, 25, 12, 5, 3][severity - 1]
    return rng.poisson(x * c) / float(c)


@suite.register("impulse_noise", default=4)
def impulse_noise(x, severity, rng):
    """Salt-and-pepper noise (scikit-image ``random_noise(mode='s&p')``): each value is replaced
    with probability ``amount``, by 1 or 0 with equal odds; amount = .03, .06, .09, .17, .27."""
    amount = [.03, .06, .09, .17, .27][severity - 1]
    flipped = rng.random(x.shape) < amount
    salted = rng.random(x.shape) < 0.5
    out = x.copy()
    out[flipped & salted] = 1.0
    out[flipped & ~salted] = 0.0
    return out


@suite.register("glass_blur", default=1)
def glass_blur(x, severity, rng):
    """Blur, shuffle pixels locally, blur again; (sigma, max_delta, iterations) = (0.7, 1, 2),
    (0.9, 2, 1), (1, 2, 3), (1.1, 3, 2), (1.5, 4, 2).

    The authors call ``gaussian(x, sigma, multichannel=True)`` on 2-D grey images, which
    scikit-image reads as a column of channels: it blurs along rows (vertically) only.  Grey
    images reproduce that; colour images are blurred in both directions.  The first blur is
    quantised to uint8 (truncating) before the shuffle, as theirs.
    """
    sigma, delta, iterations = [(0.7, 1, 2), (0.9, 2, 1), (1, 2, 3), (1.1, 3, 2), (1.5, 4, 2)][severity - 1]
    s = (sigma, 0.0) if x.shape[2] == 1 else sigma
    y = np.floor(np.clip(gaussian(x, s), 0, 1) * 255) / 255
    H, W = x.shape[:2]
    positions = [(h, w) for h in range(H - delta, delta, -1) for w in range(W - delta, delta, -1)]
    for _ in range(iterations):
        swap = rng.random(len(positions)) < 0.5
        dxy = rng.integers(-delta, delta, size=(len(positions), 2))
        for (h, w), do, (dx, dy) in zip(positions, swap, dxy):
            if do:
                h2, w2 = h + dy, w + dx
                y[[h, h2], [w, w2]] = y[[h2, h], [w2, w]]
    return gaussian(y, s)


@suite.register("motion_blur", default=1)
def motion_blur(x, severity, rng):
    """ImageMagick motion blur at an angle drawn from U(-45, 45) degrees; (radius, sigma) =
    (10, 3), (15, 5), (15, 8), (15, 12), (20, 15); read back from ImageMagick's 8-bit PNG
    (:func:`~rsmooth.corruptions.ops.imagemagick_8bit`), as the authors' ``cv2.imdecode``."""
    radius, sigma = [(10, 3), (15, 5), (15, 8), (15, 12), (20, 15)][severity - 1]
    return imagemagick_8bit(_motion_blur(x, radius, sigma, rng.uniform(-45, 45)))


def _affine(x, **kw):
    """``skimage.transform.warp`` about the centre (bilinear, zero outside) as scikit-image >= 0.19.3,
    whose clipping range includes the zero fill.  The authors' 2019 scikit-image clipped to the
    input's own range, sparing only pixels wholly outside: on an image whose minimum is above 0,
    pixels blending it with the zero outside were raised to that minimum (up to 40 levels, on 4-14%
    of the values of such images).  No MNIST or Fashion-MNIST test image has a minimum above 0."""
    return warp_affine(x, affine_about_center(x.shape[0], x.shape[1], **kw))


@suite.register("shear", default=2)
def shear(x, severity, rng):
    """Shear about the centre by +-c (sign drawn at random); c = 0.2, 0.4, 0.6, 0.8, 1.

    On grey images whose minimum is above 0 this follows scikit-image >= 0.19.3, not the authors'
    2019 release, which clipped to the input's range (see :func:`_affine`)."""
    c = [0.2, 0.4, 0.6, 0.8, 1.][severity - 1] * rng.choice([-1, 1])
    return _affine(x, shear=c)


@suite.register("scale", default=3)
def scale(x, severity, rng):
    """Shrink about the centre (inverse map scaled by c); c = 1/.9, 1/.8, 1/.7, 1/.6, 1/.5.

    On grey images whose minimum is above 0 this follows scikit-image >= 0.19.3, not the authors'
    2019 release, which clipped to the input's range (see :func:`_affine`)."""
    c = 1 / [.9, .8, .7, .6, .5][severity - 1]
    return _affine(x, scale=(c, c))


@suite.register("rotate", default=2)
def rotate(x, severity, rng):
    """Rotate about the centre by +-c radians (sign drawn at random); c = 0.2, 0.4, 0.6, 0.8, 1.

    On grey images whose minimum is above 0 this follows scikit-image >= 0.19.3, not the authors'
    2019 release, which clipped to the input's range (see :func:`_affine`)."""
    c = [0.2, 0.4, 0.6, 0.8, 1.][severity - 1] * rng.choice([-1, 1])
    return _affine(x, rotation=c)


@suite.register("brightness", default=5)
def brightness(x, severity, rng):
    """Raise the brightness: ``clip(x + c, 0, 1)`` per channel; c = .1, .2, .3, .4, .5.

    The authors convert grey to RGB, add c to the HSV value and convert back to grey.  A grey
    pixel has saturation 0, so its value is the pixel itself and HSV -> RGB gives three equal
    channels ``clip(v + c, 0, 1)``, which the luminance weights (summing to 1) return unchanged.
    """
    c = [.1, .2, .3, .4, .5][severity - 1]
    return np.clip(x + c, 0, 1)


@suite.register("translate", default=3)
def translate(x, severity, rng):
    """Shift by c pixels (of 28) along each axis, each sign drawn at random; c = 1, 2, 3, 4, 5."""
    c = [1, 2, 3, 4, 5][severity - 1]
    bits = rng.choice([-1, 1], 2)
    H, W = x.shape[:2]
    return _affine(x, translation=(c * bits[0] * W / 28.0, c * bits[1] * H / 28.0))


@suite.register("stripe", severities=())
def stripe(x, severity, rng):
    """Invert the left and right quarters (columns 0-6 and 21-27 of 28) as the authors, on the
    8-bit scale: ``(255 - 255 x) / 255``, so a level ``v`` becomes exactly ``255 - v`` (``1 - x``
    truncates one level low for 50 of the 256 levels)."""
    W = x.shape[1]
    y = x.copy()
    left, right = int(round(7 * W / 28)), int(round(21 * W / 28))
    for cols in (slice(0, left), slice(right, W)):
        y[:, cols] = (255.0 - 255.0 * y[:, cols]) / 255.0
    return y


@suite.register("fog", default=5)
def fog(x, severity, rng):
    """Add a plasma fractal (256x256, cropped) scaled by a, then rescale to the image's maximum;
    (a, wibbledecay) = (1.5, 2), (2, 2), (2.5, 1.7), (2.5, 1.5), (3, 1.4)."""
    a, decay = [(1.5, 2), (2., 2), (2.5, 1.7), (2.5, 1.5), (3., 1.4)][severity - 1]
    H, W = x.shape[:2]
    size = max(256, 1 << (max(H, W) - 1).bit_length())
    max_val = x.max()
    y = x + a * plasma_fractal(size, decay, rng)[:H, :W, None]
    return y * max_val / (max_val + a)


@suite.register("spatter", default=4)
def spatter(x, severity, rng):
    """Mud spatter: thresholded blurred Gaussian noise blended in as grey 63/255; (loc, scale,
    sigma, threshold, sigma_mask) = (.65, .3, 4, .69, .6), (.65, .3, 3, .68, .6), (.65, .3, 2,
    .68, .5), (.65, .3, 1, .65, 1.5), (.67, .4, 1, .65, 1.5)."""
    loc, sc, sigma, thr, sigma_m = [(.65, .3, 4, .69, .6), (.65, .3, 3, .68, .6), (.65, .3, 2, .68, .5),
                                    (.65, .3, 1, .65, 1.5), (.67, .4, 1, .65, 1.5)][severity - 1]
    liquid = gaussian(rng.normal(loc, sc, size=x.shape), sigma)
    liquid[liquid < thr] = 0
    m = gaussian((liquid > thr).astype(np.float64), sigma_m)
    m[m < 0.8] = 0
    return x * (1 - m) + 63 / 255.0 * m


def _add_line(x, line):
    return np.clip(x + line[:, :, None], 0, 1)


@suite.register("dotted_line", severities=())
def dotted_line(x, severity, rng):
    """A dashed line (dashes 2 of 28 pixels wide) across the image between two random rows."""
    sr, sc = _coords(x)
    r0, r1 = rng.integers(0, 27, size=2)
    H, W = x.shape[:2]
    line = line_from_points(0, r0 * sr, 27 * sc, r1 * sr, (H, W))
    dash = max(1, int(round(2 * W / 28)))
    line[:, (np.arange(W) // dash) % 2 == 0] = 0
    return _add_line(x, line)


@suite.register("zigzag", severities=())
def zigzag(x, severity, rng):
    """A zigzag line (segments 2 of 28 pixels long and wide) from column 2 to 25 of 28, starting
    at a random row and tilted by up to 5 rows."""
    sr, sc = _coords(x)
    a, b = 2.0, 2.0
    c0, c1 = 2, 25
    r0 = rng.integers(0, 27)
    r1 = r0 + rng.integers(-5, 5)
    theta = np.arctan((r1 - r0) / (c1 - c0))
    d = (c1 - c0) / np.cos(theta)
    ends = [(0.0, 0.0)]
    for i in range(int((d - a) // (2 * a)) + 1):
        ends.append(((2 * i + 1) * a, (-1) ** i * b))
    max_c = (2 * a) * (d // (2 * a))
    if d != max_c:
        ends.append((d, ends[-1][1] / (2 * (d - max_c))))
    rot = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    cs, rs = rot @ np.array(ends).T
    cs, rs = (cs + c0) * sc, (rs + r0) * sr
    y = x
    for i in range(1, len(cs)):
        y = _add_line(y, line_from_points(cs[i - 1], rs[i - 1], cs[i], rs[i], x.shape[:2]))
    return y


@suite.register("canny_edges", severities=())
def canny_edges(x, severity, rng):
    """Canny edge map (scikit-image ``canny`` defaults: sigma 1, thresholds 0.1 and 0.2), per channel."""
    return np.stack([canny(x[:, :, k]).astype(np.float64) for k in range(x.shape[2])], axis=2)
