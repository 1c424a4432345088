"""rsmooth's command line: parse -> config -> API call; every command is a thin call of the API.

Units: sigma and radii are l2 distances in [0, 1] pixel units (images scaled to [0, 1] before
normalisation), as in every randomized-smoothing paper.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import textwrap
import typing
from typing import Any, Dict, List, Optional

from . import __version__
from .errors import RsmoothError

UNITS = ("sigma and radii are l2 distances in [0,1] pixel units: images are scaled to [0,1] "
         "and the noise is added before normalisation (e.g. sigma 0.25, 0.5, 1.0).")
TRUST_PICKLE = ("load a checkpoint that pickles Python objects beyond tensors and argparse.Namespace "
                "(refused by default, naming the object): unpickling can run arbitrary code; only for "
                "files you trust")
TRUST_CODE = ("build the package.module:factory architecture that a checkpoint, run folder or denoiser run "
              "names (refused by default, naming it): importing and calling it runs its code; only for files "
              "you trust. Built-in architectures and installed rsmooth.models entry points need no flag, and "
              "--arch with the same name opts in for that one")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (the problem and where to read more, no usage dump) and no
    abbreviated flags: a prefix such as ``--batch`` could silently match another flag."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _integer(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    return v


#: the reference scripts' spellings (Cohen et al.'s code and the method codebases built on it:
#: SmoothAdv, Consistency, MACER, SmoothMix, CAT-RS) -> rsmooth's flag; each is refused with a
#: message naming rsmooth's flag (one spelling per concept), on the commands that have that flag
FOREIGN_FLAGS: Dict[str, str] = {
    "--noise_sd": "--sigma", "--noise-sd": "--sigma",
    "--N": "--n", "--N0": "--n0",
    "--batch": "--batch-size", "--batch_size": "--batch-size",
    "--lr_step_size": "--lr-step", "--lr-step-size": "--lr-step", "--learning-rate": "--lr",
    "--wd": "--weight-decay",
    "--gamma": "--lr-gamma",
    "--epsilon": "--eps",
    "--num-noise-vec": "--num-noise", "--gauss_num": "--num-noise",
    "--margin": "--macer-gamma",
    "--alpha": "--alpha-step",
    "--maxnorm": "--eps", "--maxnorm_s": "--mix-eps", "--mix_step": "--mix-step",
    "--confidence_mask": "--confidence-mask",
    "--outfile": "--out", "--outdir": "--out",
}
#: what the message adds where the meaning differs
_FOREIGN_NOTES = {
    "--gamma": "for the learning-rate decay of Cohen's and the CAT-RS scripts; MACER's hinge "
               "threshold is --macer-gamma, Stability's weight --stability-gamma",
    "--epsilon": "an l2 radius in [0,1] pixel units, where the scripts count 1/256 units",
    "--alpha": "SmoothMix's attack step; on certify and predict --alpha is the failure probability",
}


class _Foreign(argparse.Action):
    """A reference script's spelling of a flag: refuse it, naming rsmooth's flag."""

    def __init__(self, option_strings: List[str], dest: str, ours: str) -> None:
        super().__init__(option_strings, argparse.SUPPRESS, nargs="?", help=argparse.SUPPRESS)
        self.ours = ours

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        flag = option_string or self.option_strings[0]
        note = _FOREIGN_NOTES.get(flag)
        message = f"{flag} is {self.ours} in rsmooth" + (f" ({note})" if note else "")
        if flag == "--epsilon" and values is not None:
            try:
                message += f": --epsilon {values} is --eps {float(values) / 256:g}"
            except ValueError:
                pass
        parser.error(message)


def _add_foreign_flags(p: argparse.ArgumentParser) -> None:
    """Teach ``p`` the reference scripts' spellings of the flags it has (see FOREIGN_FLAGS)."""
    have = p._option_string_actions
    for theirs, ours in FOREIGN_FLAGS.items():
        if ours in have and theirs not in have:
            p.add_argument(theirs, action=_Foreign, ours=ours)


def _method_fields() -> Dict[str, List[Any]]:
    """Every method hyperparameter (except sigma) by CLI flag: flag -> [(method, field), ...].

    The flag is the field name with dashes, or ``metadata["flag"]`` where the field name means
    something else in the field's scripts (``gamma``: --macer-gamma, --stability-gamma).
    """
    from .methods import METHODS, hyperparameters

    out: Dict[str, List[Any]] = {}
    for name in METHODS.names():
        if name.startswith("_"):
            continue
        for f in hyperparameters(METHODS.get(name)):
            if f.name != "sigma":
                flag = "--" + f.metadata.get("flag", f.name.replace("_", "-"))
                out.setdefault(flag, []).append((name, f))
    return out


def _dest(flag: str) -> str:
    return "hp_" + flag[2:].replace("-", "_")


def _field_type(f: dataclasses.Field):
    t = f.type if not isinstance(f.type, str) else {"int": int, "float": float, "bool": bool,
                                                     "str": str}.get(f.type.split("[")[0], str)
    origin = typing.get_origin(t)
    if origin is typing.Union:
        t = next(a for a in typing.get_args(t) if a is not type(None))
    return t


def _json_object(text: str) -> Dict[str, Any]:
    import json

    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected a JSON object such as '{{\"width\": 64}}', got {text!r} ({e})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object such as '{{\"width\": 64}}', got {text!r}")
    return value


#: the architecture flags -> keyword arguments of create_model / load_model
_ARCH_FIELDS = ("arch", "arch_kwargs", "num_classes", "input_size", "mean", "std")


def _add_arch_flags(p: argparse.ArgumentParser, train: bool) -> None:
    """--arch and how to build it: on train, the model of the run (recorded in its folder); on
    certify, predict and targets, the model of a checkpoint that does not record it."""
    g = p.add_argument_group(
        "architecture", "NAME ('rsmooth list architectures', or an entry point of group rsmooth.models), or "
        "package.module:factory: any importable callable returning an nn.Module (importing it runs that "
        "module's code), called with --arch-kwargs, plus num_classes and input_size when its signature "
        "names them. " + ("The run folder records all of it, so certify needs none of these flags "
                          "(but --arch or --trust-code for a module:factory)" if train else
                          "A run folder of 'rsmooth train' records these; a module:factory it names is "
                          "built only with --arch naming it again or --trust-code"))
    g.add_argument("--arch", metavar="NAME|MODULE:FACTORY",
                   help="default: " + ("the dataset's usual architecture" if train else "the checkpoint's"))
    g.add_argument("--arch-kwargs", type=_json_object, metavar="JSON",
                   help="keyword arguments of a module:factory, a JSON object, e.g. '{\"width\": 64}' "
                   "(default: none)")
    g.add_argument("--num-classes", type=_integer, help="number of logits (default: the dataset's classes)")
    if train:
        g.add_argument("--input-size", type=_integer, nargs=3, metavar=("C", "H", "W"),
                       help="input shape passed to a factory that takes input_size (default and only "
                       "choice: the dataset's; images are not resized)")
    g.add_argument("--mean", type=float, nargs="+", metavar="M",
                   help="per-channel mean in [0,1] pixel units: the model gets (x - mean) / std, for nets "
                   "trained on normalised images; sigma stays in pixel units (default: the dataset's "
                   "for built-in architectures, none for a module:factory, which then gets [0,1] pixels)")
    g.add_argument("--std", type=float, nargs="+", metavar="S",
                   help="per-channel std in [0,1] pixel units, with --mean (default: as for --mean)")


def _add_trust_code_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trust-code", action="store_true", help=TRUST_CODE)


def _model_options(args: argparse.Namespace) -> Dict[str, Any]:
    """The architecture flags given on certify, predict or targets, as load_model's keywords."""
    return {k: getattr(args, k) for k in _ARCH_FIELDS if getattr(args, k, None) is not None}


