"""Every corruption of both suites is independent of the input array's memory layout."""
import numpy as np
import pytest

from rsmooth.corruptions import SUITES, corrupt


def _images(channels):
    """Two uint8 [N, C, 32, 32] images; the first (seed 1096) made contrast's channel means depend on the
    layout before corrupt() copied each image to a contiguous [H, W, C] array."""
    return np.stack([np.random.default_rng(s).integers(0, 256, (channels, 32, 32), dtype=np.uint8)
                     for s in (1096, 7)])


@pytest.mark.parametrize("suite, name", [(s, n) for s in SUITES for n in SUITES[s].names()])
def test_every_corruption_ignores_the_memory_layout(suite, name):
    x = _images(3 if suite == "cifar10-c" else 1)
    c = SUITES[suite].get(name)
    severity = c.severities[0] if c.severities else None
    y = corrupt(x, name, severity, suite=suite, seed=0, indices=[0, 1])
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)  # an NHWC array seen as NCHW
    np.testing.assert_array_equal(corrupt(nhwc, name, severity, suite=suite, seed=0, indices=[0, 1]), y)
    fortran = np.asfortranarray(x)
    np.testing.assert_array_equal(corrupt(fortran, name, severity, suite=suite, seed=0, indices=[0, 1]), y)


def test_contrast_is_computed_on_the_authors_layout():
    """(x - mean) c + mean with the channel means of a contiguous [H, W, C] array (the authors'
    ``np.array(image) / 255``), truncated to uint8."""
    x = _images(3)[:1]
    hwc = np.ascontiguousarray(x[0].transpose(1, 2, 0)) / 255.0
    means = hwc.mean(axis=(0, 1), keepdims=True)
    ref = (np.clip((hwc - means) * 0.75 + means, 0, 1) * 255).astype(np.uint8).transpose(2, 0, 1)
    np.testing.assert_array_equal(corrupt(x, "contrast", 1, suite="cifar10-c", seed=0, indices=[0])[0], ref)
