"""The MODELS registry, ``create_model`` and ``default_arch``.

Every model is ``nn.Sequential(Normalize(mean, std), net)``: inputs are [0, 1] pixels,
module 0 standardises with the dataset's constants (registered buffers), and the net's
state_dict keys are ``1.xxx`` exactly as in the public checkpoints of Cohen et al. 2019 (arXiv
1902.02918), Salman et al. 2019 (arXiv 1906.04584) and Jeong et al.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

from torch import nn

from ..errors import RsmoothError, check
from ..registry import Registry
from .normalize import Normalize


class _DatasetStats(NamedTuple):
    num_classes: int
    input_shape: Tuple[int, int, int]
    mean: Optional[Tuple[float, ...]]
    std: Optional[Tuple[float, ...]]


# The constants every public checkpoint was trained with (Cohen et al. 2019 and the later
# codebases). Kept private here so that models does not depend on rsmooth.data; they must
# agree with data.dataset_info.
_DATASET_STATS: Dict[str, _DatasetStats] = {
    "digits": _DatasetStats(10, (1, 8, 8), None, None),
    "mnist": _DatasetStats(10, (1, 28, 28), None, None),
    "fashion-mnist": _DatasetStats(10, (1, 28, 28), None, None),
    "cifar10": _DatasetStats(10, (3, 32, 32), (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),
    "cifar100": _DatasetStats(100, (3, 32, 32), (0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)),
    "imagenet": _DatasetStats(1000, (3, 224, 224), (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}

_DEFAULT_ARCH: Dict[str, str] = {
    "digits": "digits_cnn",
    "mnist": "lenet",
    "fashion-mnist": "lenet",
    "cifar10": "cifar_resnet110",
    "cifar100": "cifar_resnet110",
    "imagenet": "resnet50",
}


def dataset_stats(dataset: str) -> _DatasetStats:
    """(num_classes, input_shape, mean, std) of a dataset name; RsmoothError if unknown."""
    try:
        return _DATASET_STATS[dataset]
    except KeyError:
        raise RsmoothError(
            f"unknown dataset {dataset!r}; choose one of: {', '.join(sorted(_DATASET_STATS))}"
        ) from None


@dataclass(frozen=True)
class ArchSpec:
    """A registered architecture: how to build the net and which inputs it accepts.

    ``build(num_classes) -> nn.Module`` maps [B, C, H, W] (already normalised) to logits
    [B, num_classes]. ``input_size`` is the fixed (H, W) the net is sized for, or None for
    any size of at least ``min_size``.
    """

    name: str
    build: Callable[[int], nn.Module]
    in_channels: int
    input_size: Optional[Tuple[int, int]] = None
    min_size: int = 1

    def accepts(self, input_shape: Tuple[int, int, int]) -> bool:
        c, h, w = input_shape
        if c != self.in_channels:
            return False
        if self.input_size is not None:
            return (h, w) == tuple(self.input_size)
        return min(h, w) >= self.min_size

    def describe_input(self) -> str:
        if self.input_size is not None:
            return f"({self.in_channels}, {self.input_size[0]}, {self.input_size[1]})"
        return f"({self.in_channels}, H, W) with H, W >= {self.min_size}"


MODELS: Registry[ArchSpec] = Registry("model")


Builder = Callable[[int], nn.Module]


def register_arch(name: str, *, in_channels: int, input_size: Optional[Tuple[int, int]] = None,
                  min_size: int = 1) -> Callable[[Builder], Builder]:
    """Decorator: register ``build(num_classes) -> nn.Module`` in MODELS under ``name``."""

    def deco(build: Builder) -> Builder:
        MODELS.register(name)(ArchSpec(name, build, in_channels, input_size, min_size))
        return build

    return deco


def default_arch(dataset: str) -> str:
    """The architecture the papers use for ``dataset`` (e.g. LeNet for MNIST, ResNet-110 for CIFAR)."""
    dataset_stats(dataset)  # validates the name
    return _DEFAULT_ARCH[dataset]


def create_model(arch: str, dataset: str, num_classes: Optional[int] = None) -> nn.Sequential:
    """Build ``nn.Sequential(Normalize(mean, std), net)`` with random weights.

    Args:
        arch: a name in ``MODELS.names()``.
        dataset: a dataset name (digits, mnist, fashion-mnist, cifar10, cifar100, imagenet);
            fixes the normalisation constants, the input shape and the default num_classes.
        num_classes: K, the number of logits; defaults to the dataset's.

    Returns:
        a module mapping [0, 1] pixels [B, C, H, W] to logits [B, K]; its attributes
        ``arch`` and ``dataset`` record how it was made (used in error messages).

    Raises:
        RsmoothError: unknown arch or dataset, or an arch that does not fit the dataset's
            input shape (e.g. lenet on cifar10).
    """
    spec = MODELS.get(arch)
    stats = dataset_stats(dataset)
    if not spec.accepts(stats.input_shape):
        raise RsmoothError(
            f"architecture {arch!r} needs inputs of shape {spec.describe_input()} but dataset "
            f"{dataset!r} has {stats.input_shape}; for {dataset} use one of: "
            f"{', '.join(compatible_archs(dataset))} "
            f"(default {default_arch(dataset)!r})"
        )
    if num_classes is None:
        num_classes = stats.num_classes
    check(isinstance(num_classes, int) and not isinstance(num_classes, bool) and num_classes >= 2,
          f"num_classes must be an integer >= 2, got {num_classes!r}")
    model = nn.Sequential(Normalize(stats.mean, stats.std), spec.build(num_classes))
    model.arch = arch
    model.dataset = dataset
    return model


def compatible_archs(dataset: str) -> List[str]:
    """Names of the architectures that accept ``dataset``'s input shape."""
    shape = dataset_stats(dataset).input_shape
    return [name for name in MODELS.names() if MODELS.get(name).accepts(shape)]


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameter elements (buffers such as BN statistics and Normalize excluded)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
