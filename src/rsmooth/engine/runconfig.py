"""Training settings as files and as run folders record them.

A config file (``rsmooth train --config FILE``, ``TrainConfig.from_file``) is JSON or YAML
holding ``TrainConfig`` fields as ``OUT/config.json`` records them, the method's
hyperparameters (sigma included) in the mapping ``hparams``; a run's ``config.json``, whose
fields sit under ``"config"``, is itself one.  Unknown keys and values of the wrong type are
one-line errors.  A run folder's recorded settings are its ``config.json``'s, else its
checkpoint's config.

The functions here work on any settings dataclass (they read its fields and their annotations),
so a field added to ``TrainConfig`` needs no change here.
"""
from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from ..errors import RsmoothError, check, did_you_mean, first_line
from ..fieldtypes import check_values
from ..jsondata import check_bounded
from ..trust import check_recorded_arch
from .checkpoint import CHECKPOINT_NAME, FORMAT, read_checkpoint

PathLike = Union[str, Path]
#: the file in a run folder that records its settings beside the checkpoint
CONFIG_NAME = "config.json"
#: fields whose command-line flag is not the field name with dashes
_FLAGS = {"num_workers": "--workers"}
#: formats of ``rsmooth show-preset --format`` and of the files ``--config`` reads
FORMATS = ("json", "yaml")


def field_flag(name: str) -> str:
    """The ``rsmooth train`` flag of a config field (``train_subset`` -> ``--train-subset``)."""
    return _FLAGS.get(name, "--" + name.replace("_", "-"))


def method_flags() -> Dict[str, List[Tuple[str, dataclasses.Field]]]:
    """Every method hyperparameter (except sigma) by its ``rsmooth train`` flag: flag -> [(method,
    field), ...], the one table the CLI's flags, :func:`hparam_flag` and :func:`hparam_flags` read.

    The flag is the field name with dashes, or ``metadata["flag"]`` where the field name means
    something else in the field's scripts (``gamma``: --macer-gamma, --stability-gamma).
    """
    from ..methods import METHODS, hyperparameters

    out: Dict[str, List[Tuple[str, dataclasses.Field]]] = {}
    for name in METHODS.names():
        if name.startswith("_"):  # private (tests): no flags
            continue
        for f in hyperparameters(METHODS.get(name)):
            if f.name != "sigma":
                out.setdefault("--" + f.metadata.get("flag", f.name.replace("_", "-")), []).append((name, f))
    return out


def hparam_flag(method: str, name: str) -> str:
    """The ``rsmooth train`` flag of hyperparameter ``name`` of ``method`` (``gamma`` of macer ->
    ``--macer-gamma``)."""
    return next((flag for flag, uses in method_flags().items()
                 if any(m == method and f.name == name for m, f in uses)), field_flag(name))


def hparam_flags(method: str, hparams: Mapping[str, Any]) -> List[str]:
    """The ``rsmooth train`` arguments that set ``hparams`` of ``method`` (the inverse of the parsing)."""
    out: List[str] = []
    known = set()
    for flag, uses in method_flags().items():
        f = dict(uses).get(method)
        if f is None:
            continue
        known.add(f.name)
        if f.name in hparams:
            v = hparams[f.name]
            out += ([flag if v else "--no-" + flag[2:]] if isinstance(v, bool) else
                    [flag, repr(v) if isinstance(v, float) else str(v)])
    unknown = set(hparams) - known
    if unknown:
        raise RsmoothError(f"{method} has no hyperparameter {', '.join(sorted(unknown))}")
    return out


def flag_text(flag: str, value: Any) -> str:
    """``value`` as the flag that sets it: ``--sigma 0.5``, ``--nesterov``, ``--no-nesterov``,
    ``--milestones 30 60``, ``no --train-subset`` (None)."""
    if value is None:
        return f"no {flag}"
    if isinstance(value, bool):
        return flag if value else "--no-" + flag[2:]
    if isinstance(value, (list, tuple)):
        return " ".join([flag, *map(str, value)])
    if isinstance(value, Mapping):
        return f"{flag} '{json.dumps(value)}'"
    return f"{flag} {value}"


