"""``rsmooth targets``: CAT-RS consistency targets (:func:`rsmooth.engine.targets.compute_targets`)."""
from __future__ import annotations

import argparse

from .flags import (TRUST_PICKLE, UNITS, add_arch_flags, add_common_data, add_foreign_flags, add_heartbeat_flag,
                    add_trust_code_flag, any_integer, batch_help, integer, model_options,
                    number, trainable_datasets)


def add_parser(sub: argparse._SubParsersAction) -> None:
    tg = sub.add_parser("targets", help="CAT-RS consistency targets of a Gaussian-trained model",
                        description="Vote frequencies over all classes of the smoothed classifier of a "
                        "Gaussian-trained model for every training image (CAT-RS y_hat, Jeong et al. 2023 (CAT-RS, arXiv 2212.09000) "
                        "App. C.5): OUT (.npy, N x K) and OUT.json. Resumable: rerun to continue. " + UNITS)
    tg.add_argument("--checkpoint", required=True, help="a Gaussian-trained model (sigma 0.25 in the papers)")
    tg.add_argument("--dataset", choices=trainable_datasets(), help="default: the checkpoint's")
    tg.add_argument("--num-samples", type=integer, default=10_000,
                    help="noises per image (default: 10000 as the papers; theirs on ImageNet: 500)")
    tg.add_argument("--sigma", type=number, help="noise level, [0,1] pixel units (default: the checkpoint's)")
    tg.add_argument("--trust-pickle", action="store_true", help=TRUST_PICKLE)
    add_trust_code_flag(tg)
    tg.add_argument("--augment", action=argparse.BooleanOptionalAction, default=True,
                    help="on augmented training images drawn once, as the reference code (default), "
                    "or on the plain images (--no-augment)")
    tg.add_argument("--batch-size", type=integer, help=batch_help())
    tg.add_argument("--train-subset", type=integer, metavar="N",
                    help="targets of the N training examples 'rsmooth train --train-subset N' uses (default: all)")
    tg.add_argument("--seed", type=any_integer, default=0, help="seed of the noise and augmentation (default: 0)")
    tg.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="see 'certify --help' (default: fp32)")
    tg.add_argument("--channels-last", action="store_true", help="channels-last memory format")
    tg.add_argument("--out", required=True, help="output .npy file")
    tg.add_argument("--overwrite", action="store_true", help="recompute even if --out exists")
    tg.add_argument("--shard", metavar="I/K",
                    help="one of K independent jobs: compute the blocks of 256 images b with b %% K == I into "
                    "OUT with .shard-I-of-K before its suffix (resumable); 'rsmooth merge OUT' joins the K "
                    "shards into the file one job writes. Under torchrun each rank takes shard RANK/WORLD_SIZE "
                    "(default: none, one job computes them all)")
    add_arch_flags(tg, train=False)
    add_common_data(tg)
    add_foreign_flags(tg)
    add_heartbeat_flag(tg)
    tg.set_defaults(func=run, rerun_hint=" (without --overwrite) to continue")


def run(args: argparse.Namespace) -> None:
    from ..engine.distributed import world
    from ..engine.targets import compute_targets, targets_summary

    out = compute_targets(args.checkpoint, args.out, dataset=args.dataset, num_samples=args.num_samples,
                          sigma=args.sigma, batch_size=args.batch_size, augment=args.augment,
                          seed=args.seed, precision=args.precision, channels_last=args.channels_last,
                          data_dir=args.data_dir, device=args.device, overwrite=args.overwrite,
                          shard=args.shard, trust_pickle=args.trust_pickle, trust_code=args.trust_code,
                          model_options=model_options(args),
                          train_subset=args.train_subset, heartbeat=args.heartbeat)
    if world().main:
        print(targets_summary(out) + world().note)
