"""``rsmooth train``: its flags and its run (:func:`rsmooth.engine.train` on the
:class:`~rsmooth.engine.TrainConfig` that --preset < --config < flags give)."""
from __future__ import annotations

import argparse
from typing import Any, Dict

from ..errors import RsmoothError
from .flags import (ARCH_FIELDS, UNITS, MethodHelp, add_arch_flags, add_common_data, add_foreign_flags, add_method_flags,
                    add_trust_code_flag, any_integer, integer, method_args, number, trainable_datasets)


def add_parser(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("train", help="train a base classifier",
                       description="Train a base classifier for randomized smoothing. Writes "
                       "OUT/checkpoint.pt after every epoch and on SIGTERM/Ctrl-C (atomically; within epochs too with "
                       "--checkpoint-every), OUT/config.json and "
                       "OUT/train.log. " + UNITS, add_help=False)
    t.add_argument("-h", "--help", action=MethodHelp, help="show this help message and exit (after --method M: "
                   "only M's hyperparameters)")
    _add_settings(t)
    _add_schedule(t)
    _add_data_flags(t)
    _add_denoiser_flags(t)
    t.add_argument("--workers", type=integer,
                   help="data-loading worker processes (default: 0); on CUDA they prefetch into pinned "
                   "memory. Batches are the same with any number (each is seeded by seed, epoch, step)")
    _add_fast_and_distributed(t)
    add_arch_flags(t, train=True)
    add_trust_code_flag(t)
    _add_run_flags(t)
    add_common_data(t)
    add_method_flags(t)
    add_foreign_flags(t)
    t.set_defaults(func=run, rerun_hint=" with --resume to continue from the last saved step")


def _add_settings(t: argparse.ArgumentParser) -> None:
    from .catalog import default_dataset, methods

    t.add_argument("--preset", help="start from a paper's settings, e.g. fashion-mnist/gaussian/0.25 "
                   "('rsmooth list' shows them); flags given here override it")
    t.add_argument("--config", metavar="FILE", help="JSON or YAML file of settings (TrainConfig fields, "
                   "method hyperparameters under hparams), e.g. a run's config.json or 'rsmooth show-preset "
                   "NAME --format yaml'; it overrides --preset, flags given here override it; a module:factory arch in it "
                   "needs --arch or --trust-code, as in a checkpoint")
    t.add_argument("--dataset", choices=trainable_datasets(),
                   help=f"training data (default: {default_dataset()}, built in, no download)")
    t.add_argument("--method", choices=methods(), help="training method (default: gaussian)")
    t.add_argument("--sigma", type=number,
                   help="training noise level, std in [0,1] pixel units (default: 0.25); --method standard "
                   "adds no noise and records sigma only as certify's default smoothing level")


def _add_schedule(t: argparse.ArgumentParser) -> None:
    t.add_argument("--epochs", type=integer, help="epochs (default: the dataset's paper schedule, that of its Gaussian "
                   "presets: 90 MNIST family and ImageNet, 150 CIFAR, 30 digits; a LeNet epoch on 2 CPU cores "
                   "takes minutes)")
    t.add_argument("--batch-size", type=integer, help="images per loader batch (default: 256)")
    t.add_argument("--lr", type=number, help="initial learning rate (default: 0.01 MNIST family, 0.1 CIFAR/ImageNet, 0.05 digits)")
    t.add_argument("--momentum", type=number, help="SGD momentum (default: 0.9)")
    t.add_argument("--weight-decay", type=number, help="SGD weight decay (default: 1e-4)")
    t.add_argument("--nesterov", action=argparse.BooleanOptionalAction, default=None,
                   help="Nesterov momentum (SmoothMix's setting; default: off)")
    t.add_argument("--lr-step", type=integer,
                   help="multiply the lr by --lr-gamma every this many epochs (default: 30 MNIST family and ImageNet, "
                   "50 CIFAR, 20 digits)")
    t.add_argument("--milestones", type=integer, nargs="+", help="multistep schedule: epochs at which the lr drops")
    t.add_argument("--lr-gamma", type=number, help="lr decay factor (default: 0.1)")
    t.add_argument("--lr-timing", choices=["catrs", "cohen"],
                   help="catrs (default): the lr drops after epoch lr-step+1 as in the Jeong-family "
                   "scripts behind the CAT-RS tables; cohen: one epoch earlier, as in Cohen et al.'s code")


def _add_data_flags(t: argparse.ArgumentParser) -> None:
    t.add_argument("--seed", type=any_integer, help="seed of every random stream of the run (default: 0)")
    t.add_argument("--targets", help="per-example consistency targets file from 'rsmooth targets' (CAT-RS)")
    t.add_argument("--train-subset", type=integer, metavar="N",
                   help="train on N training examples (the same N for every run and seed; default: all); "
                   "CAT-RS targets must be made with the same --train-subset")
    t.add_argument("--optimizer", choices=["sgd", "adam"],
                   help="sgd (default; --momentum, --nesterov) or adam (the denoisers of Salman et al. 2020)")


def _add_denoiser_flags(t: argparse.ArgumentParser) -> None:
    den = t.add_argument_group(
        "denoised smoothing (--method denoise-mse | denoise-stab; Salman, Sun, Yang, Kapoor, Kolter 2020, "
        "Denoised Smoothing: A Provable Defense for Pretrained Classifiers, arXiv 2003.01908)",
        "trains a denoiser D (--arch dncnn, or dncnn_small, the default for 1-channel images) in front of a "
        "frozen classifier f; 'rsmooth certify --checkpoint OUT' then certifies f(D(x))")
    den.add_argument("--classifier", help="the frozen classifier f: an rsmooth checkpoint or run folder "
                     "(e.g. of --method standard); the run records its path and sha256")
    den.add_argument("--init", help="start D from this denoiser run's weights (the paper's Stab+MSE: "
                     "denoise-stab from a denoise-mse run)")


def _add_fast_and_distributed(t: argparse.ArgumentParser) -> None:
    fast = t.add_argument_group("fast modes (opt-in; recorded in config.json and the checkpoint; "
                                "--resume refuses a change; the evaluation after each epoch stays fp32)")
    fast.add_argument("--precision", choices=["fp32", "bf16", "fp16"],
                      help="autocast of each step's forward passes, attacks and loss: bf16 (fast on recent "
                      "GPUs and CPUs with AMX, emulated and slow on others), fp16 (CUDA only, with a "
                      "gradient scaler); default: fp32")
    fast.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=None,
                      help="model and batches in channels-last memory format (faster convolutions on CPU and GPU)")
    fast.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                      help="train through torch.compile(model): slow first steps, then faster on larger "
                      "models; the checkpoint keeps the plain model's weights")
    dist = t.add_argument_group(
        "several processes (torchrun --nproc-per-node W -m rsmooth -- train ...: DistributedDataParallel, "
        "NCCL on CUDA, gloo on CPU)", "--batch-size stays the whole loader batch: each optimiser step's "
        "chunk is split across the W processes and every example keeps the noise it gets in one process, "
        "so the run takes the steps of a one-process run (batch norm aside); only rank 0 writes and logs")
    dist.add_argument("--sync-bn", action=argparse.BooleanOptionalAction, default=None,
                      help="SyncBatchNorm across the processes (CUDA only); default: per-rank batch-norm "
                      "statistics, as the papers' DataParallel runs had")