# -- files ----------------------------------------------------------------------------------

def _yaml_loader():
    """PyYAML's safe loader, also reading ``1e-4`` as a number (YAML 1.1 wants ``1.0e-4``)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver("tag:yaml.org,2002:float",
                                 re.compile(r"^[-+]?(?:[0-9][0-9_]*\.?[0-9_]*|\.[0-9_]+)[eE][-+]?[0-9]+$"),
                                 list("-+0123456789."))
    return Loader


def read_config_file(path: PathLike) -> Mapping[str, Any]:
    """The mapping in a JSON (``.json``) or YAML file, unwrapped from a run's ``config.json``."""
    p = Path(path)
    check(p.is_file(), f"config file {p} does not exist; pass a JSON or YAML file of TrainConfig fields "
          f"(e.g. a run's config.json or 'rsmooth show-preset NAME --format yaml > FILE')")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise RsmoothError(f"cannot read config file {p}: not UTF-8 text ({e.reason} at byte {e.start}); "
                           f"save it as UTF-8") from None
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.load(text, Loader=_yaml_loader())  # noqa: S506 (a safe loader)
    except Exception as e:  # json and yaml raise their own types, with the line in the message
        raise RsmoothError(f"cannot read config file {p}: {first_line(e)}") from None
    check_bounded(data, f"config file {p}")  # YAML's aliases: a small file, exponentially many values
    check(isinstance(data, Mapping), f"config file {p} holds {type(data).__name__}, not a mapping of "
          f"TrainConfig fields (key: value lines)")
    if isinstance(data.get("config"), Mapping):  # a run's config.json: the fields and where they ran
        data = data["config"]
    return data


def read_config_fields(path: PathLike, cls: type, *, trust_code: bool) -> Dict[str, Any]:
    """The fields of config file ``path`` (:func:`read_config_file`, :func:`config_fields`).  A
    config file travels like a checkpoint, so a ``module:factory`` arch it names is refused unless
    ``trust_code`` (the user names an arch of their own or passes ``--trust-code``; :mod:`rsmooth.trust`)."""
    fields = config_fields(read_config_file(path), cls, str(path))
    check_recorded_arch(fields.get("arch"), f"config file {path}", trust_code=trust_code)
    return fields


def config_fields(data: Mapping[str, Any], cls: type, where: str) -> Dict[str, Any]:
    """``data`` checked as fields of dataclass ``cls``: unknown keys (all of them, each with the
    closest field) and wrong types are one-line errors naming ``where``; ``hparams`` is checked
    against the hyperparameters of ``data["method"]`` when it names a method."""
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in data if k not in names]
    if unknown:
        hyper = _hyperparameter_names()
        parts = [repr(k) + (" (a method hyperparameter: put it under hparams)" if k in hyper
                            else did_you_mean(str(k), names)) for k in unknown]
        raise RsmoothError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(parts)}; "
                           f"the keys are {cls.__name__} fields (a run's config.json or 'rsmooth show-preset "
                           f"NAME --format yaml' shows them all)")
    out = check_values(data, typing.get_type_hints(cls), where)
    if isinstance(out.get("hparams"), dict) and isinstance(out.get("method"), str):
        out["hparams"] = check_hparams(out["method"], out["hparams"], where)
    return out


def check_hparams(method: str, hparams: Mapping[str, Any], where: str) -> Dict[str, Any]:
    """``hparams`` checked against the hyperparameters of ``method``: names (with the closest
    one) and types."""
    from ..methods import METHODS, hyperparameters

    cls = METHODS.get(method)  # unknown method -> error listing them
    names = [f.name for f in hyperparameters(cls)]
    unknown = [k for k in hparams if k not in names]
    if unknown:
        raise RsmoothError(f"{where}: method {method} has no hyperparameter "
                           f"{', '.join(repr(k) + did_you_mean(k, names) for k in unknown)}; "
                           f"it takes: {', '.join(names)}")
    return check_values(hparams, typing.get_type_hints(cls), f"{where}: hparams")


