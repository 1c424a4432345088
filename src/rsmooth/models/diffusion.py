"""Diffusion denoised smoothing (Carlini, Tramer, Dvijotham, Rice, Sun, Kolter 2023, (Certified!!)
Adversarial Robustness for Free!, arXiv 2206.10550, Sec. 3 and Algorithm 1): an off-the-shelf
epsilon-predicting diffusion model (Ho, Jain, Abbeel 2020, Denoising Diffusion Probabilistic
Models, arXiv 2006.11239) as the denoiser D in front of any classifier f; randomized smoothing
certifies f(D(x + delta)) as it certifies any base classifier (Cohen et al. 2019).

What is done to a noisy input x + delta ([0, 1] pixels, delta ~ N(0, sigma^2 I)):

1. the diffusion model works in [-1, 1], so 2(x + delta) - 1 = (2x - 1) + 2 delta carries noise of
   standard deviation **2 sigma**; the timestep t* is the first schedule step whose noise-to-signal
   ratio sqrt((1 - abar_t) / abar_t) is at or above 2 sigma (``rounding="up"``, the default: the
   authors' ``certify.py``, ``while real_sigma < 2 sigma: t += 1``) or the nearest one
   (``rounding="nearest"``); the realised sigma s' is half that step's ratio;
2. ``noise="step"`` (the default, the authors' ``q_sample``): the input is topped up with
   independent noise of std sqrt(s'^2 - sigma^2), so that it carries noise at the step's own level
   s' >= sigma, exactly as the forward process would put it there; ``noise="sigma"``: nothing is
   added (the input carries exactly sigma); then x_t* = sqrt(abar_t*) (2(x + delta') - 1);
3. one-shot (default): x0_hat = (x_t* - sqrt(1 - abar_t*) eps(x_t*, t*)) / sqrt(abar_t*), clamped to
   [-1, 1] (``clip_denoised=True`` in the authors' code) and returned as (x0_hat + 1) / 2 in [0, 1];
   ``steps > 1``: the DDPM reverse process from t* to 0 over ``steps`` evenly spaced timesteps, each
   step's x0_hat clamped, sampling x_s' ~ q(x_s' | x_s, x0_hat) with the posterior variance (Ho et
   al. 2020 eq. 7), ``steps = t* + 1`` being the full chain of the paper's appendix.

What is certified (both choices are sound at the nominal sigma): Smooth adds delta ~ N(0, sigma^2)
and D is part of the base classifier, so Cohen et al.'s radius sigma Phi^-1(p_A) holds for any D.
With ``noise="step"`` the top-up draws are seeded by the noisy copy's bytes, so D is still a
deterministic function of x + delta and the radius at sigma is exact; read as the authors' model
(total noise N(0, s'^2), s' >= sigma), the same counts certify s' Phi^-1(p_A) >= sigma Phi^-1(p_A),
so reporting the nominal sigma's radius, as the authors' ``core.py`` does, is conservative by the
factor sigma / s'.  A step below sigma (``rounding="nearest"``) cannot be reached by adding noise,
and the authors' noise at such a level would make the nominal radius unsound (it would need the
realised s' < sigma), so ``noise="step"`` with a step below sigma is refused.

Models come as ``eps(x_t, t)`` networks: a ``diffusers`` ``UNet2DModel`` + ``DDPMScheduler`` folder
or cached hub id, rsmooth's own DDPM file (:mod:`rsmooth.models.unet`), or a user's
``module:factory`` returning ``(model, alphas_cumprod)`` (OpenAI improved/guided-diffusion:
learned-variance outputs of 2C channels give their epsilon half; class-conditional models get
``class_label``).
"""
from __future__ import annotations

import hashlib
import math
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from ..errors import RsmoothError, check, first_line
from .unet import check_schedule, load_ddpm

