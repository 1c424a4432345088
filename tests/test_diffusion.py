"""Diffusion denoised smoothing (Carlini et al. 2023, arXiv 2206.10550): the timestep choice, the
[-1, 1] scaling and the one-shot estimate against closed forms, the reverse process, loading."""
import math
import sys

import pytest
import torch
from torch import nn

from rsmooth.errors import RsmoothError
from rsmooth.models.diffusion import (DiffusionDenoiser, EpsilonModel, choose_timestep, diffusion_classifier,
                                      load_diffusion, reverse_timesteps)
from rsmooth.models.unet import TinyUNet, ddpm_loss, linear_schedule, load_ddpm, save_ddpm
from rsmooth.smoothing import Smooth

ABAR = linear_schedule(1000)


class GaussianEps(nn.Module):
    """The optimal epsilon predictor for data x0 ~ N(mu, s^2 I) in [-1, 1] under the forward process
    x_t = sqrt(a) x0 + sqrt(1 - a) eps: E[eps | x_t] = sqrt(1 - a) (x_t - sqrt(a) mu) / (a s^2 + 1 - a).
    ``out_channels = 2C`` appends a variance half (learned-variance models)."""

    def __init__(self, abar, mu, s, double=False):
        super().__init__()
        self.abar, self.mu, self.s, self.double = abar, mu, s, double

    def forward(self, x, t, y=None):
        a = self.abar[t].to(x.dtype).view(-1, 1, 1, 1)
        eps = (1 - a).sqrt() * (x - a.sqrt() * self.mu) / (a * self.s ** 2 + 1 - a)
        return torch.cat([eps, torch.full_like(eps, 7.0)], 1) if self.double else eps


def _posterior_mean(y, mu, s, r):
    """E[x0 | x0 + n = y], x0 ~ N(mu, s^2), n ~ N(0, r^2): mu + s^2 / (s^2 + r^2) (y - mu) (Wiener)."""
    return mu + s ** 2 / (s ** 2 + r ** 2) * (y - mu)


@pytest.mark.parametrize("sigma", [0.05, 0.12, 0.25, 0.5, 1.0])
@pytest.mark.parametrize("rounding", ["nearest", "up"])
def test_timestep_against_brute_force(sigma, rounding):
    ratios = [math.sqrt((1 - a) / a) for a in ABAR.tolist()]
    if rounding == "nearest":
        best = min(range(len(ratios)), key=lambda t: abs(ratios[t] - 2 * sigma))
    else:  # the authors' certify.py: walk up the schedule until the ratio reaches 2 sigma
        best = next(t for t in range(len(ratios)) if ratios[t] >= 2 * sigma)
    t, realised = choose_timestep(ABAR, sigma, rounding)
    assert t == best and realised == pytest.approx(ratios[best] / 2, rel=1e-12)
    assert abs(realised - sigma) < 0.01 * sigma + 1e-3  # the linear schedule is fine near these levels


def test_schedule_that_never_reaches_sigma_is_one_line():
    with pytest.raises(RsmoothError, match="never reaches sigma 2") as e:
        choose_timestep(ABAR[:200], 2.0)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("double", [False, True])
def test_one_shot_is_the_gaussian_posterior_mean(double):
    """With the exact epsilon predictor of Gaussian data, D(x + delta) is E[x0 | 2(x + delta) - 1]
    with noise std 2 sigma at the realised level, clamped and mapped to [0, 1]."""
    mu, s, sigma = 0.1, 0.4, 0.25
    d = DiffusionDenoiser(EpsilonModel(GaussianEps(ABAR, mu, s, double)), ABAR, sigma, noise="sigma")
    noisy = torch.rand(3, 2, 5, 5, generator=torch.Generator().manual_seed(0)) * 1.4 - 0.2
    r = 2 * d.realised_sigma
    expected = (_posterior_mean(2 * noisy.double() - 1, mu, s, r).clamp(-1, 1) + 1) / 2
    torch.testing.assert_close(d(noisy.double()), expected, rtol=1e-9, atol=1e-9)
    assert d.info["t"] == choose_timestep(ABAR, sigma)[0] and d.info["steps"] == 1


def test_scaling_uses_sqrt_abar_of_t_star():
    """x_t* = sqrt(abar_t*) (2(x + delta) - 1): a model predicting eps = 0 returns the input itself."""
    zero = EpsilonModel(_Const(0.0))
    d = DiffusionDenoiser(zero, ABAR, 0.25, noise="sigma")
    x = torch.rand(2, 1, 4, 4)
    torch.testing.assert_close(d(x), x.clamp(0, 1))


class _Const(nn.Module):
    def __init__(self, value, channels=None):
        super().__init__()
        self.value, self.channels = value, channels

    def forward(self, x, t):
        shape = (x.shape[0], self.channels or x.shape[1], *x.shape[2:])
        return torch.full(shape, self.value, dtype=x.dtype)


