"""``rsmooth demo``: train -> certify -> analyze on the built-in digits (:func:`rsmooth.demo.run_demo`)."""
from __future__ import annotations

import argparse

from .flags import UNITS, add_foreign_flags, integer


def add_parser(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser("demo", help="train -> certify -> analyze on the built-in digits data",
                       description="The whole job in a few minutes, no download: trains Gaussian-"
                       "augmented models on scikit-learn's digits (sigma 0.25 and 0.5), certifies "
                       "the 360 test images, prints the table and writes a PNG plot. " + UNITS)
    d.add_argument("--out", default="demo_out", help="output folder (default: demo_out)")
    d.add_argument("--n", type=integer, default=1000, help="certification samples per image (default: 1000)")
    d.add_argument("--epochs", type=integer, default=30, help="training epochs (default: 30)")
    d.add_argument("--overwrite", action="store_true",
                   help="delete the demo's earlier models and results in --out and start over")
    add_foreign_flags(d)
    d.set_defaults(func=run, rerun_hint=" (without --overwrite) to continue")


def run(args: argparse.Namespace) -> None:
    from ..demo import run_demo

    print(run_demo(args.out, n=args.n, epochs=args.epochs, overwrite=args.overwrite))
