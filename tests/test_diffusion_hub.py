"""Standard classifiers behind the denoiser without user code (Carlini et al. 2023, arXiv
2206.10550): a transformers folder and a timm architecture loaded by name from saved weights
(``--arch transformers|timm:NAME``), resized and normalised by ``--classifier-input``, behind a
diffusers UNet + scheduler folder (``--diffusion PATH``), certified end to end.  Each model is a
tiny config with random weights, saved and loaded back: nothing is downloaded.  Skipped where the
optional extra (``rsmooth[transformers]``, ``rsmooth[timm]``, ``rsmooth[diffusion]``) is absent."""
import pytest
import torch

from rsmooth.cli import main
from rsmooth.engine import load_model
from rsmooth.errors import RsmoothError
from rsmooth.metrics import read_certify_tsv, read_sidecar
from rsmooth.models.adapter import ClassifierInput, parse_classifier_input

RUN = ["--dataset", "digits", "--sigma", "0.25", "--n0", "4", "--n", "16", "--max", "2", "--batch-size", "8"]


def _diffusers_folder(folder):
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    diffusers.UNet2DModel(sample_size=8, in_channels=1, out_channels=1, layers_per_block=1,
                          block_out_channels=(8, 16), norm_num_groups=4,
                          down_block_types=("DownBlock2D", "DownBlock2D"),
                          up_block_types=("UpBlock2D", "UpBlock2D")).save_pretrained(folder / "unet")
    diffusers.DDPMScheduler(num_train_timesteps=1000).save_pretrained(folder / "scheduler")
    return folder


def _vit_folder(folder):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.ViTConfig(image_size=16, patch_size=4, num_channels=1, hidden_size=16, num_hidden_layers=1,
                                    num_attention_heads=2, intermediate_size=32, num_labels=10)
    net = transformers.ViTForImageClassification(config).eval()
    net.save_pretrained(folder)
    return folder, net


@pytest.mark.slow  # imports transformers and diffusers (seconds each)
def test_transformers_classifier_behind_a_diffusers_folder_certifies(tmp_path):
    vit, net = _vit_folder(tmp_path / "vit")
    unet = _diffusers_folder(tmp_path / "ddpm")
    loaded = load_model(vit, "digits", "transformers")
    x = torch.rand(3, 1, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(x), net(pixel_values=x).logits)  # the very weights saved
    out = tmp_path / "c.tsv"
    main(["certify", "--checkpoint", str(vit), "--arch", "transformers", "--diffusion", str(unet),
          "--classifier-input", "size=16,mean=0.5,std=0.5", *RUN, "--out", str(out)])
    meta = read_sidecar(out)
    assert (meta["diffusion_format"], meta["diffusion_noise"], meta["diffusion_rounding"]) == ("diffusers", "step", "up")
    assert meta["classifier_input"]["size"] == [16, 16] and len(read_certify_tsv(out)) == 2


@pytest.mark.slow  # imports timm (seconds)
def test_timm_classifier_by_name_from_saved_weights_certifies(tmp_path):
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    kwargs = {"img_size": 16, "patch_size": 4, "in_chans": 1, "embed_dim": 16, "depth": 1, "num_heads": 2}
    net = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=10, **kwargs).eval()
    torch.save(net.state_dict(), tmp_path / "vit.pth")
    loaded = load_model(tmp_path / "vit.pth", "digits", "timm:vit_tiny_patch16_224", arch_kwargs=kwargs,
                        mean=[0.5], std=[0.5])
    x = torch.rand(3, 1, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(x), net((x - 0.5) / 0.5))
    out = tmp_path / "c.tsv"
    main(["certify", "--checkpoint", str(tmp_path / "vit.pth"), "--arch", "timm:vit_tiny_patch16_224",
          "--arch-kwargs", '{"img_size": 16, "patch_size": 4, "in_chans": 1, "embed_dim": 16, "depth": 1, '
          '"num_heads": 2}', "--mean", "0.5", "--std", "0.5", "--classifier-input", "size=16", *RUN, "--out", str(out)])
    assert len(read_certify_tsv(out)) == 2 and read_sidecar(out)["classifier_input"]["size"] == [16, 16]


def test_hub_classifiers_without_their_package_name_the_extra(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "timm", None)
    monkeypatch.setitem(sys.modules, "transformers", None)
    torch.save({"w": torch.zeros(1)}, tmp_path / "w.pth")
    with pytest.raises(RsmoothError, match=r"pip install 'rsmooth\[timm\]'"):
        load_model(tmp_path / "w.pth", "digits", "timm:resnet18")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    with pytest.raises(RsmoothError, match=r"pip install 'rsmooth\[transformers\]'"):
        load_model(tmp_path / "hf", "digits", "transformers")
    with pytest.raises(RsmoothError, match="needs --dataset"):
        load_model(tmp_path / "w.pth", None, "timm:resnet18")


