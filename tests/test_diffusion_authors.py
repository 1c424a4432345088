"""``rsmooth certify --diffusion`` with its defaults against a line-by-line transcription of the
authors' code (Carlini et al. 2023, (Certified!!) Adversarial Robustness for Free!, arXiv
2206.10550; ethz-spylab/diffusion_denoised_smoothing): ``{cifar10,imagenet}/certify.py``'s t* loop,
``DRM.py``'s one-shot ``denoise`` (``q_sample`` with their noise at the step's level, ``p_sample``'s
``pred_xstart`` with ``clip_denoised=True``) and the classifier's input (bicubic, antialias, the
[-1, 1] image, i.e. mean = std = 0.5), on both of their schedule types: guided-diffusion's linear
1,000 steps (integer timesteps) and improved-diffusion's cosine 4,000 steps (``rescale_timesteps``:
the model gets t * 1000 / 4000).  The noise rsmooth draws (Smooth's delta at sigma and the top-up
to the step's level) is read off the CLI run and handed to the transcription as its ``noise``."""
import math
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rsmooth.cli import main
from rsmooth.metrics import read_sidecar
from rsmooth.models import adapter as adapter_module
from rsmooth.models import diffusion as diffusion_module

SIGMAS = (0.12, 0.25, 0.5, 1.0)
SIZE = 16  # the classifier's input size (the authors': 512 for BEiT, 224 for the ViT)


# -- the authors' code, transcribed (numpy float64 schedules as in {guided,improved}_diffusion) --

def authors_betas(name, steps):
    """gaussian_diffusion.get_named_beta_schedule."""
    if name == "linear":
        scale = 1000 / steps
        return np.linspace(scale * 0.0001, scale * 0.02, steps, dtype=np.float64)
    alpha_bar = lambda t: math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2  # noqa: E731
    return np.array([min(1 - alpha_bar((i + 1) / steps) / alpha_bar(i / steps), 0.999) for i in range(steps)],
                    dtype=np.float64)


def authors_t(abar, sigma):
    """certify.py: the timestep t of noise level sigma."""
    target_sigma = sigma * 2
    real_sigma = 0
    t = 0
    while real_sigma < target_sigma:
        t += 1
        a = np.sqrt(abar)[t]
        b = np.sqrt(1.0 - abar)[t]
        real_sigma = b / a
    return t, real_sigma


def extract(arr, t, shape):
    """gaussian_diffusion._extract_into_tensor (float32 values)."""
    res = torch.from_numpy(arr)[torch.tensor([t] * shape[0])].float()
    return res.view(-1, *([1] * (len(shape) - 1))).expand(shape)


def authors_denoise(model, abar, x, t, noise, rescale):
    """DRM.DiffusionRobustModel.forward's denoise and resize, x in [0, 1] (their multistep=False)."""
    x_start = x * 2 - 1
    x_t = extract(np.sqrt(abar), t, x_start.shape) * x_start + extract(np.sqrt(1.0 - abar), t, x_start.shape) * noise
    ts = torch.tensor([t] * len(x_start))
    model_output = model(x_t, ts.float() * (1000.0 / len(abar)) if rescale else ts)
    eps, _ = torch.split(model_output, x_t.shape[1], dim=1)  # learned variance: LEARNED_RANGE
    pred_xstart = (extract(np.sqrt(1.0 / abar), t, x_t.shape) * x_t
                   - extract(np.sqrt(1.0 / abar - 1), t, x_t.shape) * eps).clamp(-1, 1)
    return F.interpolate(pred_xstart, (SIZE, SIZE), mode="bicubic", antialias=True)


# -- the files the CLI gets: an eps-model factory per schedule, a classifier ----------------------

FACTORY = '''
import math
import numpy as np
import torch
from torch import nn

class Eps(nn.Module):
    """A learned-variance epsilon model (2C outputs) whose output depends on the timestep it gets."""
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
    def forward(self, x, t):
        return torch.tanh(self.conv(x)) + torch.sin(t.float() / 37.0).view(-1, 1, 1, 1)

def _betas(name, steps):
    if name == "linear":
        scale = 1000 / steps
        return np.linspace(scale * 0.0001, scale * 0.02, steps, dtype=np.float64)
    f = lambda t: math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
    return np.array([min(1 - f((i + 1) / steps) / f(i / steps), 0.999) for i in range(steps)])

def linear():
    return Eps(), np.cumprod(1 - _betas("linear", 1000))

def cosine():
    return Eps(), np.cumprod(1 - _betas("cosine", 4000)), {"rescale_timesteps": True}

def classifier():
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                         nn.Linear(16, 10))
'''


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("authors")
    (folder / "authors_ddpm.py").write_text(textwrap.dedent(FACTORY))
    sys.path.insert(0, str(folder))
    try:
        import authors_ddpm

        torch.manual_seed(1)
        torch.save(authors_ddpm.classifier().state_dict(), folder / "clf.pt")
        yield folder, authors_ddpm
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("authors_ddpm", None)