#: how t* is picked when no schedule step matches 2 sigma exactly ("up": the authors')
ROUNDINGS = ("up", "nearest")
#: the noise level D's input carries: the step's own ("step", the authors' q_sample) or sigma's
DIFFUSION_NOISES = ("step", "sigma")
#: how far the realised sigma may be from sigma, as a factor either way: the schedules of the
#: paper's models (linear 1000 steps, cosine 4000) match sigma 0.05 to 1 within 2%, a coarse
#: one (50 steps) within 45%; a step further off denoises noise of another level than the input has
LEVEL_FACTOR = 1.5


def noise_ratios(alphas_cumprod: torch.Tensor) -> torch.Tensor:
    """sqrt((1 - abar_t) / abar_t) per step [T]: the noise std of x_t / sqrt(abar_t) in [-1, 1] units."""
    a = torch.as_tensor(alphas_cumprod, dtype=torch.float64)
    return ((1 - a) / a).sqrt()


def choose_timestep(alphas_cumprod: torch.Tensor, sigma: float, rounding: str = "up") -> Tuple[int, float]:
    """(t*, realised sigma): the step whose ratio sqrt((1 - abar_t)/abar_t) matches 2 sigma (Carlini
    et al. 2023, arXiv 2206.10550, Algorithm 1: the [-1, 1] scaling doubles sigma), the first at or
    above it (``rounding="up"``, the authors' ``certify.py``) or the nearest one; the realised sigma is that ratio / 2 in [0, 1]
    pixel units.  A schedule whose noise never reaches 2 sigma, or whose chosen step's realised sigma
    is more than :data:`LEVEL_FACTOR` from sigma either way, is a one-line error (``alphas_cumprod``
    as :func:`~rsmooth.models.unet.check_schedule` checks it)."""
    check(rounding in ROUNDINGS, f"timestep rounding must be one of {', '.join(ROUNDINGS)}, got {rounding!r}")
    ratios = noise_ratios(check_schedule(alphas_cumprod))
    target = 2 * float(sigma)
    top = float(ratios.max())
    check(top >= target * (1 - 1e-6), f"the diffusion schedule's noise never reaches sigma {sigma:g}: its largest "
          f"level is {top / 2:.4g} in [0, 1] pixels ({top:.4g} in the model's [-1, 1]); certify at a smaller --sigma "
          f"or use a model whose schedule goes further")
    if rounding == "nearest":
        t = int((ratios - target).abs().argmin())
    else:
        t = int(torch.nonzero(ratios >= target * (1 - 1e-6))[0])
    realised = float(ratios[t]) / 2
    check(max(realised / sigma, sigma / realised) <= LEVEL_FACTOR,
          f"the diffusion schedule has no noise level near sigma {sigma:g}: its step t* = {t} of {len(ratios)} is at "
          f"sigma {realised:.4g}, more than a factor {LEVEL_FACTOR:g} away (its levels run from "
          f"{float(ratios[0]) / 2:.4g} to {top / 2:.4g} in [0, 1] pixels); certify at a sigma in that range or use "
          f"a model whose schedule covers {sigma:g}")
    return t, realised


def reverse_timesteps(t_star: int, steps: int) -> List[int]:
    """The ``steps`` timesteps the reverse process visits, t* first and 0 last (evenly spaced,
    rounded); one step is t* alone (the one-shot estimate)."""
    check(1 <= steps <= t_star + 1, f"--diffusion-steps must be between 1 and t* + 1 = {t_star + 1} "
          f"(the timesteps from t* = {t_star} down to 0), got {steps}")
    if steps == 1:
        return [t_star]
    return [round(t_star * (1 - i / (steps - 1))) for i in range(steps)]


