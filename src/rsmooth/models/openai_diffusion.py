"""OpenAI's diffusion checkpoints as Carlini et al. 2023 ((Certified!!) Adversarial Robustness for
Free!, arXiv 2206.10550) build them: ``rsmooth certify --diffusion PRESET=FILE``.

The presets are the ``Args`` of the authors' ``imagenet/DRM.py`` (guided-diffusion's unconditional
256x256 model, ``256x256_diffusion_uncond.pt``: linear schedule of 1,000 steps, integer timesteps)
and ``cifar10/DRM.py`` (improved-diffusion's unconditional CIFAR-10 model with the L_hybrid
objective, ``cifar10_uncond_50M_500K.pt``: cosine schedule of 4,000 steps, ``rescale_timesteps``:
the network gets t * 1000 / 4000), passed as they pass them (``args_to_dict(Args(),
model_and_diffusion_defaults().keys())``).  The network code is OpenAI's own package
(``guided_diffusion`` or ``improved_diffusion``, installed from their repositories); the file is read
with ``torch.load(weights_only=True)``.  Both models predict epsilon and a learned variance (2C
outputs: :class:`~rsmooth.models.diffusion.EpsilonModel` keeps the epsilon half).
"""
from __future__ import annotations

import importlib
from typing import Any, Dict, Tuple

import torch
from torch import nn

from ..errors import RsmoothError, check, first_line

_GUIDED_256_UNCOND = dict(
    image_size=256, num_channels=256, num_res_blocks=2, num_heads=4, num_heads_upsample=-1, num_head_channels=64,
    attention_resolutions="32,16,8", channel_mult="", dropout=0.0, class_cond=False, use_checkpoint=False,
    use_scale_shift_norm=True, resblock_updown=True, use_fp16=False, use_new_attention_order=False,
    clip_denoised=True, num_samples=10000, batch_size=16, use_ddim=False, model_path="", classifier_path="",
    classifier_scale=1.0, learn_sigma=True, diffusion_steps=1000, noise_schedule="linear", timestep_respacing=None,
    use_kl=False, predict_xstart=False, rescale_timesteps=False, rescale_learned_sigmas=False)
_IMPROVED_CIFAR10_UNCOND = dict(
    image_size=32, num_channels=128, num_res_blocks=3, num_heads=4, num_heads_upsample=-1,
    attention_resolutions="16,8", dropout=0.3, learn_sigma=True, sigma_small=False, class_cond=False,
    diffusion_steps=4000, noise_schedule="cosine", timestep_respacing="", use_kl=False, predict_xstart=False,
    rescale_timesteps=True, rescale_learned_sigmas=True, use_checkpoint=False, use_scale_shift_norm=True)

#: preset -> (OpenAI's package, the authors' Args, the file the authors load, where it is published)
PRESETS: Dict[str, Tuple[str, Dict[str, Any], str, str]] = {
    "guided-diffusion-imagenet256": (
        "guided_diffusion", _GUIDED_256_UNCOND, "256x256_diffusion_uncond.pt",
        "https://github.com/openai/guided-diffusion (README: 256x256 unconditional)"),
    "improved-diffusion-cifar10": (
        "improved_diffusion", _IMPROVED_CIFAR10_UNCOND, "cifar10_uncond_50M_500K.pt",
        "https://github.com/openai/improved-diffusion (README: unconditional CIFAR-10, L_hybrid)"),
}


def is_preset(spec: str) -> bool:
    """Whether ``spec`` is ``PRESET=FILE`` of :data:`PRESETS`."""
    return spec.partition("=")[0] in PRESETS and "=" in spec


def authors_kwargs(preset: str, defaults_keys: Any) -> Dict[str, Any]:
    """The keyword arguments the authors pass to ``create_model_and_diffusion``: their ``Args``
    restricted to the package's ``model_and_diffusion_defaults()`` keys (``args_to_dict``)."""
    args = PRESETS[preset][1]
    return {k: args[k] for k in defaults_keys}


def load_openai(spec: str) -> Tuple[nn.Module, torch.Tensor, Dict[str, Any]]:
    """(network, alphas_cumprod, options) of ``PRESET=FILE``: OpenAI's network built with the
    authors' arguments, the file's weights loaded, the schedule from OpenAI's diffusion object and
    ``rescale_timesteps`` as the authors set it."""
    preset, _, path = spec.partition("=")
    package, args, name, where = PRESETS[preset]
    try:
        script_util = importlib.import_module(f"{package}.script_util")
    except ImportError:
        raise RsmoothError(f"--diffusion {spec} needs OpenAI's {package} package: pip install "
                           f"git+https://github.com/openai/{package.replace('_', '-')}") from None
    model, diffusion = script_util.create_model_and_diffusion(
        **authors_kwargs(preset, script_util.model_and_diffusion_defaults().keys()))
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
    except FileNotFoundError:
        raise RsmoothError(f"--diffusion {spec}: no file {path}; the authors use {name} from {where}") from None
    except Exception as e:  # torch raises RuntimeError, UnpicklingError, ...
        raise RsmoothError(f"--diffusion {spec}: {path} is not {name} ({first_line(e)[:300]})") from None
    check(getattr(diffusion, "rescale_timesteps", False) == args["rescale_timesteps"],
          f"--diffusion {spec}: {package}'s diffusion object does not rescale timesteps as the authors' does")
    return model, torch.as_tensor(diffusion.alphas_cumprod), {"rescale_timesteps": args["rescale_timesteps"]}
