"""The batch size and memory format that certify fastest on this machine: measured, not assumed.

``--batch-size auto`` and ``--channels-last auto`` (the defaults) time a few forward passes of
noisy copies of one image (noise drawn, added, classified) at growing batch sizes, in each memory
format, and keep the fastest.  Neither changes a certificate: noise is drawn in blocks of
:data:`~rsmooth.smoothing.packing.NOISE_BLOCK` copies whatever the batch size, and channels-last
runs the same float32 arithmetic (it is kept only if its votes on the timed batch equal the
default format's).  Precision (bf16) and compile change votes and stay opt-in.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import torch
from torch import nn

from .smooth import DEFAULT_BATCH_SIZE, Smooth

#: batch sizes tried on a CPU, and from where a GPU doubles until it stops gaining or memory ends
CPU_SIZES = (64, 128, 256, 512, 1024)
GPU_SIZES = tuple(256 * 2 ** k for k in range(8))  # 256 ... 32768
#: a batch must gain this much over the last to be worth trying the next size
MIN_GAIN = 1.05
#: the noise buffer of a tried batch stays below this many bytes on a CPU
CPU_BUFFER_BYTES = 512 * 2 ** 20
#: jobs that draw fewer samples than this skip the measurement (it would cost more than it saves)
MIN_SAMPLES = 500_000
#: each size is timed over at least this many seconds
MIN_TIME = 0.05
#: no larger batch is tried once the measurement has taken this many seconds (the fastest size
#: timed so far is kept): a run's first line, its estimate, comes within 10 s
TUNE_TIME = 4.0


@dataclass
class Tuning:
    """The chosen ``batch_size`` and ``channels_last``, how each was chosen ("given", "measured" or
    "default" for a job too small to measure), and the samples/s measured for each format and size."""

    batch_size: int
    channels_last: bool
    how: Dict[str, str]
    rates: Dict[str, float] = field(default_factory=dict)
    note: str = ""

    def record(self) -> dict:
        """The sidecar's ``tuning`` field."""
        return {"how": self.how, "samples_per_s": {k: round(v, 1) for k, v in self.rates.items()},
                **({"note": self.note} if self.note else {})}

    @property
    def rate(self) -> Optional[float]:
        """Samples/s measured in the chosen format at the chosen batch size (None: not measured)."""
        return self.rates.get(f"{_format(self.channels_last)} {self.batch_size}")


def _format(channels_last: bool) -> str:
    return "channels_last" if channels_last else "nchw"


def sample_rate(smooth: Smooth, x: torch.Tensor, batch_size: int) -> float:
    """Samples/s of ``smooth`` on noisy copies of ``x`` [C x H x W], ``batch_size`` per forward pass,
    timed as the tuner times each size (a warm-up pass at that size, then the median pass): what a
    run's estimate rests on when the tuner measured nothing."""
    return _rate(smooth, x.to(device=smooth.device, dtype=smooth.noise_dtype), batch_size)


