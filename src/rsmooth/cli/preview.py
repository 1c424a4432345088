"""``rsmooth preview-corruptions``: a grid of corrupted test images
(:func:`rsmooth.engine.corrupt_certify.preview_corruptions`)."""
from __future__ import annotations

import argparse

from .flags import add_corruption_flags, integer


def add_parser(sub: argparse._SubParsersAction) -> None:
    from .catalog import datasets, default_dataset

    pv = sub.add_parser("preview-corruptions", help="a PNG grid of corrupted test images",
                        description="Look at corruptions before certifying on them: the first --examples test "
                        "images, clean (for generated corruptions) and under each (corruption, severity), "
                        "as 'rsmooth certify' would see them (same --corruption-seed).")
    pv.add_argument("--dataset", default=default_dataset(), choices=datasets(), help=f"default: {default_dataset()}")
    pv.add_argument("--out", required=True, help="image file: .png, .pdf or .svg")
    pv.add_argument("--examples", type=integer, default=4, help="test images, one per row (default: 4)")
    pv.add_argument("--start", type=integer, default=0, help="index of the first test image (default: 0)")
    add_corruption_flags(pv)
    pv.add_argument("--data-dir", help="where datasets live or are downloaded to "
                    "(default: $RSMOOTH_DATA, then ~/.cache/rsmooth/data)")
    pv.set_defaults(func=run)


def run(args: argparse.Namespace) -> None:
    from ..engine.corrupt_certify import preview_corruptions

    out = preview_corruptions(args.dataset, args.out, corruptions=args.corruption or "all", severities=args.severity,
                              examples=args.examples, start=args.start, seed=args.corruption_seed,
                              suite=args.corruption_suite, data_dir=args.data_dir)
    print(f"preview: {out}")
