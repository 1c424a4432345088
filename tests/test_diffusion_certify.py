"""``rsmooth certify --diffusion``: the classifier certified behind a diffusion denoiser, the
sidecar's record, the cost line, resume and shards unchanged (Carlini et al. 2023, arXiv 2206.10550)."""
import pytest
import torch

from rsmooth.cli import main
from rsmooth.engine import run_certification
from rsmooth.metrics import read_certify_tsv, read_sidecar
from rsmooth.models import create_model
from rsmooth.models.diffusion import choose_timestep
from rsmooth.models.unet import TinyUNet, linear_schedule, save_ddpm

QUIET = dict(progress=False, log=lambda s: None)
RUN = dict(dataset="digits", sigma=0.25, model_options={"arch": "digits_cnn"}, n0=10, n=40, max=3,
           batch_size=25, **QUIET)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("diffusion")
    torch.save(create_model("digits_cnn", "digits").state_dict(), folder / "model.pt")
    save_ddpm(folder / "ddpm.pt", TinyUNet(1, width=8), linear_schedule(1000))
    return folder


def test_cli_certifies_behind_the_diffusion_model_and_records_it(files, tmp_path, capsys):
    out = tmp_path / "c.tsv"
    main(["certify", "--checkpoint", str(files / "model.pt"), "--dataset", "digits", "--arch", "digits_cnn",
          "--sigma", "0.25", "--diffusion", str(files / "ddpm.pt"), "--n0", "10", "--n", "40", "--max", "3",
          "--batch-size", "25", "--out", str(out)])
    printed = capsys.readouterr().out
    t, realised = choose_timestep(linear_schedule(1000), 0.25)
    assert f"diffusion: sigma 0.25 -> t* = {t} of 1000 (rounding up, realised sigma {realised:.4g})" in printed
    assert "estimate: 3 images x 50 samples = 150 samples at " in printed
    meta = read_sidecar(out)
    assert meta["diffusion"] == str(files / "ddpm.pt") and len(meta["diffusion_sha256"]) == 64
    assert (meta["diffusion_t"], meta["diffusion_realised_sigma"], meta["diffusion_steps"]) == (t, realised, 1)
    assert len(read_certify_tsv(out)) == 3


def test_resume_refuses_another_diffusion_setting(files, tmp_path):
    out = tmp_path / "c.tsv"
    run_certification(str(files / "model.pt"), str(out), diffusion=str(files / "ddpm.pt"), **RUN)
    with pytest.raises(Exception, match="diffusion_steps"):
        run_certification(str(files / "model.pt"), str(out), diffusion=str(files / "ddpm.pt"), diffusion_steps=2,
                          **RUN)


def test_shards_merge_into_the_one_process_file(files, tmp_path):
    one = run_certification(str(files / "model.pt"), str(tmp_path / "one.tsv"), diffusion=str(files / "ddpm.pt"),
                            **RUN)
    for i in range(2):
        run_certification(str(files / "model.pt"), str(tmp_path / "two.tsv"), diffusion=str(files / "ddpm.pt"),
                          shard=(i, 2), **RUN)
    main(["merge", str(tmp_path / "two.tsv")])
    a, b = read_certify_tsv(tmp_path / "two.tsv"), read_certify_tsv(one)
    for column in ("idx", "label", "predict", "radius"):
        assert getattr(a, column).tolist() == getattr(b, column).tolist()
    assert read_sidecar(tmp_path / "two.tsv")["diffusion_t"] == read_sidecar(one)["diffusion_t"]


def test_bad_diffusion_steps_is_one_line(files, tmp_path):
    with pytest.raises(Exception, match="between 1 and t"):
        run_certification(str(files / "model.pt"), str(tmp_path / "c.tsv"), diffusion=str(files / "ddpm.pt"),
                          diffusion_steps=5000, **RUN)


@pytest.mark.slow
def test_a_ddpm_trained_here_denoises_and_certifies(tmp_path):
    """End to end: a width-8 TinyUNet trained for 60 Adam steps of L_simple on digits already
    denoises sigma 0.5 noise better than the noisy input (mean squared error to the clean image),
    and a classifier is certified behind it from its file."""
    from rsmooth.data import get_dataset
    from rsmooth.models.diffusion import DiffusionDenoiser, EpsilonModel
    from rsmooth.models.unet import ddpm_loss

    torch.manual_seed(0)
    x, _ = get_dataset("digits", "train").get_batch(torch.arange(1437))
    abar, net = linear_schedule(1000), TinyUNet(1, width=8)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    for _ in range(60):
        batch = x[torch.randint(0, len(x), (32,))]
        loss = ddpm_loss(net, batch, torch.randint(0, 400, (32,)), torch.randn_like(batch), abar)
        opt.zero_grad()
        loss.backward()
        opt.step()
    save_ddpm(tmp_path / "ddpm.pt", net, abar)
    test, _ = get_dataset("digits", "test").get_batch(torch.arange(200))
    noisy = test + 0.5 * torch.randn_like(test)
    with torch.no_grad():
        denoised = DiffusionDenoiser(EpsilonModel(net.eval()), abar, 0.5)(noisy)
    ratio = float(((denoised - test) ** 2).mean() / ((noisy - test) ** 2).mean())
    assert ratio < 0.5, ratio
    torch.save(create_model("digits_cnn", "digits").state_dict(), tmp_path / "model.pt")
    out = run_certification(str(tmp_path / "model.pt"), str(tmp_path / "c.tsv"), diffusion=str(tmp_path / "ddpm.pt"),
                            **{**RUN, "sigma": 0.5})
    assert read_sidecar(out)["diffusion_t"] == choose_timestep(abar, 0.5)[0]


def test_sequential_and_bf16_run_behind_the_diffusion_model(files, tmp_path):
    lines = []
    run = {**RUN, "log": lines.append, "n": None}
    out = run_certification(str(files / "model.pt"), str(tmp_path / "s.tsv"), diffusion=str(files / "ddpm.pt"),
                            mode="sequential", radii=[0.1], n_max=60, precision="bf16", **run)
    assert any(line.startswith("diffusion: sigma 0.25") for line in lines)
    assert any(line.startswith("estimate: 3 images x ") and line.endswith(" at most") for line in lines)
    assert read_sidecar(out)["diffusion_steps"] == 1 and len(read_certify_tsv(out)) == 3


def test_compile_with_seeded_noise_draws_is_one_line(files, tmp_path):
    """torch.export cannot trace the top-up's or the reverse steps' seeded draws: one line naming
    the flags that export (--diffusion-noise sigma, one step), before any certification."""
    from rsmooth.errors import RsmoothError

    with pytest.raises(RsmoothError, match="--compile cannot export .* pass --diffusion-noise sigma --diffusion-steps 1"):
        run_certification(str(files / "model.pt"), str(tmp_path / "c.tsv"), diffusion=str(files / "ddpm.pt"),
                          compile=True, **RUN)