def _add_common_data(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", help="where datasets live or are downloaded to "
                   "(default: $RSMOOTH_DATA, then ~/.cache/rsmooth/data)")
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if available)")


def _batch_help() -> str:
    from .smoothing import DEFAULT_BATCH_SIZE

    return (f"noisy samples per forward pass (default: {DEFAULT_BATCH_SIZE}, within ~15%% of the best on CPU for "
            f"LeNet and ResNet-20, see BENCHMARKS.md; a GPU may want more)")


#: --n when not given (certify leaves it None, to refuse it with --sequential/--adaptive)
DEFAULT_N = 100_000


def _add_certify_options(p: argparse.ArgumentParser, mode: str) -> None:
    """The certification flags shared by certify, predict and pipeline."""
    if mode == "certify":
        p.add_argument("--n0", type=_integer, default=100, help="samples to select the class (default: 100)")
    p.add_argument("--n", type=_integer, default=DEFAULT_N,
                   help=f"Monte Carlo samples to {'vote' if mode == 'predict' else 'estimate the bound'} "
                   "(default: 100000)")
    p.add_argument("--alpha", type=float, default=0.001, help="failure probability in (0, 1) (default: 0.001)")
    p.add_argument("--start", type=_integer, default=0,
                   help="index of the first test example (as the CAT-RS and MACER scripts' --start; default: 0); "
                   "with --skip and --max the examples are start, start+skip, ..., at most max of them")
    p.add_argument("--skip", type=_integer, default=1,
                   help="use every skip-th test example (Cohen: 20 for CIFAR-10, 100 for ImageNet; default: 1)")
    p.add_argument("--max", type=_integer, help="certify at most this many examples (default: all)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                   help="bf16: weights and noisy inputs in bfloat16 (faster on AMX CPUs; recorded in OUT.json); "
                   "default: fp32")
    p.add_argument("--channels-last", action="store_true", help="channels-last memory format (faster convolutions on CPU)")


def _add_sequential_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "sequential certification", "draw samples in growing batches until the answer is known, bounding p_A "
        "with anytime-valid confidence sequences (Robbins' one-sided Beta-binomial mixtures; Howard, Ramdas, "
        "McAuliffe, Sekhon 2021, arXiv 1810.08240), which hold at every sample size at once and so stay valid "
        "when the data choose when to stop (Voracek 2024, arXiv 2406.17830). The lower bound certifies "
        "(--alpha covers every radius and every stop at once); an upper bound at level --futility only stops "
        "work on radii that --n-max samples would not certify. OUT keeps its columns (radius: the certified "
        "radius, 0 with predict -1 when none); each example's samples (n0 + n), bounds and decisions go to "
        "OUT.seq (tab-separated; runs of earlier versions wrote OUT.seq.tsv, renamed when resumed)")
    g.add_argument("--sequential", action="store_true",
                   help="decide robustness at each of --radii: robust at r once the lower bound on p_A "
                   "exceeds Phi(r/sigma), no once the upper bound is at most Phi(r/sigma), cap once even the "
                   "lower bound projected to n_max samples is; OUT's radius is the largest robust radius")
    g.add_argument("--adaptive", action="store_true",
                   help="estimate each radius, stopping once the samples up to --n-max could not raise it by "
                   "more than --radius-tol; the radius is sigma * Phi^-1(lower bound), abstaining when "
                   "that bound is <= 1/2. Certificate: with probability >= 1 - alpha the radius is at most "
                   "sigma * Phi^-1(p_A), the radius of Cohen, Rosenfeld, Kolter 2019 (arXiv 1902.02918) with p_A "
                   "known exactly, whatever the stop")
    g.add_argument("--radii", type=float, nargs="+", metavar="R",
                   help="with --sequential: the l2 radii to decide, in [0,1] pixel units (e.g. 0.25 0.5 0.75; "
                   "add 0 for the accuracy of the smoothed classifier; required with --sequential)")
    g.add_argument("--n-max", type=_integer,
                   help="with --sequential or --adaptive: cap on the estimation samples per example "
                   "(default: 100000)")
    g.add_argument("--radius-tol", type=float,
                   help="with --adaptive: l2 radius (in [0,1] pixel units) that the samples up to --n-max may "
                   "still add at the stop (default: 0.05; inf: stop at the first look)")
    g.add_argument("--futility", type=float, metavar="BETA",
                   help="with --sequential or --adaptive: level of the upper bound that gives up radii (or radius "
                   "gains) --n-max samples would not reach; the chance of giving up one they would reach is at "
                   "most 2 * BETA. Never affects a certificate's validity (default: 0.05; below 1/e)")
    p.set_defaults(n=None)  # an --n given is told from the default: these modes draw up to --n-max


def _add_heartbeat_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--heartbeat", type=float, metavar="SECONDS",
                   help="where no progress bar is drawn (a log file, a SLURM job): a progress line (done/total, "
                   "rate, samples/s, eta) every SECONDS, the first after at most 10 s; 0: none (default: "
                   "$RSMOOTH_HEARTBEAT or 60)")


def _sequential_options(args: argparse.Namespace) -> Dict[str, Any]:
    """The mode and keywords of --sequential/--adaptive for run_certification; one-line errors
    for a flag without the mode it belongs to."""
    seq, adaptive = getattr(args, "sequential", False), getattr(args, "adaptive", False)
    if seq and adaptive:
        raise RsmoothError("--sequential and --adaptive exclude each other: decide given --radii, or estimate "
                           "each radius to --radius-tol")
    if not (seq or adaptive):
        for flag in ("--radii", "--n-max", "--radius-tol", "--futility"):
            if getattr(args, flag[2:].replace("-", "_"), None) is not None:
                raise RsmoothError(f"{flag} goes with --sequential or --adaptive; add one of them or drop {flag}")
        return {"mode": args.mode, "n": DEFAULT_N if args.n is None else args.n}
    if adaptive and args.radii is not None:
        raise RsmoothError("--radii goes with --sequential; --adaptive estimates each radius (drop --radii)")
    if seq and args.radius_tol is not None:
        raise RsmoothError("--radius-tol goes with --adaptive; --sequential decides the given --radii")
    if args.n is not None:
        raise RsmoothError(f"--n goes with fixed-sample certification; --{'sequential' if seq else 'adaptive'} draws "
                           f"samples until it can stop, at most --n-max (default 100000): pass --n-max {args.n} "
                           f"instead of --n")
    if seq and args.radii is None:
        raise RsmoothError("--sequential needs the radii to decide: add --radii R [R ...] (e.g. --radii 0.25 0.5 0.75)")
    out: Dict[str, Any] = {"mode": "sequential" if seq else "adaptive", "radii": args.radii}
    for key in ("n_max", "radius_tol", "futility"):
        if getattr(args, key) is not None:
            out[key] = getattr(args, key)
    return out


