"""Checkpoints: written atomically, read without unpickling arbitrary objects.

An rsmooth checkpoint is a dict of tensors and plain Python values (``torch.load(...,
weights_only=True)`` reads it): the model's ``state_dict`` (normalisation statistics included:
the model's first layer), optimiser, scheduler, epoch, RNG state, the resolved config, seed and
versions.  The public checkpoints of Cohen et al. 2019 (arXiv 1902.02918), Salman et al. 2019
(arXiv 1906.04584), Jeong et al. and MACER (Zhai et al. 2020, arXiv 2001.02378) load too, given
the dataset (see :mod:`rsmooth.models.checkpoint_compat`), and so do ``.safetensors`` files and
checkpoints that pickle an ``argparse.Namespace``; anything else that needs unpickling is refused
unless the caller trusts the file (``--trust-pickle``).  Rebuilding a model never runs code that
only a file names: see :mod:`rsmooth.trust` (``--trust-code``).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import subprocess
import warnings
from collections import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ..version import __version__
from ..errors import RsmoothError, check, first_line, unpickle_refusal
from ..fileio import atomic_write
from ..jsondata import check_bounded
from ..trust import UntrustedCode, check_arch_kwargs, check_recorded_arch

FORMAT = "rsmooth-checkpoint"
CHECKPOINT_NAME = "checkpoint.pt"

#: architecture names used by the public codebases -> rsmooth's
PUBLIC_ARCHS = {"cifar_resnet20": "cifar_resnet20", "cifar_resnet110": "cifar_resnet110",
                "resnet50": "resnet50", "imagenet_resnet50": "resnet50", "lenet": "lenet",
                "densenet40": "densenet40", "cifar_densenet40": "densenet40"}


def atomic_save(obj: Any, path: Union[str, Path]) -> None:
    """``torch.save`` through :func:`rsmooth.fileio.atomic_write`: a kill at any moment leaves
    either the old file or the new one, never a torn file; the file is readable as the umask
    allows; a full disk is an OSError naming ``path``."""
    atomic_write(path, lambda f: torch.save(obj, f))


#: accelerator types ``--device`` accepts when this machine has them
_ACCELERATORS = ("cuda", "mps", "xpu")


def available_devices() -> List[str]:
    """The devices this machine can run on: ``cpu`` and each available accelerator ``type:N``."""
    names = ["cpu"]
    for kind in _ACCELERATORS:
        mod = getattr(torch, kind, None)
        if mod is not None and mod.is_available():
            names += [f"{kind}:{i}" for i in range(mod.device_count())]
    return names


def resolve_device(name: Optional[str]) -> torch.device:
    """The device named by ``--device`` if this machine has it, or cuda when available, else cpu."""
    if not name:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    available = available_devices()
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError):
        dev = None
    if dev is not None and (dev.type == "cpu" or f"{dev.type}:{dev.index or 0}" in available):
        return dev
    raise RsmoothError(f"device {name!r} is not available on this machine; use one of: "
                       f"{', '.join(available)}")


def resolve_checkpoint_path(path: Union[str, Path]) -> Path:
    """A checkpoint file, or a training output folder holding ``checkpoint.pt``."""
    if not isinstance(path, (str, os.PathLike)):
        raise RsmoothError(f"checkpoint must be a file or folder path (str or pathlib.Path), "
                           f"got {type(path).__name__} {path!r:.60}")
    p = Path(path)
    if p.is_dir() and not (p / CHECKPOINT_NAME).exists() and (p / "config.json").is_file():
        return p  # a transformers folder (models/hub.py)
    if p.is_dir():
        p = p / CHECKPOINT_NAME
    if not p.exists():
        raise RsmoothError(f"checkpoint {p} does not exist; pass the file written by "
                           f"'rsmooth train' (OUT/{CHECKPOINT_NAME}) or its folder")
    return p


def state_digest(state: Mapping[str, torch.Tensor]) -> str:
    """Hex sha256 of a state_dict: every key (sorted) with its dtype, shape and raw bytes: what
    older rsmooth checkpoints record as ``state_sha256`` (newer ones: :func:`checkpoint_digest`)."""
    h = hashlib.sha256()
    for key in sorted(state):
        h.update(f"{key}\0".encode())
        _feed_tensor(h, state[key])
    return h.hexdigest()


#: the key of an rsmooth checkpoint's sha256 of all it holds (:func:`checkpoint_digest`)
DIGEST_KEY = "checkpoint_sha256"


def checkpoint_digest(obj: Mapping[Any, Any]) -> str:
    """Hex sha256 of a checkpoint dict: every entry but the digests (:data:`DIGEST_KEY`, the older
    ``state_sha256``), walked in one order (mappings by sorted key, tensors as dtype, shape and raw
    bytes, other values by type and exact value).  Stored in rsmooth's checkpoints and checked on
    load, because ``torch.load`` does not verify the zip's CRCs: a flipped bit in the weights, the
    optimiser's state, the random state or the config would otherwise load silently."""
    h = hashlib.sha256()
    _feed(h, {k: v for k, v in obj.items() if k not in (DIGEST_KEY, "state_sha256")})
    return h.hexdigest()


