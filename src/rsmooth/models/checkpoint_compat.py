"""Load rsmooth checkpoints and those of the public codebases (Cohen, Salman, Jeong, MACER).

Formats accepted (the caller has already read the file with
:func:`rsmooth.engine.checkpoint.read_checkpoint`: ``torch.load(weights_only=True)``, so nothing
arbitrary is unpickled unless the user trusted the file, or a ``.safetensors`` file):

- a plain state_dict of an rsmooth model (``0.mean``, ``0.std``, ``1.xxx``) or of its bare net
  (``xxx``), or a dict that holds one under ``"state_dict"``, ``"model"`` or ``"net"`` (other
  entries, e.g. the training script's ``'args'``, are ignored);
- Cohen et al. 2019 (arXiv 1902.02918) / Salman et al. 2019 (arXiv 1906.04584) / Jeong et al.:
  ``{'epoch', 'arch', 'state_dict', 'optimizer'}`` where the model was
  ``Sequential(NormalizeLayer, net)``: keys ``1.xxx`` (CIFAR, MNIST) or ``1.module.xxx``
  (ImageNet, DataParallel), normalisation statistics not stored;
- MACER (Zhai et al. 2020, arXiv 2001.02378): ``{'net', 'epoch'}`` with bare ``xxx`` or
  ``module.xxx`` keys and no normalisation layer;
- bare net keys ``xxx`` / ``module.xxx`` in any of the above, and forks that register the
  NormalizeLayer's ``means`` / ``sds`` (or ``stds``) as buffers.

Normalisation statistics missing from a checkpoint are taken from the dataset (they are the
constants every public checkpoint was trained with); present ones must agree with it.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import nn

from ..errors import RsmoothError, check
from .factory import dataset_stats
from .normalize import Normalize

_WRAPPERS = ("module", "_orig_mod")  # DataParallel / DistributedDataParallel, torch.compile
_CONTAINER_KEYS = ("state_dict", "model", "net")
_NORM_ALIASES = {"mean": "mean", "std": "std", "means": "mean", "sds": "std", "stds": "std"}


def strip_wrapper_prefixes(key: str) -> str:
    """Drop ``module.`` / ``_orig_mod.`` components before the first named submodule.

    ``"1.module.layer1.0.conv1.weight" -> "1.layer1.0.conv1.weight"``,
    ``"module.conv1.weight" -> "conv1.weight"``; components after the first name are kept.
    """
    parts = key.split(".")
    out: List[str] = []
    i = 0
    while i < len(parts) - 1 and (parts[i] in _WRAPPERS or parts[i].isdigit()):
        if parts[i] not in _WRAPPERS:
            out.append(parts[i])
        i += 1
    return ".".join(out + parts[i:])


def _is_state_dict(obj: Any) -> bool:
    return (isinstance(obj, Mapping) and len(obj) > 0
            and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()))


def _unwrap(obj: Any) -> Tuple[Mapping, Optional[str]]:
    """(state_dict, the checkpoint's own arch name if it records one)."""
    check(isinstance(obj, Mapping), f"a checkpoint must be a dict, got {type(obj).__name__}")
    if _is_state_dict(obj):
        return obj, None
    for key in _CONTAINER_KEYS:
        if key in obj and _is_state_dict(obj[key]):
            arch = obj.get("arch")
            return obj[key], arch if isinstance(arch, str) else None
    raise RsmoothError(
        "unrecognised checkpoint: expected a state_dict or a dict holding one under "
        f"{', '.join(repr(k) for k in _CONTAINER_KEYS)}; found keys "
        f"{', '.join(repr(k) for k in list(obj)[:8])}"
    )


def canonical_state_dict(obj: Any, indexed: Optional[bool] = None) -> Dict[str, torch.Tensor]:
    """The weights of any accepted format, keyed as ``create_model``'s Sequential.

    Pure function (no model needed): unwraps the container, strips DataParallel /
    torch.compile prefixes, prefixes bare net keys with ``1.``, and renames normalisation
    buffers to ``0.mean`` / ``0.std`` of shape [1, C, 1, 1].
    """
    return _canonical(obj, indexed)[0]


def _canonical(obj: Any, indexed: Optional[bool]) -> Tuple[Dict[str, torch.Tensor], Dict[str, str], bool]:
    """(:func:`canonical_state_dict`, canonical key -> the file's own key, whether the file's
    keys were read as ``Sequential(Normalize, net)``'s, ``0.xxx`` / ``1.xxx``)."""
    state, _ = _unwrap(obj)
    original: Dict[str, str] = {}
    stripped: Dict[str, torch.Tensor] = {}
    for key, value in state.items():
        new = strip_wrapper_prefixes(key)
        check(new not in stripped, f"checkpoint has two entries for {new!r} after removing "
                                   f"wrapper prefixes (e.g. {key!r})")
        stripped[new] = value
        original[new] = key
    if indexed is None:  # keys 0.xxx / 1.xxx: a Sequential(Normalize, net) (bare keys get "1.")
        indexed = any(k.split(".", 1)[0] in ("0", "1") for k in stripped)
    out: Dict[str, torch.Tensor] = {}
    names: Dict[str, str] = {}
    for key, value in stripped.items():
        source = original[key]
        if not indexed:
            key = "1." + key
        head, _, rest = key.partition(".")
        if head == "0" and rest in _NORM_ALIASES:
            key, value = "0." + _NORM_ALIASES[rest], value.reshape(1, -1, 1, 1)
        out[key] = value
        names[key] = source
    return out, names, bool(indexed)


def _fmt(keys: List[str], limit: int = 3) -> str:
    keys = sorted(keys)
    more = f", ... ({len(keys)} in all)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def _norm_flags(state: Mapping[str, torch.Tensor]) -> str:
    """The ``--mean ... --std ...`` a state_dict's normalisation buffers stand for."""
    return " ".join(f"--{name} " + " ".join(f"{v:g}" for v in state["0." + name].flatten().tolist())
                    for name in ("mean", "std") if "0." + name in state)


def load_weights(model: nn.Module, obj: Any, dataset: str, *,
                 normalization: Optional[Tuple[Any, Any]] = None) -> nn.Module:
    """Load a checkpoint (any format in the module docstring) into ``model`` in place.

    Args:
        model: from ``create_model(arch, dataset)``: ``Sequential(Normalize, net)``.
        obj: the already-loaded checkpoint (``torch.load(..., weights_only=True)``).
        dataset: the dataset the model is for; its normalisation constants are kept when
            the checkpoint does not store them and must match when it does.
        normalization: (mean, std) the model was built with when not the dataset's
            (``create_model(..., mean=, std=)``; ``(None, None)``: none).

    Returns:
        ``model``, with every parameter and buffer of the net overwritten.

    Raises:
        RsmoothError: unrecognised format, or the checkpoint's architecture does not match
            (missing or unexpected keys, shape mismatch: a few offending keys are named),
            or its normalisation differs from the dataset's (or from ``normalization``;
            the error then names the --mean/--std the file stores).
    """
    arch = getattr(model, "arch", type(model).__name__)
    _, ckpt_arch = _unwrap(obj)
    state, names, indexed = _canonical(obj, None)
    target = model.state_dict()
    net_keys = {k for k in target if not k.startswith("0.")}
    if not net_keys <= set(state):  # the bare keys of a net that is itself a Sequential (0.weight, ...)
        bare = _canonical(obj, indexed=False)
        state, names, indexed = bare if net_keys <= set(bare[0]) else (state, names, indexed)
    _check_normalization(model, state, dataset, normalization)
    # normalisation is fixed by the dataset: compared above, never required from the checkpoint
    target = {k: v for k, v in target.items() if not k.startswith("0.")}
    state = {k: v for k, v in state.items() if not k.startswith("0.")}
    _check_architecture(state, target, names, indexed, f"{arch!r} for {dataset}"
                        + (f" (the checkpoint says arch {ckpt_arch!r})" if ckpt_arch else ""))
    ints = [f"{names[k]} ({state[k].dtype})" for k in target
            if target[k].is_floating_point() and not state[k].is_floating_point()]
    check(not ints, f"the checkpoint holds non-floating-point weights where {arch!r} has floating-point "
                    f"ones: {_fmt(ints, 2)}; it is not a trained model's weights (a quantised or damaged "
                    f"file?): save them as float32")
    model.load_state_dict(state, strict=False)
    return model

def _check_normalization(model: nn.Module, state: Mapping[str, torch.Tensor], dataset: str,
                         normalization: Optional[Tuple[Any, Any]]) -> None:
    """The model's Normalize is the dataset's (or ``normalization``), and the checkpoint's mean/std
    buffers, where it has them, equal it: a checkpoint of another dataset is refused."""
    arch = getattr(model, "arch", type(model).__name__)
    stats = dataset_stats(dataset)
    norm = model[0] if isinstance(model, nn.Sequential) and len(model) == 2 else None
    check(isinstance(norm, Normalize), "load_weights expects a model from create_model(arch, "
                                       f"dataset): Sequential(Normalize, net), got {arch!r}")
    mean, std = (stats.mean, stats.std) if normalization is None else normalization
    expected = None if mean is None else (torch.tensor(mean), torch.tensor(std))
    actual = None if norm.identity else (norm.mean.detach().flatten().float().cpu(),
                                         norm.std.detach().flatten().float().cpu())
    same = (expected is None) == (actual is None) and (expected is None or all(
        e.shape == a.shape and torch.allclose(e, a, atol=1e-6) for e, a in zip(expected, actual)))
    check(same, f"the model's normalisation does not match dataset {dataset!r}; "
                f"create it with create_model(arch, {dataset!r})")
    target = model.state_dict()
    # normalization given: a module:factory model or --mean/--std, so the fix is --mean/--std
    fix = (f"pass the checkpoint's --mean/--std ({_norm_flags(state)})" if normalization is not None
           else "was it trained on another dataset?")
    for name in ("mean", "std"):
        key = "0." + name
        if key not in state:
            continue
        if key not in target:
            why = "the model is built without normalisation" if normalization is not None \
                else f"dataset {dataset!r} is not normalised"
            raise RsmoothError(f"the checkpoint normalises its inputs ({key} = "
                               f"{state[key].flatten().tolist()}) but {why}; {fix}")
        ours = target[key].detach().float().cpu()
        theirs = state[key].detach().float().cpu()
        # 4e-3 tolerates fp16/bf16 storage yet tells CIFAR-10 from CIFAR-100 constants
        if theirs.shape != ours.shape or not torch.allclose(theirs, ours, atol=4e-3):
            given = f"--{name}" if normalization is not None else f"dataset {dataset!r}'s"
            raise RsmoothError(
                f"the checkpoint's normalisation {name} {theirs.flatten().tolist()} differs from "
                f"{given} {ours.flatten().tolist()}; {fix}")


def _check_architecture(state: Mapping[str, torch.Tensor], target: Mapping[str, torch.Tensor],
                        names: Mapping[str, str], indexed: bool, what: str) -> None:
    """The checkpoint's net keys and shapes are the model's (``what``: the model, for the message);
    a few offending keys are named as the file names them."""
    # keys named as the file names them: its own, or the model's in the file's convention (a file
    # of bare net keys never sees the "1." that rsmooth's Sequential(Normalize, net) adds)
    missing = [k if indexed else k[2:] for k in target if k not in state and not k.endswith("num_batches_tracked")]
    unexpected = [names[k] for k in state if k not in target]
    shapes = [f"{names[k]}: checkpoint {tuple(state[k].shape)} vs model {tuple(target[k].shape)}"
              for k in target if k in state and state[k].shape != target[k].shape]
    problems = ([f"missing keys {_fmt(missing)}"] if missing else []) \
        + ([f"unexpected keys {_fmt(unexpected)}"] if unexpected else []) \
        + ([f"shape mismatch {_fmt(shapes, 2)}"] if shapes else [])
    check(not problems, f"the checkpoint's architecture does not match {what}: " + "; ".join(problems))

