"""Standard image classifiers by name from local weights, nothing downloaded: ``timm:NAME`` (a
timm architecture, its weights a ``.safetensors`` or ``.pth`` state_dict: ``pip install
'rsmooth[timm]'``) and ``transformers`` (a Hugging Face ``AutoModelForImageClassification``
folder saved with ``save_pretrained``: ``pip install 'rsmooth[transformers]'``), as
``rsmooth certify --checkpoint WEIGHTS --arch timm:NAME|transformers --dataset D``.  They are
the classifiers of Carlini et al. 2023, (Certified!!) Adversarial Robustness for Free!, arXiv
2206.10550 (timm ``beit_large_patch16_512`` on ImageNet, the ``transformers`` ViT
``aaraki/vit-base-patch16-224-in21k-finetuned-cifar10`` on CIFAR-10).  Neither runs code of the
file's choosing: timm builds a registered architecture, transformers a built-in one
(``trust_remote_code`` stays off), and weights load as tensors only."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import torch
from torch import nn

from ..errors import RsmoothError, check, first_line
from .normalize import Normalize, validate_normalization

#: the --arch of a transformers folder
TRANSFORMERS = "transformers"


#: ``timm:`` names that are timm's functions, not architectures: ``--arch timm:create_model`` stays
#: the ``module:factory`` route (docs/guide/timm.md)
TIMM_FUNCTIONS = ("create_model",)


def is_hub_arch(arch: Optional[str]) -> bool:
    """Whether ``arch`` names a timm or transformers classifier (``timm:NAME``, ``transformers``)."""
    return isinstance(arch, str) and ((arch.startswith("timm:") and arch[5:] not in TIMM_FUNCTIONS)
                                      or arch == TRANSFORMERS)


class Logits(nn.Module):
    """A transformers image classifier as ``x -> logits`` ([B, C, H, W] -> [B, K])."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(pixel_values=x).logits


def load_hub_classifier(arch: str, path: str, num_classes: int, *, weights: Optional[Mapping[str, Any]] = None,
                        arch_kwargs: Optional[Mapping[str, Any]] = None, mean: Optional[Sequence[float]] = None, std: Optional[Sequence[float]] = None
                        ) -> nn.Sequential:
    """A timm or transformers image classifier from local files, in eval mode, as
    ``nn.Sequential(Normalize(mean, std), net)``.  Most callers want :func:`rsmooth.load_model`
    (``arch="timm:NAME"`` or ``"transformers"``), which reads the file.

    Args:
        arch: ``timm:NAME`` (timm's architecture NAME) or ``transformers``.
        path: the weights file (timm) or the ``save_pretrained`` folder (transformers).
        num_classes: K, the logits the classifier must return.
        weights: for timm, the checkpoint read from ``path`` (as
            :func:`rsmooth.engine.checkpoint.read_checkpoint` reads it: tensors only).
        arch_kwargs: keyword arguments of ``timm.create_model`` (e.g. ``{"img_size": 384}``).
        mean: per-channel means in [0, 1] pixel units (None: none).
        std: per-channel standard deviations, with ``mean``.

    Returns:
        the classifier, [B, C, H, W] -> logits [B, K].

    Example:
        ```python
        loaded = rsmooth.load_model("beit.safetensors", "imagenet", "timm:beit_large_patch16_512",
                                    mean=[0.5] * 3, std=[0.5] * 3)
        ```
    """
    check(is_hub_arch(arch), f"--arch {arch}: expected timm:NAME or transformers")
    check((mean is None) == (std is None), "--mean and --std go together: pass both or neither")
    if mean is not None:
        validate_normalization(mean, std)
    if arch.startswith("timm:"):
        check(weights is not None, f"--arch {arch} needs the weights of {path}")
        net = _timm(arch[len("timm:"):], state_dict_of(weights, path), path, num_classes, arch_kwargs or {})
    else:
        check(not arch_kwargs, "--arch-kwargs does not apply to --arch transformers (its config.json says it all)")
        net = _transformers(path)
    out = _num_logits(net)
    check(out in (None, num_classes), f"--arch {arch} {path}: the classifier has {out} classes, the dataset "
          f"{num_classes}; pass --num-classes {out} or a classifier of the dataset's classes")
    return nn.Sequential(Normalize(mean, std), net).eval()


def _timm(name: str, state: Mapping[str, Any], path: str, num_classes: int, kwargs: Mapping[str, Any]
          ) -> nn.Module:
    timm = _need("timm", "timm")
    check(bool(name) and name in timm.list_models(), f"--arch timm:{name}: no such timm architecture "
          f"(timm.list_models() names them)")
    try:
        net = timm.create_model(name, pretrained=False, num_classes=num_classes, **kwargs)
    except Exception as e:  # timm raises TypeError, RuntimeError, ... for arguments it does not take
        raise RsmoothError(f"--arch timm:{name} with --arch-kwargs {dict(kwargs)}: {first_line(e)[:300]}") from None
    try:
        net.load_state_dict(state)
    except RuntimeError as e:
        raise RsmoothError(f"--checkpoint {path} does not fit timm:{name} with {num_classes} classes "
                           f"({first_line(e)[:300]})") from None
    return net


def state_dict_of(ckpt: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """The tensors of a read checkpoint (a ``.safetensors`` file's or a ``torch.save``d
    state_dict, possibly under ``state_dict``/``model``), ``module.`` prefixes of DataParallel
    removed."""
    from .checkpoint_compat import strip_wrapper_prefixes

    for key in ("state_dict", "model", "state_dict_ema"):
        if isinstance(ckpt.get(key), Mapping):
            ckpt = ckpt[key]
            break
    state = {k: v for k, v in ckpt.items() if isinstance(v, torch.Tensor)}
    check(bool(state), f"--checkpoint {path} holds no weights (expected a state_dict)")
    return {strip_wrapper_prefixes(k): v for k, v in state.items()}


def _transformers(path: str) -> nn.Module:
    transformers = _need("transformers", "transformers")
    check(Path(path).is_dir() and (Path(path) / "config.json").is_file(),
          f"--checkpoint {path} for --arch transformers must be a folder saved with save_pretrained "
          f"(config.json and the weights)")
    try:
        net = transformers.AutoModelForImageClassification.from_pretrained(path, local_files_only=True)
    except Exception as e:  # transformers raises OSError, ValueError, ...
        raise RsmoothError(f"--checkpoint {path}: not a transformers image classifier ({first_line(e)[:300]})") from None
    return Logits(net)


def _num_logits(net: nn.Module) -> Optional[int]:
    inner = net.net if isinstance(net, Logits) else net
    config = getattr(inner, "config", None)
    if config is not None and getattr(config, "num_labels", None) is not None:
        return int(config.num_labels)
    return getattr(inner, "num_classes", None)


def _need(module: str, extra: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise RsmoothError(f"--arch {module}...: needs the {module} package: pip install 'rsmooth[{extra}]'") from None