class EpsilonModel(nn.Module):
    """A diffusion network called as ``eps(x_t, t) -> [B, C, H, W]``.

    ``kind``: ``"plain"`` calls ``net(x_t, t)`` (with ``y=`` for a class label: OpenAI
    improved/guided-diffusion), ``"diffusers"`` calls ``net(x_t, t, class_labels=...).sample``.
    ``timestep_scale``: the network gets t * scale (float32) instead of the integer t, as
    improved-diffusion's ``rescale_timesteps`` calls a 4,000-step model with t * 1000 / 4000
    (Nichol & Dhariwal 2021, ``gaussian_diffusion._scale_timesteps``); 1: the integer t.
    An output of 2C channels is a learned-variance model's [epsilon, variance] (Nichol & Dhariwal
    2021, Improved Denoising Diffusion Probabilistic Models, arXiv 2102.09672): its first C are
    kept.  Any other channel count is a one-line error."""

    def __init__(self, net: nn.Module, kind: str = "plain", class_label: Optional[int] = None,
                 timestep_scale: float = 1.0) -> None:
        super().__init__()
        check(isinstance(timestep_scale, (int, float)) and not isinstance(timestep_scale, bool)
              and math.isfinite(timestep_scale) and timestep_scale > 0,
              f"the diffusion model's timestep_scale must be a positive number (1000 / T for improved-diffusion's "
              f"rescale_timesteps), got {timestep_scale!r}")
        self.net, self.kind, self.class_label = net, kind, class_label
        self.timestep_scale = float(timestep_scale)

    def forward(self, x: torch.Tensor, t: int) -> torch.Tensor:
        if self.timestep_scale == 1.0:
            ts = torch.full((x.shape[0],), t, dtype=torch.long, device=x.device)
        else:
            ts = torch.full((x.shape[0],), float(t), dtype=torch.float32, device=x.device) * self.timestep_scale
        y = None if self.class_label is None else torch.full((x.shape[0],), self.class_label, dtype=torch.long,
                                                                device=x.device)
        if self.kind == "diffusers":
            out = self.net(x, ts, class_labels=y).sample
        else:
            out = self.net(x, ts) if y is None else self.net(x, ts, y=y)
        c = x.shape[1]
        check(out.ndim == 4 and out.shape[0] == x.shape[0] and out.shape[2:] == x.shape[2:]
              and out.shape[1] in (c, 2 * c),
              f"the diffusion model maps {tuple(x.shape)} to {tuple(out.shape)}; an epsilon prediction has the "
              f"input's shape ({c} channels, or {2 * c} with a learned variance)")
        return out[:, :c]


