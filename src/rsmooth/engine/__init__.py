"""What runs: the one training loop, the certification driver, and what they share.

The engine owns every process that reads a model and data and writes results: training
(``train.py``: :class:`TrainConfig` -> :func:`train`, with ``preempt.py``'s mid-epoch stops and
``callbacks.py``), certification (``certify.py``: :class:`CertifyJob` -> resolve -> one process,
one shard, or torchrun ranks + merge -> the TSV, its sidecar and ``seqfile.py``'s ``OUT.seq``;
``corrupt_certify.py``: one job per corrupted test set), the CAT-RS targets (``targets.py``) and
the pipeline (``pipeline.py``); below them checkpoints (``checkpoint.py``), shards and their merge
(``shards.py``), ``torchrun`` plumbing (``distributed.py``) and run configs (``runconfig.py``).
Methods, models, data, smoothing and metrics do the work inside; of the engine they use only
``seeding.py``, the seeds every random draw comes from.
"""
from .certify import CertifyJob, run_certification
from .corrupt_certify import certify_corruptions, corruption_plan
from .checkpoint import LoadedModel, atomic_save, load_model, read_checkpoint
from ..seeding import derive_seed, generator
from .train import evaluate, train
from .trainconfig import TrainConfig, TrainResult

__all__ = ["CertifyJob", "run_certification", "certify_corruptions", "corruption_plan", "LoadedModel", "atomic_save",
           "load_model", "read_checkpoint", "derive_seed", "generator", "TrainConfig", "TrainResult", "evaluate",
           "train"]