def seal(obj: Mapping[str, Any]) -> Dict[str, Any]:
    """``obj`` with its :func:`checkpoint_digest` under :data:`DIGEST_KEY`: what a training run saves."""
    return {**obj, DIGEST_KEY: checkpoint_digest(obj)}


def _feed_tensor(h: Any, t: torch.Tensor) -> None:
    t = t.detach().cpu().contiguous()
    h.update(f"{t.dtype}\0{tuple(t.shape)}\0".encode())
    h.update(t.reshape(-1).view(torch.uint8).numpy())


def _feed(h: Any, value: Any) -> None:
    """Add ``value`` to sha256 ``h`` unambiguously (its bounds checked first: :mod:`rsmooth.jsondata`)."""
    if isinstance(value, torch.Tensor):
        h.update(b"T")
        _feed_tensor(h, value)
    elif isinstance(value, float):
        h.update(f"F{value.hex()}\0".encode())
    elif isinstance(value, (dict, abc.Mapping)):
        h.update(f"D{len(value)}\0".encode())
        for key in sorted(value, key=lambda k: (type(k).__name__, str(k))):
            _feed(h, key)
            _feed(h, value[key])
    elif isinstance(value, (list, tuple)):
        h.update(f"L{len(value)}\0".encode())
        for item in value:
            _feed(h, item)
    else:  # None, bool, int, str; anything else by its type and repr
        h.update(f"{type(value).__name__}:{value!r}\0".encode())


#: the globals public checkpoints pickle besides tensors that are safe to rebuild: the training
#: script's ``argparse.Namespace`` (``{'args': Namespace(...), 'state_dict': ...}``)
SAFE_GLOBALS = (argparse.Namespace,)


def read_checkpoint(path: Union[str, Path], *, trust_pickle: bool = False) -> Dict[str, Any]:
    """Load a checkpoint dict safely; one-line errors if unreadable.

    A ``.safetensors`` file is a flat state_dict, returned as ``{'state_dict': ...}`` with the
    ``arch`` and ``dataset`` of its metadata when it records them.  Anything else goes through
    ``torch.load(weights_only=True)`` allowing :data:`SAFE_GLOBALS`; a file that needs any other
    global is refused, naming it, unless ``trust_pickle`` (then it is unpickled in full, with a
    warning: unpickling can run arbitrary code).  What it holds besides tensors is bounded
    (:func:`rsmooth.jsondata.check_bounded`).  An rsmooth checkpoint must match the sha256 it
    records: of all it holds (:func:`checkpoint_digest`), or, older ones, of its weights (``state_sha256``).
    """
    p = resolve_checkpoint_path(path)
    obj = _read_safetensors(p) if p.suffix == ".safetensors" else _torch_load(p, trust_pickle)
    if not isinstance(obj, dict):
        raise RsmoothError(f"checkpoint {p} holds a {type(obj).__name__}, not a dict of weights")
    check_bounded(obj, f"checkpoint {p}")
    if obj.get("format") == FORMAT:
        _check_entries(p, obj)
    if DIGEST_KEY in obj:
        _check_digest(p, checkpoint_digest(obj) == obj[DIGEST_KEY], "its contents")
    elif "state_sha256" in obj and isinstance(obj.get("state_dict"), Mapping):
        _check_digest(p, state_digest(obj["state_dict"]) == obj["state_sha256"], "its weights")
    return obj


