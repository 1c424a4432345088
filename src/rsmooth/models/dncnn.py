"""DnCNN denoisers for denoised smoothing and the DENOISERS registry.

A denoiser maps [0, 1] pixels [B, C, H, W] to [B, C, H, W] (no normalisation layer, no
num_classes), so denoisers have their own registry, apart from the classifiers of MODELS:
``create_denoiser(name, in_channels)`` builds one with fresh weights.
"""
from __future__ import annotations

import contextlib
import inspect
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torch import nn

from ..errors import RsmoothError, check
from ..registry import Registry


class DnCNN(nn.Module):
    """DnCNN (Zhang, Zuo, Chen, Meng, Zhang 2017, Beyond a Gaussian Denoiser: Residual Learning
    of Deep CNN for Image Denoising, arXiv 1608.03981, Sec. III) as the denoised-smoothing
    authors run it (Salman et al. 2020, arXiv 2003.01908; code: microsoft/denoised-smoothing
    ``code/archs/dncnn.py``).

    ``dncnn`` = conv(C->W, bias) + ReLU, then (depth - 2) x [conv(W->W, no bias) + BN + ReLU],
    then conv(W->C, no bias); 3x3 kernels, padding 1.  Residual learning: the stack estimates
    the noise and ``forward`` returns ``x - dncnn(x)``.  Initialisation as in that code:
    orthogonal convs, zero biases, BN weight 1 / bias 0, and the last conv zero, so a fresh
    DnCNN is the identity.  BN uses eps 1e-4 and PyTorch momentum 0.95 as there (the running
    statistics follow the latest batches closely).  Attribute names match, so the authors'
    checkpoints load (keys ``dncnn.<i>.*``).

    Shapes: x [B, C, H, W] (any H, W) -> [B, C, H, W].
    """

    def __init__(self, in_channels: int = 3, depth: int = 17, width: int = 64) -> None:
        super().__init__()
        check(depth >= 2 and width >= 1, f"DnCNN needs depth >= 2 and width >= 1, got {depth}, {width}")
        layers = [nn.Conv2d(in_channels, width, 3, padding=1, bias=True), nn.ReLU(inplace=True)]
        for _ in range(depth - 2):
            layers += [nn.Conv2d(width, width, 3, padding=1, bias=False),
                       nn.BatchNorm2d(width, eps=1e-4, momentum=0.95), nn.ReLU(inplace=True)]
        layers.append(nn.Conv2d(width, in_channels, 3, padding=1, bias=False))
        self.dncnn = nn.Sequential(*layers)
        self._init_weights()

    def _init_weights(self) -> None:
        convs = [m for m in self.modules() if isinstance(m, nn.Conv2d)]
        for m in convs:
            nn.init.orthogonal_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        nn.init.zeros_(convs[-1].weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.dncnn(x)


DenoiserBuilder = Callable[[int], nn.Module]

#: name -> ``build(in_channels) -> nn.Module`` mapping [B, C, H, W] pixels to [B, C, H, W]
DENOISERS: Registry[DenoiserBuilder] = Registry("denoiser")


@DENOISERS.register("dncnn")
def dncnn(in_channels: int) -> nn.Module:
    """DnCNN depth 17, width 64: Salman et al. 2020 (arXiv 2003.01908) on CIFAR-10 and ImageNet
    (``cifar_dncnn`` / ``imagenet_dncnn`` in their code), Zhang et al. 2017 (arXiv 1608.03981)
    for Gaussian denoising at a known sigma; 558,400 parameters for C = 3."""
    return DnCNN(in_channels, depth=17, width=64)


@DENOISERS.register("dncnn_small")
def dncnn_small(in_channels: int) -> nn.Module:
    """DnCNN depth 10, width 32 for 28x28 images (rsmooth's choice, not from a paper): its
    21x21 receptive field covers the 20x20 box MNIST digits are normalised to (LeCun et al.
    1998), at 74,848 parameters for C = 1 (7.4x fewer than ``dncnn``) for CPU-sized runs."""
    return DnCNN(in_channels, depth=10, width=32)


def create_denoiser(name: str, in_channels: int, input_size: Optional[Tuple[int, int]] = None,
                    kwargs: Optional[Dict[str, Any]] = None) -> nn.Module:
    """A denoiser with fresh weights for ``in_channels``-channel images: a registered name, or
    ``package.module:factory`` (any importable callable, called with ``kwargs`` and with
    ``in_channels`` when its signature names it) checked to map [1, C, H, W] to that shape;
    ``kwargs`` are JSON-like data (:func:`rsmooth.trust.check_arch_kwargs`), for a factory only."""
    from ..jsondata import check_arch_kwargs

    check_arch_kwargs(kwargs)
    if ":" not in name:
        check(not kwargs, f"--arch-kwargs applies to a package.module:factory denoiser, not the built-in {name!r}")
        return DENOISERS.get(name)(in_channels)
    from .factory import _import_factory

    factory = _import_factory(name)
    kw = dict(kwargs or {})
    with contextlib.suppress(TypeError, ValueError):  # builtins and C callables have no signature
        if "in_channels" in inspect.signature(factory).parameters:
            kw.setdefault("in_channels", in_channels)
    try:
        model = factory(**kw)
    except Exception as e:  # the user's factory may raise anything
        raise RsmoothError(f"--arch {name}: the factory failed ({type(e).__name__}: {e})") from e
    check(isinstance(model, nn.Module), f"--arch {name} returned a {type(model).__name__}, not an nn.Module")
    if input_size is not None:
        x = torch.zeros(1, in_channels, *input_size)
        with torch.no_grad():
            out = model.eval()(x)
        model.train()
        check(tuple(out.shape) == tuple(x.shape), f"--arch {name} maps {tuple(x.shape)} to {tuple(out.shape)}; "
              f"a denoiser returns an image of its input's shape")
    return model
