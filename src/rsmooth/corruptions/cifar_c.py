"""CIFAR-10-C's corruptions (Hendrycks & Dietterich 2019, Benchmarking Neural Network Robustness
to Common Corruptions and Perturbations, arXiv 1903.12261), written from the authors'
generation code for images of any size.

Registered in the authors' order (the 15 benchmark corruptions, then the 4 held out), each with
the authors' five CIFAR parameter sets as severities 1-5.  ``frost`` is left out: it blends in
crops of the authors' frost photographs, which are not part of this package.

Images of other sizes: the authors' image-size constant (32) becomes the image's side; blur
widths and other pixel-valued parameters stay in pixels.  A grey image (one channel) is its own
luminance where the authors convert colour; it has no hue or saturation, so ``saturate`` leaves
it unchanged.

Exact up to floating-point rounding (the authors work in float32 and on uint8 PIL images; an
image given as ``uint8 / 255`` round-trips exactly): the noises, ``contrast``, ``brightness`` and
``saturate`` (scikit-image's HSV conversion), ``pixelate`` and ``jpeg_compression`` (Pillow, as
the authors), ``defocus_blur`` (OpenCV's kernel and border rule).

Approximated: ``elastic_transform`` interpolates the affine warp exactly where OpenCV's
``warpAffine`` rounds sample positions to 1/32 pixel.
"""
from __future__ import annotations

import io

import numpy as np
from PIL import Image
from scipy import ndimage

from . import SUITES

suite = SUITES["cifar10-c"]


# ---------------------------------------------------------------- helpers

def _to_uint8(x: np.ndarray) -> np.ndarray:
    """``x`` in [0, 1] as the uint8 image the authors start from (rounding undoes ``/ 255``)."""
    return np.round(np.clip(x, 0.0, 1.0) * 255.0).astype(np.uint8)


def _per_pil_image(x: np.ndarray, fn) -> np.ndarray:
    """Apply ``fn(PIL image) -> PIL image`` to ``x`` as one RGB image (3 channels) or to each
    channel as a grey image; return float in [0, 1]."""
    u = _to_uint8(x)
    planes = [u] if u.shape[2] == 3 else [u[..., k] for k in range(u.shape[2])]
    out = [np.asarray(fn(Image.fromarray(p)), dtype=np.float64) / 255.0 for p in planes]
    return out[0] if u.shape[2] == 3 else np.stack(out, axis=-1)


def _rgb_to_hsv(rgb: np.ndarray) -> np.ndarray:
    """RGB -> HSV in [0, 1] as ``skimage.color.rgb2hsv`` (a tie for the largest channel takes the
    blue, then the green formula; grey pixels get hue and saturation 0)."""
    r, g, b = np.moveaxis(rgb, -1, 0)
    v = rgb.max(-1)
    delta = v - rgb.min(-1)
    grey = delta == 0
    d = np.where(grey, 1.0, delta)
    h = np.select([b == v, g == v], [4.0 + (r - g) / d, 2.0 + (b - r) / d], (g - b) / d)
    h = np.where(grey, 0.0, (h / 6.0) % 1.0)
    s = np.where(grey, 0.0, delta / np.where(grey, 1.0, v))
    return np.stack([h, s, v], axis=-1)


#: hsv2rgb's six sectors: which of (v, t, p, q) is R, G, B
_SECTORS = np.array([[0, 1, 2], [3, 0, 2], [2, 0, 1], [2, 3, 0], [1, 2, 0], [0, 2, 3]])


def _hsv_to_rgb(hsv: np.ndarray) -> np.ndarray:
    """HSV -> RGB as ``skimage.color.hsv2rgb``."""
    h, s, v = np.moveaxis(hsv, -1, 0)
    hi = np.floor(h * 6.0)
    f = h * 6.0 - hi
    vals = np.stack([v, v * (1.0 - (1.0 - f) * s), v * (1.0 - s), v * (1.0 - f * s)], axis=-1)
    return np.take_along_axis(vals, _SECTORS[hi.astype(np.int64) % 6], axis=-1)