def _add_corruption_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "corruptions", "certify a corrupted test set: the published CIFAR-10-C, CIFAR-100-C (Hendrycks & "
        "Dietterich 2019, arXiv 1903.12261) or MNIST-C (Mu & Gilmer 2019, arXiv 1906.02337) with --dataset "
        "cifar10-c|cifar100-c|mnist-c, or corruptions generated on the fly for any other dataset. More than "
        "one (corruption, severity) makes --out a folder of TSVs, FOLDER/<corruption>-s<severity>.tsv, for "
        "'rsmooth analyze --corruptions FOLDER' (the mACR tables of Jeong, Kim, Shin 2023, CAT-RS, arXiv "
        "2212.09000, App. H-I)")
    g.add_argument("--corruption", metavar="NAME[,NAME...]|all|held-out",
                   help="corruption file name(s) as published (fog, shot_noise, ...), 'all' (the benchmark's 15) "
                   "or 'held-out' (CIFAR-10-C's 4 validation corruptions); 'rsmooth list corruptions' lists them "
                   "(default: none, the clean test set; 'all' for a published corrupted --dataset and for "
                   "preview-corruptions)")
    g.add_argument("--severity", metavar="S[,S...]|all",
                   help="level 1-5 (CIFAR-C); default 'all': 1-5 for CIFAR-C, the published level for "
                   "MNIST-C, which has one per corruption")
    g.add_argument("--corruption-seed", type=_integer, default=0,
                   help="seed of generated corruptions: image i is corrupted from (seed, corruption, severity, i) "
                   "(default: 0)")
    g.add_argument("--corruption-suite", choices=["mnist-c", "cifar10-c"],
                   help="whose definitions generate the corruptions (default: mnist-c for grey images, "
                   "cifar10-c for colour ones)")


def _add_method_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("method hyperparameters (defaults are per method; a preset may set them)")
    for flag, uses in sorted(_method_fields().items()):
        first = uses[0][1]
        ftype = _field_type(first)
        texts: Dict[str, List[str]] = {}  # one entry per distinct (help, default)
        for m, f in uses:
            texts.setdefault(f"{f.metadata.get('help', '')} (default: {f.default})", []).append(m)
        help_text = "; ".join(f"{', '.join(ms)}: {t}" for t, ms in texts.items())
        choices = list(dict.fromkeys(c for _, f in uses for c in f.metadata.get("choices", ())))
        if ftype is bool:
            kw: Dict[str, Any] = dict(action=argparse.BooleanOptionalAction)
        else:
            kw = dict(type=ftype, choices=choices or None, metavar=None if choices else first.name.upper())
        g.add_argument(flag, dest=_dest(flag), default=None, help=help_text.replace("%", "%%"), **kw)


def _method_args(args: argparse.Namespace, method: str) -> Dict[str, Any]:
    """The method hyperparameters given as flags, by field name; a flag of another method is an error."""
    out: Dict[str, Any] = {}
    for flag, uses in _method_fields().items():
        value = getattr(args, _dest(flag), None)
        if value is None:
            continue
        users = [m for m, _ in uses]
        if method not in users:
            raise RsmoothError(f"{flag} is a hyperparameter of {', '.join(users)}, not of {method}; "
                               f"drop it or pick one of those methods")
        out[dict(uses)[method].name] = value
    return out


def hparam_flags(method: str, hparams: Dict[str, Any]) -> List[str]:
    """The ``rsmooth train`` flags that set ``hparams`` of ``method`` (the inverse of the parsing)."""
    out: List[str] = []
    for flag, uses in _method_fields().items():
        name = dict(uses).get(method)
        if name is None or name.name not in hparams:
            continue
        v = hparams[name.name]
        out += [flag if v else "--no-" + flag[2:]] if isinstance(v, bool) else [flag, repr(v) if isinstance(v, float) else str(v)]
    unknown = set(hparams) - {f.name for uses in _method_fields().values() for m, f in uses if m == method}
    if unknown:
        raise RsmoothError(f"{method} has no hyperparameter {', '.join(sorted(unknown))}")
    return out


