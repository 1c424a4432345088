"""Attacks shared by the training methods (PGD on the input, on the noise, DDN).

Every attack runs the model in eval mode with its parameters frozen and restores both
afterwards (:func:`frozen_eval`), as the reference code of SmoothAdv, SmoothMix and CAT-RS
does (SPEC.md 2).
"""
from .base import frozen_eval

__all__ = ["frozen_eval"]
