"""How closely the generated corruptions fixed in issue 25 follow the authors' generation code.

In the issue's terms (share of uint8 values that differ, largest difference in levels, mean
absolute difference), on Fashion-MNIST test images (1x28x28 for MNIST-C; tinted and padded to
3x32x32 for CIFAR-10-C, as ``bench/corruption_speed.py``), the random draws of both sides coupled:

- ``spatter`` severities 1-3 (CIFAR-10-C's water) against the authors' pipeline run by OpenCV
  (``pip install 'rsmooth[opencv]'``; the reference of ``tests/test_corruptions_cifar_c.py``),
  with OpenCV's Intel IPP path on (pip wheels' default) and off;
- ``motion_blur`` (both suites) and ``snow``: ImageMagick is not on this machine, so what is shown
  is what moved: the values where its 8-bit export (``ops.imagemagick_8bit``) differs from the
  rounding rsmooth used before, with the mean change;
- MNIST-C ``stripe`` on all 256 levels, and CIFAR-10-C ``contrast`` on an NHWC view against the
  contiguous NCHW array (both after the fix; before it, ``1 - x`` and the layout).

Usage::

    python bench/corruption_agreement.py            # about half a minute
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from rsmooth.corruptions import cifar_c, corrupt, ops
from rsmooth.data import get_dataset


def _row(label: str, a: np.ndarray, b: np.ndarray) -> str:
    d = np.abs(a.astype(np.int64) - b.astype(np.int64))
    return f"| {label} | {100 * (d > 0).mean():.4f}% | {d.max()} | {d.mean():.2g} |"


def _u8(y: np.ndarray) -> np.ndarray:
    return (np.clip(y, 0, 1) * 255).astype(np.uint8)


def _spatter(colour: np.ndarray) -> None:
    try:
        import cv2
    except ImportError:
        print("spatter: skipped (needs OpenCV: pip install 'rsmooth[opencv]')")
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_corruptions_cifar_c import _opencv_water

    params = [(0.62, 0.1, 0.7, 0.7), (0.65, 0.1, 0.8, 0.7), (0.65, 0.3, 1, 0.69)]
    for ipp in (True, False):
        cv2.ipp.setUseIPP(ipp)
        for severity, (mean, std, sigma, thr) in enumerate(params, start=1):
            ours, ref, wraps = [], [], 0
            for i, x8 in enumerate(colour):
                liquid = ops.gaussian(np.random.default_rng(i).normal(mean, std, x8.shape[:2]), sigma)
                liquid[liquid < thr] = 0
                wraps += bool((liquid >= 256 / 255).any())
                ref.append(_opencv_water(x8, liquid, 0.5, cv2))
                ours.append(_u8(cifar_c.spatter(x8 / 255.0, severity, np.random.default_rng(i))))
            print(_row(f"cifar10-c spatter {severity} vs OpenCV (IPP {'on' if ipp else 'off'}; "
                       f"{wraps} images wrap)", np.array(ours), np.array(ref)))


def _moved(label: str, images: np.ndarray, blur) -> None:
    """``blur(x, rng) -> float image``: the export against rounding, and the mean change."""
    new, old = [], []
    for i, x8 in enumerate(images):
        y = blur(x8 / 255.0, np.random.default_rng(i))
        new.append(_u8(ops.imagemagick_8bit(y)))
        old.append(np.round(np.clip(y, 0, 1) * 255).astype(np.uint8))
    new, old = np.array(new, dtype=np.int64), np.array(old, dtype=np.int64)
    print(_row(f"{label}: ImageMagick export vs rounding (mean change {np.mean(new - old):+.3f})", new, old))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=200, help="images per corruption and severity (default 200)")
    args = p.parse_args()
    grey = get_dataset("fashion-mnist", "test").get_batch(torch.arange(args.images))[0].numpy()
    grey8 = np.round(grey * 255).astype(np.uint8).transpose(0, 2, 3, 1)  # [N, 28, 28, 1]
    tint = np.array([1.0, 0.8, 0.6])
    colour = np.round(np.pad(grey8, ((0, 0), (2, 2), (2, 2), (0, 0))) * tint).astype(np.uint8)  # [N, 32, 32, 3]
    print("| corruption (severity) | values differing | max levels | mean abs levels |")
    print("| --- | ---: | ---: | ---: |")
    _spatter(colour)
    for severity, (radius, sigma) in enumerate([(6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)], start=1):
        _moved(f"cifar10-c motion_blur {severity}", colour,
               lambda x, rng: ops.motion_blur(x, radius, sigma, rng.uniform(-45, 45)))
    _moved("mnist-c motion_blur 1", grey8, lambda x, rng: ops.motion_blur(x, 10, 3, rng.uniform(-45, 45)))
    for severity in range(1, 6):  # snow's blurred layer: the draws of cifar_c.snow, up to the export
        mean, std, zoom, thr, radius, sigma = [(0.1, 0.2, 1, 0.6, 8, 3), (0.1, 0.2, 1, 0.5, 10, 4),
                                               (0.15, 0.3, 1.75, 0.55, 10, 4), (0.25, 0.3, 2.25, 0.6, 12, 6),
                                               (0.3, 0.3, 1.25, 0.65, 14, 12)][severity - 1]

        def layer(x, rng):
            flakes = ops.clipped_zoom(rng.normal(mean, std, x.shape[:2] + (1,)), zoom)
            flakes = np.floor(np.clip(np.where(flakes < thr, 0, flakes), 0, 1) * 255) / 255
            return ops.motion_blur(flakes, radius, sigma, rng.uniform(-135, -45))

        _moved(f"cifar10-c snow {severity} (the flake layer)", colour, layer)
    levels = np.arange(256, dtype=np.uint8).reshape(1, 1, 8, 32)
    ref = 255 - levels.astype(np.int64)
    ref[..., 8:24] = levels[..., 8:24]
    print(_row("mnist-c stripe, all 256 levels, vs 255 - v", corrupt(levels, "stripe", None, suite="mnist-c",
                                                                      seed=0, indices=[0]), ref))
    before = ((1 - levels / 255.0) * 255).astype(np.uint8)  # what stripe computed before (1 - x, truncated)
    print(_row("mnist-c stripe before the fix (1 - x), the 256 levels inverted", before.ravel(), 255 - levels.ravel()))
    nchw, idx = colour.transpose(0, 3, 1, 2), range(len(colour))
    for severity in (1, 5):
        a = corrupt(np.ascontiguousarray(nchw), "contrast", severity, suite="cifar10-c", seed=0, indices=idx)
        b = corrupt(nchw, "contrast", severity, suite="cifar10-c", seed=0, indices=idx)
        print(_row(f"cifar10-c contrast {severity}: NHWC view vs contiguous NCHW", a, b))


if __name__ == "__main__":
    main()
