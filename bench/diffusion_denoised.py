"""Diffusion denoised smoothing at a CPU budget (Carlini, Tramer, Dvijotham, Rice, Sun, Kolter 2023,
(Certified!!) Adversarial Robustness for Free!, arXiv 2206.10550): at each sigma, on the same test
images and protocol, a clean-trained classifier alone, the same classifier behind the DDPM trained
here (bench/train_ddpm.py, one-shot), behind an MSE-trained DnCNN (issue 9: Salman et al. 2020,
arXiv 2003.01908), and a Gaussian-trained classifier.  The paper's ordering on CIFAR-10 and
ImageNet: diffusion denoising above trained denoisers and close to or above noise training.

Every step is an ordinary run folder or file in --out (rerun to continue); the table gives ACR,
certified accuracy at the radii and the cost per noise sample (the TSV's seconds per example /
(n0 + n)).

Usage::

    python bench/train_ddpm.py --dataset digits --epochs 300 --width 16 --lr 5e-4 --out runs/dds/ddpm.pt
    python bench/diffusion_denoised.py --out runs/dds --ddpm runs/dds/ddpm.pt
"""
from __future__ import annotations

import argparse
from pathlib import Path

from rsmooth.cli import main as rsmooth
from rsmooth.metrics import acr, certified_accuracy, read_certify_tsv


def _train(out: Path, args: argparse.Namespace) -> None:
    base = ["train", "--dataset", args.dataset, "--resume", "--epochs", str(args.epochs)]
    steps = [("clean", [*base, "--method", "standard", "--sigma", args.sigmas[0]])]
    for s in args.sigmas:
        steps += [(f"gaussian-{s}", [*base, "--method", "gaussian", "--sigma", s]),
                  (f"dncnn-{s}", ["train", "--dataset", args.dataset, "--resume", "--method", "denoise-mse",
                                  "--classifier", str(out / "clean"), "--sigma", s, "--optimizer", "adam", "--lr",
                                  "1e-3", "--epochs", str(args.dncnn_epochs)])]
    for name, cmd in steps:
        assert rsmooth([*cmd, "--out", str(out / name)]) == 0, name


def _rows(out: Path, sigma: str, ddpm: str):
    """(label, checkpoint, extra certify flags, TSV) of the four models at ``sigma``."""
    return [("clean classifier alone", out / "clean", [], out / f"clean-{sigma}.tsv"),
            # the settings of the recorded figures (BENCHMARKS.md), from before the authors' t* and noise
            # became the defaults (issue 41)
            ("clean + DDPM (one-shot)", out / "clean", ["--diffusion", ddpm, "--diffusion-rounding", "nearest",
                                                        "--diffusion-noise", "sigma"], out / f"diffusion-{sigma}.tsv"),
            ("clean + DnCNN (MSE)", out / f"dncnn-{sigma}", [], out / f"dncnn-{sigma}.tsv"),
            ("Gaussian-trained", out / f"gaussian-{sigma}", [], out / f"gaussian-{sigma}.tsv")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--ddpm", required=True, help="the DDPM file of bench/train_ddpm.py")
    p.add_argument("--dataset", default="digits")
    p.add_argument("--sigmas", nargs="+", default=["0.25", "0.5"])
    p.add_argument("--epochs", type=int, default=30, help="classifier epochs (default 30)")
    p.add_argument("--dncnn-epochs", type=int, default=30)
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--skip", type=int, default=4, help="certify every skip-th test image (default 4: 90 digits)")
    p.add_argument("--radii", type=float, nargs="+", default=[0.0, 0.25, 0.5, 0.75, 1.0])
    p.add_argument("--train-only", action="store_true", help="train the classifiers and denoisers, then stop")
    args = p.parse_args()
    out = Path(args.out)
    _train(out, args)
    if args.train_only:
        return
    lines = ["| sigma | model | ACR | " + " | ".join(f"r = {r:g}" for r in args.radii) + " | ms per noise sample |",
             "| --- | --- | ---: | " + " | ".join("---:" for _ in args.radii) + " | ---: |"]
    for s in args.sigmas:
        for label, ckpt, extra, tsv in _rows(out, s, args.ddpm):
            assert rsmooth(["certify", "--checkpoint", str(ckpt), "--sigma", s, "--n0", "100", "--n", str(args.n),
                            "--skip", str(args.skip), "--out", str(tsv), *extra]) == 0, label
            res = read_certify_tsv(tsv)
            accs = " | ".join(f"{100 * a:.1f}" for a in certified_accuracy(res.radius, res.correct, args.radii))
            ms = 1e3 * float(res.time.mean()) / (100 + args.n)
            lines.append(f"| {s} | {label} | {acr(res.radius, res.correct):.3f} | {accs} | {ms:.3f} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
