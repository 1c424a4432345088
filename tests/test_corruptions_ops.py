"""The corruption primitives against independent references (explicit kernels, SciPy)."""
import math

import numpy as np
import pytest
from scipy import ndimage

from rsmooth.corruptions.ops import (affine_about_center, canny, clipped_zoom, gaussian, imagemagick_8bit,
                                     line_from_points, motion_blur, opencv_canny, opencv_distance_5x5, plasma_fractal,
                                     warp_affine)


def _rng(seed=0):
    return np.random.default_rng(seed)


def _kernel_1d(sigma, truncate=4.0):
    r = int(truncate * sigma + 0.5)
    i = np.arange(-r, r + 1)
    k = np.exp(-i * i / (2 * sigma * sigma))
    return k / k.sum()


@pytest.mark.parametrize("shape", [(12, 15), (12, 15, 3)])
def test_gaussian_is_a_separable_kernel_per_channel_with_nearest_edges(shape):
    x = _rng().random(shape)
    k = _kernel_1d(1.3)
    ref = ndimage.correlate1d(ndimage.correlate1d(x, k, axis=0, mode="nearest"), k, axis=1, mode="nearest")
    np.testing.assert_allclose(gaussian(x, 1.3), ref, atol=1e-12)


def test_gaussian_mode_and_truncate():
    x = _rng().random((9, 11))
    k = _kernel_1d(1.0, truncate=3.0)
    ref = ndimage.correlate1d(ndimage.correlate1d(x, k, axis=0, mode="reflect"), k, axis=1, mode="reflect")
    np.testing.assert_allclose(gaussian(x, 1.0, mode="reflect", truncate=3.0), ref, atol=1e-12)


def test_gaussian_with_a_zero_column_sigma_blurs_rows_only():
    x = _rng().random((10, 9, 1))
    ref = ndimage.correlate1d(x, _kernel_1d(0.7), axis=0, mode="nearest")
    np.testing.assert_allclose(gaussian(x, (0.7, 0.0)), ref, atol=1e-12)


def test_affine_about_center_keeps_the_centre_and_matches_mnist_c_at_28():
    m = affine_about_center(28, 28, rotation=0.4, shear=0.3, scale=(1.2, 0.9))
    np.testing.assert_allclose(m @ [13.5, 13.5, 1], [13.5, 13.5, 1], atol=1e-12)
    a1, a2 = m[0, :2]
    b1, b2 = m[1, :2]
    np.testing.assert_allclose(m[:2, 2], [13.5 * (1 - a1 - a2), 13.5 * (1 - b1 - b2)], atol=1e-12)
    # scikit-image's AffineTransform(scale, rotation, shear) linear part
    np.testing.assert_allclose(m[:2, :2], [[1.2 * math.cos(0.4), -0.9 * math.sin(0.7)],
                                           [1.2 * math.sin(0.4), 0.9 * math.cos(0.7)]], atol=1e-12)
    np.testing.assert_allclose(affine_about_center(9, 13, translation=(2, -1))[:2, 2], [2, -1])


@pytest.mark.parametrize("channels, transform", [(None, dict(rotation=0.5)), (2, dict(rotation=-1.0)),
                                                (None, dict(shear=0.6)), (2, dict(scale=(1 / .7, 1 / .7)))])
def test_warp_affine_about_the_centre_equals_scipy_affine_transform(channels, transform):
    H, W = 17, 20
    x = _rng(1).random((H, W) if channels is None else (H, W, channels))
    m = affine_about_center(H, W, **transform)
    # scipy maps output (row, col) to input (row, col): swap skimage's (col, row) axes
    p = np.array([[0, 1], [1, 0]])
    mat, off = p @ m[:2, :2] @ p, p @ m[:2, 2]
    planes = [x] if channels is None else [x[:, :, k] for k in range(channels)]
    ref = [ndimage.affine_transform(a, mat, off, order=1, mode="grid-constant", cval=0.0) for a in planes]
    ref = ref[0] if channels is None else np.stack(ref, axis=2)
    np.testing.assert_allclose(warp_affine(x, m), ref, atol=1e-10)


def test_warp_affine_integer_translation_is_a_shift_with_zeros():
    x = _rng().random((6, 7, 1))
    m = np.eye(3)
    m[:2, 2] = 2, -1  # output (col, row) samples input (col + 2, row - 1)
    ref = np.zeros_like(x)
    ref[1:, :-2] = x[:-1, 2:]
    np.testing.assert_array_equal(warp_affine(x, m), ref)
    np.testing.assert_array_equal(warp_affine(x, np.eye(3)), x)


@pytest.mark.parametrize("angle, step", [(0.0, (0, -1)), (90.0, (-1, 0)), (180.0, (0, 1))])
def test_motion_blur_of_a_point_is_the_one_sided_normalised_kernel(angle, step):
    radius, sigma = 10, 3.0
    x = np.zeros((50, 50, 1))
    x[25, 25] = 1.0
    i = np.arange(2 * radius + 1)  # ImageMagick's width for radius > 0: 2 ceil(radius) + 1
    k = np.exp(-i * i / (2 * sigma * sigma))
    k /= k.sum()
    ref = np.zeros_like(x)
    ref[25 + step[0] * i, 25 + step[1] * i, 0] = k  # output (r, c) reads input (r + i sin a, c + i cos a)
    np.testing.assert_allclose(motion_blur(x, radius, sigma, angle), ref, atol=1e-12)


