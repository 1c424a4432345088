"""The image transforms of the public training scripts, without torchvision.

* CIFAR training augmentation: random crop 32 with zero padding 4 and horizontal flip
  with probability 0.5 (as ``torchvision.transforms.RandomCrop(32, padding=4)`` +
  ``RandomHorizontalFlip()`` in every public CIFAR training script), vectorised over a
  uint8 batch with all randomness drawn from one ``torch.Generator``.
* ImageNet: ``RandomResizedCrop(224)`` (torchvision's algorithm, including its fallback
  to a centre crop) + horizontal flip for training; ``Resize(256)`` + ``CenterCrop(224)``
  for evaluation.  These act on PIL images, one at a time.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F

if TYPE_CHECKING:  # pragma: no cover
    from PIL import Image

__all__ = [
    "crop_flip_params",
    "crop_flip",
    "random_crop_flip",
    "random_resized_crop_params",
    "resized_crop",
    "resize_shorter",
    "resized_shape",
    "center_crop",
    "pil_to_uint8",
]


# ----------------------------------------------------------------------------- batched (CIFAR)


def _device(generator: Optional[torch.Generator]) -> torch.device:
    """Draws are made on the generator's device (CPU for ``None``)."""
    return generator.device if generator is not None else torch.device("cpu")


def crop_flip_params(
    batch_size: int, padding: int, generator: Optional[torch.Generator] = None
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw per-image crop offsets and flips: ``(top [B], left [B], flip [B] bool)``.

    Offsets are uniform in ``{0, ..., 2 * padding}`` (in the padded image); draws are
    made in the order top, left, flip, each as one vector over the batch.
    """
    device = _device(generator)
    top = torch.randint(0, 2 * padding + 1, (batch_size,), generator=generator, device=device)
    left = torch.randint(0, 2 * padding + 1, (batch_size,), generator=generator, device=device)
    flip = torch.rand(batch_size, generator=generator, device=device) < 0.5
    return top, left, flip


def crop_flip(
    images: torch.Tensor,
    top: torch.Tensor,
    left: torch.Tensor,
    flip: torch.Tensor,
    padding: int,
) -> torch.Tensor:
    """Crop each zero-padded image at (top, left) to its original size, then flip.

    ``images`` [B,C,H,W] (any dtype); image b is padded by ``padding`` zeros on every
    side, cropped to rows ``top[b] : top[b] + H`` and columns ``left[b] : left[b] + W``,
    and mirrored left-right where ``flip[b]``.  One gather for the whole batch.
    """
    b, c, h, w = images.shape
    padded = F.pad(images, (padding, padding, padding, padding)) if padding else images
    hp, wp = h + 2 * padding, w + 2 * padding
    device = images.device
    top, left = top.to(device, torch.int64), left.to(device, torch.int64)
    flip = flip.to(device, torch.bool)
    rows = top[:, None] + torch.arange(h, device=device)[None, :]  # [B, H]
    cols_fwd = torch.arange(w, device=device)
    cols = left[:, None] + torch.where(flip[:, None], cols_fwd.flip(0)[None, :], cols_fwd[None, :])  # [B, W]
    # one gather over the flattened padded plane (several times faster than 4-D fancy indexing)
    flat = (rows[:, :, None] * wp + cols[:, None, :]).reshape(b, 1, h * w).expand(b, c, h * w)
    return padded.reshape(b, c, hp * wp).gather(2, flat).reshape(b, c, h, w)


def random_crop_flip(
    images: torch.Tensor, padding: int = 4, generator: Optional[torch.Generator] = None
) -> torch.Tensor:
    """Random crop with zero padding + horizontal flip (p = 0.5) of a batch [B,C,H,W]."""
    top, left, flip = crop_flip_params(images.shape[0], padding, generator)
    return crop_flip(images, top, left, flip, padding)


# ----------------------------------------------------------------------------- PIL (ImageNet)


def _uniform(low: float, high: float, generator: Optional[torch.Generator]) -> float:
    return float(torch.empty(1, device=_device(generator)).uniform_(low, high, generator=generator).item())


def random_resized_crop_params(
    height: int,
    width: int,
    scale: Tuple[float, float] = (0.08, 1.0),
    ratio: Tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
    generator: Optional[torch.Generator] = None,
) -> Tuple[int, int, int, int]:
    """``(top, left, h, w)`` of a random crop, torchvision's ``RandomResizedCrop.get_params``.

    Up to 10 tries: area fraction ~ U(scale), log aspect ratio ~ U(log ratio); the first
    crop that fits is placed uniformly.  Otherwise a centre crop of the whole image
    clamped to the ratio range.
    """
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * _uniform(scale[0], scale[1], generator)
        aspect = math.exp(_uniform(log_ratio[0], log_ratio[1], generator))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            device = _device(generator)
            top = int(torch.randint(0, height - h + 1, (1,), generator=generator, device=device).item())
            left = int(torch.randint(0, width - w + 1, (1,), generator=generator, device=device).item())
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def resized_crop(img: "Image.Image", top: int, left: int, h: int, w: int, size: int) -> "Image.Image":
    """Crop ``(top, left, h, w)`` and resize to ``size`` x ``size`` (bilinear)."""
    from PIL import Image

    return img.crop((left, top, left + w, top + h)).resize((size, size), Image.BILINEAR)


def resized_shape(width: int, height: int, size: int) -> Tuple[int, int]:
    """(width, height) after resizing the shorter side to ``size`` (torchvision rounding)."""
    if width <= height:
        return size, int(size * height / width)
    return int(size * width / height), size


def resize_shorter(img: "Image.Image", size: int) -> "Image.Image":
    """Resize so the shorter side is ``size``, keeping the aspect ratio (bilinear)."""
    from PIL import Image

    new = resized_shape(img.width, img.height, size)
    if new == img.size:
        return img
    return img.resize(new, Image.BILINEAR)


def center_crop(img: "Image.Image", size: int) -> "Image.Image":
    """Central ``size`` x ``size`` crop (torchvision's rounding of the offsets)."""
    top = int(round((img.height - size) / 2.0))
    left = int(round((img.width - size) / 2.0))
    return img.crop((left, top, left + size, top + size))


def pil_to_uint8(img: "Image.Image") -> torch.Tensor:
    """An RGB PIL image as a uint8 tensor [3,H,W]."""
    array = np.asarray(img.convert("RGB"), dtype=np.uint8)
    return torch.from_numpy(array.copy()).permute(2, 0, 1).contiguous()