def build_parser() -> argparse.ArgumentParser:
    from .data import DATASETS, DEFAULT_DATASET, published_release
    from .methods import METHODS

    parser = _Parser(
        prog="rsmooth", description="Certified robustness by randomized smoothing: train base "
        "classifiers, certify smoothed classifiers (Cohen et al. 2019, arXiv 1902.02918), report ACR "
        "and certified accuracy. " + UNITS)
    parser.add_argument("--version", action="version", version=f"rsmooth {__version__}")
    parser.add_argument("--debug", action="store_true", help="on an error, show the Python traceback "
                        "instead of one line (also RSMOOTH_DEBUG=1); may be given anywhere")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    # the published corrupted test sets (cifar10-c, ...) are certified on, never trained on
    trainable = [n for n in DATASETS.names() if not published_release(n)]

    # train ------------------------------------------------------------------------------
    t = sub.add_parser("train", help="train a base classifier",
                       description="Train a base classifier for randomized smoothing. Writes "
                       "OUT/checkpoint.pt after every epoch and on SIGTERM/Ctrl-C (atomically; within epochs too with "
                       "--checkpoint-every), OUT/config.json and "
                       "OUT/train.log. " + UNITS)
    t.add_argument("--preset", help="start from a paper's settings, e.g. fashion-mnist/gaussian/0.25 "
                   "('rsmooth list' shows them); flags given here override it")
    t.add_argument("--config", metavar="FILE", help="JSON or YAML file of settings (TrainConfig fields, "
                   "method hyperparameters under hparams), e.g. a run's config.json or 'rsmooth show-preset "
                   "NAME --format yaml'; it overrides --preset, flags given here override it")
    t.add_argument("--dataset", choices=trainable,
                   help=f"training data (default: {DEFAULT_DATASET}, built in, no download)")
    t.add_argument("--method", choices=METHODS.names(), help="training method (default: gaussian)")
    t.add_argument("--sigma", type=float,
                   help="training noise level, std in [0,1] pixel units (default: 0.25); --method standard "
                   "adds no noise and records sigma only as certify's default smoothing level")
    t.add_argument("--epochs", type=_integer, help="epochs (default: 150; digits 30; imagenet 90)")
    t.add_argument("--batch-size", type=_integer, help="images per loader batch (default: 256)")
    t.add_argument("--lr", type=float, help="initial learning rate (default: 0.01 MNIST family, 0.1 CIFAR/ImageNet, 0.05 digits)")
    t.add_argument("--momentum", type=float, help="SGD momentum (default: 0.9)")
    t.add_argument("--weight-decay", type=float, help="SGD weight decay (default: 1e-4)")
    t.add_argument("--nesterov", action=argparse.BooleanOptionalAction, default=None,
                   help="Nesterov momentum (SmoothMix's setting; default: off)")
    t.add_argument("--lr-step", type=_integer,
                   help="multiply the lr by --lr-gamma every this many epochs (default: 50; imagenet 30; digits 20)")
    t.add_argument("--milestones", type=_integer, nargs="+", help="multistep schedule: epochs at which the lr drops")
    t.add_argument("--lr-gamma", type=float, help="lr decay factor (default: 0.1)")
    t.add_argument("--lr-timing", choices=["catrs", "cohen"],
                   help="catrs (default): the lr drops after epoch lr-step+1 as in the Jeong-family "
                   "scripts behind the CAT-RS tables; cohen: one epoch earlier, as in Cohen et al.'s code")
    t.add_argument("--seed", type=int, help="seed of every random stream of the run (default: 0)")
    t.add_argument("--targets", help="per-example consistency targets file from 'rsmooth targets' (CAT-RS)")
    t.add_argument("--train-subset", type=_integer, metavar="N",
                   help="train on N training examples (the same N for every run and seed; default: all); "
                   "CAT-RS targets must be made with the same --train-subset")
    t.add_argument("--optimizer", choices=["sgd", "adam"],
                   help="sgd (default; --momentum, --nesterov) or adam (the denoisers of Salman et al. 2020)")
    den = t.add_argument_group(
        "denoised smoothing (--method denoise-mse | denoise-stab; Salman, Sun, Yang, Kapoor, Kolter 2020, "
        "Denoised Smoothing: A Provable Defense for Pretrained Classifiers, arXiv 2003.01908)",
        "trains a denoiser D (--arch dncnn, or dncnn_small, the default for 1-channel images) in front of a "
        "frozen classifier f; 'rsmooth certify --checkpoint OUT' then certifies f(D(x))")
    den.add_argument("--classifier", help="the frozen classifier f: an rsmooth checkpoint or run folder "
                     "(e.g. of --method standard); the run records its path and sha256")
    den.add_argument("--init", help="start D from this denoiser run's weights (the paper's Stab+MSE: "
                     "denoise-stab from a denoise-mse run)")
    t.add_argument("--workers", type=int,
                   help="data-loading worker processes (default: 0); on CUDA they prefetch into pinned "
                   "memory. Batches are the same with any number (each is seeded by seed, epoch, step)")
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
    _add_arch_flags(t, train=True)
    _add_trust_code_flag(t)
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
    t.add_argument("--eval-every", type=_integer, metavar="E",
                   help="evaluate (clean and noisy test accuracy) after every E-th epoch and the last; "
                   "0: never (default: 1)")
    t.add_argument("--eval-examples", type=_integer, metavar="M",
                   help="evaluate on a fixed subset of M test examples (the same for every run); "
                   "0: no evaluation (default: all)")
    t.add_argument("--tensorboard", action="store_true", default=None,
                   help="log every figure of train.log and each step's loss to OUT/tensorboard "
                   "(needs the tensorboard package: pip install tensorboard)")
    _add_common_data(t)
    _add_method_flags(t)
    _add_foreign_flags(t)
    t.set_defaults(func=cmd_train)

    # certify / predict ------------------------------------------------------------------
    for name, helptext in (("certify", "CERTIFY: certified radius of each test example"),
                           ("predict", "PREDICT: smoothed prediction of each test example")):
        c = sub.add_parser(name, help=helptext, description=helptext + " (Cohen, Rosenfeld, Kolter "
                           "2019, Certified Adversarial Robustness via Randomized Smoothing, arXiv 1902.02918). "
                           "Writes a TSV (idx label predict radius correct time) row by row and a "
                           "sidecar OUT.json with the run's settings; rerunning continues an "
                           "interrupted run. " + UNITS)
        c.add_argument("--checkpoint", required=True, help="OUT/checkpoint.pt of 'rsmooth train' "
                       "(or its folder), or a public Cohen/Salman/Jeong/MACER checkpoint with --dataset")
        c.add_argument("--dataset", choices=DATASETS.names(), help="default: the checkpoint's")
        c.add_argument("--split", default="test", choices=["test", "train"], help="default: test")
        c.add_argument("--sigma", type=float, help="noise level, std in [0,1] pixel units (default: the checkpoint's)")
        c.add_argument("--trust-pickle", action="store_true", help=TRUST_PICKLE)
        _add_trust_code_flag(c)
        _add_certify_options(c, name)
        c.add_argument("--batch-size", type=_integer, help=_batch_help())
        c.add_argument("--seed", type=int, default=0,
                       help="noise seed; example i uses a stream derived from (seed, i) (default: 0)")
        c.add_argument("--compile", action="store_true", help="compile the noisy forward pass (torch.export + inductor with frozen weights; seconds to start, then faster; recorded in OUT.json)")
        c.add_argument("--out", required=True, help="output TSV")
        c.add_argument("--overwrite", action="store_true", help="replace --out instead of continuing it")
        _add_heartbeat_flag(c)
        c.add_argument("--shard", metavar="I/K",
                       help="one of K independent jobs (a SLURM array, spot machines): certify every K-th "
                       "example of the subset from position I (I = 0..K-1) into OUT with .shard-I-of-K before "
                       "its suffix (certify.tsv -> certify.shard-0-of-4.tsv); rerun to continue it, then "
                       "'rsmooth merge OUT' joins the K shards into the file one job writes. Under torchrun "
                       "each rank takes shard RANK/WORLD_SIZE and rank 0 merges by itself (default: none, one "
                       "job certifies the whole subset)")
        if name == "certify":
            _add_sequential_flags(c)
        _add_corruption_flags(c)
        _add_arch_flags(c, train=False)
        _add_common_data(c)
        _add_foreign_flags(c)
        c.set_defaults(func=cmd_certify, mode=name)

    # merge ------------------------------------------------------------------------------
    m = sub.add_parser("merge", help="join the shard files of 'certify|predict|targets --shard I/K'",
                       description="Join the K shard files of a certification ('rsmooth certify|predict "
                       "--shard I/K --out OUT' for I = 0..K-1) into OUT and OUT.json: the rows sorted by idx, "
                       "the same file one job writes (the time column aside). The shards must all be "
                       "complete, come from the same settings and together cover the subset exactly once; "
                       "OUT is written atomically and the shard files are deleted afterwards; a killed merge is "
                       "rerun, and one whose OUT is complete says so and deletes what the shards left. Shards of "
                       "'rsmooth targets --shard I/K' merge the same way, into the targets file one job writes.")
    m.add_argument("files", nargs="*", metavar="FILE",
                   help="OUT, the --out the shards were run with (its .shard-I-of-K files are found); or, "
                   "with --out, the shard files themselves")
    m.add_argument("--out", help="the merged TSV, when FILE lists the shard files")
    m.add_argument("--overwrite", action="store_true", help="replace an OUT that holds a run with other settings")
    m.add_argument("--keep-shards", action="store_true",
                   help="keep the shard files after merging (then no write access beside them is needed: "
                   "shards on a read-only mount merge with --out elsewhere)")
    m.set_defaults(func=cmd_merge)

    # targets ----------------------------------------------------------------------------
    tg = sub.add_parser("targets", help="CAT-RS consistency targets of a Gaussian-trained model",
                        description="Vote frequencies over all classes of the smoothed classifier of a "
                        "Gaussian-trained model for every training image (CAT-RS y_hat, Jeong et al. 2023 (CAT-RS, arXiv 2212.09000) "
                        "App. C.5): OUT (.npy, N x K) and OUT.json. Resumable: rerun to continue. " + UNITS)
    tg.add_argument("--checkpoint", required=True, help="a Gaussian-trained model (sigma 0.25 in the papers)")
    tg.add_argument("--dataset", choices=trainable, help="default: the checkpoint's")
    tg.add_argument("--num-samples", type=_integer, default=10_000,
                    help="noises per image (default: 10000 as the papers; theirs on ImageNet: 500)")
    tg.add_argument("--sigma", type=float, help="noise level, [0,1] pixel units (default: the checkpoint's)")
    tg.add_argument("--trust-pickle", action="store_true", help=TRUST_PICKLE)
    _add_trust_code_flag(tg)
    tg.add_argument("--augment", action=argparse.BooleanOptionalAction, default=True,
                    help="on augmented training images drawn once, as the reference code (default), "
                    "or on the plain images (--no-augment)")
    tg.add_argument("--batch-size", type=_integer, help=_batch_help())
    tg.add_argument("--train-subset", type=_integer, metavar="N",
                    help="targets of the N training examples 'rsmooth train --train-subset N' uses (default: all)")
    tg.add_argument("--seed", type=int, default=0, help="seed of the noise and augmentation (default: 0)")
    tg.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="see 'certify --help' (default: fp32)")
    tg.add_argument("--channels-last", action="store_true", help="channels-last memory format")
    tg.add_argument("--out", required=True, help="output .npy file")
    tg.add_argument("--overwrite", action="store_true", help="recompute even if --out exists")
    tg.add_argument("--shard", metavar="I/K",
                    help="one of K independent jobs: compute the blocks of 256 images b with b %% K == I into "
                    "OUT with .shard-I-of-K before its suffix (resumable); 'rsmooth merge OUT' joins the K "
                    "shards into the file one job writes. Under torchrun each rank takes shard RANK/WORLD_SIZE "
                    "(default: none, one job computes them all)")
    _add_arch_flags(tg, train=False)
    _add_common_data(tg)
    _add_foreign_flags(tg)
    _add_heartbeat_flag(tg)
    tg.set_defaults(func=cmd_targets)

    # pipeline ---------------------------------------------------------------------------
    pl = sub.add_parser("pipeline", help="the whole CAT-RS recipe: Gaussian -> targets -> CAT-RS -> certify -> analyze",
                        description="Train the sigma0 = 0.25 Gaussian model, compute its consistency targets, "
                        "train CAT-RS at --sigma, certify (beside a Gaussian baseline at --sigma under the "
                        "same budget) and analyze. Each step is skipped when its output exists and matches, "
                        "and continues when interrupted. " + UNITS)
    pl.add_argument("recipe", choices=["catrs"], help="the recipe to run")
    pl.add_argument("--dataset", default=DEFAULT_DATASET, choices=trainable)
    pl.add_argument("--sigma", type=float, default=0.25, help="training and certification noise level")
    pl.add_argument("--epochs", type=_integer, help="epochs of every model (default: the presets')")
    pl.add_argument("--batch-size", type=_integer, help="batch size of every model")
    pl.add_argument("--lr", type=float, help="initial learning rate of every model")
    pl.add_argument("--lr-step", type=_integer, help="lr step of every model")
    pl.add_argument("--lr-timing", choices=["catrs", "cohen"], help="see 'rsmooth train --help'")
    pl.add_argument("--target-samples", type=_integer, default=10_000, help="noises per training image for the targets (papers: 10000)")
    pl.add_argument("--target-augment", action=argparse.BooleanOptionalAction, default=True,
                    help="targets on augmented images drawn once (reference) or plain ones")
    _add_certify_options(pl, "certify")
    pl.add_argument("--seed", type=int, default=0, help="seed of every training and certification stream (default: 0)")
    pl.add_argument("--compare-gaussian", action=argparse.BooleanOptionalAction, default=True,
                    help="also train and certify a Gaussian model at --sigma (default: yes)")
    pl.add_argument("--out", required=True, help="output folder")
    _add_common_data(pl)
    _add_method_flags(pl)
    _add_foreign_flags(pl)
    pl.set_defaults(func=cmd_pipeline)

    # analyze ----------------------------------------------------------------------------
    a = sub.add_parser("analyze", help="ACR and certified accuracy tables and plots",
                       description="Tables in the papers' layout (rows = result files, columns = ACR "
                       "then certified accuracy in % at each radius). " + UNITS)
    a.add_argument("results", nargs="*", help="certify TSV files (rsmooth's or any public codebase's)")
    a.add_argument("--corruptions", nargs="+", metavar="FOLDER",
                   help="instead of files: one folder per model of 'rsmooth certify --corruption all' results; "
                   "prints the corruption tables of Jeong, Kim, Shin 2023 (CAT-RS, arXiv 2212.09000): ACR and "
                   "certified accuracy at r = 0 per severity with their means over the benchmark's corruptions, "
                   "mACR and mAcc (Table 13), and per corruption for each severity (Tables 14-23), or per "
                   "corruption without severities as MNIST-C (Tables 24-25)")
    a.add_argument("--severity", help="with --corruptions: only this severity's tables (default: all)")
    a.add_argument("--paper", metavar="TABLE",
                   help="with certify files: a paper table (e.g. catrs:table4 = Jeong, Kim, Shin 2023, CAT-RS, "
                   "arXiv 2212.09000, Table 4, Fashion-MNIST) whose published ACR and certified accuracy follow "
                   "our rows: the rows that match a file's dataset, sigma and method, and its hyperparameters where "
                   "its metadata records them (the whole table, marked for reference, when none does); 'list' "
                   "lists the tables. With --corruptions: auto (default: the paper's numbers beside ours when the dataset, sigma and "
                   "method match), always (marked not comparable when they do not) or never")
    a.add_argument("--radii", type=float, nargs="+", help="radii for the columns (default: 0 to the largest radius, step 0.25)")
    a.add_argument("--format", default="markdown", choices=["markdown", "latex", "csv"], help="table format")
    a.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a.add_argument("--plot", help="write a plot of certified accuracy against radius; the extension "
                   "picks the format: .png, .pdf or .svg (png without one)")
    a.add_argument("--labels", nargs="+", help="one label per file or --corruptions folder (default: the file "
                   "names, or the run folders when the names repeat, as runs/*/certify.tsv; for folders the "
                   "training method)")
    a.add_argument("--ci", action="store_true",
                   help="honest accuracy figures: each certified accuracy with its exact two-sided Clopper-Pearson "
                   "interval over the test sample (the sampling of test examples, not each certificate's Monte-Carlo "
                   "error) and Cohen et al.'s high-probability lower bound, which discounts the wrong certificates "
                   "(at most the quantile of Binomial(m, alpha) of them; Cohen, Rosenfeld, Kolter 2019, arXiv "
                   "1902.02918, Sec. 3.2 and 4); CSV gets columns acc@r_lo, acc@r_hi, acc@r_hp, --json the numbers, "
                   "--plot error bars; notes under the table say what each means")
    a.add_argument("--ci-level", type=float, metavar="LEVEL",
                   help="with --ci: the confidence level of both (default: 0.95)")
    a.add_argument("--alpha", type=float,
                   help="with --ci: the certificates' alpha for files without a sidecar JSON that records it "
                   "(public codebases' TSVs; their standard protocol: 0.001); without it such files get no "
                   "high-probability bound")
    a.set_defaults(func=cmd_analyze)

    d = sub.add_parser("demo", help="train -> certify -> analyze on the built-in digits data",
                       description="The whole job in a few minutes, no download: trains Gaussian-"
                       "augmented models on scikit-learn's digits (sigma 0.25 and 0.5), certifies "
                       "the 360 test images, prints the table and writes a PNG plot. " + UNITS)
    d.add_argument("--out", default="demo_out", help="output folder (default: demo_out)")
    d.add_argument("--n", type=_integer, default=1000, help="certification samples per image (default: 1000)")
    d.add_argument("--epochs", type=_integer, default=30, help="training epochs (default: 30)")
    d.add_argument("--overwrite", action="store_true",
                   help="delete the demo's earlier models and results in --out and start over")
    _add_foreign_flags(d)
    d.set_defaults(func=cmd_demo)

    pv = sub.add_parser("preview-corruptions", help="a PNG grid of corrupted test images",
                        description="Look at corruptions before certifying on them: the first --examples test "
                        "images, clean (for generated corruptions) and under each (corruption, severity), "
                        "as 'rsmooth certify' would see them (same --corruption-seed).")
    pv.add_argument("--dataset", default=DEFAULT_DATASET, choices=DATASETS.names(), help=f"default: {DEFAULT_DATASET}")
    pv.add_argument("--out", required=True, help="image file: .png, .pdf or .svg")
    pv.add_argument("--examples", type=_integer, default=4, help="test images, one per row (default: 4)")
    pv.add_argument("--start", type=_integer, default=0, help="index of the first test image (default: 0)")
    _add_corruption_flags(pv)
    pv.add_argument("--data-dir", help="where datasets live or are downloaded to "
                    "(default: $RSMOOTH_DATA, then ~/.cache/rsmooth/data)")
    pv.set_defaults(func=cmd_preview_corruptions)

    ls = sub.add_parser("list", help="list datasets, architectures, methods, presets and corruptions",
                        description="Without KIND: every kind, wrapped. With KIND: one per line "
                        "(presets with the paper table they reproduce).")
    ls.add_argument("kind", nargs="?", choices=_LIST_KINDS, help="what to list")
    ls.set_defaults(func=cmd_list)

    rp = sub.add_parser(
        "reproduce", help="train, certify and tabulate a whole paper table beside the published values",
        description="Train every (method, sigma) row of a paper table from its preset (CAT-RS through its "
        "consistency targets, sharing the sigma0 = 0.25 Gaussian model across sigmas), certify with the table's "
        "protocol and write OUT/table.md in the paper's layout with the published values and the difference "
        "(mean +- std over --seeds). Every step is an ordinary run folder under OUT/runs: rerun the same "
        "command after a kill to continue. " + UNITS)
    rp.add_argument("table", nargs="?", help="e.g. catrs:table4 (Jeong, Kim, Shin 2023, CAT-RS, arXiv 2212.09000, "
                    "Table 4: Fashion-MNIST); --list shows them all")
    rp.add_argument("--list", action="store_true", help="list the tables, what each trains and the data it needs")
    rp.add_argument("--out", help="output folder (one table and budget per folder)")
    rp.add_argument("--budget", default="small",
                    help="paper (the published protocol), small (default: epochs x0.1, 1/6 of the training set, "
                    "targets and n x0.1, every 10th test example) or smoke (x1/30, 1/20, x0.01); a factor may be "
                    "changed: small,epochs=0.05,train=0.1,targets=0.02,n=0.02,test=0.02. The table's caption states it")
    rp.add_argument("--seeds", type=_integer, help="train every row with seeds 0..N-1 and show mean +- std "
                    "(default: as many as the published values are over: 5 for catrs:table12, else 1)")
    rp.add_argument("--methods", nargs="+", metavar="METHOD", help="only the rows of these methods (default: all)")
    rp.add_argument("--sigmas", type=float, nargs="+", metavar="SIGMA",
                    help="only the rows of these noise levels, [0,1] pixel units (default: all)")
    rp.add_argument("--jobs", type=_integer, default=1,
                    help="run up to K independent steps at once, each in its own process (default: 1)")
    rp.add_argument("--print-commands", action="store_true",
                    help="print the steps as rsmooth commands, by stage (a stage's commands are independent: one "
                    "cluster job each), and run nothing; then --collect writes the table")
    rp.add_argument("--collect", action="store_true", help="write the table from the runs done, running nothing")
    _add_common_data(rp)
    rp.set_defaults(func=cmd_reproduce)

    sp = sub.add_parser("show-preset", help="every setting of a paper preset",
                        description="Dataset, method, sigma, every method hyperparameter (with its "
                        "flag), the training schedule, the paper table it reproduces and its note.")
    sp.add_argument("name", help="a preset name, e.g. fashion-mnist/catrs/0.50 or fashion-mnist/catrs/0.5 "
                    "('rsmooth list presets')")
    sp.add_argument("--format", choices=["text", "yaml", "json"], default="text",
                    help="text (default): settings as flags, with the source; yaml or json: every setting "
                    "as a file for 'rsmooth train --config FILE'")
    sp.set_defaults(func=cmd_show_preset)
    return parser