@pytest.fixture
def spy(monkeypatch):
    """What D gets and what the classifier gets, call by call, on the CLI's path."""
    calls = {"D": [], "f": []}
    forward_d, forward_a = diffusion_module.DiffusionDenoiser.forward, adapter_module.ClassifierInput.forward

    def d(self, x):
        calls["D"].append((self, x.detach().clone()))
        return forward_d(self, x)

    def a(self, x):
        out = forward_a(self, x)
        calls["f"].append(out.detach().clone())
        return out

    monkeypatch.setattr(diffusion_module.DiffusionDenoiser, "forward", d)
    monkeypatch.setattr(adapter_module.ClassifierInput, "forward", a)
    return calls


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
@pytest.mark.parametrize("sigma", SIGMAS)
def test_cli_defaults_are_the_authors_t_noise_and_denoiser(files, spy, tmp_path, schedule, sigma):
    folder, factory = files
    out = tmp_path / "c.tsv"
    main(["certify", "--checkpoint", str(folder / "clf.pt"), "--dataset", "digits", "--arch", "authors_ddpm:classifier",
          "--sigma", str(sigma), "--diffusion", f"authors_ddpm:{schedule}", "--classifier-input",
          f"size={SIZE},mode=bicubic,mean=0.5,std=0.5", "--n0", "4", "--n", "8", "--max", "1", "--batch-size", "6",
          "--out", str(out)])
    net, abar = factory.linear()[:2] if schedule == "linear" else factory.cosine()[:2]
    t, real_sigma = authors_t(abar, sigma)
    meta = read_sidecar(out)
    assert (meta["diffusion_t"], meta["diffusion_rounding"], meta["diffusion_noise"]) == (t, "up", "step")
    assert meta["diffusion_realised_sigma"] == pytest.approx(real_sigma / 2, rel=1e-12)
    assert meta.get("diffusion_timestep_scale") == (0.25 if schedule == "cosine" else None)
    assert meta["classifier_input"] == {"size": [SIZE, SIZE], "mode": "bicubic", "antialias": True,
                                        "mean": [0.5], "std": [0.5]}
    from rsmooth.data import get_dataset

    x = get_dataset("digits", "test")[0][0]
    checked = 0
    for (denoiser, noisy), f_input in zip(spy["D"], spy["f"]):
        if denoiser.timesteps != [t]:
            continue  # not this run's (none here: every pass is)
        top_up = diffusion_module.row_noise(noisy, diffusion_module._row_generators(noisy))
        delta = (noisy - x) + denoiser.top_up * top_up  # the whole noise, in [0, 1] pixels
        noise = delta / (real_sigma / 2)  # as the authors' q_sample draws it: N(0, 1) at the step's level
        with torch.no_grad():
            theirs = authors_denoise(net.eval(), abar, x.expand_as(noisy), t, noise.float(), schedule == "cosine")
        torch.testing.assert_close(f_input, theirs, rtol=0, atol=4e-6)  # float32 rounding (seen: 1e-6)
        checked += len(noisy)
    assert checked >= 12  # the n0 and n passes (and the timed ones) were all compared


