"""``rsmooth list``: the registries' names (datasets, architectures, methods, presets, corruptions),
read from :mod:`.catalog` where their modules import PyTorch."""
from __future__ import annotations

import argparse
import textwrap
from typing import Dict, List

_LIST_KINDS = ("datasets", "architectures", "methods", "presets", "corruptions")


def add_parser(sub: argparse._SubParsersAction) -> None:
    ls = sub.add_parser("list", help="list datasets, architectures, methods, presets and corruptions",
                        description="Without KIND: every kind, wrapped. With KIND: one per line "
                        "(presets with the paper table they reproduce; '(denoiser)' marks the architectures "
                        "of denoised smoothing's denoisers).")
    ls.add_argument("kind", nargs="?", choices=_LIST_KINDS, help="what to list")
    ls.set_defaults(func=run)


def _wrapped(title: str, names: List[str], indent: str = "  ") -> str:
    return textwrap.fill(", ".join(names), width=100, initial_indent=f"{indent}{title}: ",
                         subsequent_indent=indent + "    ", break_on_hyphens=False)


def run(args: argparse.Namespace) -> None:
    from ..presets import PRESETS, get_preset
    from . import catalog

    archs = catalog.architectures() + [f"{name} (denoiser)" for name in catalog.denoisers()]  # all train's --arch takes
    names = dict(zip(_LIST_KINDS, (catalog.datasets(), archs, catalog.methods(),
                                   [n for n in PRESETS.names() if not n.startswith("_")])))
    if args.kind == "presets":
        width = max(map(len, names["presets"]))
        for name in names["presets"]:
            print(f"{name:<{width}}  {get_preset(name).source}")
    elif args.kind == "corruptions":
        print(_corruption_listing())
    elif args.kind:
        print("\n".join(names[args.kind]))
    else:
        for kind in ("datasets", "architectures", "methods"):
            print(_wrapped(kind, names[kind], indent=""))
        by_dataset: Dict[str, List[str]] = {}
        for name in names["presets"]:
            dataset, rest = name.split("/", 1)
            by_dataset.setdefault(dataset, []).append(rest)
        print(f"presets ({len(names['presets'])}; 'rsmooth list presets': sources, "
              f"'rsmooth show-preset NAME': settings):")
        for dataset, rest in by_dataset.items():
            print(_wrapped(dataset, rest))
        from ..corruptions import SUITES

        print("corruptions by suite ('rsmooth list corruptions': severities, benchmarks, published sets):")
        for suite in SUITES.values():
            print(_wrapped(suite.name, list(suite.corruptions)))


def _corruption_listing() -> str:
    """Each suite's corruptions (levels, benchmark membership) and the published corrupted datasets."""
    from ..corruptions import BENCHMARK, HELD_OUT, SUITES
    from . import catalog

    lines = []
    for suite in SUITES.values():
        lines.append(f"generated, {suite.name} definitions ({suite.citation}):")
        for c in suite.corruptions.values():
            where = ("benchmark" if c.name in BENCHMARK[suite.name]
                     else "held out" if c.name in HELD_OUT[suite.name] else "extra")
            levels = (f"severities {c.severities[0]}-{c.severities[-1]}" if c.severities else "no levels")
            default = f", default {c.default}" if c.default is not None else ""
            lines.append(f"  {c.name:<18} {where:<9} {levels}{default}")
    for name in catalog.datasets():
        release = catalog.published(name)
        if release:
            levels = (f"severities {release['severities'][0]}-{release['severities'][-1]}" if release["severities"]
                      else "one level each")
            lines.append(f"published {name} ({levels}): {', '.join(release['corruptions'])}")
    return "\n".join(lines)
