"""The MODELS registry, ``create_model``, ``register_model`` and ``default_arch``.

Every model is ``nn.Sequential(Normalize(mean, std), net)``: inputs are [0, 1] pixels,
module 0 standardises with the dataset's constants (registered buffers), and the net's
state_dict keys are ``1.xxx`` exactly as in the public checkpoints of Cohen et al. 2019 (arXiv
1902.02918), Salman et al. 2019 (arXiv 1906.04584) and Jeong et al.

An architecture is named in one of three ways: a name in ``MODELS`` (built in, or added by
``register_model``), ``package.module:factory`` (any importable callable returning an
``nn.Module``; importing it runs that module's code), or the name of an entry point in the group
``rsmooth.models`` of an installed package (loaded when the name is not in ``MODELS``).  Such a
factory's net gets [0, 1] pixels unless ``mean``/``std`` are given.  A module named by the caller
is looked for on ``sys.path``, then in the current folder; one recorded in a checkpoint on
``sys.path`` only (:mod:`rsmooth.imports`), and only when the user opts in (:mod:`rsmooth.trust`).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import nn

from ..errors import RsmoothError, check, first_line
from ..imports import cwd_hint, import_module
from ..registry import Registry
from ..jsondata import check_arch_kwargs
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


#: The published corrupted test sets are certified with models of their clean dataset.
_CLEAN_OF = {"cifar10-c": "cifar10", "cifar100-c": "cifar100", "mnist-c": "mnist"}


def clean_dataset(dataset: str) -> str:
    """The dataset whose models certify ``dataset``: the clean one of a published corrupted set."""
    return _CLEAN_OF.get(dataset, dataset)


def dataset_stats(dataset: str) -> _DatasetStats:
    """(num_classes, input_shape, mean, std) of a dataset name; RsmoothError if unknown."""
    try:
        return _DATASET_STATS[clean_dataset(dataset)]
    except KeyError:
        raise RsmoothError(
            f"unknown dataset {dataset!r}; choose one of: {', '.join(sorted(_DATASET_STATS))}"
        ) from None


@dataclass(frozen=True)
class ArchSpec:
    """A registered architecture: how to build the net and which inputs it accepts.

    ``build(num_classes) -> nn.Module`` maps [B, C, H, W] (already normalised) to logits
    [B, num_classes]. ``input_size`` is the fixed (H, W) the net is sized for, or None for
    any size of at least ``min_size``.  A factory (``module:factory``, an entry point,
    ``register_model``) has ``factory`` set instead: it is called with the keyword arguments
    of ``create_model`` and checked by one forward pass; ``ref`` is what a checkpoint records.
    """

    name: str
    build: Optional[Callable[[int], nn.Module]]
    in_channels: Optional[int]
    input_size: Optional[Tuple[int, int]] = None
    min_size: int = 1
    factory: Optional[Callable[..., nn.Module]] = None
    ref: Optional[str] = None

    def accepts(self, input_shape: Tuple[int, int, int]) -> bool:
        if self.factory is not None:
            return True  # checked by a forward pass
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
    return _DEFAULT_ARCH[clean_dataset(dataset)]


ENTRY_POINT_GROUP = "rsmooth.models"
#: the keyword arguments of ``create_model`` that a training run records to rebuild its model
MODEL_OPTIONS = ("num_classes", "arch_kwargs", "mean", "std", "input_size")


def _import_factory(ref: str, search_cwd: bool = True) -> Callable[..., Any]:
    """The callable named by ``package.module:attr`` (attr may be dotted); one-line errors.

    ``search_cwd``: the caller named it (not a file), so the current folder is searched after
    ``sys.path`` (see :func:`rsmooth.imports.import_module`)."""
    module, _, attr = ref.partition(":")
    check(bool(module and attr), f"--arch {ref!r} is not of the form package.module:factory")
    try:
        obj: Any = import_module(module, search_cwd=search_cwd)
    except Exception as e:  # the user's module may raise anything while it is imported
        hint = ""
        if isinstance(e, ModuleNotFoundError) and e.name == module.partition(".")[0]:  # not one it imports
            hint = " or run rsmooth in its folder" if search_cwd else cwd_hint(module, ref)
        raise RsmoothError(f"--arch {ref}: cannot import module {module!r} ({first_line(e)}); "
                           f"install its package or put its folder on PYTHONPATH{hint}") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise RsmoothError(f"--arch {ref}: module {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    check(callable(obj), f"--arch {ref}: {attr} is a {type(obj).__name__}, not a callable returning an nn.Module")
    return obj


def _importable_ref(factory: Callable[..., Any]) -> Optional[str]:
    """``module:qualname`` when it imports back to ``factory`` in a new process, else None."""
    module, qualname = getattr(factory, "__module__", None), getattr(factory, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname:
        return None
    try:
        return f"{module}:{qualname}" if _import_factory(f"{module}:{qualname}", search_cwd=False) is factory else None
    except RsmoothError:
        return None


def _entry_point(name: str) -> Optional[ArchSpec]:
    """The architecture an installed package registers as entry point ``name`` of group
    ``rsmooth.models`` (its value is a ``module:factory``), or None."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            try:
                factory = ep.load()
            except Exception as e:
                raise RsmoothError(f"architecture {name!r}: cannot load entry point {ep.value!r} of "
                                   f"group {ENTRY_POINT_GROUP} ({first_line(e)})") from e
            check(callable(factory), f"architecture {name!r}: entry point {ep.value!r} is not callable")
            return ArchSpec(name, None, None, factory=factory, ref=name)
    return None


