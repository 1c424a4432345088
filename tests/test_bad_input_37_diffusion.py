"""Bad input to ``rsmooth certify --diffusion`` (issue 37, items 7, 8, 9, 20, 21): each a one-line
error and exit 2, never an internal error and never a silent run behind the wrong denoiser.  CASES
runs in the one table of bad input, ``test_bad_input_37.test_bad_input_is_one_line``."""
import sys

import pytest
import torch
from test_diffusion_certify import files  # noqa: F401  (fixture: model.pt, ddpm.pt)
from test_engine import _Evil, _global_pickle

from rsmooth.engine import run_certification
from rsmooth.errors import RsmoothError
from rsmooth.metrics import read_sidecar
from rsmooth.models.diffusion import diffusion_classifier
from rsmooth.models.unet import TinyUNet, linear_schedule, save_ddpm


def _ddpm(tmp_path, files, **entries):
    """A copy of the fixture's DDPM file with ``entries`` replaced."""
    blob = torch.load(files / "ddpm.pt", weights_only=True)
    torch.save({**blob, **entries}, tmp_path / "bad.pt")
    return str(tmp_path / "bad.pt")


def _schedule(tmp_path, files, abar):
    return _ddpm(tmp_path, files, alphas_cumprod=abar)


def _bumped():
    """The linear schedule with one step that rises: non-monotone in the middle."""
    abar = linear_schedule(1000).clone()
    abar[150] = abar[148]
    return abar


def _saved(tmp_path, net, **extra):
    save_ddpm(tmp_path / "ddpm.pt", net, linear_schedule(1000), **extra)
    return str(tmp_path / "ddpm.pt")


#: (id, builder(tmp_path, files) -> the --diffusion value, more flags, a substring of the error), run by
#: test_bad_input_37.test_bad_input_is_one_line
CASES = [
    # item 7: malformed rsmooth DDPM files
    ("unet-none", lambda p, f: _ddpm(p, f, unet=None), [], "its 'unet' entry must be {'in_channels': C, 'width': W}"),
    ("unet-str", lambda p, f: _ddpm(p, f, unet="TinyUNet"), [], "its 'unet' entry must be"),
    ("unet-extra-key", lambda p, f: _ddpm(p, f, unet={"in_channels": 1, "width": 8, "depth": 2}), [],
     "its 'unet' entry must be"),
    ("unet-3-channels", lambda p, f: _ddpm(p, f, unet={"in_channels": 3, "width": 8}), [],
     "its state_dict does not fit its 'unet' entry {'in_channels': 3, 'width': 8}: shape of inp.weight (8, 1, 3, 3)"),
    ("unet-width-7", lambda p, f: _ddpm(p, f, unet={"in_channels": 1, "width": 7}), [], "W a multiple of 8"),
    ("unet-width-bool", lambda p, f: _ddpm(p, f, unet={"in_channels": True, "width": 8}), [], "positive integers"),
    ("state-dict-empty", lambda p, f: _ddpm(p, f, state_dict={}), [], "does not fit its 'unet' entry"),
    ("state-dict-str", lambda p, f: _ddpm(p, f, state_dict="weights"), [],
     "its 'state_dict' must be a dict of tensors"),
    ("abar-none", lambda p, f: _schedule(p, f, None), [],
     "its alphas_cumprod must be a 1-D schedule of numbers, got NoneType"),
    ("abar-strings", lambda p, f: _schedule(p, f, ["0.9", "0.8"]), [], "its alphas_cumprod must be a 1-D schedule"),
    ("abar-2d", lambda p, f: _schedule(p, f, linear_schedule(10).view(2, 5)), [], "must be a 1-D schedule"),
    ("abar-non-monotone-5-steps", lambda p, f: _schedule(p, f, _bumped()), ["--diffusion-steps", "5"],
     "its alphas_cumprod must decrease strictly (every step adds noise); step 150"),
    # item 8: accepted silently before
    ("abar-increasing-1-step", lambda p, f: _schedule(p, f, linear_schedule(1000).flip(0)), [],
     "must decrease strictly"),
    ("abar-nan", lambda p, f: _schedule(p, f, torch.tensor([0.9, float("nan"), 0.5], dtype=torch.float64)), [],
     "must hold values in (0, 1); step 1 is nan"),
    ("abar-one", lambda p, f: _schedule(p, f, torch.tensor([1.0, 0.5, 0.1], dtype=torch.float64)), [],
     "must hold values in (0, 1); step 0 is 1"),
    ("abar-zero", lambda p, f: _schedule(p, f, torch.tensor([0.9, 0.5, 0.0], dtype=torch.float64)), [],
     "step 2 is 0"),
    ("levels-far-above-sigma", lambda p, f: _schedule(p, f, linear_schedule(1000)[800:]), [],
     "no noise level near sigma 0.25: its step t* = 0 of 200 is at sigma 12.87"),
    ("levels-coarse", lambda p, f: _schedule(p, f, linear_schedule(1000)[::250]), [],
     "no noise level near sigma 0.25"),
    # item 9: pickled files, without torch's multi-line, coloured message
    ("pickled-object", lambda p, f: _ddpm(p, f, obj=_Evil()), [],
     "not a readable DDPM file: it needs to unpickle print, which can run arbitrary code; rsmooth"),
    ("pickled-blocked-global", lambda p, f: str(_global_pickle(p / "evil.pt", "posix", "system")), [],
     "it needs to unpickle posix.system (module posix, which torch blocks outright)"),
    ("truncated", lambda p, f: (p / "t.pt").write_bytes((f / "ddpm.pt").read_bytes()[:300]) and str(p / "t.pt"), [],
     "not a readable DDPM file ("),
    # item 20: a DDPM of other images
    ("other-dataset", lambda p, f: _saved(p, TinyUNet(1, width=8), dataset="fashion-mnist"), [],
     "was trained on fashion-mnist, not digits: it denoises towards fashion-mnist images"),
    ("other-shape-recorded", lambda p, f: _saved(p, TinyUNet(3, width=8), dataset="cifar10"), [],
     "was trained on cifar10, not digits"),
    ("other-shape-unrecorded", lambda p, f: _saved(p, TinyUNet(3, width=8)), [],
     "fails on digits images (shape 1 x 8 x 8, C x H x W): Given groups=1"),
    ("other-shape-overridden", lambda p, f: _saved(p, TinyUNet(3, width=8), dataset="cifar10"),
     ["--diffusion-other-dataset"], "fails on digits images"),
    # item 21: a path with nothing there
    ("missing-file", lambda p, f: "runs/nonexist.pt", [], "--diffusion runs/nonexist.pt: no such file or folder"),
    ("missing-dot-folder", lambda p, f: "./ddpm", [], "--diffusion ./ddpm: no such file or folder"),
]


