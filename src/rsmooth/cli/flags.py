"""The flag groups the subcommands share: data and device, architecture, certification,
sequential certification, corruptions, method hyperparameters, trust, heartbeat, and the reference
scripts' spellings (refused, naming rsmooth's flag); plus :class:`Parser` (one-line errors, no
abbreviations) and the value types.  A flag two subcommands have is defined here once.

Units: sigma and radii are l2 distances in [0, 1] pixel units (images scaled to [0, 1] before
normalisation), as in every randomized-smoothing paper.
"""
from __future__ import annotations

import argparse
import typing
from typing import Any, Dict, List, Optional

from ..errors import RsmoothError
from . import catalog
from .catalog import trainable_datasets  # noqa: F401 (the subcommands' --dataset choices)

UNITS = ("sigma and radii are l2 distances in [0,1] pixel units: images are scaled to [0,1] "
         "and the noise is added before normalisation (e.g. sigma 0.25, 0.5, 1.0).")
TRUST_PICKLE = ("load a checkpoint that pickles Python objects beyond tensors and argparse.Namespace "
                "(refused by default, naming the object): unpickling can run arbitrary code; only for "
                "files you trust")
TRUST_CODE = ("build the package.module:factory architecture that a checkpoint, run folder or denoiser run "
              "names (refused by default, naming it): importing and calling it runs its code; only for files "
              "you trust. Built-in architectures and installed rsmooth.models entry points need no flag, and "
              "--arch with the same name opts in for that one")


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (the problem and where to read more, no usage dump) and no
    abbreviated flags: a prefix such as ``--batch`` could silently match another flag."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def any_integer(text: str) -> int:
    """An integer, written out or as ``1e5`` (exactly: ``1.5e0`` is refused); its range is the
    caller's (seeds go to 2**63 - 1)."""
    import decimal

    try:
        return int(text)
    except ValueError:
        pass
    try:
        d = decimal.Decimal(text.strip())
    except decimal.InvalidOperation:
        d = decimal.Decimal("NaN")
    if not d.is_finite() or d.adjusted() > 100 or d != d.to_integral_value():  # 1e100000 is not built
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    return int(d)


def integer(text: str) -> int:
    """A count or index flag's value: an integer of magnitude at most MAX_COUNT (2**40), so that no
    absurd value reaches a tensor or a loop (``1e5`` is 100000)."""
    from ..smoothing.stats import MAX_COUNT, MAX_COUNT_TEXT

    v = any_integer(text)
    if abs(v) > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"expected an integer of at most {MAX_COUNT_TEXT}, got {text!r}; lower it")
    return v


def number(text: str) -> float:
    """A float flag's value: a finite number (nan and inf are refused; --radius-tol alone takes inf)."""
    import math

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
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


class ForeignFlag(argparse.Action):
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


def add_foreign_flags(p: argparse.ArgumentParser) -> None:
    """Teach ``p`` the reference scripts' spellings of the flags it has (see FOREIGN_FLAGS)."""
    have = p._option_string_actions
    for theirs, ours in FOREIGN_FLAGS.items():
        if ours in have and theirs not in have:
            p.add_argument(theirs, action=ForeignFlag, ours=ours)



#: a method hyperparameter's value type, by the name the catalogue stores
_TYPES = {"int": integer, "float": number, "str": str}


def _dest(flag: str) -> str:
    return "hp_" + flag[2:].replace("-", "_")


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
ARCH_FIELDS = ("arch", "arch_kwargs", "num_classes", "input_size", "mean", "std")


def add_arch_flags(p: argparse.ArgumentParser, train: bool) -> None:
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
                   help="default: " + ("the dataset's usual architecture" if train else "the checkpoint's; also "
                   "timm:NAME (timm's architecture, the --checkpoint file its weights: pip install 'rsmooth[timm]') "
                   "or transformers (--checkpoint a save_pretrained image classifier folder: pip install "
                   "'rsmooth[transformers]'), with --dataset; nothing is downloaded"))
    g.add_argument("--arch-kwargs", type=_json_object, metavar="JSON",
                   help="keyword arguments of a module:factory, a JSON object, e.g. '{\"width\": 64}' "
                   "(default: none)")
    g.add_argument("--num-classes", type=integer, help="number of logits (default: the dataset's classes)")
    if train:
        g.add_argument("--input-size", type=integer, nargs=3, metavar=("C", "H", "W"),
                       help="input shape passed to a factory that takes input_size (default and only "
                       "choice: the dataset's; images are not resized)")
    g.add_argument("--mean", type=number, nargs="+", metavar="M",
                   help="per-channel mean in [0,1] pixel units: the model gets (x - mean) / std, for nets "
                   "trained on normalised images; sigma stays in pixel units (default: the dataset's "
                   "for built-in architectures, none for a module:factory, which then gets [0,1] pixels)")
    g.add_argument("--std", type=number, nargs="+", metavar="S",
                   help="per-channel std in [0,1] pixel units, with --mean (default: as for --mean)")


