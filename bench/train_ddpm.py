"""Train rsmooth's small DDPM: the same as ``python -m rsmooth.train_ddpm`` (kept for the commands
in BENCHMARKS.md; the code is :func:`rsmooth.engine.ddpm.train_ddpm`).

Usage::

    python bench/train_ddpm.py --dataset digits --epochs 300 --out runs/ddpm-digits.pt
"""
import sys

from rsmooth.train_ddpm import main

if __name__ == "__main__":
    sys.exit(main())
