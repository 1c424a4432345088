"""``rsmooth attack`` and ``rsmooth audit``: SmoothAdv's evaluation attack on a smoothed classifier
(:func:`rsmooth.engine.attack.run_attack`), and the audit of a certify file's certificates
(:func:`rsmooth.engine.audit.run_audit`)."""
from __future__ import annotations

import argparse

from ..errors import RsmoothError
from . import catalog
from .flags import (TRUST_PICKLE, UNITS, add_arch_flags, add_common_data, add_foreign_flags, add_heartbeat_flag,
                    add_trust_code_flag, any_integer, integer, model_options, number)

_REFERENCE = ("Salman, Yang, Li, Zhang, Zhang, Razenshteyn, Bubeck 2019, Provably Robust Deep Learning via "
              "Adversarially Trained Smoothed Classifiers, arXiv 1906.04584; code: Hadisalman/smoothing-adversarial "
              "code/predict.py and code/attacks.py")


def add_parser(sub: argparse._SubParsersAction) -> None:
    _add_attack(sub)
    _add_audit(sub)


def _attack_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--num-steps", type=integer, default=20,
                   help="attack steps T (default: 20, the reference README's --num-steps 20)")
    p.add_argument("--num-noise", type=integer, default=32,
                   help="m: noises the soft-smoothed classifier averages over, drawn once per image and used at "
                   "every step (default: 32, the README's --num-noise-vec 32)")
    p.add_argument("--batch-size", type=integer, default=1000, help="noisy inputs per forward pass of PREDICT "
                   "(default: 1000)")
    p.add_argument("--seed", type=any_integer, default=0, help="seed; every image draws from streams derived from "
                   "the seed and the image (the attack's: and its eps; the audit's: and its attack and round), "
                   "so shards and resumed runs write the same rows (default: 0)")


def _model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trust-pickle", action="store_true", help=TRUST_PICKLE)
    add_trust_code_flag(p)
    add_heartbeat_flag(p)
    add_arch_flags(p, train=False)
    add_common_data(p)
    add_foreign_flags(p)


def _add_attack(sub: argparse._SubParsersAction) -> None:
    helptext = "empirical robustness: attack the smoothed classifier at each eps, then PREDICT"
    a = sub.add_parser("attack", help=helptext, description=(
        f"{helptext}. For each test example and each --eps, PGD or DDN on the soft-smoothed classifier with "
        f"m noises, as SmoothAdv evaluates ({_REFERENCE}), then PREDICT (--n, --alpha) at the attacked point. "
        "Writes a TSV (idx label eps predict correct norm time) row by row and OUT.json; rerunning continues an "
        "interrupted run. 'rsmooth analyze CERTIFY.tsv --attack OUT' puts the empirical accuracy beside the "
        "certified one. " + UNITS))
    a.add_argument("--checkpoint", required=True, help="OUT/checkpoint.pt of 'rsmooth train' (or its folder), or "
                   "a public checkpoint with --dataset")
    a.add_argument("--dataset", choices=catalog.datasets(), help="default: the checkpoint's")
    a.add_argument("--split", default="test", choices=["test", "train"], help="default: test")
    a.add_argument("--sigma", type=number, help="noise level, std in [0,1] pixel units (default: the checkpoint's)")
    a.add_argument("--noise", metavar="NAME",
                   help="the smoothing noise, as certify names it: the attack's m noises and PREDICT's are drawn "
                   "from it (default: the one the checkpoint was trained with, else gaussian)")
    a.add_argument("--eps", type=number, nargs="+", default=[0.25, 0.5, 0.75, 1.0],
                   help="l2 attack radii, each > 0 (default: 0.25 0.5 0.75 1.0)")
    a.add_argument("--attack", default="pgd", choices=["pgd", "ddn"],
                   help="pgd: step 2 eps / T along the normalised gradient, projected; ddn: Rony et al. 2019's "
                   "decoupled direction and norm, init norm 1, gamma 1 - (3/510/eps)^(1/T) (default: pgd)")
    _attack_flags(a)
    a.add_argument("--n", type=integer, default=100_000, help="PREDICT's samples at the attacked point (default: "
                   "100000, predict.py's --N)")
    a.add_argument("--alpha", type=number, default=0.001, help="PREDICT's failure probability (default: 0.001)")
    a.add_argument("--start", type=integer, default=0, help="index of the first test example (default: 0)")
    a.add_argument("--skip", type=integer, default=1, help="use every skip-th test example (default: 1)")
    a.add_argument("--max", type=integer, help="attack at most this many examples (default: all)")
    a.add_argument("--shard", metavar="I/K", help="one of K independent jobs: every K-th example of the subset "
                   "from position I into OUT with .shard-I-of-K before its suffix; 'rsmooth merge OUT' joins them. "
                   "Under torchrun each rank takes shard RANK/WORLD_SIZE and rank 0 merges")
    a.add_argument("--out", required=True, help="output TSV")
    a.add_argument("--overwrite", action="store_true", help="replace --out instead of continuing it")
    _model_flags(a)
    a.set_defaults(func=run_attack_command)


