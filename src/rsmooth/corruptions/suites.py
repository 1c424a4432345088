"""The corruption and suite records, and ``SUITES``: the bottom of :mod:`rsmooth.corruptions`.

The suites' modules (:mod:`~rsmooth.corruptions.mnist_c`, :mod:`~rsmooth.corruptions.cifar_c`)
register their definitions here; the package imports them and builds :func:`corrupt` on top.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from ..errors import RsmoothError


#: ``fn(x float64 [H, W, C] in [0, 1], severity or None, rng) -> float array [H, W, C]``
CorruptionFn = Callable[[np.ndarray, Optional[int], np.random.Generator], np.ndarray]


@dataclass(frozen=True)
class Corruption:
    """One corruption of a suite.

    ``severities``: the levels it has (``()`` for one without levels, such as ``stripe``);
    ``default``: the level used when none is asked for (MNIST-C: the published one).
    """

    name: str
    fn: CorruptionFn
    severities: Tuple[int, ...] = (1, 2, 3, 4, 5)
    default: Optional[int] = None


@dataclass
class Suite:
    """A family of corruption definitions, in the authors' order (``corruptions``)."""

    name: str
    citation: str
    corruptions: Dict[str, Corruption] = field(default_factory=dict)

    def register(self, name: str, severities: Tuple[int, ...] = (1, 2, 3, 4, 5),
                 default: Optional[int] = None) -> Callable[[CorruptionFn], CorruptionFn]:
        """Decorator adding ``fn`` as corruption ``name``."""
        def deco(fn: CorruptionFn) -> CorruptionFn:
            if name in self.corruptions:
                raise ValueError(f"corruption {name!r} is already in suite {self.name}")
            self.corruptions[name] = Corruption(name, fn, tuple(severities), default)
            return fn

        return deco

    def names(self) -> List[str]:
        return list(self.corruptions)

    def get(self, name: str) -> Corruption:
        try:
            return self.corruptions[name]
        except KeyError:
            raise RsmoothError(f"unknown corruption {name!r} in the {self.name} suite; choose one of: "
                               f"{', '.join(self.corruptions)}") from None


#: Suite name -> :class:`Suite`; filled by :mod:`~rsmooth.corruptions.mnist_c` and
#: :mod:`~rsmooth.corruptions.cifar_c`, which :mod:`rsmooth.corruptions` imports.
SUITES: Dict[str, Suite] = {
    "mnist-c": Suite("mnist-c", "Mu & Gilmer 2019, MNIST-C: A Robustness Benchmark for Computer Vision, "
                     "arXiv 1906.02337"),
    "cifar10-c": Suite("cifar10-c", "Hendrycks & Dietterich 2019, Benchmarking Neural Network Robustness "
                       "to Common Corruptions and Perturbations, arXiv 1903.12261"),
}