def test_motion_blur_keeps_a_constant_image_and_extends_edges():
    x = np.full((8, 9, 2), 0.3)
    np.testing.assert_allclose(motion_blur(x, 15, 5, 33.0), x, atol=1e-12)
    ramp = np.tile(np.arange(9.0), (8, 1))[:, :, None]  # the last column repeats past the edge
    np.testing.assert_allclose(motion_blur(ramp, 4, 100.0, 0.0)[:, -1], ramp[:, -1], atol=1e-12)


def test_plasma_fractal_range_determinism_and_size():
    a = plasma_fractal(32, 2.0, _rng(3))
    assert a.shape == (32, 32) and a.min() == 0.0 and a.max() == 1.0
    np.testing.assert_array_equal(a, plasma_fractal(32, 2.0, _rng(3)))
    assert not np.array_equal(a, plasma_fractal(32, 2.0, _rng(4)))
    with pytest.raises(ValueError):
        plasma_fractal(30, 2.0, _rng())


def test_clipped_zoom_keeps_the_shape_and_does_not_mix_channels():
    x = _rng().random((16, 16, 3))
    np.testing.assert_allclose(clipped_zoom(x, 1.0), x, atol=1e-12)
    z = clipped_zoom(x, 1.5)
    assert z.shape == x.shape
    for k in range(3):
        np.testing.assert_allclose(z[:, :, k], clipped_zoom(x[:, :, k], 1.5), atol=1e-12)
    # zoom 2 of a 16-pixel image magnifies its central 8x8 crop (scipy zoom, order 1)
    np.testing.assert_allclose(clipped_zoom(x[:, :, 0], 2.0), ndimage.zoom(x[4:12, 4:12, 0], 2.0, order=1),
                               atol=1e-12)


def test_line_from_points_profile_and_column_limits():
    line = line_from_points(2.0, 5.0, 9.0, 5.0, (12, 14))
    one_off = math.log(1 - 1 / 2.3) + 1
    assert np.all(line[5, 2:9] == 1.0)
    np.testing.assert_allclose(line[[4, 6], 2:9], one_off)
    assert np.all(line[[0, 1, 2, 3, 7, 8, 9, 10, 11]] == 0)  # log(1 - d/2.3) + 1 < 0 from d = 2
    assert np.all(line[:, :2] == 0) and np.all(line[:, 9:] == 0)
    assert np.all(line_from_points(3, 1, 3, 7, (5, 5)) == 0)


def test_canny_finds_the_boundary_of_a_square():
    x = np.zeros((24, 24))
    x[6:18, 6:18] = 1.0
    edges = canny(x)
    square = np.zeros_like(x, dtype=bool)
    square[6:18, 6:18] = True
    ring = square ^ ndimage.binary_erosion(square) | (ndimage.binary_dilation(square) ^ square)
    assert edges.any() and not (edges & ~ring).any()  # only pixels next to the boundary
    for side in (edges[5:7, 7:17], edges[17:19, 7:17], edges[7:17, 5:7], edges[7:17, 17:19]):
        assert side.any(axis=0 if side.shape[0] == 2 else 1).all()  # each side is traced end to end
    assert not canny(np.full((10, 10), 0.5)).any()
    assert not canny(0.05 * x).any()  # below the low threshold


