"""Image primitives the corruption suites share, in NumPy and SciPy.

Each reproduces the library call the corruption authors used (scikit-image, ImageMagick through
Wand, OpenCV, SciPy), so that their parameters carry over: images are float64 ``[H, W, C]`` (or
``[H, W]`` where said) in [0, 1]; coordinates are ``(col, row)`` as in scikit-image.
"""
from __future__ import annotations

import math
from typing import Sequence, Tuple, Union

import numpy as np

__all__ = ["gaussian", "warp_affine", "affine_about_center", "motion_blur", "imagemagick_8bit", "plasma_fractal",
           "clipped_zoom", "line_from_points", "canny", "opencv_canny", "opencv_distance_5x5"]

_EPS = 1e-12  # ImageMagick's MagickEpsilon
_QUANTUM_SCALE = 1.0 / 65535.0  # ImageMagick's QuantumScale (Q16 builds, Wand's usual)



def ndimage():
    """``scipy.ndimage``, imported when a corruption first needs it rather than when rsmooth starts."""
    import scipy.ndimage

    return scipy.ndimage

def gaussian(x: np.ndarray, sigma: Union[float, Tuple[float, float]], mode: str = "nearest",
             truncate: float = 4.0) -> np.ndarray:
    """Gaussian blur of each channel over the two image axes, as ``skimage.filters.gaussian``.

    ``sigma``: one standard deviation, or ``(sigma_rows, sigma_cols)``; ``mode`` extends the
    borders as :func:`scipy.ndimage.gaussian_filter` and ``truncate`` cuts the kernel (in
    sigmas), with scikit-image's defaults.  ``x``: ``[H, W]`` or ``[H, W, C]``.
    """
    s = (float(sigma), float(sigma)) if np.isscalar(sigma) else tuple(float(v) for v in sigma)
    x = np.asarray(x, dtype=np.float64)
    return ndimage().gaussian_filter(x, s + (0.0,) * (x.ndim - 2), mode=mode, truncate=truncate)


def affine_about_center(H: int, W: int, rotation: float = 0.0, shear: float = 0.0,
                        scale: Tuple[float, float] = (1.0, 1.0),
                        translation: Tuple[float, float] = (0.0, 0.0)) -> np.ndarray:
    """3x3 matrix of ``skimage.transform.AffineTransform(scale, rotation, shear)`` that keeps the
    image centre ``((W-1)/2, (H-1)/2)`` fixed, then adds ``translation`` ``(col, row)``.

    The linear part is scikit-image's ``[[sx cos r, -sy sin(r+s)], [sx sin r, sy cos(r+s)]]``; the
    offset ``c - A c`` generalises MNIST-C's ``a3 = 13.5 (1 - a1 - a2)`` (a 28x28 image) to any size.
    """
    sx, sy = scale
    A = np.array([[sx * math.cos(rotation), -sy * math.sin(rotation + shear)],
                  [sx * math.sin(rotation), sy * math.cos(rotation + shear)]])
    c = np.array([(W - 1) / 2.0, (H - 1) / 2.0])
    m = np.eye(3)
    m[:2, :2] = A
    m[:2, 2] = c - A @ c + np.asarray(translation, dtype=np.float64)
    return m