def _add_audit(sub: argparse._SubParsersAction) -> None:
    helptext = "try to break a certify file's certificates: attack just inside each radius, or check given points"
    a = sub.add_parser("audit", help=helptext, description=(
        f"{helptext}. For each example certified (class c, radius r), --restarts rounds of each --attack "
        f"(SmoothAdv's evaluation PGD/DDN, {_REFERENCE}) at eps = r (1 - --shrink), and PREDICT at each point: "
        "a point within r where PREDICT returns another class (not an abstention) is a counterexample. Prints "
        "their count with its Clopper-Pearson interval and the count alpha allows (alpha + checks x PREDICT's "
        "alpha per image), and writes OUT/counterexamples/ (delta and point as .npy, votes as .json) to replay "
        "them, OUT/audit.tsv (resumable) and OUT/audit.json. With --points and --indices the given points "
        "are checked instead. The noise is the certify file's. --shard I/K splits the certified examples "
        "into K jobs joined by 'rsmooth merge OUT'; under torchrun each rank takes one shard and rank 0 "
        "merges. " + UNITS))
    a.add_argument("--checkpoint", required=True, help="the model the certify file was made with")
    a.add_argument("--certify", required=True, help="the certify TSV (with its OUT.json) whose certificates to audit")
    a.add_argument("--out", required=True, help="output folder")
    a.add_argument("--attack", nargs="+", default=["pgd", "ddn"], choices=["pgd", "ddn"],
                   help="the attacks of each round (default: pgd ddn)")
    a.add_argument("--restarts", type=integer, default=1, help="rounds of the attacks per image, each with fresh "
                   "noise: the budget (default: 1)")
    a.add_argument("--shrink", type=number, default=1e-3, help="attack at eps = radius x (1 - shrink) (default: 0.001)")
    _attack_flags(a)
    a.add_argument("--n", type=integer, help="PREDICT's samples at each point (default: the certify file's n)")
    a.add_argument("--alpha", type=number, help="PREDICT's failure probability (default: the certify file's)")
    a.add_argument("--beta", type=number, default=0.05, help="miss probability of the interval and of the count "
                   "alpha allows (default: 0.05)")
    a.add_argument("--max", type=integer, help="audit at most this many certified examples (default: all)")
    a.add_argument("--overwrite", action="store_true", help="replace an audit of other settings in --out (its rows "
                   "and counterexamples are deleted) instead of refusing; an audit of the same settings continues")
    a.add_argument("--shard", metavar="I/K", help="one of K independent jobs: every K-th certified example from "
                   "position I into OUT/audit.shard-I-of-K.tsv; 'rsmooth merge OUT' joins them. Under torchrun "
                   "each rank takes shard RANK/WORLD_SIZE and rank 0 merges")
    a.add_argument("--points", help="a .npy [N, C, H, W] of perturbed inputs to check instead of attacking")
    a.add_argument("--indices", nargs="+", metavar="I", help="the test index of each of --points: integers, or "
                   "one .npy file of them")
    _model_flags(a)
    a.set_defaults(func=run_audit_command)


def run_attack_command(args: argparse.Namespace) -> None:
    from ..engine.attack import run_attack
    from ..engine.distributed import world

    out = run_attack(args.checkpoint, args.out, eps=args.eps, attack=args.attack, num_steps=args.num_steps,
                     num_noise=args.num_noise, n=args.n, alpha=args.alpha, dataset=args.dataset, split=args.split,
                     sigma=args.sigma, noise=args.noise, batch_size=args.batch_size, start=args.start,
                     skip=args.skip, max=args.max, shard=args.shard, seed=args.seed, data_dir=args.data_dir,
                     device=args.device, overwrite=args.overwrite, trust_pickle=args.trust_pickle,
                     trust_code=args.trust_code,
                     model_options=model_options(args), heartbeat=args.heartbeat)
    if world().main:
        print(f"results: {out}{world().note}")


def run_audit_command(args: argparse.Namespace) -> None:
    from ..engine.audit import run_audit
    from ..engine.distributed import world

    run_audit(args.checkpoint, args.certify, args.out, attacks=args.attack, restarts=args.restarts,
              num_steps=args.num_steps, num_noise=args.num_noise, shrink=args.shrink, n=args.n, alpha=args.alpha,
              points=args.points, indices=_indices(args.indices), beta=args.beta, batch_size=args.batch_size,
              max=args.max, shard=args.shard, seed=args.seed, data_dir=args.data_dir, device=args.device,
              overwrite=args.overwrite,
              trust_pickle=args.trust_pickle, trust_code=args.trust_code, model_options=model_options(args),
              heartbeat=args.heartbeat)
    if world().main:
        print(f"results: {args.out}{world().note}")


def _indices(values):
    """--indices: a .npy file's path, or integers (one-line error otherwise)."""
    if values is None or (len(values) == 1 and values[0].endswith(".npy")):
        return None if values is None else values[0]
    try:
        return [integer(v) for v in values]
    except argparse.ArgumentTypeError as e:
        raise RsmoothError(f"--indices: {e} (give integers or one .npy file)") from None