def _hyperparameter_names() -> set:
    from ..methods import METHODS, hyperparameters

    return {f.name for m in METHODS.names() for f in hyperparameters(METHODS.get(m))}


def dump_config(fields: Mapping[str, Any], fmt: str, header: Iterable[str] = ()) -> str:
    """``fields`` as a ``--config`` file: JSON, or YAML with ``header`` as comment lines."""
    check(fmt in FORMATS, f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "json":
        return json.dumps(dict(fields), indent=2) + "\n"
    import yaml

    class Dumper(yaml.SafeDumper):  # mappings as blocks, lists on one line: [1, 28, 28]
        pass

    Dumper.add_representer(list, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))
    comments = "".join(f"# {line}\n" for line in header)
    return comments + yaml.dump(dict(fields), Dumper=Dumper, sort_keys=False, default_flow_style=False, width=100)


# -- run folders ----------------------------------------------------------------------------

def recorded_file(out: PathLike) -> Optional[Path]:
    """The file that records run folder ``out``'s settings, None when there is none: its
    ``config.json``, written when each session starts (so an ``epochs`` extended by a session
    stopped before its first checkpoint stays extended), else its checkpoint.  A resumed session
    checks the checkpoint's config anyway."""
    for name in (CONFIG_NAME, CHECKPOINT_NAME):
        if (Path(out) / name).is_file():
            return Path(out) / name
    return None


def recorded_fields(out: PathLike, cls: type) -> Dict[str, Any]:
    """The settings recorded in run folder ``out`` as fields of ``cls`` (see :func:`recorded_file`)."""
    path = recorded_file(out)
    check(path is not None, f"{out} holds no run to resume (no {CHECKPOINT_NAME} or {CONFIG_NAME}); "
          f"give the run's settings to start it")
    if path.name == CONFIG_NAME:
        return config_fields(read_config_file(path), cls, str(path))
    ck = read_checkpoint(path)
    check(ck.get("format") == FORMAT and isinstance(ck.get("config"), Mapping),
          f"{path} is not an rsmooth training checkpoint")
    return config_fields(ck["config"], cls, str(path))


def merge(recorded: Mapping[str, Any], overrides: Mapping[str, Any]) -> Dict[str, Any]:
    """``recorded`` fields with ``overrides``; ``hparams`` merged per hyperparameter unless the
    overrides change the method."""
    out = {**recorded, **{k: v for k, v in overrides.items() if k != "hparams"}}
    same_method = out.get("method") == recorded.get("method")
    base = (recorded.get("hparams") or {}) if same_method else {}
    out["hparams"] = {**base, **(overrides.get("hparams") or {})}
    return out


def conflicts(saved: Mapping[str, Any], new: Any, keys: Iterable[str]) -> List[Tuple[str, str]]:
    """(recorded, new) flag texts of each of ``keys`` where config ``new`` differs from the
    ``saved`` config dict; a key the saved config lacks (a field newer than it) had its default,
    and ``hparams`` are compared one by one (when the method is the same)."""
    defaults = {f.name: f.default for f in dataclasses.fields(new) if f.default is not dataclasses.MISSING}
    out: List[Tuple[str, str]] = []
    for key in keys:
        old, value = saved.get(key, defaults.get(key)), getattr(new, key)
        if key == "hparams":
            if saved.get("method", defaults.get("method")) == new.method:
                defaults_h = _hparam_defaults(new.method)
                old, value = {**defaults_h, **(old or {})}, {**defaults_h, **value}
                out += [(flag_text(hparam_flag(new.method, k), old.get(k)),
                         flag_text(hparam_flag(new.method, k), value.get(k)))
                        for k in sorted(set(old) | set(value)) if old.get(k) != value.get(k)]
        elif old != value:
            out.append((flag_text(field_flag(key), old), flag_text(field_flag(key), value)))
    return out


def _hparam_defaults(method: str) -> Dict[str, Any]:
    from ..methods import METHODS, hyperparameters

    if method not in METHODS:
        return {}
    return {f.name: f.default for f in hyperparameters(METHODS.get(method)) if f.default is not dataclasses.MISSING}
