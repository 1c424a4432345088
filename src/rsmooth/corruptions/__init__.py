"""Common corruptions generated on the fly, for datasets with no published corrupted copy.

Two suites of definitions, each written from its authors' generation code (NumPy, SciPy and
Pillow only):

- ``mnist-c``: the 15 corruptions of MNIST-C (Mu & Gilmer 2019, MNIST-C: A Robustness
  Benchmark for Computer Vision, arXiv 1906.02337), each at the severity the published dataset
  uses unless another is asked for, plus ``identity``; tuned for 28x28 grey images.
- ``cifar10-c``: the corruptions of CIFAR-10-C (Hendrycks & Dietterich 2019, Benchmarking
  Neural Network Robustness to Common Corruptions and Perturbations, arXiv 1903.12261) that need
  no external images (all but frost), severities 1-5; tuned for 32x32 colour images.

A corruption is a pure function ``fn(x, severity, rng) -> y`` of one image ``x`` (float64
[H, W, C] in [0, 1]) drawing its randomness from ``rng`` (a ``numpy.random.Generator``); it
returns an array of the same shape (values are clipped to [0, 1] by :func:`corrupt`).
:func:`corrupt` seeds one generator per example from ``(seed, suite, name, severity, index)``,
so an image's corruption does not depend on the batch, the order, the process it is made in or the
memory layout of the array (each image is copied to a contiguous ``[H, W, C]`` array, as the
authors' ``np.array(image)``).

Example::

    from rsmooth.corruptions import corrupt, SUITES
    y = corrupt(images_uint8, "fog", None, suite="mnist-c", seed=0, indices=range(len(images_uint8)))
"""
from __future__ import annotations

from typing import Dict, Iterable, Optional, Sequence, Tuple

import numpy as np

from ..errors import RsmoothError, check
from . import cifar_c, mnist_c  # noqa: F401  (register the suites' corruptions)
from .suites import SUITES, Corruption, CorruptionFn, Suite  # noqa: F401  (CorruptionFn: importable from here)

__all__ = ["Corruption", "Suite", "SUITES", "BENCHMARK", "HELD_OUT", "get_suite", "default_suite", "corrupt",
           "resolve_severity"]

#: The corruptions each benchmark averages over (mACR, mAcc), in the authors' order: CIFAR-10-C's
#: 15 (Hendrycks & Dietterich 2019, Sec. 3; the CIFAR-100-C files are the same) and MNIST-C's 15
#: (Mu & Gilmer 2019, Sec. 3; ``identity`` is the clean test set).  File names as published.
BENCHMARK: Dict[str, Tuple[str, ...]] = {
    "cifar10-c": ("gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur",
                  "motion_blur", "zoom_blur", "snow", "frost", "fog", "brightness", "contrast",
                  "elastic_transform", "pixelate", "jpeg_compression"),
    "mnist-c": ("shot_noise", "impulse_noise", "glass_blur", "motion_blur", "shear", "scale", "rotate",
                "brightness", "translate", "stripe", "fog", "spatter", "dotted_line", "zigzag", "canny_edges"),
}
#: CIFAR-10-C's four held-out corruptions (published for validation, outside the mean).
HELD_OUT: Dict[str, Tuple[str, ...]] = {
    "cifar10-c": ("speckle_noise", "gaussian_blur", "spatter", "saturate"),
    "mnist-c": (),
}

def get_suite(name: str) -> Suite:
    """The :class:`Suite` called ``name``; an unknown name lists the suites."""
    check(name in SUITES, f"unknown corruption suite {name!r}; choose one of: {', '.join(SUITES)}")
    return SUITES[name]


def default_suite(channels: int) -> str:
    """``mnist-c`` for grey images, ``cifar10-c`` for colour ones."""
    return "mnist-c" if channels == 1 else "cifar10-c"


def resolve_severity(c: Corruption, severity: Optional[int], suite: str) -> Optional[int]:
    """``severity``, or the corruption's default; an error names the levels it has."""
    if severity is None:
        return c.default if c.severities else None
    if not c.severities:
        raise RsmoothError(f"corruption {c.name} ({suite}) has no severity levels; drop --severity")
    check(severity in c.severities, f"corruption {c.name} ({suite}) has severities "
          f"{', '.join(map(str, c.severities))}, not {severity}")
    return int(severity)


def corrupt(images: np.ndarray, name: str, severity: Optional[int], *, suite: str, seed: int,
            indices: Iterable[int]) -> np.ndarray:
    """Corrupt ``images`` (uint8, or float in [0, 1]; [N, C, H, W]) into uint8 [N, C, H, W].

    Image ``k`` is example ``indices[k]``: its generator is seeded from ``(seed, suite, name,
    severity, indices[k])``.  ``severity`` ``None`` means the corruption's default.  The result is
    quantised as the published datasets are (``uint8(255 * clip(y, 0, 1))``, truncating).
    """
    from ..seeding import derive_seed  # imports torch: only when corrupting (rsmooth list stays light)

    s = get_suite(suite)
    c = s.get(name)
    level = resolve_severity(c, severity, suite)
    images = np.asarray(images)
    check(images.ndim == 4, f"corrupt: images must be [N, C, H, W], got shape {images.shape}")
    idx: Sequence[int] = list(indices)
    check(len(idx) == len(images), f"corrupt: {len(images)} images but {len(idx)} indices")
    x = images.astype(np.float64) / 255.0 if images.dtype == np.uint8 else images.astype(np.float64)
    out = np.empty(images.shape, dtype=np.uint8)
    for k, i in enumerate(idx):
        rng = np.random.default_rng(derive_seed(seed, "corrupt", suite, name, level, int(i)))
        hwc = np.ascontiguousarray(x[k].transpose(1, 2, 0))  # the authors' layout, whatever the input's
        y = np.asarray(c.fn(hwc, level, rng), dtype=np.float64)
        check(y.shape == hwc.shape, f"corruption {name} returned shape {y.shape} for an image of shape {hwc.shape}")
        out[k] = (np.clip(y, 0.0, 1.0) * 255.0).astype(np.uint8).transpose(2, 0, 1)
    return out