def warp_affine(x: np.ndarray, inverse: np.ndarray) -> np.ndarray:
    """``skimage.transform.warp(x, inverse_map=AffineTransform(matrix=inverse))``: bilinear, zero
    outside the image.

    ``inverse`` (3x3) maps an output pixel's ``(col, row)`` to the input ``(col, row)`` it samples;
    a sample between the border and the zero outside mixes both, as scikit-image's ``mode='constant'``.
    ``x``: ``[H, W]`` or ``[H, W, C]``.
    """
    x = np.asarray(x, dtype=np.float64)
    H, W = x.shape[:2]
    rr, cc = np.mgrid[0:H, 0:W].astype(np.float64)
    m = np.asarray(inverse, dtype=np.float64)
    c_in = m[0, 0] * cc + m[0, 1] * rr + m[0, 2]
    r_in = m[1, 0] * cc + m[1, 1] * rr + m[1, 2]
    padded = np.pad(x, ((1, 1), (1, 1)) + ((0, 0),) * (x.ndim - 2))  # zeros around the image
    r0, c0 = np.floor(r_in), np.floor(c_in)
    dr, dc = r_in - r0, c_in - c0
    if x.ndim == 3:
        dr, dc = dr[..., None], dc[..., None]

    def at(r, c):
        inside = (r >= -1) & (r <= H) & (c >= -1) & (c <= W)
        ri = np.where(inside, r, -1).astype(np.int64) + 1
        ci = np.where(inside, c, -1).astype(np.int64) + 1
        v = padded[ri, ci]
        return np.where(inside[..., None], v, 0.0) if x.ndim == 3 else np.where(inside, v, 0.0)

    return ((1 - dr) * (1 - dc) * at(r0, c0) + (1 - dr) * dc * at(r0, c0 + 1)
            + dr * (1 - dc) * at(r0 + 1, c0) + dr * dc * at(r0 + 1, c0 + 1))


def _kernel_width(radius: float, sigma: float) -> int:
    """ImageMagick's ``GetOptimalKernelWidth1D``: ``2 ceil(radius) + 1`` for a positive radius,
    else the widest odd width whose edge weight of the normalised Gaussian stays perceptible."""
    if radius > _EPS:
        return int(2 * math.ceil(radius) + 1)
    g = abs(sigma)
    if g <= _EPS:
        return 3
    width = 5
    while True:
        j = (width - 1) // 2
        i = np.arange(-j, j + 1)
        k = np.exp(-(i * i) / (2 * g * g))
        if k[-1] / k.sum() < _QUANTUM_SCALE:
            return width - 2
        width += 2


def motion_blur(x: np.ndarray, radius: float, sigma: float, angle: float) -> np.ndarray:
    """ImageMagick's ``MotionBlurImage`` (Wand's ``motion_blur``): a one-sided Gaussian streak.

    Output pixel ``(col, row)`` is ``sum_i k_i x[row + round(i sin a), col + round(i cos a)]``
    for ``i = 0 .. width-1`` (``width`` from ImageMagick's ``GetOptimalKernelWidth1D``), with
    ``k_i`` proportional to ``exp(-i^2 / (2 sigma^2))`` summing to 1, ``a = angle`` in degrees,
    offsets rounded half up and pixels beyond the border replaced by the nearest edge pixel
    (ImageMagick's default virtual pixels).  ``x``: ``[H, W]`` or ``[H, W, C]``.
    """
    x = np.asarray(x, dtype=np.float64)
    width = _kernel_width(radius, sigma)
    s = abs(sigma) if abs(sigma) > _EPS else _EPS
    i = np.arange(width, dtype=np.float64)
    k = np.exp(-(i * i) / (2 * s * s))
    k /= k.sum()
    a = math.radians(angle)
    dc = np.ceil(i * math.cos(a) - 0.5).astype(np.int64)
    dr = np.ceil(i * math.sin(a) - 0.5).astype(np.int64)
    H, W = x.shape[:2]
    rows, cols = np.arange(H), np.arange(W)
    out = np.zeros_like(x)
    for w, oc, orr in zip(k, dc, dr):
        out += w * x[np.clip(rows + orr, 0, H - 1)][:, np.clip(cols + oc, 0, W - 1)]
    return out


def imagemagick_8bit(x: np.ndarray) -> np.ndarray:
    """``x`` in [0, 1] as ImageMagick (Q16) writes it to an 8-bit PNG: the 16-bit quantum
    ``q = round(65535 x)``, exported as ``floor(q / 257)``; returned as that level / 255.

    An 8-bit level ``v / 255`` comes back unchanged (``q = 257 v``); anything between two levels
    goes to the lower one, where rounding ``255 x`` would go up half the time."""
    q = np.round(np.clip(np.asarray(x, dtype=np.float64), 0.0, 1.0) * 65535.0)
    return np.floor(q / 257.0) / 255.0