#: train flags that map one-to-one onto TrainConfig fields
_TRAIN_FIELDS = ("dataset", *_ARCH_FIELDS, "method", "epochs", "batch_size", "lr", "momentum",
                 "weight_decay", "nesterov", "lr_step", "milestones", "lr_gamma", "lr_timing", "seed", "train_subset",
                 "data_dir", "device", "targets", "precision", "channels_last", "compile", "sync_bn", "optimizer", "classifier", "init",
                 "checkpoint_every", "eval_every", "eval_examples", "tensorboard")


def train_config_from_args(args: argparse.Namespace):
    """The fields given: --preset < --config FILE < flags (hyperparameters merged one by one).
    With --resume on a run folder: its recorded config with those fields, which must agree with
    it (TrainConfig.from_run); else a new config whose unset fields keep their defaults."""
    from .engine import TrainConfig
    from .engine.runconfig import config_fields, read_config_file, recorded_fields, recorded_file
    from .presets import get_preset

    preset = get_preset(args.preset) if args.preset else None
    layers = [preset.train_config()] if preset else []
    if args.config:
        layers.append(config_fields(read_config_file(args.config), TrainConfig, args.config))
    layers.append({k: getattr(args, k) for k in _TRAIN_FIELDS if getattr(args, k) is not None})
    if args.workers is not None:
        layers[-1]["num_workers"] = args.workers
    fields: Dict[str, Any] = {"hparams": {}}
    for layer in layers:
        fields.update({k: v for k, v in layer.items() if k != "hparams"})
        fields["hparams"] = {**fields["hparams"], **(layer.get("hparams") or {})}
    if preset and fields["method"] != preset.method:
        raise RsmoothError(f"--method {fields['method']} conflicts with preset {preset.name}; drop one of them")
    run = args.resume and recorded_file(args.out) is not None
    method = fields.get("method") or (recorded_fields(args.out, TrainConfig)["method"] if run else TrainConfig.method)
    if args.sigma is not None:
        fields["hparams"]["sigma"] = args.sigma
    fields["hparams"].update(_method_args(args, method))
    return TrainConfig.from_run(args.out, trust_code=args.trust_code, **fields) if run else TrainConfig(**fields)


