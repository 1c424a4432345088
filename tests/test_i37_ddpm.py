"""Issue 37, item 13: rsmooth's own DDPM trains from the installed package
(``python -m rsmooth.train_ddpm``, :func:`rsmooth.engine.ddpm.train_ddpm`), as the diffusion guide
says, not only from the repository's ``bench/``."""
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import SUBPROCESS_ENV

from rsmooth.data import SubsetDataset, get_dataset
from rsmooth.engine import ddpm
from rsmooth.errors import RsmoothError
from rsmooth.models.unet import load_ddpm

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def few_digits(monkeypatch):
    """32 training digits instead of 1,437: an epoch in a fraction of a second."""
    monkeypatch.setattr(ddpm, "get_dataset", lambda name, split, data_dir=None:
                        SubsetDataset(get_dataset(name, split), list(range(32))))


def test_i37_ddpm_trains_and_a_resumed_run_is_the_uninterrupted_one(tmp_path, few_digits):
    lines = []
    straight = ddpm.train_ddpm("digits", tmp_path / "a.pt", epochs=2, batch_size=16, width=8, steps=50, log=lines.append)
    ddpm.train_ddpm("digits", tmp_path / "b.pt", epochs=1, batch_size=16, width=8, steps=50, log=lines.append)
    ddpm.train_ddpm("digits", tmp_path / "b.pt", epochs=2, batch_size=16, width=8, steps=50, log=lines.append)
    (a, abar, blob), (b, _, blob_b) = load_ddpm(straight), load_ddpm(tmp_path / "b.pt")
    assert blob["epoch"] == blob_b["epoch"] == 2 and blob["dataset"] == "digits" and len(abar) == 50
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert [re.sub(r"loss .*", "", line) for line in lines] == ["epoch 1/2: ", "epoch 2/2: ", "epoch 1/1: ", "epoch 2/2: "]


def test_i37_ddpm_refuses_bad_settings_in_one_line(tmp_path, few_digits):
    for kwargs, message in [({"width": 4}, "multiple of 8"), ({"epochs": 0}, "--epochs"), ({"lr": -1.0}, "--lr")]:
        with pytest.raises(RsmoothError, match=message):
            ddpm.train_ddpm("digits", tmp_path / "x.pt", **kwargs)
    ddpm.train_ddpm("digits", tmp_path / "d.pt", epochs=1, batch_size=16, width=8, steps=50, log=lambda s: None)
    with pytest.raises(RsmoothError, match="a DDPM of 'digits', not 'mnist'"):
        ddpm.train_ddpm("mnist", tmp_path / "d.pt", epochs=2)


def test_i37_python_m_rsmooth_train_ddpm_is_installed_with_the_package(tmp_path):
    """The module runs as ``python -m`` from any folder (errors are one line, exit 2); the guide
    and bench/train_ddpm.py use it."""
    run = subprocess.run([sys.executable, "-m", "rsmooth.train_ddpm", "--width", "4", "--out", "d.pt"], cwd=tmp_path,
                         env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stderr.strip().splitlines() == [
        "rsmooth: error: --width must be a multiple of 8 (the UNet's group norms), got 4"]
    assert not (tmp_path / "d.pt").exists()
    guide = (ROOT / "docs" / "guide" / "diffusion.md").read_text()
    assert "python -m rsmooth.train_ddpm --dataset digits" in guide and "bench/train_ddpm.py" not in guide
    assert "from rsmooth.train_ddpm import main" in (ROOT / "bench" / "train_ddpm.py").read_text()