def test_classifier_input_resizes_bicubic_antialiased_and_normalises():
    x = torch.rand(2, 3, 40, 40)
    adapter = parse_classifier_input("size=20x24,mode=bicubic,mean=0.485/0.456/0.406,std=0.229/0.224/0.225")
    mean, std = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1), torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    expected = (torch.nn.functional.interpolate(x, (20, 24), mode="bicubic", antialias=True) - mean) / std
    torch.testing.assert_close(adapter(x), expected)
    assert adapter.spec()["size"] == [20, 24] and adapter.spec()["antialias"]
    assert ClassifierInput(None)(x) is x  # nothing asked, nothing done
    # resizing is linear with weights summing to 1: normalising before or after is the same
    half = parse_classifier_input("size=64,mean=0.5,std=0.5")
    torch.testing.assert_close(half(x), torch.nn.functional.interpolate(2 * x - 1, (64, 64), mode="bicubic",
                                                                        antialias=True), atol=1e-6, rtol=0)


@pytest.mark.parametrize("spec, message", [
    ("size=0", "positive int"), ("mode=lanczos", "resize mode must be one of"), ("mean=0.5", "go together"),
    ("size=abc", "is not a number"), ("colour=1", "expected comma-separated"), ("mean=0.5,std=0", "must be positive"),
    ("antialias=maybe", "yes or no"),
])
def test_bad_classifier_input_is_one_line(spec, message):
    with pytest.raises(RsmoothError, match=message):
        parse_classifier_input(spec)


def test_timm_plumbing_with_a_stand_in_module(tmp_path, monkeypatch):
    """Where timm is not installed: the name, the arch kwargs, the class count and the weights reach
    ``timm.create_model`` and the net as timm would get them (a stand-in module records the call)."""
    import sys
    import types

    calls = []

    def create_model(name, pretrained, num_classes, **kwargs):
        calls.append((name, pretrained, num_classes, kwargs))
        net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(kwargs["in_chans"] * 64, num_classes))
        net.num_classes = num_classes
        return net

    monkeypatch.setitem(sys.modules, "timm", types.SimpleNamespace(list_models=lambda: ["tiny"],
                                                                   create_model=create_model))
    torch.manual_seed(0)
    saved = create_model("tiny", False, 10, in_chans=1)
    torch.save({"state_dict": {f"module.{k}": v for k, v in saved.state_dict().items()}}, tmp_path / "w.pth")
    loaded = load_model(tmp_path / "w.pth", "digits", "timm:tiny", arch_kwargs={"in_chans": 1}, mean=[0.5], std=[0.5])
    assert calls[-1] == ("tiny", False, 10, {"in_chans": 1})
    x = torch.rand(2, 1, 8, 8)
    torch.testing.assert_close(loaded.model(x), saved((x - 0.5) / 0.5))
    out = tmp_path / "c.tsv"
    assert main(["certify", "--checkpoint", str(tmp_path / "w.pth"), "--arch", "timm:tiny", "--arch-kwargs",
                 '{"in_chans": 1}', "--mean", "0.5", "--std", "0.5", *RUN, "--out", str(out)]) in (0, None)
    assert len(read_certify_tsv(out)) == 2 and read_sidecar(out)["arch"] == "timm:tiny"
    with pytest.raises(RsmoothError, match="no such timm architecture"):
        load_model(tmp_path / "w.pth", "digits", "timm:huge")
    with pytest.raises(RsmoothError, match="does not fit timm:tiny with 100 classes"):
        load_model(tmp_path / "w.pth", "digits", "timm:tiny", arch_kwargs={"in_chans": 1}, num_classes=100)


def test_timm_create_model_stays_a_factory():
    """``--arch timm:create_model`` (docs/guide/timm.md) is timm's function as a module:factory,
    not an architecture of that name."""
    from rsmooth.models.hub import is_hub_arch

    assert not is_hub_arch("timm:create_model") and is_hub_arch("timm:beit_large_patch16_512")
    assert is_hub_arch("transformers") and not is_hub_arch("my.module:factory") and not is_hub_arch(None)


@pytest.mark.slow  # imports diffusers (seconds)
def test_diffusers_folder_certifies_end_to_end(tmp_path):
    """``--diffusion FOLDER`` (a tiny random UNet2DModel + DDPMScheduler saved with save_pretrained)
    in front of a built-in classifier, with the authors' defaults recorded."""
    from rsmooth.models import create_model

    unet = _diffusers_folder(tmp_path / "ddpm")
    torch.save(create_model("digits_cnn", "digits").state_dict(), tmp_path / "clf.pt")
    out = tmp_path / "c.tsv"
    main(["certify", "--checkpoint", str(tmp_path / "clf.pt"), "--arch", "digits_cnn", "--diffusion", str(unet),
          *RUN, "--out", str(out)])
    meta = read_sidecar(out)
    assert (meta["diffusion_format"], meta["diffusion_t"], meta["diffusion_noise"]) == ("diffusers", 145, "step")
    assert len(read_certify_tsv(out)) == 2