def _hsv_channel(x: np.ndarray, k: int, fn) -> np.ndarray:
    """``x`` with HSV channel ``k`` replaced by ``fn(channel)``."""
    hsv = _rgb_to_hsv(x)
    hsv[..., k] = fn(hsv[..., k])
    return _hsv_to_rgb(hsv)


def disk_kernel(radius: float, alias_blur: float) -> np.ndarray:
    """The authors' defocus kernel: an aliased disk of ``radius`` on a 17x17 grid (or
    (2 radius + 1)^2 beyond radius 8), normalised, then smoothed as ``cv2.GaussianBlur`` with a
    3x3 (5x5) kernel of width ``alias_blur`` and OpenCV's default border (reflect-101)."""
    half = 8 if radius <= 8 else int(radius)
    ksize = 3 if radius <= 8 else 5
    grid = np.arange(-half, half + 1)
    aliased = (grid[:, None] ** 2 + grid[None, :] ** 2 <= radius ** 2).astype(np.float64)
    aliased /= aliased.sum()
    t = np.arange(ksize) - (ksize - 1) / 2
    g = np.exp(-t ** 2 / (2.0 * alias_blur ** 2))
    g /= g.sum()
    return ndimage.correlate(aliased, np.outer(g, g), mode="mirror")


def _filter2d(x: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """``cv2.filter2D`` on each channel: correlation, border reflect-101."""
    return np.stack([ndimage.correlate(x[..., k], kernel, mode="mirror") for k in range(x.shape[2])], axis=-1)


# ---------------------------------------------------------------- corruptions

@suite.register("gaussian_noise")
def gaussian_noise(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Additive Gaussian noise of std c = [0.04, 0.06, 0.08, 0.09, 0.10]."""
    c = [0.04, 0.06, 0.08, 0.09, 0.10][severity - 1]
    return np.clip(x + rng.normal(scale=c, size=x.shape), 0.0, 1.0)


@suite.register("shot_noise")
def shot_noise(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Poisson noise: Poisson(c x) / c, c = [500, 250, 100, 75, 50]."""
    c = [500, 250, 100, 75, 50][severity - 1]
    return np.clip(rng.poisson(x * c) / c, 0.0, 1.0)


@suite.register("impulse_noise")
def impulse_noise(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Salt-and-pepper noise as ``skimage.util.random_noise(mode='s&p')``: each value is replaced
    with probability c = [0.01, 0.02, 0.03, 0.05, 0.07], by 1 or 0 with equal odds."""
    c = [0.01, 0.02, 0.03, 0.05, 0.07][severity - 1]
    flipped = rng.random(x.shape) < c
    salted = rng.random(x.shape) < 0.5
    return np.where(flipped, salted.astype(np.float64), x)


@suite.register("defocus_blur")
def defocus_blur(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Convolution with an anti-aliased disk (:func:`disk_kernel`); (radius, alias_blur) =
    [(0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)]."""
    c = [(0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)][severity - 1]
    return np.clip(_filter2d(x, disk_kernel(*c)), 0.0, 1.0)


@suite.register("brightness")
def brightness(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """HSV value + c, clipped to [0, 1]; c = [0.05, 0.1, 0.15, 0.2, 0.3]."""
    c = [0.05, 0.1, 0.15, 0.2, 0.3][severity - 1]
    if x.shape[2] != 3:
        return np.clip(x + c, 0.0, 1.0)
    return np.clip(_hsv_channel(x, 2, lambda v: np.clip(v + c, 0.0, 1.0)), 0.0, 1.0)


@suite.register("contrast")
def contrast(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Each channel pulled towards its mean: (x - mean) c + mean, c = [0.75, 0.5, 0.4, 0.3, 0.15]."""
    c = [0.75, 0.5, 0.4, 0.3, 0.15][severity - 1]
    means = x.mean(axis=(0, 1), keepdims=True)
    return np.clip((x - means) * c + means, 0.0, 1.0)


@suite.register("elastic_transform")
def elastic_transform(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """A random affine warp, then a smooth random displacement field; with s the image side,
    (alpha, sigma, affine shift) = s [(0, 0, 0.08), (0.05, 0.2, 0.07), (0.08, 0.06, 0.06),
    (0.1, 0.04, 0.05), (0.1, 0.03, 0.03)]."""
    h, w = x.shape[:2]
    size = min(h, w)
    alpha, sigma, shift = size * np.array([(0, 0, 0.08), (0.05, 0.2, 0.07), (0.08, 0.06, 0.06),
                                           (0.1, 0.04, 0.05), (0.1, 0.03, 0.03)][severity - 1])
    # cv2.getAffineTransform of three (col, row) points moved by U(-shift, shift), then
    # cv2.warpAffine (bilinear, border reflect-101): output (col, row) samples inverse @ (col, row, 1)
    centre, half = np.array([w // 2, h // 2], dtype=np.float64), size // 3
    src = np.array([centre + half, [centre[0] + half, centre[1] - half], centre - half])
    dst = src + rng.uniform(-shift, shift, size=src.shape)
    inverse = np.linalg.solve(np.hstack([dst, np.ones((3, 1))]), src).T
    matrix, offset = inverse[::-1, 1::-1], inverse[::-1, 2]
    warped = [ndimage.affine_transform(x[..., k], matrix, offset, order=1, mode="mirror") for k in range(x.shape[2])]
    # displacement: skimage.filters.gaussian(U(-1, 1), sigma, mode='reflect', truncate=3) * alpha
    dx, dy = (ndimage.gaussian_filter(rng.uniform(-1.0, 1.0, size=(h, w)), sigma, mode="reflect", truncate=3.0) * alpha
              for _ in range(2))
    rows, cols = np.mgrid[0:h, 0:w].astype(np.float64)
    coords = np.stack([rows + dy, cols + dx])
    out = [ndimage.map_coordinates(p, coords, order=1, mode="reflect") for p in warped]
    return np.clip(np.stack(out, axis=-1), 0.0, 1.0)


@suite.register("pixelate")
def pixelate(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Pillow BOX resize to int(c size), then back; c = [0.95, 0.9, 0.85, 0.75, 0.65]."""
    c = [0.95, 0.9, 0.85, 0.75, 0.65][severity - 1]
    h, w = x.shape[:2]
    small = (max(1, int(w * c)), max(1, int(h * c)))
    return _per_pil_image(x, lambda im: im.resize(small, Image.BOX).resize((w, h), Image.BOX))


@suite.register("jpeg_compression")
def jpeg_compression(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Pillow JPEG round trip at quality c = [80, 65, 58, 50, 40]."""
    c = [80, 65, 58, 50, 40][severity - 1]

    def jpeg(im: Image.Image) -> Image.Image:
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=c)
        return Image.open(buf)

    return _per_pil_image(x, jpeg)


@suite.register("speckle_noise")
def speckle_noise(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Multiplicative Gaussian noise x + x n, n of std c = [0.06, 0.1, 0.12, 0.16, 0.2]."""
    c = [0.06, 0.1, 0.12, 0.16, 0.2][severity - 1]
    return np.clip(x + x * rng.normal(scale=c, size=x.shape), 0.0, 1.0)


@suite.register("saturate")
def saturate(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """HSV saturation s a + b, clipped; (a, b) = [(0.3, 0), (0.1, 0), (1.5, 0), (2, 0.1), (2.5, 0.2)].
    A grey image has no saturation and is returned unchanged."""
    a, b = [(0.3, 0), (0.1, 0), (1.5, 0), (2, 0.1), (2.5, 0.2)][severity - 1]
    if x.shape[2] != 3:
        return x.copy()
    return np.clip(_hsv_channel(x, 1, lambda s: np.clip(s * a + b, 0.0, 1.0)), 0.0, 1.0)