def cmd_train(args: argparse.Namespace) -> None:
    from .engine import train
    from .engine.distributed import world
    from .engine.runconfig import recorded_file

    if args.resume and world().main and recorded_file(args.out) is None:
        print(f"{args.out} holds no run yet: starting it")
    result = train(train_config_from_args(args), args.out, resume=args.resume, trust_code=args.trust_code)
    if world().main:
        print(f"checkpoint: {result.checkpoint}{world().note}")


def cmd_certify(args: argparse.Namespace) -> None:
    from .data import published_release
    from .engine import certify_corruptions, corruption_plan, load_model, run_certification
    from .engine.distributed import world

    kwargs = dict(**_sequential_options(args), dataset=args.dataset, split=args.split,
                  sigma=args.sigma, n0=getattr(args, "n0", 100), alpha=args.alpha,
                  batch_size=args.batch_size, start=args.start, skip=args.skip, max=args.max, shard=args.shard,
                  seed=args.seed, precision=args.precision, channels_last=args.channels_last, compile=args.compile,
                  data_dir=args.data_dir, device=args.device, overwrite=args.overwrite,
                  trust_pickle=args.trust_pickle, trust_code=args.trust_code, model_options=_model_options(args),
                  heartbeat=args.heartbeat)
    dataset = args.dataset
    if args.corruption is None and args.severity is None and (
            dataset is None or not published_release(dataset)):
        if args.corruption_suite is not None:
            raise RsmoothError("--corruption-suite without --corruption: name the corruption(s) as well")
        out = run_certification(args.checkpoint, args.out, **kwargs)
    else:
        if dataset is None:
            dataset = load_model(args.checkpoint, trust_pickle=args.trust_pickle, trust_code=args.trust_code,
                                 **_model_options(args)).dataset
            kwargs["dataset"] = dataset
        plan = corruption_plan(dataset, args.corruption or "all", args.severity, args.corruption_suite,
                               log=lambda _: None)
        common = dict(corruption_seed=args.corruption_seed, corruption_suite=args.corruption_suite, **kwargs)
        if len(plan) == 1 and args.out.endswith(".tsv"):
            out = run_certification(args.checkpoint, args.out, corruption=plan[0].corruption,
                                    severity=plan[0].severity, **common)
        else:
            out = certify_corruptions(args.checkpoint, args.out, corruptions=args.corruption or "all",
                                      severities=args.severity, **common)
    if world().main:
        print(f"results: {out}{world().note}")