def _check_digest(p: Path, ok: bool, what: str) -> None:
    if not ok:
        raise RsmoothError(f"checkpoint {p} is corrupt: {what} do not match the stored sha256 (a changed "
                           f"or flipped bit); restore it from a copy or retrain")


#: the entries of an rsmooth checkpoint that rsmooth reads, with their types; the first four are
#: required, the others may be absent (older versions) or null
_ENTRIES: Dict[str, Tuple[type, ...]] = {
    "arch": (str,), "dataset": (str,), "num_classes": (int,), "state_dict": (Mapping,),
    "config": (Mapping,), "classifier": (Mapping,), "epoch": (int,), "sigma": (int, float), "method": (str,),
    "seed": (int,), "input_shape": (list, tuple), "history": (list,), "sessions": (list,), "world_size": (int,),
    "state_sha256": (str,), DIGEST_KEY: (str,), "optimizer": (Mapping,), "scheduler": (Mapping,), "scaler": (Mapping,),
    "rng": (Mapping,), "data_fingerprint": (Mapping,), "versions": (Mapping,)}
_REQUIRED = ("arch", "dataset", "num_classes", "state_dict")


def _check_entries(p: Path, ckpt: Dict[str, Any]) -> None:
    """An rsmooth checkpoint's entries have their types (:data:`_ENTRIES`) and its weights are
    tensors: else one line, before anything reads them."""
    def damaged(what: str) -> RsmoothError:
        return RsmoothError(f"checkpoint {p} is an rsmooth checkpoint {what}; it was edited or damaged: "
                            f"restore it from a copy or retrain")

    missing = [k for k in _REQUIRED if ckpt.get(k) is None]
    if missing:
        raise damaged(f"without a valid {missing[0]!r} (it has keys {', '.join(map(repr, sorted(ckpt)[:10]))})")
    for key, types in _ENTRIES.items():
        value = ckpt.get(key)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            raise damaged(f"whose {key!r} is {type(value).__name__} {_short(value)}, not "
                          f"{' or '.join(t.__name__.lower() for t in types)}")
    wrong = next((k for k, v in ckpt["state_dict"].items() if not (isinstance(k, str) and
                                                                  isinstance(v, torch.Tensor))), None)
    if wrong is not None:
        raise damaged(f"whose state_dict holds {type(ckpt['state_dict'][wrong]).__name__} "
                      f"{_short(ckpt['state_dict'][wrong])} under {wrong!r}, not a tensor")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _torch_load(p: Path, trust_pickle: bool) -> Any:
    allowed = getattr(torch.serialization, "safe_globals", None)  # torch >= 2.5
    try:
        with allowed(list(SAFE_GLOBALS)) if allowed else contextlib.nullcontext():
            return torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for corrupt/truncated/pickled files
        name = unpickle_refusal(e)  # a global torch does not allow
        if name is None:
            raise RsmoothError(f"cannot read checkpoint {p}: corrupt, truncated or not a PyTorch "
                               f"checkpoint ({first_line(e)})") from None
    if not trust_pickle:
        raise RsmoothError(f"checkpoint {p} is not a safe PyTorch checkpoint: it needs to unpickle "
                           f"{name}, which can run arbitrary code; pass --trust-pickle "
                           f"(trust_pickle=True) only if you trust the file")
    warnings.warn(f"unpickling checkpoint {p} in full (it needs {name}) because of --trust-pickle: "
                  f"this runs any code the file holds")
    try:
        return torch.load(p, map_location="cpu", weights_only=False)
    except Exception as e:  # its own classes may be missing here, or the code may fail
        raise RsmoothError(f"cannot unpickle checkpoint {p}: {type(e).__name__}: "
                           f"{(str(e).splitlines() or [''])[0][:160]}") from None


