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
image given as ``uint8 / 255`` round-trips exactly) and to the random streams (NumPy's
``Generator`` here, the legacy global state there): the noises, ``contrast``, ``brightness`` and
``saturate`` (scikit-image's HSV conversion), ``pixelate`` and ``jpeg_compression`` (Pillow, as
the authors), ``defocus_blur`` (OpenCV's kernel and border rule), ``elastic_transform``
(OpenCV's affine warp, sample positions rounded to 1/32 pixel as it does), ``motion_blur`` and
``snow`` (a NumPy rendering of ImageMagick's ``MotionBlurImage`` and of its 8-bit export,
:func:`ops.imagemagick_8bit`), ``spatter`` (OpenCV's Canny and 5x5 chamfer distance transform in
its integer arithmetic, :func:`ops.opencv_canny` and :func:`ops.opencv_distance_5x5`) and, given
the shared primitives of :mod:`rsmooth.corruptions.ops`, ``gaussian_blur``, ``glass_blur``,
``zoom_blur`` and ``fog``.  ``bench/corruption_agreement.py`` measures what is left.
"""
from __future__ import annotations

import io

import numpy as np
from PIL import Image

from . import ops
from .suites import SUITES

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
    return ops.ndimage().correlate(aliased, np.outer(g, g), mode="mirror")


def _filter2d(x: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """``cv2.filter2D`` on each channel: correlation, border reflect-101."""
    return np.stack([ops.ndimage().correlate(x[..., k], kernel, mode="mirror") for k in range(x.shape[2])], axis=-1)


def _box3(x: np.ndarray) -> np.ndarray:
    """``cv2.blur(x, (3, 3))`` of a 2-D image: the 3x3 mean, border reflect-101."""
    return ops.ndimage().correlate(x, np.ones((3, 3)), mode="mirror") / 9.0


#: cv2.COLOR_RGB2GRAY's weights
_LUMA = np.array([0.299, 0.587, 0.114])


def _luminance(x: np.ndarray) -> np.ndarray:
    """``cv2.cvtColor(x, COLOR_RGB2GRAY)`` as ``[H, W, 1]``; a grey image is its own luminance."""
    return x @ _LUMA[:, None] if x.shape[2] == 3 else x.mean(axis=2, keepdims=True)


def _colour(rgb, channels: int) -> np.ndarray:
    """An RGB colour (0-255) as a pixel of a ``channels``-channel image (grey: its luminance)."""
    rgb = np.asarray(rgb, dtype=np.float64) / 255.0
    return rgb if channels == 3 else np.full(channels, rgb @ _LUMA)


def _equalize_hist(u: np.ndarray) -> np.ndarray:
    """``cv2.equalizeHist`` of a uint8 image: the lowest level present goes to 0, the others to
    round(255 cdf / (n - count of that level)) in float32, as OpenCV computes it."""
    hist = np.bincount(u.ravel(), minlength=256)
    first = int(np.flatnonzero(hist)[0])
    if hist[first] == u.size:
        return u.copy()
    scale = np.float32(255.0) / np.float32(u.size - hist[first])
    lut = np.zeros(256, dtype=np.float32)
    lut[first + 1:] = np.cumsum(hist[first + 1:]).astype(np.float32) * scale
    return np.clip(np.rint(lut), 0, 255).astype(np.uint8)[u]


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


@suite.register("glass_blur")
def glass_blur(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Gaussian blur, pixels moved locally, blur again; (sigma, max_delta, iterations) =
    [(0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2)].

    As in the authors' code the blurred image is truncated to uint8, and each "swap" copies pixel
    (h + dy, w + dx) onto (h, w) (their tuple swap of NumPy views), dx, dy in [-delta, delta).
    """
    sigma, delta, iterations = [(0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2)][severity - 1]
    h, w = x.shape[:2]
    u = (ops.gaussian(x, sigma) * 255.0).astype(np.uint8)
    rows, cols = np.arange(h - delta, delta, -1)[:, None], np.arange(w - delta, delta, -1)[None, :]
    for _ in range(iterations):
        d = rng.integers(-delta, delta, size=(rows.size, cols.size, 2))  # (dx, dy), in the authors' visiting order
        # the authors visit (h, w) downwards; with delta 1 every source is up-left, visited later,
        # so their sequential copies read unmoved pixels: one gather
        u[rows, cols] = u[rows + d[..., 1], cols + d[..., 0]]
    return np.clip(ops.gaussian(u / 255.0, sigma), 0.0, 1.0)


@suite.register("motion_blur")
def motion_blur(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """ImageMagick motion blur at an angle drawn from U(-45, 45) degrees; (radius, sigma) =
    [(6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)], read back from ImageMagick's 8-bit PNG
    (:func:`ops.imagemagick_8bit`)."""
    radius, sigma = [(6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)][severity - 1]
    return ops.imagemagick_8bit(ops.motion_blur(x, radius, sigma, rng.uniform(-45, 45)))


@suite.register("zoom_blur")
def zoom_blur(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Mean of the image and its centre zooms by factors np.arange(1, e, 0.01),
    e = [1.06, 1.11, 1.16, 1.21, 1.26]."""
    factors = np.arange(1, [1.06, 1.11, 1.16, 1.21, 1.26][severity - 1], 0.01)
    out = x + sum(ops.clipped_zoom(x, z) for z in factors)
    return np.clip(out / (len(factors) + 1), 0.0, 1.0)


@suite.register("snow")
def snow(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Motion-blurred zoomed Gaussian flakes added twice (the layer and its 180-degree rotation)
    to a brightened image; (mean, std, zoom, threshold, blur radius, blur sigma, blend) =
    [(0.1, 0.2, 1, 0.6, 8, 3, 0.95), (0.1, 0.2, 1, 0.5, 10, 4, 0.9), (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9),
    (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85), (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8)]; blur angle U(-135, -45),
    the blurred layer read back from ImageMagick's 8-bit PNG."""
    mean, std, zoom, threshold, radius, sigma, blend = [
        (0.1, 0.2, 1, 0.6, 8, 3, 0.95), (0.1, 0.2, 1, 0.5, 10, 4, 0.9), (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9),
        (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85), (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8)][severity - 1]
    layer = ops.clipped_zoom(rng.normal(loc=mean, scale=std, size=x.shape[:2] + (1,)), zoom)
    layer[layer < threshold] = 0
    layer = (np.clip(layer, 0.0, 1.0) * 255.0).astype(np.uint8) / 255.0  # the authors' grey PNG
    layer = ops.imagemagick_8bit(ops.motion_blur(layer, radius, sigma, rng.uniform(-135, -45)))
    x = blend * x + (1 - blend) * np.maximum(x, _luminance(x) * 1.5 + 0.5)
    return np.clip(x + layer + np.rot90(layer, k=2), 0.0, 1.0)


@suite.register("fog")
def fog(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Plasma-fractal haze: (x + a plasma) max(x) / (max(x) + a); (a, wibble decay) =
    [(0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)].  The fractal is made on the smallest
    power-of-two square that covers the image (32 for CIFAR) and cropped to it."""
    amount, decay = [(0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)][severity - 1]
    h, w = x.shape[:2]
    mapsize = max(2, 1 << (max(h, w) - 1).bit_length())
    top = x.max()
    haze = amount * ops.plasma_fractal(mapsize, decay, rng)[:h, :w, None]
    return np.clip((x + haze) * top / (top + amount), 0.0, 1.0)


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
    # cv2.warpAffine (bilinear, border reflect-101): output (col, row) samples inverse @ (col, row, 1),
    # which OpenCV computes in 1/1024-pixel fixed point and rounds to 1/32 pixel
    centre, half = np.array([w // 2, h // 2], dtype=np.float64), size // 3
    src = np.array([centre + half, [centre[0] + half, centre[1] - half], centre - half])
    dst = src + rng.uniform(-shift, shift, size=src.shape)
    inverse = np.linalg.solve(np.hstack([dst, np.ones((3, 1))]), src).T
    rows, cols = np.mgrid[0:h, 0:w].astype(np.float64)
    at = [np.floor((np.rint((a[1] * rows + a[2]) * 1024) + np.rint(a[0] * cols * 1024) + 16) / 32) / 32
          for a in inverse[::-1]]  # source row, source col
    warped = [ops.ndimage().map_coordinates(x[..., k], at, order=1, mode="mirror") for k in range(x.shape[2])]
    dx, dy = (ops.gaussian(rng.uniform(-1.0, 1.0, size=(h, w)), sigma, mode="reflect", truncate=3.0) * alpha
              for _ in range(2))
    coords = np.stack([rows + dy, cols + dx])
    out = [ops.ndimage().map_coordinates(p, coords, order=1, mode="reflect") for p in warped]
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


@suite.register("gaussian_blur")
def gaussian_blur(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Gaussian blur (``skimage.filters.gaussian``) of width c = [0.4, 0.6, 0.7, 0.8, 1]."""
    c = [0.4, 0.6, 0.7, 0.8, 1][severity - 1]
    return np.clip(ops.gaussian(x, c), 0.0, 1.0)


@suite.register("spatter")
def spatter(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Water drops (severities 1-3) or mud (4-5) from a thresholded blurred Gaussian field;
    (mean, std, blur sigma, threshold, intensity / mud sigma, mud) = [(0.62, 0.1, 0.7, 0.7, 0.5, 0),
    (0.65, 0.1, 0.8, 0.7, 0.5, 0), (0.65, 0.3, 1, 0.69, 0.5, 0), (0.65, 0.1, 0.7, 0.69, 0.6, 1),
    (0.65, 0.1, 0.5, 0.68, 0.6, 1)].

    Water, as the authors' OpenCV calls: the drops as uint8 ``(liquid * 255).astype(np.uint8)``,
    which wraps modulo 256 where ``liquid >= 256 / 255`` (severity 3; the authors' behaviour, kept),
    their edges (``Canny(50, 150)``, :func:`ops.opencv_canny`), the distance to them (5x5 chamfer,
    :func:`ops.opencv_distance_5x5`) truncated at 20, box blur to uint8, histogram equalisation,
    an emboss kernel and a box blur (as OpenCV on uint8) shade pale turquoise drops.  Mud: drops
    smoothed by ``mud sigma``, kept where >= 0.8, painted brown.
    """
    mean, std, sigma, threshold, k, mud = [(0.62, 0.1, 0.7, 0.7, 0.5, 0), (0.65, 0.1, 0.8, 0.7, 0.5, 0),
                                           (0.65, 0.3, 1, 0.69, 0.5, 0), (0.65, 0.1, 0.7, 0.69, 0.6, 1),
                                           (0.65, 0.1, 0.5, 0.68, 0.6, 1)][severity - 1]
    liquid = ops.gaussian(rng.normal(loc=mean, scale=std, size=x.shape[:2]), sigma)
    liquid[liquid < threshold] = 0
    if mud:
        m = ops.gaussian((liquid > threshold).astype(np.float64), k)
        m[m < 0.8] = 0
        m = m[..., None]
        return np.clip(x * (1 - m) + m * _colour((63, 42, 20), x.shape[2]), 0.0, 1.0)
    return _water(x, liquid, k)


def _water(x: np.ndarray, liquid: np.ndarray, k: float) -> np.ndarray:
    """``spatter``'s water drops from the thresholded liquid layer (``[H, W]``, >= 0), at intensity ``k``."""
    drops = np.floor(liquid * 255.0) % 256  # the authors' uint8 cast: 256 and above wrap
    dist = np.minimum(ops.opencv_distance_5x5(ops.opencv_canny(drops, 50, 150)), 20.0)
    dist = _box3(dist.astype(np.float64)).astype(np.uint8)
    dist = _equalize_hist(dist).astype(np.float64)
    emboss = np.array([[-2, -1, 0], [-1, 1, 1], [0, 1, 2]], dtype=np.float64)
    dist = np.clip(ops.ndimage().correlate(dist, emboss, mode="mirror"), 0, 255)
    dist = np.round(_box3(dist))
    m = drops * dist
    top = m.max()
    m = k * (m / top if top > 0 else m)
    return np.clip(x + m[..., None] * _colour((175, 238, 238), x.shape[2]), 0.0, 1.0)


@suite.register("saturate")
def saturate(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """HSV saturation s a + b, clipped; (a, b) = [(0.3, 0), (0.1, 0), (1.5, 0), (2, 0.1), (2.5, 0.2)].
    A grey image has no saturation and is returned unchanged."""
    a, b = [(0.3, 0), (0.1, 0), (1.5, 0), (2, 0.1), (2.5, 0.2)][severity - 1]
    if x.shape[2] != 3:
        return x.copy()
    return np.clip(_hsv_channel(x, 1, lambda s: np.clip(s * a + b, 0.0, 1.0)), 0.0, 1.0)