def resolve_arch(arch: str, *, search_cwd: bool = True) -> ArchSpec:
    """The :class:`ArchSpec` of a registered name, a ``module:factory`` or an entry point.

    ``search_cwd=False`` for an arch read from a file: its module is looked for on ``sys.path``
    only, never in the current folder."""
    check(isinstance(arch, str) and bool(arch), f"arch must be a non-empty string, got {arch!r}")
    if arch in MODELS:
        return MODELS.get(arch)
    if ":" in arch:
        return ArchSpec(arch, None, None, factory=_import_factory(arch, search_cwd), ref=arch)
    spec = _entry_point(arch)
    if spec is None:
        raise RsmoothError(
            f"unknown model {arch!r}; choose one of: {', '.join(arch_names())}, or name any "
            f"factory as package.module:factory (a model registered with rsmooth.register_model "
            f"exists only in the process that registered it)")
    return spec


def arch_ref(arch: str) -> str:
    """What a checkpoint records for ``arch``: ``module:qualname`` for a model registered with
    :func:`register_model` whose factory imports back (so a new process rebuilds it), else
    ``arch`` itself (a ``module:factory`` is not imported to tell)."""
    return arch if ":" in arch else resolve_arch(arch).ref or arch


def arch_names() -> List[str]:
    """The registered architectures and those of installed ``rsmooth.models`` entry points."""
    from importlib.metadata import entry_points

    return sorted(set(MODELS.names()) | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def register_model(name: str, factory: Optional[Callable[..., nn.Module]] = None, *,
                   replace: bool = False) -> Any:
    """Register ``factory(**kwargs) -> nn.Module`` as architecture ``name`` (also a decorator).

    The factory is called like a ``module:factory`` architecture: with ``arch_kwargs``, plus
    ``num_classes`` and ``input_size`` (C, H, W) when its signature names them; its net gets
    [0, 1] pixels unless ``mean``/``std`` are given.  A name lives only in this process, so a
    checkpoint records ``factory.__module__:factory.__qualname__`` when that imports back to
    the factory (then ``rsmooth certify`` rebuilds it in a new process), else the name.

    Args:
        name: the architecture's name (no ``:``), as ``create_model`` and ``--arch`` take it.
        factory: a callable returning an ``nn.Module`` that maps [B, C, H, W] images to logits
            [B, K]; omitted, ``register_model(name)`` is a decorator.
        replace: allow replacing a model registered earlier with ``register_model``
            (built-in names are never replaced).

    Returns:
        the factory (so that it works as a decorator), or the decorator when ``factory`` is None.

    Example:
        ```python
        rsmooth.register_model("mlp", lambda num_classes: nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes)))
        model = rsmooth.create_model("mlp", "digits")       # [B, 1, 8, 8] in [0, 1] -> [B, 10]
        ```
    """
    if factory is None:
        return lambda f: register_model(name, f, replace=replace)
    check(isinstance(name, str) and bool(name) and ":" not in name,
          f"model name must be a non-empty string without ':', got {name!r}")
    check(callable(factory), f"factory must be callable, got {type(factory).__name__}")
    if name in MODELS:
        check(replace and MODELS.get(name).factory is not None,
              f"model {name!r} is already registered; pick another name"
              + ("" if MODELS.get(name).factory is None else " or pass replace=True"))
    MODELS.register(name, replace=True)(ArchSpec(name, None, None, factory=factory,
                                                 ref=_importable_ref(factory)))
    return factory


def _call_factory(spec: ArchSpec, kwargs: Mapping[str, Any], num_classes: int,
                  input_shape: Tuple[int, int, int]) -> nn.Module:
    try:
        params = inspect.signature(spec.factory).parameters
    except (TypeError, ValueError):  # some builtins have no signature
        params = {}
    kw = dict(kwargs)
    for key, value in (("num_classes", num_classes), ("input_size", input_shape)):
        if key in params and key not in kw:
            kw[key] = value
    try:
        net = spec.factory(**kw)
    except Exception as e:  # the user's code
        raise RsmoothError(f"architecture {spec.name}: the factory failed with arguments {kw} "
                           f"({type(e).__name__}: {first_line(e)})") from e
    check(isinstance(net, nn.Module), f"architecture {spec.name}: the factory returned a "
                                      f"{type(net).__name__}, not a torch.nn.Module")
    return net


def _check_forward(model: nn.Module, arch: str, input_shape: Tuple[int, int, int], num_classes: int) -> None:
    """Forward passes of zero images in eval mode, batches of 1 and 2: the model must return logits
    [B, K] (two batch sizes, so that a fixed [1, K] fails here and not in training)."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            outs = [(b, model(torch.zeros(b, *input_shape))) for b in (1, 2)]
    except Exception as e:
        raise RsmoothError(f"architecture {arch} fails on an input of shape {tuple(input_shape)} "
                           f"(C, H, W): {first_line(e)}") from e
    finally:
        model.train(was_training)
    for b, out in outs:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        check(isinstance(out, torch.Tensor) and out.dim() == 2 and out.shape[0] == b,
              f"architecture {arch} must return logits [B, K], one row per input; for an input "
              f"[{b}, {', '.join(map(str, input_shape))}] it returned {got}")
    out = outs[0][1]
    check(out.shape[1] == num_classes,
          f"architecture {arch} returns {out.shape[1]} logits but num_classes is {num_classes}; "
          f"pass --num-classes {out.shape[1]} or make the factory return {num_classes} "
          f"(e.g. --arch-kwargs '{{\"num_classes\": {num_classes}}}')")


def create_model(arch: str, dataset: str, num_classes: Optional[int] = None, *,
                 arch_kwargs: Optional[Mapping[str, Any]] = None,
                 mean: Optional[Sequence[float]] = None, std: Optional[Sequence[float]] = None,
                 input_size: Optional[Sequence[int]] = None) -> nn.Sequential:
    """Build ``nn.Sequential(Normalize(mean, std), net)`` with random weights.

    Args:
        arch: a name in ``MODELS.names()``, ``package.module:factory`` or an entry point of
            group ``rsmooth.models`` (see the module docstring).
        dataset: a dataset name (digits, mnist, fashion-mnist, cifar10, cifar100, imagenet);
            fixes the normalisation constants, the input shape and the default num_classes.
        num_classes: K, the number of logits; defaults to the dataset's.
        arch_kwargs: keyword arguments of a factory (a built-in architecture takes none).
        mean: per-channel means in [0, 1] pixel units, subtracted before the net (sigma
            stays in pixel units); default: the dataset's for a built-in architecture, none for
            a factory (its net gets [0, 1] pixels).
        std: per-channel standard deviations, in [0, 1] pixel units, as ``mean``.
        input_size: (C, H, W) the net gets, passed to a factory that names ``input_size``;
            must be the dataset's (images are not resized).

    Returns:
        a module mapping [0, 1] pixels [B, C, H, W] to logits [B, K]; its attributes
        ``arch`` and ``dataset`` record how it was made (``arch`` as :func:`arch_ref`).

    Raises:
        RsmoothError: unknown arch or dataset, or an arch that does not fit the dataset's
            input shape (e.g. lenet on cifar10), or a factory that cannot be imported, fails,
            returns no ``nn.Module`` or not logits [B, K].

    Example:
        ```python
        model = rsmooth.create_model("digits_cnn", "digits")    # random weights
        model(torch.rand(4, 1, 8, 8)).shape                     # torch.Size([4, 10])
        ```
    """
    spec = resolve_arch(arch)
    stats = dataset_stats(dataset)
    if input_size is not None:
        check(tuple(input_size) == stats.input_shape,
              f"--input-size {' '.join(map(str, input_size))} differs from dataset {dataset!r}'s images "
              f"{stats.input_shape} (C, H, W); rsmooth does not resize: drop it or use that size")
    check_arch_kwargs(arch_kwargs)
    check(spec.factory is not None or not arch_kwargs,
          f"--arch-kwargs applies to a package.module:factory architecture, not the built-in {arch!r}")
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
    check((mean is None) == (std is None), "--mean and --std go together: pass both or neither")
    if mean is None and spec.factory is None:
        mean, std = stats.mean, stats.std
    if mean is not None:
        check(len(mean) == len(std) == stats.input_shape[0],
              f"--mean and --std need one value per channel ({stats.input_shape[0]} for {dataset}), "
              f"got {len(mean)} and {len(std)}")
    if spec.factory is None:
        net = spec.build(num_classes)
    else:
        net = _call_factory(spec, arch_kwargs or {}, num_classes, stats.input_shape)
    model = nn.Sequential(Normalize(mean, std), net)
    if spec.factory is not None:
        _check_forward(model, arch, stats.input_shape, num_classes)
    model.arch = spec.ref or arch
    model.dataset = dataset
    return model


def compatible_archs(dataset: str) -> List[str]:
    """Names of the architectures that accept ``dataset``'s input shape."""
    shape = dataset_stats(dataset).input_shape
    return [name for name in MODELS.names() if MODELS.get(name).accepts(shape)]


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameter elements (buffers such as BN statistics and Normalize excluded)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