def plasma_fractal(mapsize: int, wibbledecay: float, rng: np.random.Generator) -> np.ndarray:
    """Diamond-square height map ``[mapsize, mapsize]`` in [0, 1] (``mapsize`` a power of two),
    as the corruption authors' ``plasma_fractal``: the random term at a step is
    ``wibble * U(-wibble, wibble)``, ``wibble`` starting at 100 and divided by ``wibbledecay``."""
    if mapsize < 2 or mapsize & (mapsize - 1):
        raise ValueError(f"plasma_fractal: mapsize must be a power of two >= 2, got {mapsize}")
    m = np.zeros((mapsize, mapsize))
    step, wibble = mapsize, 100.0

    def wibbled_mean(a):
        return a / 4 + wibble * rng.uniform(-wibble, wibble, a.shape)

    while step >= 2:
        half = step // 2
        corners = m[0::step, 0::step]
        squares = corners + np.roll(corners, -1, axis=0)
        squares += np.roll(squares, -1, axis=1)
        m[half::step, half::step] = wibbled_mean(squares)
        centres = m[half::step, half::step]
        corners = m[0::step, 0::step]
        m[0::step, half::step] = wibbled_mean(centres + np.roll(centres, 1, axis=0)
                                              + corners + np.roll(corners, -1, axis=1))
        m[half::step, 0::step] = wibbled_mean(centres + np.roll(centres, 1, axis=1)
                                              + corners + np.roll(corners, -1, axis=0))
        step //= 2
        wibble /= wibbledecay
    m -= m.min()
    return m / m.max()


def clipped_zoom(x: np.ndarray, zoom_factor: float) -> np.ndarray:
    """Zoom into the centre: crop ``ceil(size / zoom_factor)``, ``scipy.ndimage.zoom`` it (order 1;
    a channel axis is not zoomed) and trim the result back to ``[H, W]``, as the authors' helper."""
    x = np.asarray(x, dtype=np.float64)
    H, W = x.shape[:2]
    ch, cw = int(np.ceil(H / zoom_factor)), int(np.ceil(W / zoom_factor))
    top, left = (H - ch) // 2, (W - cw) // 2
    z = ndimage().zoom(x[top:top + ch, left:left + cw], (zoom_factor, zoom_factor) + (1,) * (x.ndim - 2), order=1)
    tt, tl = (z.shape[0] - H) // 2, (z.shape[1] - W) // 2
    return z[tt:tt + H, tl:tl + W]


def line_from_points(c0: float, r0: float, c1: float, r1: float, shape: Sequence[int]) -> np.ndarray:
    """``[H, W]`` intensity of the line through ``(c0, r0)`` and ``(c1, r1)`` between columns
    ``floor(c0)`` and ``ceil(c1)``: ``log(1 - d / 2.3) + 1`` clipped to [0, 1] at vertical distance
    ``d`` from it (MNIST-C's ``line_from_points``, for ``shape`` instead of 28x28)."""
    H, W = int(shape[0]), int(shape[1])
    if c1 == c0:
        return np.zeros((H, W))
    rr, cc = np.arange(H, dtype=np.float64)[:, None], np.arange(W, dtype=np.float64)[None, :]
    slope = (r1 - r0) / (c1 - c0)
    dist = np.clip(np.abs(rr - (slope * (cc - c0) + r0)), 0, 2.3 - 1e-10)
    out = np.clip(np.log(1 - dist / 2.3) + 1, 0, 1)
    out[:, :max(int(math.floor(c0)), 0)] = 0
    out[:, max(int(math.ceil(c1)), 0):] = 0
    return out


# (neighbour "plus" 1, "plus" 2, "minus" 1, "minus" 2) offsets (drow, dcol) of the four gradient
# sectors of scikit-image's non-maximum suppression, in its order; ``same`` is whether the two
# gradient components share a sign, ``rows`` whether |d/drow| >= |d/dcol| (else <=).
_NMS_SECTORS = (
    (True, True, ((1, 0), (1, 1), (-1, 0), (-1, -1))),
    (True, False, ((0, 1), (1, 1), (0, -1), (-1, -1))),
    (False, False, ((0, 1), (-1, 1), (0, -1), (1, -1))),
    (False, True, ((-1, 0), (-1, 1), (1, 0), (1, -1))),
)


