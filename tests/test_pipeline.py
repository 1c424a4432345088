"""The whole CAT-RS recipe on digits at a tiny budget, and its step skipping."""
import json

import pytest

from conftest import assert_keywords_are_fields
from rsmooth.cli import main
from rsmooth.engine.pipeline import PipelineJob, run_pipeline
from rsmooth.metrics import read_certify_tsv


@pytest.mark.slow
def test_pipeline_runs_then_skips_finished_steps(tmp_path, capsys):
    logs = []
    kw = dict(method="catrs", dataset="digits", sigma=0.5, hparams={"num_noise": 2, "num_steps": 1},
              train_overrides={"epochs": 2, "batch_size": 128}, target_samples=10, n=100, max=4,
              log=logs.append)
    table = run_pipeline(str(tmp_path), **kw)
    assert "Gaussian sigma=0.5" in table and "CAT-RS sigma=0.5" in table
    for run in ("gaussian_0.25", "gaussian_0.50", "catrs_0.50"):
        assert (tmp_path / run / "checkpoint.pt").exists()
    cfg = json.loads((tmp_path / "catrs_0.50" / "config.json").read_text())["config"]
    assert cfg["targets"].endswith("targets_0.25.npy") and cfg["hparams"]["num_noise"] == 2
    assert cfg["hparams"]["sigma"] == 0.5 and cfg["epochs"] == 2
    assert json.loads((tmp_path / "targets_0.25.npy.json").read_text())["sigma"] == 0.25
    assert len(read_certify_tsv(tmp_path / "catrs_0.50" / "certify.tsv").idx) == 4
    assert (tmp_path / "certified_accuracy.png").exists() and (tmp_path / "table.md").exists()

    logs.clear()
    assert run_pipeline(str(tmp_path), **kw) == table  # everything exists: nothing recomputed
    assert not any(line.startswith("epoch") for line in logs)
    assert any("already computed" in line for line in logs)

    # the CLI refuses to reuse the folder with other settings instead of overwriting
    code = main(["pipeline", "catrs", "--dataset", "digits", "--sigma", "0.5", "--epochs", "3",
                 "--target-samples", "10", "--n", "100", "--max", "4", "--out", str(tmp_path)])
    assert code == 2 and "cannot resume" in capsys.readouterr().err


def test_run_pipeline_is_the_job():
    assert_keywords_are_fields(run_pipeline, PipelineJob)


def test_job_checks_every_step_when_made(tmp_path):
    job = PipelineJob(str(tmp_path / "p"), dataset="digits", sigma=0.5, train_overrides={"epochs": 1}, seed=3)
    assert job.seed == 3 and job._plan.base.hparams["sigma"] == 0.25 and job._plan.cat.hparams["sigma"] == 0.5
    assert job._plan.gauss.method == "gaussian" and job._plan.certify.n == 100_000
    assert not (tmp_path / "p").exists()  # nothing written before run()
    assert PipelineJob(str(tmp_path), compare_gaussian=False)._plan.gauss is None