class DiffusionDenoiser(nn.Module):
    """D(x + delta): [B, C, H, W] noisy [0, 1] pixels -> [B, C, H, W] denoised [0, 1] pixels, for
    smoothing noise sigma (pixel units) and an epsilon model with its ``alphas_cumprod`` [T].

    See the module docstring for exactly what is done to the input.  ``rounding`` picks t*
    (``"up"``: the first step at or above 2 sigma, the authors'), ``noise`` the level the input is
    denoised at (``"step"``: topped up to the step's own level, the authors'; ``"sigma"``: as it
    is).  ``steps`` = 1 is the one-shot estimate (one UNet pass per noisy copy); more run the
    reverse process from t* (one pass each).  The top-up and the reverse process's noise for each
    noisy copy are drawn from a generator seeded by that copy's bytes, so a copy is denoised the
    same way in any batch (certificates stay reproducible and independent of batch size, packing
    and sharding); those seeded draws do not export (``torch.export``, ``Smooth(compile=True)``):
    only ``noise="sigma"`` with one step does.  ``info`` records t*, the realised sigma, the steps,
    the rounding and the noise."""

    def __init__(self, eps_model: nn.Module, alphas_cumprod: Sequence[float], sigma: float, steps: int = 1,
                 rounding: str = "up", noise: str = "step") -> None:
        super().__init__()
        check(noise in DIFFUSION_NOISES, f"the diffusion noise must be one of {', '.join(DIFFUSION_NOISES)} "
                                         f"(the step's own level, as the authors add it, or exactly sigma), got {noise!r}")
        self.eps_model = eps_model
        self.abar = check_schedule(alphas_cumprod)
        self._abar = self.abar.tolist()  # Python floats: the arithmetic traces to constants (--compile)
        self.t_star, self.realised_sigma = choose_timestep(self.abar, sigma, rounding)
        self.timesteps = reverse_timesteps(self.t_star, steps)
        self.top_up = top_up_std(self.realised_sigma, sigma, self.t_star) if noise == "step" else 0.0
        self.info: Dict[str, Any] = {"t": self.t_star, "realised_sigma": self.realised_sigma, "steps": steps,
                                     "rounding": rounding, "noise": noise, "schedule_steps": len(self.abar)}
        scale = getattr(eps_model, "timestep_scale", 1.0)
        if scale != 1.0:
            self.info["timestep_scale"] = scale

    def x0_hat(self, x_t: torch.Tensor, t: int) -> torch.Tensor:
        """(x_t - sqrt(1 - abar_t) eps(x_t, t)) / sqrt(abar_t), clamped to [-1, 1]."""
        a = self._abar[t]
        eps = self.eps_model(x_t, t)
        return ((x_t - math.sqrt(1 - a) * eps) / math.sqrt(a)).clamp(-1, 1)

    def posterior_step(self, x_t: torch.Tensor, x0: torch.Tensor, t: int, s: int,
                       gens: Sequence[torch.Generator]) -> torch.Tensor:
        """A draw of x_s ~ q(x_s | x_t, x0) for s < t (Ho et al. 2020 eq. 6-7 with abar_t / abar_s in
        place of alpha_t, the respaced chain's step): mean c0 x0 + ct x_t, variance
        (1 - abar_s)/(1 - abar_t) (1 - abar_t/abar_s); row i's noise from ``gens[i]``."""
        at, as_ = self._abar[t], self._abar[s]
        beta = 1 - at / as_
        c0 = math.sqrt(as_) * beta / (1 - at)
        ct = math.sqrt(at / as_) * (1 - as_) / (1 - at)
        std = math.sqrt(beta * (1 - as_) / (1 - at))
        return c0 * x0 + ct * x_t + std * row_noise(x_t, gens)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        taus = self.timesteps
        gens = _row_generators(x) if len(taus) > 1 or self.top_up > 0 else []
        if self.top_up > 0:
            x = x + self.top_up * row_noise(x, gens)
        x_t = math.sqrt(self._abar[taus[0]]) * (2 * x - 1)
        for i, t in enumerate(taus):
            x0 = self.x0_hat(x_t, t)
            if i + 1 < len(taus):
                x_t = self.posterior_step(x_t, x0, t, taus[i + 1], gens)
        return (x0 + 1) / 2


def top_up_std(realised: float, sigma: float, t: int) -> float:
    """sqrt(s'^2 - sigma^2): the std of the noise that brings an input carrying sigma to the step's
    level s' (0 when they agree to float rounding); a step below sigma is a one-line error (the
    nominal radius would be unsound at the authors' noise, and noise cannot be taken away)."""
    check(realised >= sigma * (1 - 1e-9), f"diffusion noise at the step's level: step t* = {t} is at sigma "
          f"{realised:.6g}, below the certified sigma {sigma:g}, so the radius at sigma would not hold; pick the "
          f"first step at or above it (--diffusion-rounding up, the default) or denoise at sigma "
          f"(--diffusion-noise sigma)")
    return math.sqrt(max(realised ** 2 - sigma ** 2, 0.0))


def row_noise(x: torch.Tensor, gens: Sequence[torch.Generator]) -> torch.Tensor:
    """Standard normal noise of x's shape, row i drawn from ``gens[i]``."""
    return torch.stack([torch.randn(x.shape[1:], generator=g, device=x.device, dtype=x.dtype) for g in gens])