def cmd_merge(args: argparse.Namespace) -> None:
    from pathlib import Path

    from .engine.shards import CERTIFY, merge_shards, shard_groups, shard_kind

    if args.out is None:
        if len(args.files) != 1:
            raise RsmoothError("merge takes OUT (the --out of the shards), or --out OUT and the shard files")
        if Path(args.files[0]).is_dir():  # a folder of 'certify --corruption all --shard I/K'
            groups = shard_groups(args.files[0])
            for out in groups:
                merge_shards(out, CERTIFY, None, overwrite=args.overwrite, keep=args.keep_shards)
            print(f"results: {args.files[0]} " + (f"({len(groups)} files merged)" if groups
                                                   else "(already complete: no shard files left to merge)"))
            return
        out, shards = args.files[0], []
    else:
        if not args.files:
            raise RsmoothError(f"--out {args.out} without shard files: list them, or give OUT alone to find them")
        out, shards = args.out, args.files
    kind = shard_kind(out, shards)
    path = merge_shards(out, kind, shards, overwrite=args.overwrite, keep=args.keep_shards)
    print(f"{'targets' if kind is not CERTIFY else 'results'}: {path}")


def cmd_targets(args: argparse.Namespace) -> None:
    from .engine.distributed import world
    from .engine.targets import compute_targets

    out = compute_targets(args.checkpoint, args.out, dataset=args.dataset, num_samples=args.num_samples,
                          sigma=args.sigma, batch_size=args.batch_size, augment=args.augment,
                          seed=args.seed, precision=args.precision, channels_last=args.channels_last,
                          data_dir=args.data_dir, device=args.device, overwrite=args.overwrite,
                          shard=args.shard, trust_pickle=args.trust_pickle, trust_code=args.trust_code,
                          model_options=_model_options(args),
                          train_subset=args.train_subset, heartbeat=args.heartbeat)
    if world().main:
        print(f"targets: {out}{world().note}")


def cmd_pipeline(args: argparse.Namespace) -> None:
    from .engine.pipeline import run_pipeline

    overrides = {"epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
                 "lr_step": args.lr_step, "lr_timing": args.lr_timing, "data_dir": args.data_dir,
                 "device": args.device}
    table = run_pipeline(
        args.out, method=args.recipe, dataset=args.dataset, sigma=args.sigma,
        hparams=_method_args(args, args.recipe), train_overrides=overrides, target_samples=args.target_samples,
        target_augment=args.target_augment, n0=args.n0, n=args.n, alpha=args.alpha, skip=args.skip,
        max=args.max, seed=args.seed, compare_gaussian=args.compare_gaussian,
        certify_options={"start": args.start, "precision": args.precision, "channels_last": args.channels_last,
                         "data_dir": args.data_dir, "device": args.device})
    if table:  # rank 0 under torchrun
        print(table)


def cmd_analyze(args: argparse.Namespace) -> None:
    from .report import analyze, corruption_tables
    from .report.corruptions import PAPER_MODES
    from .report.paper import PAPER_TABLES, check_table_id, list_tables

    if args.paper == "list":
        print(list_tables())
        return
    if args.corruptions and args.paper not in (None, *PAPER_MODES):
        raise RsmoothError(f"--paper {args.paper}: with --corruptions choose one of {', '.join(PAPER_MODES)}")
    if not args.corruptions and args.paper in PAPER_MODES:
        raise RsmoothError(f"--paper {args.paper} goes with --corruptions FOLDER...; for certify files give a "
                           f"table: {', '.join(PAPER_TABLES)}")
    if not args.corruptions and args.paper is not None:
        try:
            check_table_id(args.paper)
        except RsmoothError:
            raise RsmoothError(f"--paper {args.paper}: unknown table; choose one of {', '.join(PAPER_TABLES)} "
                               f"('--paper list' describes them)") from None
    if not args.ci and (args.ci_level is not None or args.alpha is not None):
        raise RsmoothError(f"{'--ci-level' if args.ci_level is not None else '--alpha'} goes with --ci")
    if args.corruptions:
        if args.ci:
            raise RsmoothError("--ci goes with certify files, not --corruptions folders")
        if args.results or args.radii or args.plot:
            raise RsmoothError("--corruptions takes folders of corruption results and prints their tables; "
                               "give certify files (with --radii, --plot) in another 'rsmooth analyze' call")
        print(corruption_tables(args.corruptions, labels=args.labels, fmt=args.format, severity=args.severity,
                                as_json=args.json, paper=args.paper or "auto"))
        return
    if not args.results:
        raise RsmoothError("analyze needs certify TSV files, or --corruptions FOLDER... for corruption results")
    if args.severity is not None:
        raise RsmoothError("--severity goes with --corruptions FOLDER...")

    ci = (args.ci_level if args.ci_level is not None else True) if args.ci else None
    print(analyze(args.results, radii=args.radii, fmt=args.format, labels=args.labels,
                  plot=args.plot, as_json=args.json, paper=args.paper, ci=ci, alpha=args.alpha))


def cmd_preview_corruptions(args: argparse.Namespace) -> None:
    from .engine.corrupt_certify import preview_corruptions

    out = preview_corruptions(args.dataset, args.out, corruptions=args.corruption or "all", severities=args.severity,
                              examples=args.examples, start=args.start, seed=args.corruption_seed,
                              suite=args.corruption_suite, data_dir=args.data_dir)
    print(f"preview: {out}")


def cmd_demo(args: argparse.Namespace) -> None:
    from .demo import run_demo

    print(run_demo(args.out, n=args.n, epochs=args.epochs, overwrite=args.overwrite))


_LIST_KINDS = ("datasets", "architectures", "methods", "presets", "corruptions")


def _wrapped(title: str, names: List[str], indent: str = "  ") -> str:
    return textwrap.fill(", ".join(names), width=100, initial_indent=f"{indent}{title}: ",
                         subsequent_indent=indent + "    ", break_on_hyphens=False)


def cmd_list(args: argparse.Namespace) -> None:
    from .data import DATASETS
    from .methods import METHODS
    from .models import arch_names
    from .presets import PRESETS, get_preset

    names = {kind: [n for n in names if not n.startswith("_")]  # "_name": private (tests)
             for kind, names in zip(_LIST_KINDS, (DATASETS.names(), arch_names(), METHODS.names(), PRESETS.names()))}
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
        from .corruptions import SUITES

        print("corruptions by suite ('rsmooth list corruptions': severities, benchmarks, published sets):")
        for suite in SUITES.values():
            print(_wrapped(suite.name, list(suite.corruptions)))


def _corruption_listing() -> str:
    """Each suite's corruptions (levels, benchmark membership) and the published corrupted datasets."""
    from .corruptions import BENCHMARK, HELD_OUT, SUITES
    from .data import DATASETS, published_release

    lines = []
    for suite in SUITES.values():
        lines.append(f"generated, {suite.name} definitions ({suite.citation}):")
        for c in suite.corruptions.values():
            where = ("benchmark" if c.name in BENCHMARK[suite.name]
                     else "held out" if c.name in HELD_OUT[suite.name] else "extra")
            levels = (f"severities {c.severities[0]}-{c.severities[-1]}" if c.severities else "no levels")
            default = f", default {c.default}" if c.default is not None else ""
            lines.append(f"  {c.name:<18} {where:<9} {levels}{default}")
    for name in DATASETS.names():
        cls = published_release(name)
        if cls:
            levels = f"severities {cls.severities[0]}-{cls.severities[-1]}" if cls.severities else "one level each"
            lines.append(f"published {name} ({levels}): {', '.join(cls.published_corruptions)}")
    return "\n".join(lines)


def _as_flag(flag: str, value: Any) -> str:
    """``value`` as the command-line flag that sets it."""
    from .engine.runconfig import flag_text

    return flag_text(flag, value)


