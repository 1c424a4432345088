"""Standard training (--method standard): clean cross-entropy, no noise; sigma is certify's default."""
import json
import math

import pytest
import torch

from rsmooth.cli import main
from rsmooth.engine import TrainConfig, load_model, train
from rsmooth.methods import METHODS, Batch, StepContext, create_method

QUIET = dict(progress=False, log=lambda s: None)


def test_loss_is_clean_cross_entropy_by_hand():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 5)).double()
    x = torch.rand(3, 1, 3, 4, dtype=torch.float64)
    y = torch.tensor([1, 0, 4])
    method = create_method("standard", sigma=0.5)
    gen = torch.Generator().manual_seed(5)
    loss, stats = method.loss(model, Batch(x, y, torch.arange(3)), StepContext(gen))
    logits = model(x).tolist()
    by_hand = sum(math.log(sum(math.exp(v) for v in row)) - row[t]
                  for row, t in zip(logits, y.tolist())) / len(y)
    assert loss.item() == pytest.approx(by_hand, rel=1e-12)
    assert stats["acc"].item() == pytest.approx(
        sum(max(range(5), key=row.__getitem__) == t for row, t in zip(logits, y.tolist())) / 3)
    # no noise was drawn: the generator is untouched
    assert torch.equal(gen.get_state(), torch.Generator().manual_seed(5).get_state())
    assert method.num_chunks == 1


@pytest.mark.slow
def test_trains_digits_to_high_clean_accuracy_and_records_sigma(tmp_path):
    config = TrainConfig(dataset="digits", method="standard", epochs=6, batch_size=128, lr=0.1,
                         seed=0, hparams={"sigma": 0.5})
    result = train(config, tmp_path, **QUIET)
    assert result.history[-1]["test_acc"] > 0.85
    assert 0 <= result.history[-1]["test_acc_noisy"] <= 1  # evaluated under method.sigma
    loaded = load_model(tmp_path)
    assert loaded.sigma == 0.5 and loaded.meta["method"] == "standard"


def test_cli_lists_and_certifies_at_the_recorded_sigma(tmp_path, capsys):
    assert "standard" in METHODS
    assert main(["list", "methods"]) == 0
    assert "standard" in capsys.readouterr().out
    assert main(["train", "--dataset", "digits", "--method", "standard", "--epochs", "1",
                 "--out", str(tmp_path / "r")]) == 0
    assert main(["certify", "--checkpoint", str(tmp_path / "r"), "--n", "100", "--max", "2",
                 "--out", str(tmp_path / "c.tsv")]) == 0
    assert json.loads((tmp_path / "c.tsv.json").read_text())["sigma"] == 0.25
