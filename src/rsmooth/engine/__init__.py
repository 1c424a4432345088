"""The one training loop, checkpoints and the certification driver."""
from .certify import run_certification
from .corrupt_certify import certify_corruptions, corruption_plan
from .checkpoint import LoadedModel, atomic_save, load_model, read_checkpoint
from .seeding import derive_seed, generator
from .train import TrainConfig, TrainResult, evaluate, train

__all__ = ["run_certification", "certify_corruptions", "corruption_plan", "LoadedModel", "atomic_save", "load_model", "read_checkpoint",
           "derive_seed", "generator", "TrainConfig", "TrainResult", "evaluate", "train"]