def cmd_reproduce(args: argparse.Namespace) -> None:
    from .reproduce import list_tables, reproduce

    if args.list:
        print(list_tables())
        return
    if not args.table or not args.out:
        raise RsmoothError("reproduce needs TABLE and --out DIR (or --list to see the tables)")
    print(reproduce(args.table, args.out, budget=args.budget, seeds=args.seeds, jobs=args.jobs,
                    methods=args.methods, sigmas=args.sigmas,
                    print_commands=args.print_commands, collect=args.collect, data_dir=args.data_dir,
                    device=args.device))


def cmd_show_preset(args: argparse.Namespace) -> None:
    from .engine import TrainConfig
    from .methods import create_method
    from .presets import get_preset

    preset = get_preset(args.name)
    kw = preset.train_config()
    method = create_method(preset.method, **kw["hparams"])
    config = TrainConfig(**kw).resolved()
    if args.format != "text":
        from .engine.runconfig import dump_config

        config.hparams = method.hparams()
        print(dump_config(config.to_dict(), args.format, (
            f"preset {preset.name}: {preset.source}",
            "rsmooth train --config FILE --out DIR  (flags given there override the file)")), end="")
        return
    flags = {f.name: flag for flag, uses in _method_fields().items() for m, f in uses if m == preset.method}
    print(f"preset   {preset.name}\ndataset  {preset.dataset}\nmethod   {preset.method}\n"
          f"sigma    {preset.sigma:g}")
    hparams = [(_as_flag(flags[k], v), k in preset.hparams) for k, v in method.hparams().items() if k != "sigma"]
    if hparams:
        print("hyperparameters (* set by the preset; the others are the method's defaults):")
        width = max(len(text) for text, _ in hparams)
        for text, from_preset in hparams:
            print(f"  {text:<{width}}  *" if from_preset else f"  {text}")
    schedule = [_as_flag("--" + k.replace("_", "-"), getattr(config, k))
                for k in ("arch", "epochs", "batch_size", "optimizer", "lr", "momentum", "weight_decay", "nesterov",
                          "lr_step", "milestones", "lr_gamma", "lr_timing") if getattr(config, k) is not None]
    print("schedule:\n" + "\n".join("  " + text for text in schedule))
    print(textwrap.fill(f"source   {preset.source}", width=100, subsequent_indent="         "))
    print(textwrap.fill(f"note     {preset.note or '-'}", width=100, subsequent_indent="         "))
    print(f"train it: rsmooth train --preset {preset.name} --out DIR  (flags given there override it)")


#: main() calls running in this process (``reproduce --jobs 1`` runs each step through main)
_depth = 0


def main(argv: Optional[List[str]] = None) -> int:
    """Run one command and return its exit status.

    0: done (also 141, quietly, when stdout is a pipe closed early, as in ``rsmooth list | head``).
    2: a problem the user fixes (bad input, a full or read-only disk, out of memory),
    told in one line ``rsmooth: error: ...``.  1: an internal error (a bug), also one line;
    ``--debug`` (anywhere in the arguments) or ``RSMOOTH_DEBUG=1`` shows its traceback instead.
    130 (Ctrl-C) and 143 (SIGTERM, what schedulers send before killing a job): the run stops as
    if killed between two units of work (training saves the step in progress, certification keeps
    its whole rows), and rerunning the same command (train: with --resume) continues it.  A main
    called inside another (a step of ``reproduce``) leaves signals to the outer one, which says
    so once.
    """
    global _depth
    import os
    import signal
    import threading
    import warnings

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("RSMOOTH_DEBUG", "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    from .progress import line_buffered_stdout

    line_buffered_stdout()  # a SLURM log shows each line when it is printed
    terminated: List[int] = []

    def on_sigterm(signum: int, frame: Any) -> None:
        terminated.append(signum)
        raise KeyboardInterrupt  # unwind exactly as Ctrl-C does

    # before anything imports torch (seconds), so a stop during start-up is handled too
    nested = _depth > 0
    handle_signals = not nested and threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, on_sigterm) if handle_signals else None
    _depth += 1
    try:
        with warnings.catch_warnings():  # restores the default display afterwards
            warnings.showwarning = _show_warning
            args = build_parser().parse_args(argv)
            args.func(args)
            sys.stdout.flush()  # here, so a closed pipe is handled below, not at the interpreter's exit
    except SystemExit:  # --help, --version and usage errors: their text may meet a closed pipe too
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            if _silence_closed_stdout():
                return 141
        raise
    except KeyboardInterrupt:
        if nested:  # the outer main knows whether it was SIGTERM, and prints the one line
            raise
        how = "terminated" if terminated else "interrupted"
        size = os.environ.get("WORLD_SIZE", "1")
        if size not in ("", "1"):  # a signal, or torchrun stopping the ranks after one failed
            from .torchrun import stop_line

            print(stop_line(bool(terminated)), file=sys.stderr, flush=True)  # before torchrun's report
        else:
            print(f"rsmooth: {how}; rerun the same command (train: add --resume) to continue", file=sys.stderr)
        return 143 if terminated else 130
    except Exception as e:
        if isinstance(e, BrokenPipeError) and _silence_closed_stdout():
            return 141  # quietly, as a tool that SIGPIPE ends (128 + 13): 'rsmooth list | head' is no error
        if debug:
            raise
        code, message = _explain(e)
        print(message, file=sys.stderr, flush=True)  # under torchrun, before torchrun's report
        return code
    finally:
        _depth -= 1
        if handle_signals:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
    return 0


def _silence_closed_stdout() -> bool:
    """Whether stdout is a pipe whose reader is gone (``rsmooth list | head``); if so, point it at
    /dev/null so that nothing more fails on it (Python's docs, "Note on SIGPIPE")."""
    import os
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        if not any(events & select.POLLERR for _, events in poller.poll(0)):  # the write end of a
            return False  # pipe polls POLLERR once its read end is closed
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # no file descriptor (captured), no poll
        return False
    return True


def _show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                  line: Optional[str] = None) -> None:
    """Warnings as one line ``rsmooth: warning: ...`` (not Python's file:line and source line)."""
    print(f"rsmooth: warning: {message}", file=sys.stderr if file is None else file)


def _explain(e: Exception) -> typing.Tuple[int, str]:
    """(exit status, the one line to print) for an exception that ended a command."""
    import errno

    first = (str(e).strip().splitlines() or [""])[0][:200]
    if isinstance(e, RsmoothError):
        return 2, f"rsmooth: error: {e}"
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError" or "can't allocate memory" in first:
        return 2, (f"rsmooth: error: out of memory ({first or type(e).__name__}); lower --batch-size "
                   f"and rerun the same command to continue")
    if isinstance(e, OSError):
        full = "free some space or choose another --out, then rerun the same command to continue"
        hint = {errno.ENOSPC: full, getattr(errno, "EDQUOT", errno.ENOSPC): full,
                errno.EFBIG: "the file system or a limit (ulimit -f) allows no file this large; " + full,
                errno.EROFS: "choose another --out on a writable file system",
                errno.EACCES: "fix the permissions (or, for an output, choose another --out)",
                errno.EPERM: "fix the permissions (or, for an output, choose another --out)"}.get(e.errno)
        where = f"{e.filename}: " if e.filename else ""
        return 2, f"rsmooth: error: {where}{e.strerror or first}" + (f"; {hint}" if hint else "")
    return 1, (f"rsmooth: internal error: {type(e).__name__}: {first} (rerun with --debug or "
               f"RSMOOTH_DEBUG=1 to see the traceback; please report it)")


if __name__ == "__main__":  # python -m rsmooth.cli: as python -m rsmooth
    from .imports import drop_implicit_cwd

    drop_implicit_cwd()
    sys.exit(main())