def add_trust_code_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trust-code", action="store_true", help=TRUST_CODE)


def model_options(args: argparse.Namespace) -> Dict[str, Any]:
    """The architecture flags given on certify, predict or targets, as load_model's keywords."""
    return {k: getattr(args, k) for k in ARCH_FIELDS if getattr(args, k, None) is not None}


def add_common_data(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", help="the folder datasets are read from, or downloaded to when missing; "
                   "no other folder is searched (default: $RSMOOTH_DATA, then system folders, then "
                   "~/.cache/rsmooth/data; digits ships with scikit-learn and reads none)")
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if available)")


def batch_size(text: str):
    """``auto`` or a positive integer (what ``--batch-size`` takes)."""
    return "auto" if text == "auto" else integer(text)


def auto_batch_help() -> str:
    return ("noisy inputs per forward pass, or auto (default): measured at the start for the model and device "
            "(a few passes at growing sizes; skipped for jobs under 500,000 samples, which take 256). Results do "
            "not depend on it: each image's noise is drawn in blocks of 256 copies, and many images share a pass")


def batch_help() -> str:
    return (f"noisy samples per forward pass (default: {catalog.default_batch_size()}, within ~15%% of the best "
            f"on CPU for LeNet and ResNet-20, see BENCHMARKS.md; a GPU may want more)")


#: --n when not given (certify leaves it None, to refuse it with --sequential/--adaptive)
DEFAULT_N = 100_000


def add_certify_options(p: argparse.ArgumentParser, mode: str) -> None:
    """The certification flags shared by certify, predict and pipeline."""
    if mode == "certify":
        p.add_argument("--n0", type=integer, default=100, help="samples to select the class (default: 100)")
    p.add_argument("--n", type=integer, default=DEFAULT_N,
                   help=f"Monte Carlo samples to {'vote' if mode == 'predict' else 'estimate the bound, at least --n0'} "
                   "(default: 100000)")
    p.add_argument("--alpha", type=number, default=0.001, help="failure probability in (0, 1) (default: 0.001)")
    p.add_argument("--start", type=integer, default=0,
                   help="index of the first test example (as the CAT-RS and MACER scripts' --start; default: 0); "
                   "with --skip and --max the examples are start, start+skip, ..., at most max of them")
    p.add_argument("--skip", type=integer, default=1,
                   help="use every skip-th test example (Cohen: 20 for CIFAR-10, 100 for ImageNet; default: 1)")
    p.add_argument("--max", type=integer, help="certify at most this many examples (default: all)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                   help="bf16: weights and noisy inputs in bfloat16 (faster on AMX CPUs; recorded in OUT.json); "
                   "default: fp32")
    p.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=None,
                   help="channels-last memory format for the convolutions (default: measured at the start, kept "
                   "when faster and its votes equal NCHW's; recorded in OUT.json)")


#: smoothing.sequential.ALPHA_SHARE as the help writes it (not imported: the CLI starts without numpy)
ALPHA_SHARE_TEXT = "0.5"