def test_wrong_channel_count_is_one_line():
    d = DiffusionDenoiser(EpsilonModel(_Const(0.0, channels=3)), ABAR, 0.25, noise="sigma")
    with pytest.raises(RsmoothError, match=r"maps \(2, 1, 4, 4\) to \(2, 3, 4, 4\)"):
        d(torch.rand(2, 1, 4, 4))


def test_reverse_timesteps():
    assert reverse_timesteps(50, 1) == [50]
    assert reverse_timesteps(4, 5) == [4, 3, 2, 1, 0]
    assert reverse_timesteps(100, 3) == [100, 50, 0]
    with pytest.raises(RsmoothError, match="between 1 and t"):
        reverse_timesteps(4, 6)


def test_reverse_process_keeps_the_posterior_mean():
    """Under the exact predictor of Gaussian data every reverse step's conditional mean is exact and
    x0_hat is affine, so the mean of the multi-step output is the one-shot posterior mean (no
    clamping at this data spread).  Its spread stays within the posterior's std s r / sqrt(s^2 + r^2):
    the posterior variance of q(x_s | x_t, x0) leaves out Var(x0 | x_t) (Ho et al. 2020's "fixed
    small" variance under-disperses Gaussian data)."""
    mu, s, sigma = 0.0, 0.2, 0.25
    eps = EpsilonModel(GaussianEps(ABAR, mu, s))
    one = DiffusionDenoiser(eps, ABAR, sigma, noise="sigma")
    multi = DiffusionDenoiser(eps, ABAR, sigma, steps=8, noise="sigma")
    x = 0.55 + 1e-9 * torch.arange(4000, dtype=torch.float64).view(-1, 1, 1, 1)  # distinct copies, distinct draws
    out = multi(x)
    r = 2 * one.realised_sigma
    post_std = s * r / math.sqrt(s ** 2 + r ** 2) / 2  # in [0, 1] units
    assert float(out.mean()) == pytest.approx(float(one(x[:1])), abs=4 * post_std / math.sqrt(len(x)))
    assert 0.3 * post_std < float(out.std()) < post_std
    torch.testing.assert_close(multi(x[:3])[1:2], multi(x[1:2]))  # a copy's draws do not depend on its batch


def test_learned_variance_half_and_class_label_reach_the_model():
    seen = {}

    class Net(nn.Module):
        def forward(self, x, t, y=None):
            seen["y"] = y
            return torch.cat([torch.zeros_like(x), torch.ones_like(x)], 1)

    d = DiffusionDenoiser(EpsilonModel(Net(), class_label=3), ABAR, 0.5, noise="sigma")
    x = torch.rand(2, 1, 4, 4)
    torch.testing.assert_close(d(x), x)  # the variance half (ones) is not taken as epsilon
    assert seen["y"].tolist() == [3, 3]


def test_ddpm_loss_against_by_hand():
    g = torch.Generator().manual_seed(0)
    x0, noise = torch.rand(3, 1, 4, 4, generator=g), torch.randn(3, 1, 4, 4, generator=g)
    t = torch.tensor([0, 10, 999])
    model = GaussianEps(ABAR, 0.0, 1.0)
    a = ABAR[t].float().view(-1, 1, 1, 1)
    x_t = a.sqrt() * (2 * x0 - 1) + (1 - a).sqrt() * noise
    expected = ((model(x_t, t) - noise) ** 2).mean()
    assert float(ddpm_loss(model, x0, t, noise, ABAR)) == pytest.approx(float(expected), rel=1e-6)


def _factory_module(tmp_path, monkeypatch, body):
    (tmp_path / "toy_diffusion.py").write_text(
        "import torch\nfrom rsmooth.models.unet import linear_schedule\n" + body)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("toy_diffusion", None)


def test_factory_path_and_smooth(tmp_path, monkeypatch):
    _factory_module(tmp_path, monkeypatch, "class Zero(torch.nn.Module):\n"
                    "    def forward(self, x, t):\n        return torch.zeros_like(x)\n"
                    "def make():\n    return Zero(), linear_schedule(1000)\n")
    classifier = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    model, record = diffusion_classifier(classifier, "toy_diffusion:make", 0.25)
    assert record["diffusion"] == "toy_diffusion:make" and record["diffusion_format"] == "factory"
    assert (record["diffusion_t"], record["diffusion_realised_sigma"]) == choose_timestep(ABAR, 0.25)
    pred, radius = Smooth(model, 3, 0.25).certify(torch.rand(1, 4, 4), 10, 50, 0.001, 25,
                                                  generator=torch.Generator().manual_seed(0))
    assert pred in (-1, 0, 1, 2)