def test_i37_other_dataset_flag_certifies_and_records_the_ddpms_dataset(files, tmp_path):  # noqa: F811
    """Item 20: --diffusion-other-dataset (diffusion_other_dataset=True) runs a DDPM of other images of
    the same shape; the sidecar records the dataset it was trained on."""
    ddpm = _saved(tmp_path, TinyUNet(1, width=8), dataset="fashion-mnist")
    run = dict(dataset="digits", sigma=0.25, model_options={"arch": "digits_cnn"}, n0=10, n=20, max=1,
               batch_size=20, progress=False, log=lambda s: None)
    with pytest.raises(RsmoothError, match="pass --diffusion-other-dataset"):
        run_certification(str(files / "model.pt"), str(tmp_path / "c.tsv"), diffusion=ddpm, **run)
    out = run_certification(str(files / "model.pt"), str(tmp_path / "c.tsv"), diffusion=ddpm,
                            diffusion_other_dataset=True, **run)
    meta = read_sidecar(out)
    assert meta["diffusion_dataset"] == "fashion-mnist" and meta["dataset"] == "digits"


def test_i37_a_corrupted_copy_is_its_clean_dataset(tmp_path):
    """Item 20: a DDPM of mnist denoises mnist-c (the published corrupted copy); fashion-mnist's is
    refused; a file that records no dataset is only checked for shape."""
    classifier = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))
    mnist = _saved(tmp_path, TinyUNet(1, width=8), dataset="mnist")
    _, record = diffusion_classifier(classifier, mnist, 0.25, dataset="mnist-c")
    assert record["diffusion_dataset"] == "mnist"
    with pytest.raises(RsmoothError, match="trained on mnist, not fashion-mnist"):
        diffusion_classifier(classifier, mnist, 0.25, dataset="fashion-mnist")
    diffusion_classifier(classifier, mnist, 0.25, dataset="fashion-mnist", other_dataset=True)


@pytest.mark.parametrize("spec", ["runs/nonexist.pt", "nonexist.safetensors", "./ddpm", "/no/such/ddpm",
                                  "runs/a/b", "..\\ddpm"])
def test_i37_a_path_with_nothing_there_says_so_first(spec, monkeypatch, tmp_path):
    """Item 21: a value that looks like a path (a file suffix, a leading . or /, a backslash, more
    than one /) is a missing file, whether or not diffusers is installed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "diffusers", None)
    from rsmooth.models.diffusion import load_diffusion

    with pytest.raises(RsmoothError, match=r"^--diffusion .*: no such file or folder \(a diffusers hub id is org/name"):
        load_diffusion(spec)


@pytest.mark.parametrize("spec", ["org/name", "google/ddpm-cifar10-32"])
def test_i37_a_hub_id_is_not_taken_for_a_path(spec, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "diffusers", None)
    from rsmooth.models.diffusion import load_diffusion

    with pytest.raises(RsmoothError, match="as a hub id it needs the diffusers package"):
        load_diffusion(spec)
