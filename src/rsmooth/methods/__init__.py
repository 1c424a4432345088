"""Training methods as pure losses behind a registry.

Every module in this package is imported here, so a new method is one file with a
``@METHODS.register(...)`` class.
"""
import importlib
import pkgutil

from .base import METHODS, Batch, Method, StepContext, create_method, hyperparameters
from .gaussian import Gaussian, gaussian_loss

for _m in pkgutil.iter_modules(__path__):
    if _m.name != "base":
        importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["METHODS", "Batch", "Method", "StepContext", "create_method", "hyperparameters",
           "Gaussian", "gaussian_loss"]
