"""A small epsilon-predicting UNet, the DDPM objective and rsmooth's DDPM file, so diffusion
denoised smoothing (:mod:`rsmooth.models.diffusion`) runs on a model trained on this machine
(``python -m rsmooth.train_ddpm``) without downloads.

The file is ``torch.save({"format": "rsmooth-ddpm", "unet": {in_channels, width}, "state_dict",
"alphas_cumprod", ...})``, read back with ``weights_only=True``.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import RsmoothError, check, first_line, unpickle_refusal

FORMAT = "rsmooth-ddpm"


def linear_schedule(steps: int = 1000, beta_1: float = 1e-4, beta_T: float = 0.02) -> torch.Tensor:
    """alphas_cumprod [steps] of Ho et al. 2020's linear beta schedule (arXiv 2006.11239, Sec. 4),
    in float64."""
    betas = torch.linspace(beta_1, beta_T, steps, dtype=torch.float64)
    return torch.cumprod(1 - betas, 0)


def check_schedule(alphas_cumprod: Any, what: str = "alphas_cumprod") -> torch.Tensor:
    """``alphas_cumprod`` as float64 [T] on the CPU, checked: a 1-D schedule of finite values in (0, 1)
    that decreases strictly (abar_t = prod_{s <= t} (1 - beta_s), each beta_s in (0, 1): every step
    adds noise).  ``what`` names it in the one-line error."""
    try:
        abar = torch.as_tensor(alphas_cumprod, dtype=torch.float64).detach().cpu()
    except (TypeError, ValueError, RuntimeError):  # None, strings, ragged lists
        abar = None
    check(abar is not None and abar.ndim == 1 and len(abar) > 0,
          f"{what} must be a 1-D schedule of numbers, got {type(alphas_cumprod).__name__}")
    bad = (~(torch.isfinite(abar) & (abar > 0) & (abar < 1))).nonzero()
    if len(bad):
        t = int(bad[0])
        raise RsmoothError(f"{what} must hold values in (0, 1); step {t} is {float(abar[t]):g}")
    rises = (abar[1:] >= abar[:-1]).nonzero()
    if len(rises):
        t = int(rises[0]) + 1
        raise RsmoothError(f"{what} must decrease strictly (every step adds noise); step {t} is "
                           f"{float(abar[t]):g}, not below step {t - 1}'s {float(abar[t - 1]):g}")
    return abar


def ddpm_loss(model: nn.Module, x0: torch.Tensor, t: torch.Tensor, noise: torch.Tensor,
              alphas_cumprod: torch.Tensor) -> torch.Tensor:
    """Ho et al. 2020 (arXiv 2006.11239) eq. 14, L_simple: mean ||eps - eps_theta(sqrt(abar_t) x0' +
    sqrt(1 - abar_t) eps, t)||^2 over every element, x0' = 2 x0 - 1 the [0, 1] images [B, C, H, W]
    in [-1, 1]; t [B] long, noise [B, C, H, W], alphas_cumprod [T]."""
    a = alphas_cumprod.to(x0.device, x0.dtype)[t].view(-1, 1, 1, 1)
    x_t = a.sqrt() * (2 * x0 - 1) + (1 - a).sqrt() * noise
    return F.mse_loss(model(x_t, t), noise)


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding [B, dim] of timesteps t [B] (Vaswani et al. 2017, as Ho et al. 2020 use it)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([args.sin(), args.cos()], 1)


class _ResBlock(nn.Module):
    """GroupNorm, SiLU, conv 3x3, + the time embedding's projection, GroupNorm, SiLU, conv; 1x1 skip."""

    def __init__(self, cin: int, cout: int, tdim: int) -> None:
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(min(8, cin), cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(tdim, cout)
        self.n2, self.c2 = nn.GroupNorm(min(8, cout), cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        h = self.c1(F.silu(self.n1(x))) + self.temb(emb)[:, :, None, None]
        return self.skip(x) + self.c2(F.silu(self.n2(h)))


class TinyUNet(nn.Module):
    """eps_theta(x_t, t): [B, C, H, W] (H, W divisible by 4) and t [B] -> [B, C, H, W].

    Two resolutions below the input (width, 2 width channels), one residual block per level on the
    way down and up with skip connections, a sinusoidal time embedding through a two-layer MLP
    (Ho et al. 2020's design at toy size, rsmooth's own: no attention).  410,721 parameters at
    width 32 for C = 1."""

    def __init__(self, in_channels: int = 1, width: int = 32) -> None:
        super().__init__()
        w, tdim = width, 4 * width
        self.width = w
        self.temb = nn.Sequential(nn.Linear(w, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.inp = nn.Conv2d(in_channels, w, 3, padding=1)
        self.d1, self.down1 = _ResBlock(w, w, tdim), nn.Conv2d(w, w, 3, stride=2, padding=1)
        self.d2, self.down2 = _ResBlock(w, 2 * w, tdim), nn.Conv2d(2 * w, 2 * w, 3, stride=2, padding=1)
        self.mid = _ResBlock(2 * w, 2 * w, tdim)
        self.u2, self.u1 = _ResBlock(4 * w, 2 * w, tdim), _ResBlock(3 * w, w, tdim)
        self.out = nn.Sequential(nn.GroupNorm(8, w), nn.SiLU(), nn.Conv2d(w, in_channels, 3, padding=1))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        emb = self.temb(timestep_embedding(t, self.width).to(x.dtype))
        h1 = self.d1(self.inp(x), emb)
        h2 = self.d2(self.down1(h1), emb)
        h = self.mid(self.down2(h2), emb)
        h = self.u2(torch.cat([F.interpolate(h, scale_factor=2.0), h2], 1), emb)
        h = self.u1(torch.cat([F.interpolate(h, scale_factor=2.0), h1], 1), emb)
        return self.out(h)


def save_ddpm(path: Union[str, Path], model: TinyUNet, alphas_cumprod: torch.Tensor, **extra: Any) -> None:
    """Write rsmooth's DDPM file atomically (``extra``: dataset, epochs, optimizer state, ...)."""
    from ..fileio import atomic_write

    in_channels = model.inp.in_channels
    blob = {"format": FORMAT, "unet": {"in_channels": in_channels, "width": model.width},
            "state_dict": model.state_dict(), "alphas_cumprod": alphas_cumprod.double().cpu(), **extra}
    atomic_write(path, lambda f: torch.save(blob, f))


def load_ddpm(path: Union[str, Path]) -> Tuple[TinyUNet, torch.Tensor, Dict[str, Any]]:
    """(model in eval mode, alphas_cumprod float64 [T], the file's dict) of rsmooth's DDPM file,
    every entry checked; one-line errors."""
    where = f"--diffusion {path}"
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated, foreign or pickled file raises anything
        refused = unpickle_refusal(e)
        why = (f": it needs to unpickle {refused}, which can run arbitrary code; rsmooth's DDPM file holds only "
               f"tensors and plain values" if refused else f" ({type(e).__name__}: {first_line(e)})")
        raise RsmoothError(f"{where}: not a readable DDPM file{why}") from None
    check(isinstance(blob, dict) and blob.get("format") == FORMAT,
          f"{where}: a file must be rsmooth's DDPM checkpoint (python -m rsmooth.train_ddpm); give a diffusers "
          f"folder or hub id, or a package.module:factory, for other models")
    model = _unet_of(blob.get("unet"), where)
    _load_state(model, blob.get("state_dict"), where)
    return model.eval(), check_schedule(blob.get("alphas_cumprod"), f"{where}: its alphas_cumprod"), blob


def _unet_of(config: Any, where: str) -> TinyUNet:
    """The TinyUNet of a DDPM file's ``unet`` entry {in_channels, width}: positive ints, the width a
    multiple of 8 (its GroupNorms have 8 groups)."""
    ok = isinstance(config, dict) and set(config) == {"in_channels", "width"} \
        and all(type(v) is int and v > 0 for v in config.values()) and config["width"] % 8 == 0
    check(ok, f"{where}: its 'unet' entry must be {{'in_channels': C, 'width': W}} (positive integers, W a multiple "
              f"of 8), got {str(config)[:80]}")
    return TinyUNet(**config)


def _load_state(model: TinyUNet, state: Any, where: str) -> None:
    """Load a DDPM file's ``state_dict`` into ``model``: the same keys, each tensor of the same shape."""
    check(isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values()),
          f"{where}: its 'state_dict' must be a dict of tensors")
    target = model.state_dict()
    missing = sorted(set(target) - set(state))
    unexpected = sorted(set(state) - set(target))
    shapes = [f"{k} {tuple(state[k].shape)} vs {tuple(target[k].shape)}" for k in target
              if k in state and state[k].shape != target[k].shape]
    problems = [f"{label} {', '.join(keys[:3])}{f', ... ({len(keys)} in all)' if len(keys) > 3 else ''}"
                for label, keys in (("missing", missing), ("unexpected", unexpected), ("shape of", shapes)) if keys]
    check(not problems, f"{where}: its state_dict does not fit its 'unet' entry {{'in_channels': "
                        f"{model.inp.in_channels}, 'width': {model.width}}}: {'; '.join(problems)}")
    model.load_state_dict(state)