def _row_generators(x: torch.Tensor) -> List[torch.Generator]:
    """One generator per row of x [B, ...] on x's device, seeded by a hash of that row's bytes: the
    reverse process's noise for a noisy copy depends on that copy alone (not on its batch)."""
    rows = x.detach().contiguous().cpu().view(torch.uint8).reshape(len(x), -1).numpy()  # any dtype's bytes
    gens = []
    for row in rows:
        gen = torch.Generator(device=x.device)
        gen.manual_seed(int.from_bytes(hashlib.sha256(row.tobytes()).digest()[:8], "little"))
        gens.append(gen)
    return gens


# -- loading ------------------------------------------------------------------------------------

def load_diffusion(spec: str, *, class_label: Optional[int] = None, timestep_scale: Optional[float] = None
                   ) -> Tuple[EpsilonModel, torch.Tensor, Dict[str, Any]]:
    """(epsilon model in eval mode, alphas_cumprod [T], what to record) of ``spec``: rsmooth's DDPM
    file, OpenAI's checkpoint as the authors build it (``PRESET=FILE``,
    :mod:`rsmooth.models.openai_diffusion`), a ``package.module:factory`` returning ``(model, alphas_cumprod)`` or ``(model,
    alphas_cumprod, options)`` (options: ``prediction_type``, ``timestep_scale`` or
    improved-diffusion's ``rescale_timesteps=True``, i.e. t * 1000 / T), or a diffusers ``UNet2DModel`` + ``DDPMScheduler``
    folder (both in it, or in ``unet/`` and ``scheduler/`` as a saved pipeline) or cached hub id.
    The caller names ``spec`` (a flag, an argument: never a file's record), so a factory is the
    user's choice (:mod:`rsmooth.trust`); :func:`rsmooth.engine.diffusion.with_diffusion` says so to
    the gate."""
    from .openai_diffusion import is_preset, load_openai

    check(is_preset(spec) or not _missing_path(spec), f"--diffusion {spec}: no such file or folder (a diffusers "
                                                      f"hub id is org/name, without a file suffix)")
    record: Dict[str, Any] = {"diffusion": spec}
    options: Dict[str, Any] = {}
    if is_preset(spec):
        net, abar, options = load_openai(spec)
        record["diffusion_format"] = "openai"
        kind, prediction = "plain", "epsilon"
    elif os.path.isfile(spec):
        net, abar, blob = load_ddpm(spec)
        record["diffusion_format"] = "rsmooth-ddpm"
        if isinstance(blob.get("dataset"), str):
            record["diffusion_dataset"] = blob["dataset"]
        kind, prediction = "plain", "epsilon"
    elif ":" in spec and not os.path.isdir(spec):
        net, abar, options = _from_factory(spec)
        prediction = options.get("prediction_type", "epsilon")
        record["diffusion_format"] = "factory"
        kind = "plain"
    else:
        net, abar, prediction, conditional = _from_diffusers(spec)
        check(not conditional or class_label is not None, f"--diffusion {spec} is class-conditional: give the "
              f"class label every input is denoised with (class_label=K)")
        record["diffusion_format"] = "diffusers"
        kind = "diffusers"
    check(prediction == "epsilon", f"--diffusion {spec} predicts {prediction!r}; diffusion denoised smoothing needs "
          f"an epsilon-predicting model (prediction_type 'epsilon')")
    if class_label is not None:
        record["diffusion_class_label"] = class_label
    abar = check_schedule(abar, f"--diffusion {spec}: its alphas_cumprod")
    scale = _timestep_scale(spec, options, len(abar)) if timestep_scale is None else timestep_scale
    return EpsilonModel(net.eval(), kind, class_label, scale), abar, record


def _timestep_scale(spec: str, options: Dict[str, Any], steps: int) -> float:
    """The factory's ``timestep_scale``, or 1000 / T for ``rescale_timesteps=True``, else 1."""
    check(not {"timestep_scale", "rescale_timesteps"} <= set(options), f"--diffusion {spec}: give timestep_scale "
          f"or rescale_timesteps, not both")
    if options.get("rescale_timesteps"):
        return 1000.0 / steps
    return options.get("timestep_scale", 1.0)