def _add_run_flags(t: argparse.ArgumentParser) -> None:
    t.add_argument("--out", required=True, help="output folder")
    t.add_argument("--resume", action="store_true",
                   help="continue the run in --out after a stop or kill, with any number of processes, and "
                   "with the settings it recorded: flags given must agree with them, except --epochs (may "
                   "grow, not shrink), --device, --workers, --data-dir, --checkpoint-every, --eval-every, "
                   "--eval-examples, --tensorboard; an --out with no run starts one")
    t.add_argument("--checkpoint-every", metavar="N|TIME",
                   help="also checkpoint inside epochs, every N optimiser steps (e.g. 500) or every TIME "
                   "(e.g. 600s, 10m, 1h); SIGTERM/Ctrl-C always saves the step in progress and stops. "
                   "--resume continues from that step, bit-identically (default: at epoch ends only)")
    t.add_argument("--eval-every", type=integer, metavar="E",
                   help="evaluate (clean and noisy test accuracy) after every E-th epoch and the last; "
                   "0: never (default: 1)")
    t.add_argument("--eval-examples", type=integer, metavar="M",
                   help="evaluate on a fixed subset of M test examples (the same for every run); "
                   "0: no evaluation (default: all)")
    t.add_argument("--tensorboard", action="store_true", default=None,
                   help="log every figure of train.log and each step's loss to OUT/tensorboard "
                   "(needs the tensorboard package: pip install tensorboard)")