def canny(x2d: np.ndarray, sigma: float = 1.0, low: float = 0.1, high: float = 0.2) -> np.ndarray:
    """Canny edges of a 2-D image as ``skimage.feature.canny`` (bool ``[H, W]``).

    Gaussian smoothing (zero outside, divided by the smoothed all-ones mask), Sobel gradients,
    non-maximum suppression interpolating the gradient magnitude between the two neighbours in
    the gradient direction, no edges on the 1-pixel border, then hysteresis: 8-connected
    components of maxima with magnitude >= ``low`` that hold one >= ``high``.
    """
    x = np.asarray(x2d, dtype=np.float64)
    H, W = x.shape
    smoothed = gaussian(x, sigma, mode="constant") / (gaussian(np.ones_like(x), sigma, mode="constant")
                                                      + np.finfo(float).eps)
    gr, gc = ndimage().sobel(smoothed, axis=0), ndimage().sobel(smoothed, axis=1)
    ar, ac = np.abs(gr), np.abs(gc)
    mag = np.hypot(gr, gc)
    inner = np.zeros((H, W), dtype=bool)
    inner[1:-1, 1:-1] = True
    candidates = inner & (mag > 0)
    padded = np.pad(mag, 1)

    def shifted(d):
        return padded[1 + d[0]:1 + d[0] + H, 1 + d[1]:1 + d[1] + W]

    maxima = np.zeros((H, W), dtype=bool)
    for same, rows, (p1, p2, m1, m2) in _NMS_SECTORS:
        signs = (((gr >= 0) & (gc >= 0)) | ((gr <= 0) & (gc <= 0)) if same
                 else ((gr <= 0) & (gc >= 0)) | ((gr >= 0) & (gc <= 0)))
        pts = candidates & signs & ((ar >= ac) if rows else (ar <= ac))
        num, den = (ac, ar) if rows else (ar, ac)
        w = np.divide(num, den, out=np.zeros_like(num), where=den > 0)
        plus = shifted(p2) * w + shifted(p1) * (1 - w) <= mag
        minus = shifted(m2) * w + shifted(m1) * (1 - w) <= mag
        maxima[pts] = (plus & minus)[pts]
    low_mask = maxima & (mag >= low)
    labels, count = ndimage().label(low_mask, structure=np.ones((3, 3), dtype=bool))
    if count == 0:
        return low_mask
    keep = np.zeros(count + 1, dtype=bool)
    keep[1:] = np.asarray(ndimage().sum(maxima & (mag >= high), labels, np.arange(1, count + 1))) > 0
    return keep[labels]


_SOBEL_COLS = np.array([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]])
_TG22 = int(0.4142135623730950488016887242097 * (1 << 15) + 0.5)  # tan(22.5 deg) in OpenCV's 15-bit fixed point


def _nms_opencv(dx: np.ndarray, dy: np.ndarray, mag: np.ndarray) -> np.ndarray:
    """OpenCV's non-maximum suppression: the gradient's sector from ``|dy| / |dx|`` against
    tan 22.5 and tan 67.5 in 15-bit fixed point; a maximum is ``>`` the neighbour before it in
    the gradient direction and ``>=`` the one after (``>`` both on diagonals); zero outside."""
    H, W = mag.shape
    padded = np.pad(mag, 1)

    def at(dr, dc):
        return padded[1 + dr:1 + dr + H, 1 + dc:1 + dc + W]

    ax, ay = np.abs(dx), np.abs(dy) << 15
    tg22 = ax * _TG22
    horizontal, vertical = ay < tg22, ay > tg22 + (ax << 16)
    diagonal = np.where((dx ^ dy) < 0, (mag > at(-1, 1)) & (mag > at(1, -1)), (mag > at(-1, -1)) & (mag > at(1, 1)))
    return np.where(horizontal, (mag > at(0, -1)) & (mag >= at(0, 1)),
                    np.where(vertical, (mag > at(-1, 0)) & (mag >= at(1, 0)), diagonal))