#: what a path to a model file ends with (a hub id has no such suffix)
_FILE_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors", ".pkl", ".tar")


def _missing_path(spec: str) -> bool:
    """Whether ``spec`` is a path with nothing there: it does not exist and looks like a path (a file
    suffix, a leading ``.``, ``/`` or ``~``, a backslash, or more than one ``/``), not like a hub id
    (``org/name``) or a ``module:factory``."""
    if os.path.exists(spec):
        return False
    return (spec.startswith((".", "/", "~")) or "\\" in spec or spec.count("/") > 1
            or os.path.splitext(spec)[1].lower() in _FILE_SUFFIXES)


def _from_factory(spec: str) -> Tuple[nn.Module, Any, Dict[str, Any]]:
    from .factory import _import_factory

    try:
        out = _import_factory(spec)()
    except RsmoothError:
        raise
    except Exception as e:  # the user's factory may raise anything
        raise RsmoothError(f"--diffusion {spec}: the factory failed ({type(e).__name__}: {e})") from e
    check(isinstance(out, tuple) and len(out) in (2, 3) and isinstance(out[0], nn.Module),
          f"--diffusion {spec} must return (model, alphas_cumprod) or (model, alphas_cumprod, options), "
          f"got {type(out).__name__}")
    options = out[2] if len(out) == 3 else {}
    check(isinstance(options, dict), f"--diffusion {spec}: its third value must be a dict of options")
    unknown = set(options) - {"prediction_type", "timestep_scale", "rescale_timesteps"}
    check(not unknown, f"--diffusion {spec}: unknown option(s) {', '.join(sorted(unknown))}; a factory's options are "
          f"prediction_type, timestep_scale and rescale_timesteps")
    return out[0], out[1], options


def _from_diffusers(spec: str) -> Tuple[nn.Module, torch.Tensor, str, bool]:
    try:
        import diffusers
    except ImportError:
        what = "a diffusers folder" if os.path.isdir(spec) else "no file or folder of that name; as a hub id it"
        raise RsmoothError(f"--diffusion {spec}: {what} needs the diffusers package: "
                           f"pip install 'rsmooth[diffusion]'") from None
    parts = []
    for cls in (diffusers.UNet2DModel, diffusers.DDPMScheduler):
        sub = "unet" if cls is diffusers.UNet2DModel else "scheduler"
        parts.append(_from_pretrained(cls, spec, sub))
    unet, scheduler = parts
    conditional = getattr(unet.config, "num_class_embeds", None) is not None
    return unet, scheduler.alphas_cumprod, scheduler.config.prediction_type, conditional


def _from_pretrained(cls: Any, spec: str, subfolder: str) -> Any:
    """``cls.from_pretrained`` of ``spec`` (its ``subfolder`` when it has one), local files only."""
    errors = []
    for sub in (subfolder, None):
        try:
            return cls.from_pretrained(spec, subfolder=sub, local_files_only=True)
        except Exception as e:  # diffusers raises OSError, ValueError, EnvironmentError...
            errors.append(e)
    raise RsmoothError(f"--diffusion {spec}: no {cls.__name__} there, neither a folder saved with save_pretrained "
                       f"nor a cached hub id ({type(errors[-1]).__name__}: {str(errors[-1]).splitlines()[0]})")


