"""CIFAR-10-C's corruptions (Hendrycks & Dietterich 2019, Benchmarking Neural Network Robustness
to Common Corruptions and Perturbations, arXiv 1903.12261), written from the authors'
generation code for images of any size."""
from __future__ import annotations

from . import SUITES

suite = SUITES["cifar10-c"]
