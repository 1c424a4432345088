"""``rsmooth pipeline catrs``: the whole CAT-RS recipe (:func:`rsmooth.engine.pipeline.run_pipeline`)."""
from __future__ import annotations

import argparse

from .flags import (UNITS, add_certify_options, add_common_data, add_foreign_flags, add_method_flags, integer,
                    any_integer, method_args, number, trainable_datasets)


def add_parser(sub: argparse._SubParsersAction) -> None:
    from .catalog import default_dataset

    pl = sub.add_parser("pipeline", help="the whole CAT-RS recipe: Gaussian -> targets -> CAT-RS -> certify -> analyze",
                        description="Train the sigma0 = 0.25 Gaussian model, compute its consistency targets, "
                        "train CAT-RS at --sigma, certify (beside a Gaussian baseline at --sigma under the "
                        "same budget) and analyze. Each step is skipped when its output exists and matches, "
                        "and continues when interrupted. " + UNITS)
    pl.add_argument("recipe", choices=["catrs"], help="the recipe to run")
    pl.add_argument("--dataset", default=default_dataset(), choices=trainable_datasets())
    pl.add_argument("--sigma", type=number, default=0.25, help="training and certification noise level")
    pl.add_argument("--epochs", type=integer, help="epochs of every model (default: the presets')")
    pl.add_argument("--batch-size", type=integer, help="batch size of every model")
    pl.add_argument("--lr", type=number, help="initial learning rate of every model")
    pl.add_argument("--lr-step", type=integer, help="lr step of every model")
    pl.add_argument("--lr-timing", choices=["catrs", "cohen"], help="see 'rsmooth train --help'")
    pl.add_argument("--target-samples", type=integer, default=10_000, help="noises per training image for the targets (papers: 10000)")
    pl.add_argument("--target-augment", action=argparse.BooleanOptionalAction, default=True,
                    help="targets on augmented images drawn once (reference) or plain ones")
    add_certify_options(pl, "certify")
    pl.add_argument("--seed", type=any_integer, default=0, help="seed of every training and certification stream (default: 0)")
    pl.add_argument("--compare-gaussian", action=argparse.BooleanOptionalAction, default=True,
                    help="also train and certify a Gaussian model at --sigma (default: yes)")
    pl.add_argument("--out", required=True, help="output folder")
    add_common_data(pl)
    add_method_flags(pl)
    add_foreign_flags(pl)
    pl.set_defaults(func=run, rerun_hint=" to continue (finished steps are kept)")


def run(args: argparse.Namespace) -> None:
    from ..engine.pipeline import run_pipeline

    overrides = {"epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
                 "lr_step": args.lr_step, "lr_timing": args.lr_timing, "data_dir": args.data_dir,
                 "device": args.device}
    table = run_pipeline(
        args.out, method=args.recipe, dataset=args.dataset, sigma=args.sigma,
        hparams=method_args(args, args.recipe), train_overrides=overrides, target_samples=args.target_samples,
        target_augment=args.target_augment, n0=args.n0, n=args.n, alpha=args.alpha, skip=args.skip,
        max=args.max, seed=args.seed, compare_gaussian=args.compare_gaussian,
        certify_options={"start": args.start, "precision": args.precision, "channels_last": args.channels_last,
                         "data_dir": args.data_dir, "device": args.device})
    if table:  # rank 0 under torchrun
        print(table)