def test_the_top_up_makes_the_noise_the_steps_level():
    """The whole noise D's input carries has std s' (the step's level), not sigma: the top-up is
    independent of delta with variance s'^2 - sigma^2."""
    abar = np.cumprod(1 - authors_betas("linear", 1000))
    eps = diffusion_module.EpsilonModel(torch.nn.Conv2d(1, 1, 1))
    d = diffusion_module.DiffusionDenoiser(eps, abar, 0.5)
    _, real = authors_t(abar, 0.5)
    assert d.realised_sigma == pytest.approx(real / 2) and d.top_up == pytest.approx(math.sqrt((real / 2) ** 2 - 0.25))
    noisy = 0.5 + 0.5 * torch.randn(4000, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    total = (noisy - 0.5) + d.top_up * diffusion_module.row_noise(noisy, diffusion_module._row_generators(noisy))
    assert float(total.std()) == pytest.approx(real / 2, rel=0.01)


def test_noise_at_a_step_below_sigma_is_refused_and_nearest_at_sigma_is_not():
    from rsmooth.errors import RsmoothError

    abar = np.cumprod(1 - authors_betas("linear", 1000))
    eps = diffusion_module.EpsilonModel(torch.nn.Conv2d(1, 1, 1))
    t, realised = diffusion_module.choose_timestep(abar, 0.25, "nearest")
    assert realised < 0.25  # sigma 0.25: step 144 (0.2497) against the authors' 145 (0.2516)
    with pytest.raises(RsmoothError, match="below the certified sigma 0.25.*--diffusion-rounding up"):
        diffusion_module.DiffusionDenoiser(eps, abar, 0.25, rounding="nearest")
    d = diffusion_module.DiffusionDenoiser(eps, abar, 0.25, rounding="nearest", noise="sigma")
    assert (d.t_star, d.top_up, d.info["noise"]) == (t, 0.0, "sigma")


# -- the authors' Args, transcribed from {imagenet,cifar10}/DRM.py --------------------------------

IMAGENET_ARGS = dict(
    image_size=256, num_channels=256, num_res_blocks=2, num_heads=4, num_heads_upsample=-1, num_head_channels=64,
    attention_resolutions="32,16,8", channel_mult="", dropout=0.0, class_cond=False, use_checkpoint=False,
    use_scale_shift_norm=True, resblock_updown=True, use_fp16=False, use_new_attention_order=False,
    clip_denoised=True, num_samples=10000, batch_size=16, use_ddim=False, model_path="", classifier_path="",
    classifier_scale=1.0, learn_sigma=True, diffusion_steps=1000, noise_schedule="linear", timestep_respacing=None,
    use_kl=False, predict_xstart=False, rescale_timesteps=False, rescale_learned_sigmas=False)
CIFAR10_ARGS = dict(
    image_size=32, num_channels=128, num_res_blocks=3, num_heads=4, num_heads_upsample=-1,
    attention_resolutions="16,8", dropout=0.3, learn_sigma=True, sigma_small=False, class_cond=False,
    diffusion_steps=4000, noise_schedule="cosine", timestep_respacing="", use_kl=False, predict_xstart=False,
    rescale_timesteps=True, rescale_learned_sigmas=True, use_checkpoint=False, use_scale_shift_norm=True)
# model_and_diffusion_defaults().keys() of guided-diffusion and improved-diffusion (their script_util.py)
GUIDED_KEYS = ("image_size", "num_channels", "num_res_blocks", "num_heads", "num_heads_upsample", "num_head_channels",
               "attention_resolutions", "channel_mult", "dropout", "class_cond", "use_checkpoint",
               "use_scale_shift_norm", "resblock_updown", "use_fp16", "use_new_attention_order", "learn_sigma",
               "diffusion_steps", "noise_schedule", "timestep_respacing", "use_kl", "predict_xstart",
               "rescale_timesteps", "rescale_learned_sigmas")
IMPROVED_KEYS = ("image_size", "num_channels", "num_res_blocks", "num_heads", "num_heads_upsample",
                 "attention_resolutions", "dropout", "learn_sigma", "sigma_small", "class_cond", "diffusion_steps",
                 "noise_schedule", "timestep_respacing", "use_kl", "predict_xstart", "rescale_timesteps",
                 "rescale_learned_sigmas", "use_checkpoint", "use_scale_shift_norm")


@pytest.mark.parametrize("preset, package, args, keys, schedule", [
    ("guided-diffusion-imagenet256", "guided_diffusion", IMAGENET_ARGS, GUIDED_KEYS, "linear"),
    ("improved-diffusion-cifar10", "improved_diffusion", CIFAR10_ARGS, IMPROVED_KEYS, "cosine"),
])
def test_openai_presets_build_what_the_authors_build(tmp_path, monkeypatch, preset, package, args, keys, schedule):
    """``--diffusion PRESET=FILE`` calls OpenAI's create_model_and_diffusion with the authors'
    arguments (a stand-in package records them), loads the file's weights, takes the diffusion's
    schedule and rescales timesteps as the authors' model does."""
    import types

    from rsmooth.models.diffusion import load_diffusion

    got = {}
    steps = args["diffusion_steps"]
    abar = np.cumprod(1 - authors_betas(schedule, steps))

    def create_model_and_diffusion(**kw):
        got.update(kw)
        diffusion = types.SimpleNamespace(alphas_cumprod=abar, rescale_timesteps=kw["rescale_timesteps"])
        return torch.nn.Conv2d(3, 6, 1), diffusion

    script_util = types.SimpleNamespace(model_and_diffusion_defaults=lambda: dict.fromkeys(keys),
                                        create_model_and_diffusion=create_model_and_diffusion)
    monkeypatch.setitem(sys.modules, package, types.ModuleType(package))
    monkeypatch.setitem(sys.modules, f"{package}.script_util", script_util)
    torch.manual_seed(0)
    weights = torch.nn.Conv2d(3, 6, 1).state_dict()
    torch.save(weights, tmp_path / "w.pt")
    eps, got_abar, record = load_diffusion(f"{preset}={tmp_path / 'w.pt'}")
    assert got == {k: args[k] for k in keys}
    torch.testing.assert_close(eps.net.weight, weights["weight"])
    torch.testing.assert_close(got_abar, torch.as_tensor(abar))
    assert eps.timestep_scale == (1000 / 4000 if schedule == "cosine" else 1.0)
    assert record["diffusion_format"] == "openai"
    from rsmooth.errors import RsmoothError

    with pytest.raises(RsmoothError, match="no file .*nothing.pt; the authors use"):
        load_diffusion(f"{preset}={tmp_path / 'nothing.pt'}")
    monkeypatch.setitem(sys.modules, f"{package}.script_util", None)
    with pytest.raises(RsmoothError, match=f"needs OpenAI's {package} package: pip install git"):
        load_diffusion(f"{preset}={tmp_path / 'w.pt'}")
