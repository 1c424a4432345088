"""``rsmooth show-preset``: every setting of a paper preset, as flags or as a config file."""
from __future__ import annotations

import argparse
import textwrap


def add_parser(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser("show-preset", help="every setting of a paper preset",
                        description="Dataset, method, sigma, every method hyperparameter (with its "
                        "flag), the training schedule, the paper table it reproduces and its note.")
    sp.add_argument("name", help="a preset name, e.g. fashion-mnist/catrs/0.50 or fashion-mnist/catrs/0.5 "
                    "('rsmooth list presets')")
    sp.add_argument("--format", choices=["text", "yaml", "json"], default="text",
                    help="text (default): settings as flags, with the source; yaml or json: every setting "
                    "as a file for 'rsmooth train --config FILE'")
    sp.set_defaults(func=run)


def run(args: argparse.Namespace) -> None:
    """Print the preset's settings: as flags (text) or as a --config file (yaml, json)."""
    from ..engine import TrainConfig
    from ..engine.runconfig import dump_config, flag_text, hparam_flag
    from ..methods import create_method
    from ..presets import get_preset

    preset = get_preset(args.name)
    kw = preset.train_config()
    method = create_method(preset.method, **kw["hparams"])
    config = TrainConfig(**kw).resolved()
    if args.format != "text":
        config.hparams = method.hparams()
        print(dump_config(config.to_dict(), args.format, (
            f"preset {preset.name}: {preset.source}",
            "rsmooth train --config FILE --out DIR  (flags given there override the file)")), end="")
        return
    print(f"preset   {preset.name}\ndataset  {preset.dataset}\nmethod   {preset.method}\n"
          f"sigma    {preset.sigma:g}")
    hparams = [(flag_text(hparam_flag(preset.method, k), v), k in preset.hparams) for k, v in method.hparams().items() if k != "sigma"]
    if hparams:
        print("hyperparameters (* set by the preset; the others are the method's defaults):")
        width = max(len(text) for text, _ in hparams)
        for text, from_preset in hparams:
            print(f"  {text:<{width}}  *" if from_preset else f"  {text}")
    schedule = [flag_text("--" + k.replace("_", "-"), getattr(config, k))
                for k in ("arch", "epochs", "batch_size", "optimizer", "lr", "momentum", "weight_decay", "nesterov",
                          "lr_step", "milestones", "lr_gamma", "lr_timing") if getattr(config, k) is not None]
    print("schedule:\n" + "\n".join("  " + text for text in schedule))
    print(textwrap.fill(f"source   {preset.source}", width=100, subsequent_indent="         "))
    print(textwrap.fill(f"note     {preset.note or '-'}", width=100, subsequent_indent="         "))
    print(f"train it: rsmooth train --preset {preset.name} --out DIR  (flags given there override it)")
