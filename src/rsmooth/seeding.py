"""Deterministic seeds derived from one run seed.

Every random stream of a run (data order, augmentation, training noise, evaluation noise,
certification noise) is seeded from ``(seed, purpose, counters...)``, so a run resumed after a
kill, or a certification split into shards, draws exactly what the uninterrupted run draws.
"""
from __future__ import annotations

import hashlib
from typing import Optional

import torch

from .errors import RsmoothError
from .counts import validate_count

#: seeds accepted everywhere: what ``torch.manual_seed`` takes without overflow, and >= 0
MAX_SEED = 2 ** 63 - 1


def validate_seed(seed: int, flag: str = "--seed") -> int:
    """Return ``seed`` as int, or raise unless it is an integer in [0, MAX_SEED]."""
    seed = validate_count(flag, seed, minimum=0, maximum=None)
    if seed > MAX_SEED:
        raise RsmoothError(f"{flag} must be at most 2**63 - 1, got {seed}")
    return seed


def derive_seed(seed: int, *keys: object) -> int:
    """A 63-bit seed that depends only on ``seed`` and ``keys`` (stable across processes)."""
    text = ":".join([str(int(seed)), *map(str, keys)]).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") & ((1 << 63) - 1)


def generator(seed: int, *keys: object, device: Optional[torch.device] = None) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with ``derive_seed(seed, *keys)``."""
    g = torch.Generator(device=device or "cpu")
    g.manual_seed(derive_seed(seed, *keys))
    return g
