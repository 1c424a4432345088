"""Denoised smoothing on Fashion-MNIST at a CPU budget: a clean-trained LeNet certified at sigma
0.25 without a denoiser, with an MSE denoiser, with a stability denoiser (Stab+MSE: fine-tuned
from the MSE one), and a Gaussian-trained LeNet as the upper reference (Salman, Sun, Yang,
Kapoor, Kolter 2020, Denoised Smoothing, arXiv 2003.01908: on CIFAR-10 no denoiser << MSE <
Stab+MSE < Gaussian-trained).  Every step is an ordinary run folder in --out (rerun to continue),
then one certification per model (every --skip-th test image, n0 = 100) and the table.

Usage::

    python bench/denoised.py --out runs/denoised            # about 45 minutes on 2 shared cores
"""
from __future__ import annotations

import argparse
from pathlib import Path

from rsmooth.cli import main as rsmooth
from rsmooth.report import analyze


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--sigma", default="0.25")
    p.add_argument("--epochs", type=int, default=5, help="classifier epochs (default 5)")
    p.add_argument("--mse-epochs", type=int, default=1)
    p.add_argument("--stab-epochs", type=int, default=1)
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--skip", type=int, default=200, help="certify every skip-th test image (default 200: 50 images)")
    args = p.parse_args()
    out = Path(args.out)
    base = ["train", "--dataset", "fashion-mnist", "--resume"]
    steps = [
        ("clean", [*base, "--method", "standard", "--sigma", args.sigma, "--epochs", str(args.epochs)]),
        ("gaussian", [*base, "--method", "gaussian", "--sigma", args.sigma, "--epochs", str(args.epochs)]),
        ("mse", [*base, "--method", "denoise-mse", "--classifier", str(out / "clean"), "--sigma", args.sigma,
                 "--optimizer", "adam", "--lr", "1e-3", "--epochs", str(args.mse_epochs)]),
        ("stab", [*base, "--method", "denoise-stab", "--classifier", str(out / "clean"), "--init", str(out / "mse"),
                  "--sigma", args.sigma, "--optimizer", "adam", "--lr", "1e-4", "--epochs", str(args.stab_epochs)]),
    ]
    for name, cmd in steps:
        assert rsmooth([*cmd, "--out", str(out / name)]) == 0, name
    labels = {"clean": "clean LeNet, no denoiser", "mse": "clean LeNet + MSE denoiser",
              "stab": "clean LeNet + Stab+MSE denoiser", "gaussian": "Gaussian-trained LeNet"}
    for name in labels:
        tsv = out / name / "certify.tsv"
        assert rsmooth(["certify", "--checkpoint", str(out / name), "--n0", "100", "--n", str(args.n),
                        "--skip", str(args.skip), "--out", str(tsv)]) == 0, name
    print(analyze([str(out / name / "certify.tsv") for name in labels], labels=list(labels.values()),
                  radii=[0.0, 0.25, 0.5]))


if __name__ == "__main__":
    main()
