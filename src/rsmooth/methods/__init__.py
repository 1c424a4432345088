"""Training methods as pure losses behind a registry (SPEC.md 2)."""
from .base import METHODS, Batch, Method, StepContext, create_method, hyperparameters
from . import gaussian  # noqa: F401  (registers "gaussian")
from .gaussian import Gaussian, gaussian_loss

__all__ = ["METHODS", "Batch", "Method", "StepContext", "create_method", "hyperparameters",
           "Gaussian", "gaussian_loss"]