@pytest.mark.parametrize("sigma", [0.8, 3.0])
def test_motion_blur_without_radius_takes_imagemagicks_width(sigma):
    x = np.zeros((1, 80, 1))
    x[0, 60] = 1.0
    width = int((motion_blur(x, 0, sigma, 0.0) > 0).sum())

    def edge_weight(w):  # the outermost weight of a centred Gaussian kernel of width w
        k = np.exp(-np.arange(-(w // 2), w // 2 + 1) ** 2 / (2 * sigma * sigma))
        return k[-1] / k.sum()

    # the widest odd width whose edge weight stays at least one 16-bit quantum
    assert width % 2 == 1 and edge_weight(width) >= 1 / 65535 > edge_weight(width + 2)


def test_imagemagick_8bit_export_by_hand():
    """q = round(65535 x), level floor(q / 257): 100.6 and 100.99 go down to 100 (rounding gives 101);
    100.999 is within half a 16-bit step of 101 and gives 101; 8-bit levels are unchanged."""
    levels = np.arange(256)
    np.testing.assert_array_equal(imagemagick_8bit(levels / 255) * 255, levels)
    x = np.array([100.6, 100.99, 100.999, 0.4, 254.7]) / 255
    np.testing.assert_array_equal(imagemagick_8bit(x) * 255, [100, 100, 101, 0, 254])
    y = _rng().random(1000)
    ints = np.array([int(v * 65535 + 0.5) // 257 for v in y])  # integer arithmetic, as ImageMagick's
    np.testing.assert_array_equal(imagemagick_8bit(y) * 255, ints)


@pytest.mark.parametrize("step, edges", [(12, False), (13, False), (38, True)])
def test_opencv_canny_of_a_step_by_hand(step, edges):
    """Columns 0-2 dark, 3-5 at ``step``: Sobel |dx| = 4 step at columns 2 and 3, |dy| = 0 (replicated
    rows).  A maximum is > its left and >= its right neighbour: column 2 only, on every row,
    border rows included.  Edges need 4 step > 150 (step 38); 52 (step 13) is above the low
    threshold 50 but has no strong pixel."""
    u = np.zeros((6, 6), dtype=np.uint8)
    u[:, 3:] = step
    ref = np.zeros((6, 6), dtype=bool)
    ref[:, 2] = edges
    np.testing.assert_array_equal(opencv_canny(u, 50, 150), ref)


def test_opencv_canny_hysteresis_follows_weak_maxima_from_a_strong_one():
    """A vertical step whose lower half is weak (4 x 20 = 80 > 50) continues a strong upper half
    (4 x 40 = 160 > 150) and is kept; a separate weak step (column 8) is dropped, and so is the
    whole first step when its upper half is weak too."""
    u = np.zeros((8, 12), dtype=np.uint8)
    u[:4, 3:6], u[4:, 3:6] = 40, 20
    u[:, 9:] = 20
    edges = opencv_canny(u, 50, 150)
    assert edges[:3, 2].all() and edges[5:, 2].all() and not edges[:, 6:].any()
    u[:4, 3:6] = 20
    assert not opencv_canny(u, 50, 150).any()


# OpenCV's 5x5 chamfer weights in 16-bit fixed point: round(65536 float32(m)) for m = 1, 1.4, 2.1969
_A, _B, _C = 65536, 91750, 143976


def _chamfer(dr, dc):
    """The chamfer length of the offset: knight's moves (C) and straight (A) or diagonal (B) steps."""
    p, q = max(abs(dr), abs(dc)), min(abs(dr), abs(dc))
    return (_C * q + _A * (p - 2 * q)) if p >= 2 * q else (_C * (p - q) + _B * (2 * q - p))


def test_opencv_distance_5x5_of_one_point_by_hand():
    zero = np.zeros((7, 7), dtype=bool)
    zero[3, 3] = True
    d = opencv_distance_5x5(zero)
    assert d.dtype == np.float32
    hand = {(0, 0): 0, (0, 1): _A, (1, 1): _B, (0, 2): 2 * _A, (1, 2): _C, (2, 2): 2 * _B, (0, 3): 3 * _A,
            (1, 3): _C + _A, (2, 3): _C + _B, (3, 3): 3 * _B}
    for (dr, dc), v in hand.items():
        for r, c in {(3 + dr, 3 + dc), (3 - dc, 3 + dr), (3 - dr, 3 - dc), (3 + dc, 3 - dr)}:
            assert d[r, c] == np.float32(v / 65536), (r, c)


def test_opencv_distance_5x5_is_the_chamfer_length_to_the_nearest_zero():
    """Two raster passes against the brute-force minimum over all zero pixels."""
    for seed in range(4):
        zero = _rng(seed).random((11, 14)) < 0.04
        zero[5, 6] = True
        zr, zc = np.nonzero(zero)
        ref = [[min(_chamfer(r - a, c - b) for a, b in zip(zr, zc)) for c in range(14)] for r in range(11)]
        np.testing.assert_array_equal(opencv_distance_5x5(zero), np.float32(np.array(ref) / 65536))


def _drop_layers(n):
    for seed in range(n):
        liquid = gaussian(_rng(seed).normal(0.65, 0.3, (32, 32)), 1.0)
        liquid[liquid < 0.69] = 0
        yield (np.floor(liquid * 255) % 256).astype(np.uint8)


def test_opencv_canny_and_distance_equal_opencv():
    """Against OpenCV itself where it is installed (``pip install 'rsmooth[opencv]'``)."""
    cv2 = pytest.importorskip("cv2")
    for u in _drop_layers(40):
        edges = cv2.Canny(u, 50, 150) > 0
        np.testing.assert_array_equal(opencv_canny(u, 50, 150), edges)
        src = np.where(edges, 0, 255).astype(np.uint8)
        ours = np.minimum(opencv_distance_5x5(edges), 1e4)
        use_ipp = cv2.ipp.useIPP()
        try:
            cv2.ipp.setUseIPP(False)  # OpenCV's own code: the same integers
            np.testing.assert_array_equal(ours, np.minimum(cv2.distanceTransform(src, cv2.DIST_L2, 5), 1e4))
            cv2.ipp.setUseIPP(True)  # Intel IPP: the float32 sums of the same moves
            np.testing.assert_allclose(ours, np.minimum(cv2.distanceTransform(src, cv2.DIST_L2, 5), 1e4), atol=1e-4)
        finally:
            cv2.ipp.setUseIPP(use_ipp)