def _rate(smooth: Smooth, x: torch.Tensor, batch_size: int, repeats: int = 3, min_time: float = MIN_TIME) -> float:
    """Samples/s of drawing, adding and classifying ``batch_size`` noisy copies of ``x``: the median
    pass after one warm-up, over at least ``repeats`` passes and ``min_time`` seconds (a GPU pass
    of a small model takes well under a millisecond: three of them time the launches and the
    clock's ramp, not the model)."""
    noise = torch.empty((batch_size, *x.shape), dtype=x.dtype, device=x.device)
    g = torch.Generator(device=x.device).manual_seed(0)  # not the global generator: timing draws nothing of a run
    times: List[float] = []
    with smooth.packer(batch_size) as packer:
        packer.noisy_votes(x, noise, g).cpu()
        while len(times) < repeats or sum(times) < min_time:
            t0 = time.perf_counter()
            packer.noisy_votes(x, noise, g).cpu()
            times.append(time.perf_counter() - t0)
    return batch_size / sorted(times)[len(times) // 2]


def _sizes(x: torch.Tensor, given: Optional[int]) -> Sequence[int]:
    if given is not None:
        return (given,)
    if x.device.type != "cpu":
        return GPU_SIZES
    return tuple(b for b in CPU_SIZES if b * x.numel() * x.element_size() <= CPU_BUFFER_BYTES) or (CPU_SIZES[0],)


def _best_size(smooth: Smooth, x: torch.Tensor, sizes: Sequence[int], rates: Dict[str, float], name: str,
               deadline: float = math.inf) -> int:
    """The fastest of ``sizes`` (tried in order until one gains less than MIN_GAIN, memory ends or
    the clock passes ``deadline``)."""
    best, best_rate = sizes[0], 0.0
    for b in sizes:
        try:
            rate = rates[f"{name} {b}"] = _rate(smooth, x, b)
        except (RuntimeError, MemoryError):  # out of memory: the largest that fits is the last one
            if b == sizes[0]:
                raise
            break
        if rate > best_rate:
            best, gained, best_rate = b, rate >= MIN_GAIN * best_rate, rate
        else:
            gained = False
        if not gained or time.perf_counter() > deadline:
            break
    return best


def _same_votes(a: Smooth, b: Smooth, x: torch.Tensor, batch_size: int) -> int:
    """How many of ``batch_size`` noisy copies of ``x`` the two classify differently."""
    g = torch.Generator(device=x.device).manual_seed(0)
    batch = a.noise.draw(torch.empty((batch_size, *x.shape), dtype=x.dtype, device=x.device), x, g)
    with a.packer(batch_size) as pa, b.packer(batch_size) as pb:
        return int((pa.votes(batch) != pb.votes(batch)).sum())


def fastest(model: nn.Module, num_classes: int, sigma: float, x: torch.Tensor, *, precision: str = "fp32",
            compile: bool = False, batch_size: Optional[int] = None, channels_last: Optional[bool] = None,
            samples: Optional[int] = None) -> "tuple[Smooth, Tuning]":
    """The :class:`Smooth` of ``model`` in the fastest memory format and its fastest batch size, for
    images like ``x`` [C x H x W] (on the model's device); ``batch_size`` and ``channels_last`` given
    (not None) are kept.  A job of fewer than MIN_SAMPLES ``samples`` is not measured: batch 256,
    the default format.  Compiled mode is not measured either (each batch size compiles).  Larger
    batches stop being tried once the measurement has taken TUNE_TIME seconds."""
    how = {"batch_size": "given" if batch_size is not None else "measured",
           "channels_last": "given" if channels_last is not None else "measured"}
    small = (samples is not None and samples < MIN_SAMPLES) or compile
    for key in ("batch_size", "channels_last"):
        if how[key] == "measured" and small:
            how[key] = "default"
    formats = [channels_last] if channels_last is not None else [False] if small else [False, True]
    smooths = {cl: Smooth(model, num_classes, sigma, precision=precision, channels_last=cl, compile=compile)
               for cl in formats}
    if small and batch_size is None:
        batch_size = DEFAULT_BATCH_SIZE
    if batch_size is not None and len(formats) == 1:
        return smooths[formats[0]], Tuning(batch_size, formats[0], how)
    x = x.to(device=smooths[formats[0]].device, dtype=smooths[formats[0]].noise_dtype)
    rates: Dict[str, float] = {}
    deadline = time.perf_counter() + TUNE_TIME
    best = {cl: _best_size(smooth, x, _sizes(x, batch_size), rates, _format(cl), deadline)
            for cl, smooth in smooths.items()}
    cl = max(best, key=lambda c: rates[f"{_format(c)} {best[c]}"])
    note = ""
    if cl and len(formats) == 2 and (differ := _same_votes(smooths[False], smooths[True], x, best[True])):
        cl, note = False, f"channels-last classified {differ} of {best[True]} noisy inputs differently; kept NCHW"
    return smooths[cl], Tuning(best[cl], cl, how, rates, note)