@pytest.mark.parametrize("body, match", [
    ("def make():\n    return torch.nn.Identity()\n", "must return \\(model, alphas_cumprod\\)"),
    ("def make():\n    return torch.nn.Identity(), linear_schedule(10), {'prediction_type': 'v_prediction'}\n",
     "predicts 'v_prediction'; diffusion denoised smoothing needs an epsilon"),
    ("def make():\n    raise ValueError('boom')\n", "the factory failed \\(ValueError: boom\\)"),
])
def test_bad_factories_are_one_line(tmp_path, monkeypatch, body, match):
    _factory_module(tmp_path, monkeypatch, body)
    with pytest.raises(RsmoothError, match=match) as e:
        load_diffusion("toy_diffusion:make")
    assert "\n" not in str(e.value)


def test_rsmooth_ddpm_file_round_trip(tmp_path):
    net = TinyUNet(1, width=8)
    save_ddpm(tmp_path / "ddpm.pt", net, ABAR, dataset="digits")
    loaded, abar, blob = load_ddpm(tmp_path / "ddpm.pt")
    x, t = torch.randn(2, 1, 8, 8), torch.tensor([1, 700])
    torch.testing.assert_close(loaded(x, t), net.eval()(x, t))
    torch.testing.assert_close(abar, ABAR)
    _, _, record = load_diffusion(str(tmp_path / "ddpm.pt"))
    assert record["diffusion_format"] == "rsmooth-ddpm"
    (tmp_path / "other.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(RsmoothError, match="not a readable DDPM file"):
        load_diffusion(str(tmp_path / "other.pt"))


def _tiny_diffusers(folder, prediction_type="epsilon", **unet_kw):
    diffusers = pytest.importorskip("diffusers")
    unet = diffusers.UNet2DModel(sample_size=8, in_channels=1, out_channels=1, layers_per_block=1,
                                 block_out_channels=(8, 16), norm_num_groups=4,
                                 down_block_types=("DownBlock2D", "DownBlock2D"),
                                 up_block_types=("UpBlock2D", "UpBlock2D"), **unet_kw)
    scheduler = diffusers.DDPMScheduler(num_train_timesteps=1000, prediction_type=prediction_type)
    unet.save_pretrained(folder / "unet")
    scheduler.save_pretrained(folder / "scheduler")
    return unet, scheduler


@pytest.mark.slow  # imports diffusers (7 s)
def test_diffusers_folder_round_trip(tmp_path):
    unet, scheduler = _tiny_diffusers(tmp_path)
    eps, abar, record = load_diffusion(str(tmp_path))
    torch.testing.assert_close(abar, scheduler.alphas_cumprod.double())
    torch.testing.assert_close(abar.float(), ABAR.float())  # DDPMScheduler's default is Ho et al.'s linear one
    x = torch.randn(2, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(eps(x, 17), unet(x, torch.tensor([17, 17])).sample)
    assert record == {"diffusion": str(tmp_path), "diffusion_format": "diffusers"}


@pytest.mark.slow  # imports diffusers (7 s)
@pytest.mark.parametrize("prediction_type", ["sample", "v_prediction"])
def test_diffusers_x0_or_v_model_is_refused(tmp_path, prediction_type):
    _tiny_diffusers(tmp_path, prediction_type)
    with pytest.raises(RsmoothError, match=f"predicts {prediction_type!r}"):
        load_diffusion(str(tmp_path))


@pytest.mark.slow  # imports diffusers (7 s)
def test_diffusers_class_conditional_needs_a_label(tmp_path):
    _tiny_diffusers(tmp_path, num_class_embeds=10)
    with pytest.raises(RsmoothError, match="is class-conditional"):
        load_diffusion(str(tmp_path))
    eps, _, record = load_diffusion(str(tmp_path), class_label=2)
    assert eps(torch.randn(2, 1, 8, 8), 5).shape == (2, 1, 8, 8) and record["diffusion_class_label"] == 2


def test_missing_diffusers_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "diffusers", None)  # import diffusers raises ImportError
    with pytest.raises(RsmoothError, match=r"a diffusers folder needs the diffusers package: pip install 'rsmooth\[diffusion\]'"):
        load_diffusion(str(tmp_path))
    with pytest.raises(RsmoothError, match="no file or folder of that name; as a hub id it needs the diffusers"):
        load_diffusion("org/no-such-model")  # a hub id's form: maybe a missing package
    with pytest.raises(RsmoothError, match="ddpm.pt: no such file or folder"):
        load_diffusion(str(tmp_path / "ddpm.pt"))  # a typo in a path is not a missing package


@pytest.mark.slow  # imports diffusers (7 s)
def test_unknown_folder_or_hub_id_is_one_line(tmp_path):
    pytest.importorskip("diffusers")
    (tmp_path / "nothing").mkdir()  # a folder without a model (a missing path is "no such file or folder")
    with pytest.raises(RsmoothError, match="no UNet2DModel there") as e:
        load_diffusion(str(tmp_path / "nothing"))
    assert "\n" not in str(e.value)