def diffusion_classifier(classifier: nn.Module, diffusion: str, sigma: float, *, steps: int = 1,
                         rounding: str = "up", noise: str = "step", class_label: Optional[int] = None,
                         timestep_scale: Optional[float] = None, dataset: Optional[str] = None,
                         other_dataset: bool = False) -> Tuple[nn.Module, Dict[str, Any]]:
    """(f(D(x)) as ``nn.Sequential(D, f)`` for :class:`~rsmooth.smoothing.Smooth`, what to record):
    ``classifier`` f takes [0, 1] pixels [B, C, H, W] (any model rsmooth loads), D is
    :class:`DiffusionDenoiser` of the model ``diffusion`` names (:func:`load_diffusion`) at
    smoothing noise ``sigma``, moved to f's device.  Both are frozen and in eval mode.

    Args:
        classifier: f, on [0, 1] pixels.
        diffusion: a diffusers folder or cached hub id, rsmooth's DDPM file, or
            ``package.module:factory``.
        sigma: the smoothing noise, in [0, 1] pixel units.
        steps: reverse steps from t* (1: one-shot denoising).
        rounding: t* the first step at or above 2 sigma (``"up"``, the authors') or the nearest
            (``"nearest"``).
        noise: the input denoised at the step's own level (``"step"``, the authors' ``q_sample``:
            topped up from sigma) or at exactly sigma (``"sigma"``); see the module docstring for
            what each certifies.
        class_label: the label of a class-conditional model.
        timestep_scale: the network gets t * timestep_scale (0.25 for improved-diffusion's
            4,000-step models); default: the factory's option, else 1 (the integer t).
        dataset: the images certified: a DDPM file that records another dataset is refused
            unless ``other_dataset`` (a denoiser of other images makes the certificate true but
            the accuracy meaningless), and D must take one image of that dataset's shape.
        other_dataset: accept a DDPM file trained on another dataset.

    Returns:
        (the model f(D(x)), a dict of what to record: ``diffusion_t``,
        ``diffusion_realised_sigma``, ...).

    Example:
        ```python
        model, record = diffusion_classifier(f, "runs/ddpm.pt", sigma=0.5)
        smooth = Smooth(model, num_classes=10, sigma=0.5)
        ```
    """
    eps, abar, record = load_diffusion(diffusion, class_label=class_label, timestep_scale=timestep_scale)
    denoiser = DiffusionDenoiser(eps, abar, sigma, steps, rounding, noise)
    denoiser.to(_device_of(classifier))
    if dataset is not None:
        _check_dataset(diffusion, record.get("diffusion_dataset"), dataset, other_dataset)
        _check_input(denoiser, diffusion, dataset)
    model = nn.Sequential(denoiser, classifier).eval().requires_grad_(False)
    return model, {**record, **{f"diffusion_{k}": v for k, v in denoiser.info.items()}}


def _check_dataset(spec: str, trained: Optional[str], dataset: str, other_dataset: bool) -> None:
    """A model trained on ``trained`` (None: not recorded) denoises ``dataset``'s images (a published
    corrupted copy counts as its clean dataset) or ``other_dataset`` says to use it anyway."""
    from .factory import clean_dataset

    check(trained is None or other_dataset or clean_dataset(trained) == clean_dataset(dataset),
          f"--diffusion {spec} was trained on {trained}, not {dataset}: it denoises towards {trained} images "
          f"(the certificate holds, the accuracy suffers); use a DDPM of {dataset}, or pass "
          f"--diffusion-other-dataset to use it anyway")


def _check_input(denoiser: "DiffusionDenoiser", spec: str, dataset: str) -> None:
    """One pass of the epsilon model at t* on a grey image of ``dataset``'s shape (whatever the steps):
    a model of another shape is a one-line error before any certification."""
    from .factory import dataset_stats

    shape = dataset_stats(dataset).input_shape
    x = torch.full((1, *shape), 0.5, device=_device_of(denoiser))
    try:
        with torch.no_grad():
            denoiser.eps_model(x, denoiser.t_star)
    except RsmoothError:
        raise
    except Exception as e:  # the user's model may raise anything
        raise RsmoothError(f"--diffusion {spec} fails on {dataset} images (shape {' x '.join(map(str, shape))}, "
                           f"C x H x W): {first_line(e)}; use a diffusion model of that image shape") from e


def _device_of(module: nn.Module) -> torch.device:
    """The device of ``module``'s first parameter (the CPU when it has none)."""
    param = next(module.parameters(), None)
    return param.device if param is not None else torch.device("cpu")
