"""``rsmooth certify`` and ``rsmooth predict`` (one parser each, the same flags but --n0 and the
sequential modes): :func:`rsmooth.engine.run_certification`, or one run per corruption file."""
from __future__ import annotations

import argparse
from typing import Any, Dict

from ..errors import RsmoothError
from . import catalog
from .flags import (DEFAULT_N, TRUST_PICKLE, UNITS, add_arch_flags, add_certify_options, add_common_data,
                    add_corruption_flags, add_foreign_flags, add_heartbeat_flag, add_sequential_flags,
                    add_trust_code_flag, any_integer, auto_batch_help, batch_size, integer, model_options, number)


def add_parser(sub: argparse._SubParsersAction) -> None:
    for name, helptext in (("certify", "CERTIFY: certified radius of each test example"),
                           ("predict", "PREDICT: smoothed prediction of each test example")):
        _add_mode(sub, name, helptext)


def _add_mode(sub: argparse._SubParsersAction, name: str, helptext: str) -> None:
    c = sub.add_parser(name, help=helptext, description=helptext + " (Cohen, Rosenfeld, Kolter "
                       "2019, Certified Adversarial Robustness via Randomized Smoothing, arXiv 1902.02918). "
                       "Writes a TSV (idx label predict radius correct time) row by row and a "
                       "sidecar OUT.json with the run's settings; rerunning continues an "
                       "interrupted run. " + UNITS)
    c.add_argument("--checkpoint", required=True, help="OUT/checkpoint.pt of 'rsmooth train' "
                   "(or its folder), or a public Cohen/Salman/Jeong/MACER checkpoint with --dataset")
    c.add_argument("--dataset", choices=catalog.datasets(), help="default: the checkpoint's")
    c.add_argument("--split", default="test", choices=["test", "train"], help="default: test")
    c.add_argument("--sigma", type=number, help="noise level, std in [0,1] pixel units (default: the checkpoint's)")
    c.add_argument("--noise", choices=catalog.noises(),
                   help="the smoothing noise (default: the one the checkpoint was trained with, else gaussian): "
                        "gaussian certifies l2 radii (Cohen et al. 2019, arXiv 1902.02918); docs/noises.md "
                        "lists the others and the norm each certifies")
    c.add_argument("--trust-pickle", action="store_true", help=TRUST_PICKLE)
    add_trust_code_flag(c)
    add_certify_options(c, name)
    c.add_argument("--batch-size", type=batch_size, default="auto", help=auto_batch_help())
    c.add_argument("--seed", type=any_integer, default=0,
                   help="noise seed; example i uses a stream derived from (seed, i) (default: 0)")
    c.add_argument("--compile", action="store_true", help="compile the noisy forward pass (torch.export + inductor with frozen weights; seconds to start, then faster; recorded in OUT.json)")
    c.add_argument("--out", required=True, help="output TSV")
    c.add_argument("--overwrite", action="store_true", help="replace --out instead of continuing it")
    add_heartbeat_flag(c)
    c.add_argument("--shard", metavar="I/K",
                   help="one of K independent jobs (a SLURM array, spot machines): certify every K-th "
                   "example of the subset from position I (I = 0..K-1) into OUT with .shard-I-of-K before "
                   "its suffix (certify.tsv -> certify.shard-0-of-4.tsv); rerun to continue it, then "
                   "'rsmooth merge OUT' joins the K shards into the file one job writes. Under torchrun "
                   "each rank takes shard RANK/WORLD_SIZE and rank 0 merges by itself. A one-job run of "
                   "OUT stopped part-way is continued: each shard starts with the rows of its share that "
                   "OUT holds (default: none, one job certifies the whole subset)")
    if name == "certify":
        c.add_argument("--skip-wrong", action="store_true",
                       help="stop an example after its --n0 selection samples when the class they pick is not its "
                       "label: it counts at no radius whatever more samples show, so the certified-accuracy table "
                       "and ACR equal a full run's at a fraction of the cost; its row is predict c_A, radius 0, "
                       "correct 0 (OUT.seq: decisions 'skipped'); recorded in OUT.json (default: certify every "
                       "example to the end)")
        c.add_argument("--two-sided", action="store_true",
                       help="bound the runner-up's probability p_B above as well as p_A below (each at --alpha/2) "
                       "and certify sigma/2 (Phi^-1(p_A) - Phi^-1(p_B)) (the noise's radius of both; Cohen et al. "
                       "2019, Thm. 1): larger where the other classes share the rest of the votes, slightly smaller "
                       "where every vote is for c_A; with --sequential/--adaptive OUT.seq adds n_b and p_b_upper; "
                       "recorded in OUT.json (default: one-sided, p_B = 1 - p_A, as the papers report)")
        add_sequential_flags(c)
    add_corruption_flags(c)
    _add_diffusion_flags(c)
    add_arch_flags(c, train=False)
    add_common_data(c)
    add_foreign_flags(c)
    c.set_defaults(func=run, mode=name, rerun_hint=" (without --overwrite) to continue the file: its finished "
                   "rows are kept")