def add_sequential_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "sequential certification", "draw samples in growing batches until the answer is known, bounding p_A "
        "with anytime-valid confidence sequences (Robbins' one-sided Beta-binomial mixtures; Howard, Ramdas, "
        "McAuliffe, Sekhon 2021, arXiv 1810.08240), which hold at every sample size at once and so stay valid "
        "when the data choose when to stop (Voracek 2024, arXiv 2406.17830). The lower bound certifies "
        "(--alpha covers every radius and every stop at once); an upper bound at level --futility stops work "
        "on radii that its lower bound would not certify with --n-max samples (fixed certify --n N_MAX, "
        "whose bound is about 1.5x tighter, certifies some of them: see docs/guide/certify.md). OUT keeps its columns (radius: the certified "
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
    g.add_argument("--radii", type=number, nargs="+", metavar="R",
                   help="with --sequential: the l2 radii to decide, in [0,1] pixel units (e.g. 0.25 0.5 0.75; "
                   "add 0 for the accuracy of the smoothed classifier; required with --sequential)")
    g.add_argument("--n-max", type=integer,
                   help="with --sequential or --adaptive: cap on the estimation samples per example "
                   "(default: 100000)")
    g.add_argument("--radius-tol", type=float,
                   help="with --adaptive: l2 radius (in [0,1] pixel units) that the samples up to --n-max may "
                   "still add at the stop (default: 0.05; inf: stop at the first look)")
    g.add_argument("--futility", type=number, metavar="BETA",
                   help="with --sequential or --adaptive: level of the upper bound that gives up radii (or radius "
                   "gains) its lower bound would not reach with --n-max samples; the chance of giving up one it "
                   "would reach is at most 2 * BETA. Never affects a certificate's validity (default: 0.05; below 1/e)")
    g.add_argument("--alpha-share", type=number, metavar="S",
                   help="with --sequential or --adaptive: the share of --alpha spent on the anytime bound, which "
                   "decides the easy radii early; the rest goes to Clopper-Pearson over all --n-max samples where a "
                   "radius is still open at the cap (a union bound), so little of what fixed certify --n N_MAX "
                   "certifies is given up; 1: the anytime bound alone (runs made before this option); recorded in "
                   "OUT.json (default: the continued file's, else " + ALPHA_SHARE_TEXT + ")")
    p.set_defaults(n=None)  # an --n given is told from the default: these modes draw up to --n-max


def add_heartbeat_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--heartbeat", type=number, metavar="SECONDS",
                   help="where no progress bar is drawn (a log file, a SLURM job): a progress line (done/total, "
                   "rate, samples/s, eta) every SECONDS, the first after at most 10 s; 0: none (default: "
                   "$RSMOOTH_HEARTBEAT or 60)")



def add_corruption_flags(p: argparse.ArgumentParser) -> None:
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
    g.add_argument("--corruption-seed", type=any_integer, default=0,
                   help="seed of generated corruptions: image i is corrupted from (seed, corruption, severity, i) "
                   "(default: 0)")
    g.add_argument("--corruption-suite", choices=["mnist-c", "cifar10-c"],
                   help="whose definitions generate the corruptions (default: mnist-c for grey images, "
                   "cifar10-c for colour ones)")


#: the title of the group of method hyperparameter flags (:class:`MethodHelp` retitles it)
_HPARAM_GROUP = "method hyperparameters (defaults are per method; a preset may set them)"


def add_method_flags(p: argparse.ArgumentParser) -> None:
    """Every method's hyperparameter flag, each action keeping its help per method (``method_help``)."""
    g = p.add_argument_group(_HPARAM_GROUP)
    for flag, spec in catalog.method_flags().items():
        if spec["type"] == "bool":
            kw: Dict[str, Any] = dict(action=argparse.BooleanOptionalAction)
        else:
            kw = dict(type=_TYPES[spec["type"]], choices=spec["choices"],
                      metavar=None if spec["choices"] else spec["field"].upper())
        action = g.add_argument(flag, dest=_dest(flag), default=None, help=spec["help"].replace("%", "%%"), **kw)
        action.method_help = {m: text.replace("%", "%%") for m, text in spec["own"].items()}


class MethodHelp(argparse.Action):
    """``-h/--help`` of a command with --method and :func:`add_method_flags`: after ``--method M``,
    only M's hyperparameter flags, each with M's own help."""

    def __init__(self, option_strings: List[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        method = getattr(namespace, "method", None)
        for group in parser._action_groups if method else ():
            if group.title == _HPARAM_GROUP:
                group.title = f"--method {method}'s hyperparameters (without --method, --help lists every method's)"
                for action in group._group_actions:
                    action.help = action.method_help.get(method, argparse.SUPPRESS)
        parser.print_help()
        parser.exit()


def method_args(args: argparse.Namespace, method: str) -> Dict[str, Any]:
    """The method hyperparameters given as flags, by field name; a flag of another method is an error."""
    from ..engine.runconfig import method_flags

    out: Dict[str, Any] = {}
    for flag, uses in method_flags().items():
        value = getattr(args, _dest(flag), None)
        if value is None:
            continue
        users = [m for m, _ in uses]
        if method not in users:
            raise RsmoothError(f"{flag} is a hyperparameter of {', '.join(users)}, not of {method}; "
                               f"drop it or pick one of those methods")
        out[dict(uses)[method].name] = value
    return out