def _read_safetensors(p: Path) -> Dict[str, Any]:
    try:
        from safetensors import SafetensorError
        from safetensors.torch import load_file, safe_open
    except ImportError:
        raise RsmoothError(f"reading {p} needs the safetensors package: pip install safetensors") from None
    try:
        state = load_file(str(p), device="cpu")
        with safe_open(str(p), framework="pt") as f:
            meta = f.metadata() or {}
    except (SafetensorError, OSError, ValueError) as e:
        raise RsmoothError(f"cannot read checkpoint {p}: not a valid .safetensors file "
                           f"({(str(e).splitlines() or [''])[0][:160]})") from None
    return {"state_dict": state, **{k: meta[k] for k in ("arch", "dataset") if k in meta}}


def file_sha256(path: Union[str, Path]) -> str:
    """Hex sha256 of a file (recorded with results to identify the checkpoint); of a folder (a
    transformers model), of each file's relative path and bytes in sorted order."""
    h = hashlib.sha256()
    p = Path(path)
    for f in sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]:
        if p.is_dir():
            h.update(f"{f.relative_to(p).as_posix()}\0".encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def git_commit() -> Optional[str]:
    """The git commit of the rsmooth source tree, if it is a checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except Exception:
        return None


def versions() -> Dict[str, str]:
    """Versions of rsmooth, torch and Python, for run metadata."""
    import platform

    return {"rsmooth": __version__, "torch": str(torch.__version__), "python": platform.python_version()}


#: what an rsmooth checkpoint must hold to rebuild its model: key -> type
def _load_weights(path: Path, model: nn.Module, obj: Any, dataset: str, hint: str = "", **kw: Any) -> None:
    from ..models import load_weights

    try:
        load_weights(model, obj, dataset, **kw)
    except RsmoothError as e:
        raise RsmoothError(f"checkpoint {path}: {e}{hint}") from None


def load_classifier(path: Union[str, Path], dataset: Optional[str], of: str, *, trust_pickle: bool = False,
                    trust_code: bool = False) -> "LoadedModel":
    """:func:`load_model` of the classifier f a denoiser runs in front of (``of``: the denoiser
    run or flag that names it); f's recorded ``module:factory`` can be trusted by ``trust_code``
    only, as ``--arch`` names the denoiser's."""
    try:
        return load_model(path, dataset=dataset, trust_pickle=trust_pickle, trust_code=trust_code)
    except UntrustedCode as e:
        raise UntrustedCode(e.arch, f"{of}: its classifier {path}", by_arch=False) from None


def _load_denoised(p: Path, ckpt: Dict[str, Any], dataset: Optional[str], trust_pickle: bool,
                   named: bool = False, trust_code: bool = False) -> "LoadedModel":
    """A denoiser run (denoised smoothing): its D in front of the classifier f it records, which
    must be the very file D was trained with (same sha256).  ``named``: the caller passed D's arch;
    ``trust_code``: D's and f's recorded ``module:factory`` may run (:mod:`rsmooth.trust`)."""
    from ..methods.denoise import DenoisedClassifier
    from ..models.dncnn import create_denoiser
    from ..models.factory import _import_factory

    check_recorded_arch(ckpt["arch"], f"checkpoint {p}", trust_code=trust_code or named)
    ref = ckpt["classifier"]
    f_path = Path(str(ref.get("path")))
    if not f_path.exists():
        raise RsmoothError(f"checkpoint {p} is a denoiser for the classifier {f_path}, which is missing; "
                           f"put that checkpoint back (sha256 {str(ref.get('sha256'))[:16]}...)")
    if file_sha256(f_path) != ref.get("sha256"):
        raise RsmoothError(f"checkpoint {p}: its classifier {f_path} changed since the denoiser was trained "
                           f"(sha256 differs); restore that classifier or train the denoiser again")
    f = load_classifier(f_path, dataset, f"checkpoint {p}", trust_pickle=trust_pickle, trust_code=trust_code)
    config = ckpt.get("config") if isinstance(ckpt.get("config"), Mapping) else {}
    if ":" in ckpt["arch"]:  # a recorded module: on sys.path only, unless the caller named it
        try:
            _import_factory(ckpt["arch"], search_cwd=named)
        except RsmoothError as e:
            raise RsmoothError(f"checkpoint {p}: {e}") from e.__cause__
    denoiser = create_denoiser(ckpt["arch"], int(ckpt["input_shape"][0]), kwargs=config.get("arch_kwargs"))
    denoiser.load_state_dict(ckpt["state_dict"])  # rsmooth's own, its digest checked on reading
    return LoadedModel(DenoisedClassifier(denoiser, f.model), f"{ckpt['arch']}+{f.arch}", f.dataset,
                       f.num_classes, ckpt.get("sigma"), p,
                       {**{k: ckpt.get(k) for k in ("epoch", "method", "seed", "config", "rsmooth_version")},
                        "classifier": dict(ref)})


@dataclass
class LoadedModel:
    """A model rebuilt from a checkpoint, with what the checkpoint says about it."""

    model: nn.Module
    arch: str
    dataset: str
    num_classes: int
    sigma: Optional[float]
    path: Path
    meta: Dict[str, Any] = field(default_factory=dict)


def _build(path: Path, arch: str, dataset: str, weights: Any, options: Dict[str, Any], *,
           named: bool = True, hint: str = "") -> nn.Module:
    """``create_model(arch, dataset, **options)`` with ``weights`` loaded; errors name ``path``.

    ``named``: the caller named ``arch`` (else it was read from the file, and its module is looked
    for on ``sys.path`` only); ``hint`` ends an error about the weights not fitting."""
    from ..models import create_model, resolve_arch

    try:
        custom = options.get("mean") is not None or resolve_arch(arch, search_cwd=named).factory is not None
        model = create_model(arch, dataset, **options)
    except RsmoothError as e:
        raise RsmoothError(f"checkpoint {path}: {e}") from e.__cause__
    _load_weights(path, model, weights, dataset, hint,
                  normalization=(options.get("mean"), options.get("std")) if custom else None)
    return model


def _file_arch(p: Path, recorded: Any, arch: Optional[str], dataset: str, trust_code: bool) -> Tuple[str, str]:
    """(the architecture to build a non-rsmooth checkpoint with, a hint for when its weights do not
    fit): the caller's ``arch``; else the one the file records, when it is a public codebase's name,
    registered, or an installed entry point (a ``module:factory`` it names only with ``trust_code``:
    see :mod:`rsmooth.trust`); else the dataset's default."""
    from ..models import MODELS, arch_names, default_arch

    if arch is not None:
        return arch, ""
    if not isinstance(recorded, str) or not recorded:
        name = default_arch(dataset)
        return name, f"; the file records no architecture, so {name} (the default for {dataset}) was tried: pass --arch"
    if recorded in PUBLIC_ARCHS:
        return PUBLIC_ARCHS[recorded], ""
    if ":" in recorded:
        check_recorded_arch(recorded, f"checkpoint {p}", trust_code=trust_code,
                            hint=" (with --arch-kwargs if it takes arguments)")
        return recorded, ""
    if recorded in MODELS or recorded in arch_names():
        return recorded, ""
    name = default_arch(dataset)
    return name, (f"; {recorded!r} is not built in or installed, so {name} (the default for {dataset}) "
                  f"was tried: pass --arch")


def load_model(path: Union[str, Path], dataset: Optional[str] = None, arch: Optional[str] = None, *,
               arch_kwargs: Optional[Mapping[str, Any]] = None, mean: Optional[Sequence[float]] = None,
               std: Optional[Sequence[float]] = None, num_classes: Optional[int] = None,
               trust_pickle: bool = False, trust_code: bool = False) -> LoadedModel:
    """Rebuild the model of an rsmooth or public checkpoint (Cohen/Salman/Jeong/MACER codebases).

    rsmooth checkpoints carry arch, its keyword arguments, normalisation, dataset and sigma;
    ``dataset``, ``arch`` and the rest given here must agree with them (a model trained on one
    dataset cannot certify another).  Public checkpoints and
    ``.safetensors`` files need ``dataset`` unless they record it (their normalisation
    statistics are not stored) and, for an architecture that is not built in, ``arch`` with its
    ``arch_kwargs``, ``mean``/``std`` and ``num_classes`` as in :func:`rsmooth.models.create_model`;
    the arch such a file records is used when it is built in or installed.

    A ``package.module:factory`` that a file records (its own arch, a denoiser run's classifier's)
    is code: it is refused (:class:`rsmooth.trust.UntrustedCode`) unless ``arch`` names it too or
    ``trust_code``, and then imported from ``sys.path`` only (from the current folder too when
    ``arch`` names it).  ``trust_pickle``: see :func:`read_checkpoint`.

    Args:
        path: a run folder (its ``checkpoint.pt``), an rsmooth checkpoint, a public checkpoint
            (``.pth.tar``, a state_dict) or a ``.safetensors`` file.
        dataset: the dataset the model was trained on; needed where the file does not record it.
        arch: an architecture name or ``package.module:factory``; needed where the file records
            none that is built in.  ``timm:NAME`` builds timm's architecture NAME and loads the
            file's weights (``arch_kwargs`` go to ``timm.create_model``), ``transformers`` loads
            the ``save_pretrained`` folder ``path`` (:mod:`rsmooth.models.hub`; both need
            ``dataset``, download nothing and run no code of the file's).
        arch_kwargs: the factory's keyword arguments (JSON-like values only).
        mean: per-channel normalisation means in [0, 1] pixel units, for a file without them.
        std: per-channel normalisation standard deviations in [0, 1] pixel units, as ``mean``.
        num_classes: K, the number of logits, where it differs from the dataset's classes.
        trust_pickle: unpickle the file in full (can run arbitrary code: only for files you trust).
        trust_code: import a ``module:factory`` that the file records.

    Returns:
        a ``LoadedModel`` with ``model`` (an ``nn.Module`` mapping [0, 1] pixels
        [B, C, H, W] to logits [B, K]), ``arch``, ``dataset``, ``num_classes``, ``sigma`` (the
        training noise in [0, 1] pixel units, None where unknown), ``path`` and ``meta``.

    Example:
        ```python
        loaded = rsmooth.load_model("runs/digits025")
        smooth = rsmooth.Smooth(loaded.model, loaded.num_classes, loaded.sigma)
        ```
    """
    from ..models.hub import is_hub_arch

    check_arch_kwargs(arch_kwargs)
    if is_hub_arch(arch):
        return _load_hub(path, dataset, arch, mean, std, num_classes, arch_kwargs)
    ckpt = read_checkpoint(path, trust_pickle=trust_pickle)
    p = resolve_checkpoint_path(path)
    given = {"arch_kwargs": arch_kwargs, "mean": mean, "std": std, "num_classes": num_classes}
    given = {k: v for k, v in given.items() if v is not None}
    if ckpt.get("format") == FORMAT:
        return _load_own(p, ckpt, dataset, arch, given, trust_pickle, trust_code)
    # a public codebase's checkpoint, one saved by any script, or a .safetensors file (whose
    # metadata may name the dataset and arch)
    if dataset is None and isinstance(ckpt.get("dataset"), str):
        dataset = ckpt["dataset"]
    if dataset is None:
        raise RsmoothError(f"checkpoint {p} is not an rsmooth checkpoint; pass --dataset so its "
                           f"normalisation and class count are known")
    from ..data import dataset_info

    name, hint = _file_arch(p, ckpt.get("arch"), arch, dataset, trust_code)
    model = _build(p, name, dataset, ckpt, given, named=arch is not None, hint=hint)
    return LoadedModel(model, name, dataset, num_classes or dataset_info(dataset).num_classes, None, p,
                       {"epoch": ckpt.get("epoch"), "public_arch": ckpt.get("arch")})


def _load_hub(path: Union[str, Path], dataset: Optional[str], arch: str, mean: Optional[Sequence[float]],
              std: Optional[Sequence[float]], num_classes: Optional[int],
              arch_kwargs: Optional[Mapping[str, Any]]) -> LoadedModel:
    """load_model of a timm or transformers classifier (:mod:`rsmooth.models.hub`): ``dataset``
    says what it classifies; nothing is downloaded."""
    from ..data import dataset_info
    from ..models.hub import load_hub_classifier

    check(dataset is not None, f"--arch {arch} needs --dataset: the images it classifies")
    p = resolve_checkpoint_path(path)
    k = num_classes or dataset_info(dataset).num_classes
    weights = read_checkpoint(p) if arch.startswith("timm:") else None
    model = load_hub_classifier(arch, str(p), k, weights=weights, arch_kwargs=arch_kwargs, mean=mean, std=std)
    return LoadedModel(model, arch, dataset, k, None, p, {"mean": mean, "std": std})


def _load_own(p: Path, ckpt: Dict[str, Any], dataset: Optional[str], arch: Optional[str], given: Dict[str, Any],
              trust_pickle: bool, trust_code: bool) -> "LoadedModel":
    """load_model of an rsmooth checkpoint: what it records rebuilds the model; ``dataset``, ``arch``
    and the ``given`` model options must agree with it."""
    from ..models import MODEL_OPTIONS, arch_ref

    if isinstance(ckpt.get("classifier"), Mapping):
        check(arch is None or arch == ckpt["arch"],
              f"checkpoint {p} is a denoiser run: it rebuilds its denoiser ({ckpt['arch']}) and the classifier "
              f"it records, so --arch {arch} would be ignored; drop --arch")
        return _load_denoised(p, ckpt, dataset, trust_pickle, named=arch is not None and arch == ckpt["arch"],
                              trust_code=trust_code)
    ck_arch, ck_data = ckpt["arch"], ckpt["dataset"]
    if arch is not None and ck_arch not in (arch, arch_ref(arch)):
        raise RsmoothError(f"checkpoint {p} holds a {ck_arch} model, not {arch}; "
                           f"drop --arch or pass --arch {ck_arch}")
    config = ckpt.get("config") if isinstance(ckpt.get("config"), Mapping) else {}
    options = {k: config.get(k) for k in MODEL_OPTIONS}
    options["num_classes"] = ckpt["num_classes"]
    for key, value in given.items():
        recorded = options[key]
        if (list(value) if isinstance(value, (tuple, list)) else value) != recorded:
            raise RsmoothError(f"checkpoint {p} records {key} {recorded!r}, not {value!r}; drop "
                               f"--{key.replace('_', '-')} (a run folder knows how to rebuild its model)")
    if dataset is not None and dataset != ck_data:
        info_ck = ckpt.get("num_classes"), ckpt.get("input_shape")
        from ..data import dataset_info

        info = dataset_info(dataset)
        if (info.num_classes, list(info.input_shape)) != (info_ck[0], list(info_ck[1] or [])):
            raise RsmoothError(f"checkpoint {p} was trained on {ck_data} "
                               f"({info_ck[0]} classes, input {tuple(info_ck[1] or ())}), which does not "
                               f"match {dataset} ({info.num_classes} classes, input {info.input_shape})")
    data_name = dataset or ck_data
    check_recorded_arch(ck_arch, f"checkpoint {p}", trust_code=trust_code or arch is not None)
    model = _build(p, ck_arch, ck_data, ckpt["state_dict"], options, named=arch is not None)
    return LoadedModel(model, ck_arch, data_name, int(ckpt["num_classes"]), ckpt.get("sigma"), p,
                       {k: ckpt.get(k) for k in ("epoch", "method", "seed", "config", "rsmooth_version")})