def _add_diffusion_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "diffusion denoised smoothing", "certify the --checkpoint classifier f behind an epsilon-predicting "
        "diffusion model D (Carlini, Tramer, Dvijotham, Rice, Sun, Kolter 2023, (Certified!!) Adversarial "
        "Robustness for Free!, arXiv 2206.10550): the base classifier is f(D(x + delta)). What D does to a "
        "noisy input x + delta in [0,1] pixels: the model works in [-1,1], so 2(x + delta) - 1 carries noise "
        "2 sigma; t* is the first schedule step whose sqrt((1 - abar_t)/abar_t) is at or above 2 sigma (the realised "
        "sigma s', half that step's value, is printed and recorded in OUT.json); the input is topped up to noise s' "
        "(the authors' q_sample); x_t* = sqrt(abar_t*) (2(x + delta) - 1); x0 = (x_t* - sqrt(1 - abar_t*) eps(x_t*, t*)) / sqrt(abar_t*), clamped to [-1,1], mapped back "
        "to [0,1] and classified. Costs the UNet pass(es) per noise sample: the cost per sample and the run's "
        "time are printed before it starts")
    g.add_argument("--diffusion", metavar="PATH_OR_ID",
                   help="a diffusers UNet2DModel + DDPMScheduler folder saved with save_pretrained (or a cached hub "
                   "id; pip install 'rsmooth[diffusion]'), rsmooth's DDPM file (python -m rsmooth.train_ddpm), or "
                   "package.module:factory returning (model, alphas_cumprod) with model(x_t, t) -> epsilon; "
                   "of a learned-variance output (improved/guided-diffusion) the epsilon half is used (default: none, "
                   "the classifier alone)")
    g.add_argument("--diffusion-steps", type=integer, default=1, metavar="K",
                   help="reverse-process steps from t* to 0 (evenly spaced, a UNet pass each; the noise of each "
                   "step seeded by the input); 1: the one-shot estimate above, the paper's default (default: 1)")
    g.add_argument("--diffusion-rounding", choices=("up", "nearest"), default="up",
                   help="t*: the first step at or above 2 sigma (up, the authors') or the nearest (default: up)")
    g.add_argument("--diffusion-noise", choices=("step", "sigma"), default="step",
                   help="D's input at the step's own level s' >= sigma (step: topped up, the authors' q_sample) or "
                   "at exactly sigma; the radius is at sigma either way, sound for both (default: step)")
    g.add_argument("--classifier-input", metavar="SPEC",
                   help="what the classifier gets, also without --diffusion: size=N|HxW, mode=bicubic|bilinear|"
                   "nearest|area (antialiased), mean=M[/M/M], std=S[/S/S], comma-separated, e.g. "
                   "size=512,mean=0.5,std=0.5 (default: the images as they are)")
    g.add_argument("--diffusion-other-dataset", action="store_true",
                   help="use a DDPM file that records another dataset than the one certified (refused without "
                   "it: a denoiser of other images keeps the certificate sound but its accuracy low)")


def _sequential_options(args: argparse.Namespace) -> Dict[str, Any]:
    """The mode and keywords of --sequential/--adaptive for run_certification; one-line errors
    for a flag without the mode it belongs to."""
    seq, adaptive = getattr(args, "sequential", False), getattr(args, "adaptive", False)
    if seq and adaptive:
        raise RsmoothError("--sequential and --adaptive exclude each other: decide given --radii, or estimate "
                           "each radius to --radius-tol")
    if not (seq or adaptive):
        for flag in ("--radii", "--n-max", "--radius-tol", "--futility", "--alpha-share"):
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
    for key in ("n_max", "radius_tol", "futility", "alpha_share"):
        if getattr(args, key) is not None:
            out[key] = getattr(args, key)
    return out


#: CertifyJob fields that no flag of their name sets: the positional pair, the corruption flags (one
#: job per corrupted set, below), the Python-only ones, and those of the mode (_sequential_options)
_NOT_FROM_FLAGS = frozenset({"checkpoint", "out", "corruption", "severity", "corruption_seed", "corruption_suite",
                             "progress", "log", "model_options", "mode", "n", "radii", "n_max", "radius_tol",
                             "futility"})


def job_keywords(args: argparse.Namespace) -> Dict[str, Any]:
    """run_certification's keywords from the flags: each CertifyJob field from the flag of its name
    (a field added to the job is a flag away from the command line), the mode's from
    :func:`_sequential_options`, and the model options."""
    from dataclasses import fields

    from ..engine.certify import CertifyJob

    kwargs = {f.name: getattr(args, f.name) for f in fields(CertifyJob)
              if f.name not in _NOT_FROM_FLAGS and hasattr(args, f.name)}
    return {**kwargs, **_sequential_options(args), "model_options": model_options(args)}


def run(args: argparse.Namespace) -> None:
    """Certify (or predict) --checkpoint on the test set, or on each corruption asked for."""
    from ..data import published_release
    from ..engine import certify_corruptions, corruption_plan, load_model, run_certification
    from ..engine.distributed import world

    kwargs = job_keywords(args)
    dataset = args.dataset
    if args.corruption is None and args.severity is None and (
            dataset is None or not published_release(dataset)):
        if args.corruption_suite is not None:
            raise RsmoothError("--corruption-suite without --corruption: name the corruption(s) as well")
        out = run_certification(args.checkpoint, args.out, **kwargs)
    else:
        if dataset is None:
            dataset = load_model(args.checkpoint, trust_pickle=args.trust_pickle, trust_code=args.trust_code,
                                 **model_options(args)).dataset
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
