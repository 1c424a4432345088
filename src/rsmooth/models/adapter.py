"""The input a standard classifier expects, made from [0, 1] pixels: resized to its size and
normalised with its mean and std (``rsmooth certify --classifier-input``; Carlini et al. 2023,
(Certified!!) Adversarial Robustness for Free!, arXiv 2206.10550: the authors' ``DRM.py`` resizes the
denoised image bicubic with antialias to 512 for BEiT-large and to 224 for the CIFAR-10 ViT, both
normalised with mean = std = 0.5).  Resizing and normalising are part of the base classifier, so
the certificate is the one of the images certified, at their own size."""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import check

#: interpolation modes of torch.nn.functional.interpolate the adapter offers (antialias: the
#: first two)
RESIZE_MODES = ("bicubic", "bilinear", "nearest", "area")


class ClassifierInput(nn.Module):
    """The classifier's input: pixels in [0, 1], ``[B, C, H, W]`` -> ``[B, C, h, w]`` resized (``mode``, with ``antialias`` for bicubic
    and bilinear) and normalised ((x - mean) / std per channel) for a classifier.

    Args:
        size: (h, w) or one int for a square; None: no resizing.
        mode: one of :data:`RESIZE_MODES`.
        antialias: antialias when shrinking (bicubic and bilinear only; the authors' choice).
        mean: per-channel means in [0, 1] pixel units (one value: all channels); None: none.
        std: per-channel standard deviations, with ``mean``.

    Example:
        ```python
        beit_input = ClassifierInput(512, mean=[0.5], std=[0.5])  # Carlini et al.'s BEiT-large
        ```
    """

    def __init__(self, size: Optional[Any] = None, mode: str = "bicubic", antialias: bool = True,
                 mean: Optional[Sequence[float]] = None, std: Optional[Sequence[float]] = None) -> None:
        super().__init__()
        check(mode in RESIZE_MODES, f"classifier input resize mode must be one of {', '.join(RESIZE_MODES)}, "
                                    f"got {mode!r}")
        check((mean is None) == (std is None), "the classifier input's mean and std go together: give both or neither")
        self.size = None if size is None else _size(size)
        self.mode, self.antialias = mode, bool(antialias) and mode in ("bicubic", "bilinear")
        self.mean = None if mean is None else tuple(float(m) for m in mean)
        self.std = None if std is None else tuple(float(s) for s in std)
        if self.std is not None:
            check(all(s > 0 for s in self.std), f"the classifier input's std must be positive, got {self.std}")

    def spec(self) -> Dict[str, Any]:
        """What a sidecar records (and :func:`parse_classifier_input` reads back as a string)."""
        return {"size": None if self.size is None else list(self.size), "mode": self.mode,
                "antialias": self.antialias, "mean": self.mean and list(self.mean), "std": self.std and list(self.std)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.size is not None and tuple(x.shape[-2:]) != self.size:
            corners = {} if self.mode in ("nearest", "area") else {"align_corners": False}
            x = F.interpolate(x, self.size, mode=self.mode, antialias=self.antialias, **corners)
        if self.mean is not None:
            c = x.shape[1]
            check(len(self.mean) in (1, c) and len(self.std) in (1, c),
                  f"the classifier input's mean and std need 1 or {c} values (one per channel), got "
                  f"{len(self.mean)} and {len(self.std)}")
            shape = (1, -1, 1, 1)
            mean = torch.tensor(self.mean, dtype=x.dtype, device=x.device).view(shape)
            std = torch.tensor(self.std, dtype=x.dtype, device=x.device).view(shape)
            x = (x - mean) / std
        return x


def _size(size: Any) -> Tuple[int, int]:
    sizes = (size, size) if isinstance(size, int) else tuple(size)
    check(len(sizes) == 2 and all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in sizes),
          f"the classifier input's size must be a positive int or (height, width), got {size!r}")
    return sizes  # type: ignore[return-value]


def parse_classifier_input(text: str) -> ClassifierInput:
    """``--classifier-input size=512,mode=bicubic,mean=0.5,std=0.5``: comma-separated key=value
    (size: N or HxW; mode: :data:`RESIZE_MODES`; antialias: yes/no; mean, std: one value or one per
    channel joined by ``/``, e.g. ``mean=0.485/0.456/0.406``)."""
    fields: Dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        check(bool(sep) and key in ("size", "mode", "antialias", "mean", "std"),
              f"--classifier-input {text!r}: expected comma-separated size=N|HxW, mode=..., antialias=yes|no, "
              f"mean=M[/M/M], std=S[/S/S], got {part!r}")
        if key == "antialias":
            check(value in ("yes", "no"), f"--classifier-input antialias is yes or no, got {value!r}")
            fields[key] = value == "yes"
        elif key == "mode":
            fields[key] = value
        else:
            try:
                if key == "size":
                    dims = [int(v) for v in value.lower().split("x")]
                    fields[key] = dims[0] if len(dims) == 1 else tuple(dims)
                else:
                    fields[key] = [float(v) for v in value.split("/")]
            except ValueError:
                check(False, f"--classifier-input {text!r}: {key}={value!r} is not a number")
    return ClassifierInput(**fields)
