"""MNIST-C's corruptions (Mu & Gilmer 2019, MNIST-C: A Robustness Benchmark for Computer Vision,
arXiv 1906.02337), written from the authors' generation code for images of any size."""
from __future__ import annotations

import numpy as np

from . import SUITES

suite = SUITES["mnist-c"]


@suite.register("identity", severities=())
def identity(x: np.ndarray, severity, rng: np.random.Generator) -> np.ndarray:
    """The clean image (MNIST-C's ``identity`` folder)."""
    return x.copy()