#: train flags that map one-to-one onto TrainConfig fields
_TRAIN_FIELDS = ("dataset", *ARCH_FIELDS, "method", "epochs", "batch_size", "lr", "momentum",
                 "weight_decay", "nesterov", "lr_step", "milestones", "lr_gamma", "lr_timing", "seed", "train_subset",
                 "data_dir", "device", "targets", "precision", "channels_last", "compile", "sync_bn", "optimizer", "classifier", "init",
                 "checkpoint_every", "eval_every", "eval_examples", "tensorboard")


def train_config_from_args(args: argparse.Namespace):
    """The fields given: --preset < --config FILE < flags (hyperparameters merged one by one).
    With --resume on a run folder: its recorded config with those fields, which must agree with
    it (TrainConfig.from_run); else a new config whose unset fields keep their defaults."""
    from ..engine import TrainConfig
    from ..engine.runconfig import read_config_fields, recorded_fields, recorded_file
    from ..presets import get_preset

    preset = get_preset(args.preset) if args.preset else None
    layers = [preset.train_config()] if preset else []
    if args.config:
        named = args.trust_code or args.arch is not None  # --arch replaces the file's
        layers.append(read_config_fields(args.config, TrainConfig, trust_code=named))
    layers.append({k: getattr(args, k) for k in _TRAIN_FIELDS if getattr(args, k) is not None})
    if args.workers is not None:
        layers[-1]["num_workers"] = args.workers
    fields: Dict[str, Any] = {"hparams": {}}
    for layer in layers:
        fields.update({k: v for k, v in layer.items() if k != "hparams"})
        fields["hparams"] = {**fields["hparams"], **(layer.get("hparams") or {})}
    if preset and fields["method"] != preset.method:
        raise RsmoothError(f"--method {fields['method']} conflicts with preset {preset.name}; drop one of them")
    from_run = args.resume and recorded_file(args.out) is not None
    method = fields.get("method") or (recorded_fields(args.out, TrainConfig)["method"] if from_run else TrainConfig.method)
    if args.sigma is not None:
        fields["hparams"]["sigma"] = args.sigma
    fields["hparams"].update(method_args(args, method))
    return TrainConfig.from_run(args.out, trust_code=args.trust_code, **fields) if from_run else TrainConfig(**fields)


def run(args: argparse.Namespace) -> None:
    """Train (or, with --resume, continue) the run in --out."""
    from ..engine import train
    from ..engine.distributed import world
    from ..engine.runconfig import recorded_file

    if args.resume and world().main and recorded_file(args.out) is None:
        print(f"{args.out} holds no run yet: starting it")
    config = train_config_from_args(args)
    if args.arch and ":" in args.arch:  # typed here: the current folder is searched too (rsmooth.imports)
        from ..models import resolve_arch

        resolve_arch(args.arch, search_cwd=True)
    result = train(config, args.out, resume=args.resume, trust_code=args.trust_code)
    if world().main:
        print(f"checkpoint: {result.checkpoint}{world().note}")