def opencv_canny(u: np.ndarray, low: float, high: float) -> np.ndarray:
    """``cv2.Canny(u, low, high)`` (aperture 3, L1 gradient norm) of an 8-bit ``[H, W]`` image,
    as bool ``[H, W]``; integer arithmetic, so exact.

    3x3 Sobel gradients with replicated borders, magnitude ``|dx| + |dy|``, OpenCV's
    non-maximum suppression, then hysteresis: the 8-connected components of maxima above
    ``floor(low)`` that hold one above ``floor(high)``.  Border pixels can be edges (unlike
    :func:`canny`, scikit-image's)."""
    u = np.asarray(u, dtype=np.int64)
    dx = ndimage().correlate(u, _SOBEL_COLS, mode="nearest")
    dy = ndimage().correlate(u, _SOBEL_COLS.T, mode="nearest")
    mag = np.abs(dx) + np.abs(dy)
    candidates = _nms_opencv(dx, dy, mag) & (mag > math.floor(low))
    labels, count = ndimage().label(candidates, structure=np.ones((3, 3), dtype=bool))
    keep = np.zeros(count + 1, dtype=bool)
    keep[labels[candidates & (mag > math.floor(high))]] = True
    keep[0] = False
    return keep[labels]


_DIST_INIT = (2 ** 31 - 1) >> 2  # OpenCV's INIT_DIST0: "no zero pixel reached yet"
#: (drow, dcol, metric index) of the forward half of OpenCV's 5x5 chamfer mask; the backward half mirrors it
_CHAMFER_5X5 = ((-2, -1, 2), (-2, 1, 2), (-1, -2, 2), (-1, -1, 1), (-1, 0, 0), (-1, 1, 1), (-1, 2, 2))


def opencv_distance_5x5(zero: np.ndarray, metrics: Sequence[float] = (1.0, 1.4, 2.1969)) -> np.ndarray:
    """``cv2.distanceTransform(src, cv2.DIST_L2, 5)`` with ``zero`` (bool ``[H, W]``) where
    ``src`` is 0: float32 distance of each pixel to the nearest zero one along 5x5 chamfer moves
    (1 straight, 1.4 diagonal, 2.1969 knight's move, in 16-bit fixed point).

    OpenCV's two raster passes, a row at a time: the moves from the rows already passed, then the
    running minimum along the row (``min_k s_k + (j - k)``), which is its pixel-by-pixel loop.
    OpenCV builds with Intel IPP (the pip wheels) sum the same float32 metrics in floating point
    instead: less than 1e-4 apart, and no ``spatter`` value changed in ``bench/corruption_agreement.py``."""
    zero = np.asarray(zero, dtype=bool)
    H, W = zero.shape
    fixed = [int(np.rint(np.float32(m) * np.float32(1 << 16))) for m in metrics]
    t = np.full((H + 4, W + 4), _DIST_INIT, dtype=np.int64)
    steps = np.arange(W + 1, dtype=np.int64) * fixed[0]

    def row(r, sign):
        terms = [t[r + sign * dr, 2 + sign * dc:2 + sign * dc + W] + fixed[k] for dr, dc, k in _CHAMFER_5X5]
        s = np.minimum(np.min(terms, axis=0), t[r, 2:W + 2])
        s[zero[r - 2]] = 0
        run = np.concatenate([[_DIST_INIT], s[::sign]])  # the border, then the row in pass order
        t[r, 2:W + 2] = (np.minimum.accumulate(run - steps) + steps)[1:][::sign]

    for r in range(2, H + 2):
        row(r, 1)
    for r in range(H + 1, 1, -1):
        row(r, -1)
    return t[2:H + 2, 2:W + 2].astype(np.float32) * np.float32(2.0 ** -16)
