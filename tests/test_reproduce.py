"""rsmooth reproduce: budgets, the plan of ordinary run commands, the table beside the published
values, and a whole reproduction killed once and rerun (a test table on digits)."""
import contextlib
import csv
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import SUBPROCESS_ENV
from rsmooth.cli import build_parser, main, train_config_from_args
from rsmooth.engine.train import TrainConfig
from rsmooth.errors import RsmoothError
from rsmooth.presets import get_preset
from rsmooth.reproduce import BUDGETS, get_table, parse_budget, plan, reproduce
from rsmooth.reproduce.plan import commands, train_argv
from rsmooth.reproduce.spec import budget_protocol, select

# A test table on digits: two rows with made-up "published" values, one without.
TEST_TABLE = textwrap.dedent("""
    from rsmooth.report.paper import PaperRow
    from rsmooth.reproduce import spec as S

    def paper(method, acr, acc):
        return PaperRow("test:tiny", "digits", "lenet", method, 0.25, method, acr, dict(zip((0.0, 0.25, 0.5), acc)))

    ROWS = (S.Row("digits", "gaussian", 0.25, "Gaussian", paper=paper("gaussian", 0.300, (80.0, 60.0, 30.0))),
            S.Row("digits", "catrs", 0.25, "CAT-RS", paper=paper("catrs", 0.400, (70.0, 60.0, 40.0))),
            S.Row("digits", "consistency", 0.5, "Consistency", {"lbd": 2.0}))
    S.TABLES.register("test:tiny", replace=True)(lambda: S.TableSpec(
        "test:tiny", "a test table", ROWS, (0.0, 0.25, 0.5), lambda d: dict(S.PAPER_PROTOCOL)))
""")
BUDGET = "smoke,train=0.15,epochs=0.1,test=0.025"
exec(TEST_TABLE)


def _run(out, *extra, session=False):
    script = TEST_TABLE + "\nimport sys\nfrom rsmooth.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    argv = [sys.executable, "-c", script, "reproduce", "test:tiny", "--budget", BUDGET, "--out", str(out), *extra]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=session, env={**os.environ, "OMP_NUM_THREADS": "1"})


def _acr_from_tsv(path):
    """ACR and accuracy at radii straight from the TSV columns (not rsmooth.metrics)."""
    with open(path) as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    radius = np.array([float(r["radius"]) for r in rows])
    correct = np.array([int(r["correct"]) for r in rows])
    return (radius * correct).mean(), {r: 100 * np.mean((radius >= r) & (correct == 1)) for r in (0.0, 0.25, 0.5)}


@pytest.mark.slow
def test_killed_then_rerun_reproduction_writes_the_table(tmp_path, capsys):
    out = tmp_path / "rep"
    proc = _run(out, "--jobs", "2", session=True)
    deadline = time.time() + 300
    while not list((out / "runs").glob("digits/*/seed0/checkpoint.pt")) and time.time() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole job, as a scheduler's kill
    proc.wait()
    assert not (out / "table.md").exists()
    steps = plan(get_table("test:tiny"), parse_budget(BUDGET), [0], out)
    assert len(steps) == 7  # 3 rows + targets + certify x3; the Gaussian row is CAT-RS's sigma0 model

    proc = _run(out)
    log, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, log
    assert "steps already done" in log
    table = (out / "table.md").read_text()
    assert "Budget smoke,epochs=0.1,train=0.15,test=0.025, REDUCED, not the paper's protocol" in table
    assert "n = 100" in table and "every 40th test example" in table
    res = json.loads((out / "results.json").read_text())
    assert [r["label"] for r in res["rows"]] == ["Gaussian", "CAT-RS", "Consistency"]
    for row in res["rows"]:
        tsv = out / "runs" / "digits" / row["run"] / "seed0" / "certify.tsv"
        acr, acc = _acr_from_tsv(tsv)
        assert row["acr"]["mean"] == pytest.approx(acr, abs=1e-12) and row["seeds"]["0"]["examples"] == 9
        for r, a in acc.items():
            assert row["accuracy"][f"{r:g}"]["mean"] == pytest.approx(a, abs=1e-9)
        if row["paper"]:
            line = next(ln for ln in table.splitlines()[table.splitlines().index(
                next(ln for ln in table.splitlines() if f"| {row['label']} |" in ln)):] if "difference" in ln)
            assert f"{acr - row['paper']['acr']:+.3f}" in line
    cfg = json.loads((out / "runs/digits/consistency_0.50_lbd2/seed0/config.json").read_text())["config"]
    assert cfg["hparams"]["lbd"] == 2.0 and cfg["epochs"] == 3 and cfg["train_subset"] == 216
    from rsmooth.metrics import read_sidecar
    assert read_sidecar(out / "runs/digits/consistency_0.50_lbd2/seed0/certify.tsv")["hparams"]["lbd"] == 2.0
    assert "Note: ACR order, digits sigma 0.25: ours" in table and "of 1 pairs ordered alike" in table

    # a third run (in this process: it starts no step) finds everything done and writes the same table
    (out / "table.md").unlink()
    assert main(["reproduce", "test:tiny", "--budget", BUDGET, "--out", str(out)]) == 0
    assert "7 of 7 steps already done" in capsys.readouterr().out
    assert (out / "table.md").read_text() == table


def test_budgets():
    assert parse_budget("paper").is_paper and not parse_budget("small").is_paper
    b = parse_budget("small,epochs=0.05,n=0.02")
    assert (b.epochs, b.n, b.train, b.name) == (0.05, 0.02, BUDGETS["small"].train, "small,epochs=0.05,n=0.02")
    for bad, msg in (("huge", "start with one of paper, small, smoke"), ("small,epoch=0.1", "unknown factor 'epoch'"),
                     ("small,n=2", "n must be a factor in \\(0, 1\\], got '2'"), ("small,n=x", "got 'x'")):
        with pytest.raises(RsmoothError, match=msg):
            parse_budget(bad)
    p = dict(n0=100, n=100_000, alpha=0.001, skip=100, max=500)
    assert budget_protocol(p, BUDGETS["paper"]) == p
    assert budget_protocol(p, BUDGETS["small"]) == dict(p, n=10_000, skip=1000, max=50)
    assert budget_protocol(dict(p, max=None, skip=1), BUDGETS["smoke"]) == dict(p, n=100, skip=500, max=None)


@pytest.mark.parametrize("preset,budget", [("fashion-mnist/smoothadv/0.25", "small"),
                                           ("imagenet/catrs/1.00", "small"),
                                           ("cifar10/smoothmix/0.50", "paper")])
def test_train_commands_give_the_scaled_preset(preset, budget, tmp_path):
    p = get_preset(preset)
    b = parse_budget(budget)
    argv = train_argv(p.dataset, p.method, p.sigma, {}, b, 3, tmp_path / "r", 1000 if b.train < 1 else None)
    got = train_config_from_args(build_parser().parse_args(argv))
    want = TrainConfig(**p.train_config()).resolved()
    f = b.epochs
    assert got.seed == 3 and got.train_subset == (1000 if b.train < 1 else None)
    assert got.epochs == max(1, round(want.epochs * f))
    if want.milestones:
        assert got.milestones == [max(1, round(m * f)) for m in want.milestones]
    else:
        assert got.lr_step == max(1, round(want.lr_step * f))
    scaled = {k: max(1, round(v * f)) for k, v in want.hparams.items() if k in ("warmup", "eps_double_epoch") and v}
    assert got.hparams == {**want.hparams, **scaled}  # every other hyperparameter as the preset's
    assert (got.lr, got.batch_size, got.arch) == (want.lr, want.batch_size, want.arch)
    # below the paper's budget only the last epoch is evaluated (issue 20, item 16)
    assert [e for e in range(got.epochs) if got.evaluates(e)] == (
        list(range(got.epochs)) if b.is_paper else [got.epochs - 1])


@pytest.mark.parametrize("table,budget", [("catrs:table4", "smoke"), ("catrs:table4", "paper"),
                                          ("rsmooth:digits", "small")])
def test_step_settings_are_what_the_cli_reads_from_the_argv(table, budget):
    """The estimate reads each step's settings (reproduce imports no CLI): they must be what the
    step's command line gives when the CLI parses it."""
    parser = build_parser()
    for step in plan(get_table(table), parse_budget(budget), [0], Path("OUT")):
        args = parser.parse_args(step.argv)
        if step.kind == "train":
            assert step.settings == {"config": train_config_from_args(args).resolved()}, step.title
        else:
            keys = ("num_samples", "train_subset") if step.kind == "targets" else ("n0", "n", "skip", "max", "start")
            assert step.settings == {k: getattr(args, k) for k in keys}, step.title


def test_reproduce_imports_no_cli():
    """The CLI runs reproduce, never the other way round: the plan's flags come from
    rsmooth.engine.runconfig and its steps run through the function the CLI hands down."""
    import ast

    import rsmooth.reproduce as package

    for path in Path(package.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert "cli" not in (node.module or "").split("."), f"{path.name}:{node.lineno}"


def test_reproduce_runs_steps_through_the_function_it_is_handed(tmp_path):
    """The CLI hands main (steps in its process); a Python caller's default is a process per step."""
    from rsmooth.reproduce.plan import Step
    from rsmooth.reproduce.run import run_steps

    ran = []
    steps = [Step("certify", f"step {k}", ["--version"], tmp_path / f"out{k}") for k in range(2)]
    run_steps(steps, 1, tmp_path / "logs", log=lambda s: None, run_step=lambda argv: ran.append(argv) or 0)
    assert ran == [["--version"], ["--version"]]
    with pytest.raises(RsmoothError, match="step 'step 0' failed"):
        run_steps(steps, 1, tmp_path / "logs", log=lambda s: None, run_step=lambda argv: 2)


@pytest.mark.slow
def test_python_callers_run_each_step_in_a_process_of_its_own(tmp_path, monkeypatch):
    from rsmooth.reproduce.plan import Step
    from rsmooth.reproduce.run import run_steps

    monkeypatch.setenv("PYTHONPATH", SUBPROCESS_ENV["PYTHONPATH"])
    with pytest.raises(RsmoothError, match="step 'step 0' failed"):  # python -m rsmooth --no-such-flag: status 2
        run_steps([Step("certify", "step 0", ["--no-such-flag"], tmp_path / "out")], 1, tmp_path / "logs",
                  log=lambda s: None)


def test_plan_shares_the_sigma0_model_and_targets(tmp_path):
    spec = get_table("rsmooth:digits")
    steps = plan(spec, parse_budget("smoke"), [0, 1], tmp_path)
    kinds = [s.kind for s in steps]
    assert kinds.count("train") == 16 and kinds.count("targets") == 2 and kinds.count("certify") == 16
    for s in steps:  # every step comes after the steps it reads
        assert all(any(d == t.out for t in steps[:steps.index(s)]) for d in s.deps), s.title
    cat = [s for s in steps if "catrs_0.50 seed 1" in s.title and s.kind == "train"][0]
    assert cat.deps == [tmp_path / "runs/digits/targets_0.25/seed1.npy"]
    text = commands(steps, tmp_path / "commands")
    assert text.splitlines()[0] == "# stage 1 (train): 12 independent command(s)"
    stage3 = (tmp_path / "commands" / "stage3.txt").read_text().splitlines()
    assert len(stage3) == 4 and all(ln.startswith("rsmooth train --dataset digits --method catrs") for ln in stage3)
    assert "# stage 3 (train (needs targets)): 4 independent command(s)" in text
    assert text.count("rsmooth certify") == 16


@pytest.mark.parametrize("budget, evals_every_epoch", [
    ("paper", True), ("paper,test=0.1,n=0.5", True), ("paper,epochs=0.5", False), ("small", False)])
def test_training_at_the_paper_schedule_is_evaluated_every_epoch(tmp_path, budget, evals_every_epoch):
    """Below the paper's schedule only the last epoch is evaluated; at it (fewer test examples or
    samples certified aside) every epoch is, for the comparison with the authors' training logs."""
    steps = plan(get_table("rsmooth:digits"), parse_budget(budget), [0], tmp_path)
    trains = [" ".join(map(str, s.argv)) for s in steps if s.kind == "train"]
    assert trains and all(("--eval-every" not in t) == evals_every_epoch for t in trains), trains


def test_select_rows_and_errors(tmp_path, capsys):
    spec = select(get_table("rsmooth:digits"), ["gaussian", "catrs"], [0.5])
    assert [(r.method, r.sigma) for r in spec.rows] == [("gaussian", 0.5), ("catrs", 0.5)]
    with pytest.raises(RsmoothError, match="has no rows of method macer"):
        select(spec, ["macer"])
    with pytest.raises(RsmoothError, match="no row of rsmooth:digits has one of the methods and sigmas"):
        select(get_table("rsmooth:digits"), None, [1.0])
    assert main(["reproduce", "nope:table1", "--out", str(tmp_path / "x")]) == 2
    assert "nope:table1: unknown table; choose one of" in capsys.readouterr().err
    assert main(["reproduce", "rsmooth:digits"]) == 2
    assert "needs TABLE and --out DIR" in capsys.readouterr().err
    assert main(["reproduce", "rsmooth:digits", "--out", str(tmp_path / "y"), "--print-commands"]) == 0
    assert main(["reproduce", "rsmooth:digits", "--budget", "smoke", "--out", str(tmp_path / "y"),
                 "--print-commands"]) == 2
    assert "holds a reproduction of rsmooth:digits at budget small, not rsmooth:digits at smoke" in capsys.readouterr().err
    (tmp_path / "y" / "reproduce.json").write_text("{garbage")
    assert main(["reproduce", "rsmooth:digits", "--out", str(tmp_path / "y"), "--print-commands"]) == 2
    assert "reproduce.json is not a reproduction record (damaged?)" in capsys.readouterr().err
    assert main(["reproduce", "catrs:table12", "--budget", "paper", "--methods", "catrs", "--sigmas", "0.5",
                 "--out", str(tmp_path / "t12"), "--print-commands"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("rsmooth certify") == 10  # 5 seeds by default (the published means), MNIST and CIFAR-10
    assert "--dataset cifar10" not in printed and "--preset cifar10/catrs/0.50" in printed
    assert "--skip 5 --max 2000 --seed 4" in printed
    assert main(["reproduce", "--list"]) == 0
    assert "rsmooth:digits: " in capsys.readouterr().out


def test_table_over_seeds_against_numpy(tmp_path):
    """--collect on hand-written certify files: mean +- std (ddof 1) per cell, the paper's row, the
    difference and the ACR orderings, all recomputed here with numpy."""
    from rsmooth.metrics import CertifyWriter, write_sidecar

    spec = select(get_table("catrs:table4"), ["gaussian", "catrs"], [0.25])
    radii = {("gaussian", 0): [0.6, 0.3, 0.0, 0.2], ("gaussian", 1): [0.5, 0.5, 0.1, 0.0],
             ("catrs", 0): [0.9, 0.8, 0.0, 0.7], ("catrs", 1): [0.9, 0.0, 0.4, 0.7]}
    correct = [1, 1, 0, 1]
    for (method, seed), rs in radii.items():
        tsv = tmp_path / "runs" / "fashion-mnist" / f"{method}_0.25" / f"seed{seed}" / "certify.tsv"
        tsv.parent.mkdir(parents=True)
        with CertifyWriter(tsv) as w:
            for i, (r, c) in enumerate(zip(rs, correct)):
                w.write(i, 0, 0 if c else 1, r, c, 0.1)
        write_sidecar(tsv, {"complete": True})
    text = reproduce("catrs:table4", str(tmp_path), budget="small,train=1", seeds=2, methods=["gaussian", "catrs"],
                     sigmas=[0.25], collect=True)
    lines = text.splitlines()
    for method, label in (("gaussian", "Gaussian"), ("catrs", "CAT-RS")):
        acrs = [np.mean(np.array(radii[(method, s)]) * correct) for s in (0, 1)]
        acc50 = [100 * np.mean((np.array(radii[(method, s)]) >= 0.5) & (np.array(correct) == 1)) for s in (0, 1)]
        k = next(i for i, ln in enumerate(lines) if f"| {label} | ours (2 seeds) |" in ln)
        cells = [c.strip() for c in lines[k].split("|")[1:-1]]
        assert cells[3] == f"{np.mean(acrs):.3f} ± {np.std(acrs, ddof=1):.3f}"
        assert cells[6] == f"{np.mean(acc50):.1f} ± {np.std(acc50, ddof=1):.1f}"  # radius 0.50
        paper = next(r for r in spec.rows if r.method == method).paper
        assert lines[k + 1].startswith("|  |  | 95% interval | [")
        assert lines[k + 2].split("|")[4].strip() == f"{paper.acr:.3f}"
        assert lines[k + 3].split("|")[4].strip().split()[0] == f"{np.mean(acrs) - paper.acr:+.3f}"
    assert "Budget small,train=1, REDUCED, not the paper's protocol: epochs x0.1 (90 -> 9, 150 -> 15" in text
    assert "training set x1 (all)" in text and "n = 10,000" in text and "every 10th test example" in text
    assert "the training runs evaluate the test set after their last epoch only" in text
    assert "Note: ACR order, fashion-mnist sigma 0.25: ours Gaussian < CAT-RS; paper Gaussian < CAT-RS; " \
           "1 of 1 pairs ordered alike" in text
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["rows"][0]["seeds"]["1"]["acr"] == pytest.approx(np.mean(np.array(radii[("gaussian", 1)]) * correct))


# ----------------------------------------------------------------------------- issue 20, item 16


@pytest.fixture
def no_data(tmp_path, monkeypatch):
    """An empty data folder and no network: any attempt to read or fetch a dataset fails."""
    import urllib.request

    def offline(*args, **kwargs):
        raise OSError("network disabled in this test")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    for var in ("RSMOOTH_DATA", "HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, str(tmp_path / "nothing"))
    (tmp_path / "empty").mkdir()
    return str(tmp_path / "empty")


@pytest.mark.parametrize("table,subset", [("consistency:table1", 100), ("catrs:table4", 120)])
def test_print_commands_and_collect_need_no_data(no_data, tmp_path, capsys, table, subset):
    """The published sizes give --train-subset (0.2% of 50,000 / 60,000 at smoke), so a plan prints and
    collects on a machine without the data."""
    if table.startswith("consistency"):  # the data cannot be read here
        from rsmooth.data import get_dataset
        with pytest.raises(RsmoothError, match="could not download"):
            get_dataset("cifar10", "train", data_dir=no_data)
    out = str(tmp_path / "rep")
    assert main(["reproduce", table, "--budget", "smoke", "--out", out, "--data-dir", no_data, "--print-commands"]) == 0
    printed = capsys.readouterr().out
    assert printed.count(f"--train-subset {subset} ") == printed.count("rsmooth train") + printed.count("rsmooth targets")
    assert main(["reproduce", table, "--budget", "smoke", "--out", out, "--data-dir", no_data, "--collect"]) == 0
    assert f"{subset:,} examples" in capsys.readouterr().out


def _write_tsv(root, run, predict, label, radius):
    from rsmooth.metrics import CertifyWriter, write_sidecar

    tsv = root / "runs" / "fashion-mnist" / run / "seed0" / "certify.tsv"
    tsv.parent.mkdir(parents=True)
    with CertifyWriter(tsv) as w:
        for i, (p, y, r) in enumerate(zip(predict, label, radius)):
            w.write(i, y, p, r, p == y, 0.1)
    write_sidecar(tsv, {"complete": True})


def test_a_model_that_predicts_one_class_is_flagged(tmp_path):
    labels = [k % 10 for k in range(20)]
    _write_tsv(tmp_path, "gaussian_0.25", labels, labels, [0.5] * 20)  # a sound model
    collapsed = [3] * 19 + [-1]  # class 3 for 19 of 20, the labels' class 3 only twice
    _write_tsv(tmp_path, "stability_0.25", collapsed, labels, [0.9 if p == 3 else 0.0 for p in collapsed])
    text = reproduce("catrs:table4", str(tmp_path), budget="small,train=1", methods=["gaussian", "stability"],
                     sigmas=[0.25], collect=True)
    rows = [ln for ln in text.splitlines() if "| ours" in ln]
    assert "(constant †)" not in rows[0] and "| Stability | ours (constant †) |" in rows[1]
    assert "Note: † constant: the model predicts one class for (nearly) all test examples" in text
    assert "Stability sigma 0.25: class 3 for 95% of the examples (labels: 10%)" in text
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["rows"][0]["seeds"]["0"]["constant"] is None
    assert res["rows"][1]["seeds"]["0"]["constant"] == {"class": 3, "share": 0.95, "label_share": 0.1}
    from rsmooth.reproduce.render import constant_prediction  # labels mostly that class: no flag
    assert constant_prediction(np.array([1] * 10), np.array([1] * 9 + [2])) is None


def test_title_and_caption_describe_the_selection(tmp_path):
    text = reproduce("catrs:table4", str(tmp_path / "a"), budget="smoke", methods=["gaussian"], sigmas=[0.25],
                     collect=True)
    title, budget_line = text.splitlines()[:2]
    assert title == ("catrs:table4: Jeong, Kim, Shin 2023, Confidence-aware Training of Smoothed Classifiers for "
                     "Certified Robustness, arXiv 2212.09000, Table 4: Gaussian at sigma 0.25 (fashion-mnist), 1 of "
                     "its 21 rows, selected by --methods/--sigmas")
    assert "seven" not in title and "consistency targets" not in budget_line and "difference = ours - paper" in text
    text = reproduce("catrs:table4", str(tmp_path / "b"), budget="smoke", methods=["gaussian", "catrs"],
                     sigmas=[0.5, 1.0], collect=True)
    assert "Table 4: Gaussian and CAT-RS at sigma 0.5/1 (fashion-mnist), 4 of its 21 rows" in text.splitlines()[0]
    assert "consistency targets x0.001 (fashion-mnist: 10 noises)" in text.splitlines()[1]
    full = reproduce("rsmooth:digits", str(tmp_path / "c"), budget="paper", methods=["gaussian"], collect=True)
    assert "Budget paper: the published protocol (schedules, full training sets, n)." in full
    assert "; paper:" not in full and "difference" not in full and "Ours: seed 0; certified accuracy" in full


def test_list_estimates_the_work_at_the_paper_budget(capsys):
    """The passes of catrs:table4 counted by hand from its presets: epochs x 60,000 x the method's
    passes per image, 60,000 x 10,000 target noises, 21 x 10,000 x (100 + 100,000) certification."""
    from rsmooth.methods import create_method
    from rsmooth.presets import preset_config
    from rsmooth.reproduce.cost import ASSUMED_THROUGHPUT, estimate

    per_image = {"gaussian": lambda h: 1, "stability": lambda h: 2, "consistency": lambda h: h["num_noise"],
                 "macer": lambda h: h["num_noise"], "smoothadv": lambda h: h["num_noise"] * (h["num_steps"] + 1),
                 "smoothmix": lambda h: h["num_noise"] * (h["num_steps"] + 2),
                 "catrs": lambda h: h["num_noise"] * (h["num_steps"] + 2)}
    spec = get_table("catrs:table4")
    train = 0
    for row in spec.rows:
        _, cfg = preset_config(row.dataset, row.method, row.sigma)
        hp = create_method(row.method, **{**cfg["hparams"], **row.hparams}).hparams()
        train += cfg["epochs"] * 60_000 * per_image[row.method](hp)
    work = estimate(spec, BUDGETS["paper"], [0])
    assert work.train == train and work.targets == 60_000 * 10_000 and work.certify == 21 * 10_000 * 100_100
    rate_train, rate_forward = ASSUMED_THROUGHPUT["lenet"]
    assert work.gpu_hours == pytest.approx((train / rate_train + (work.targets + work.certify) / rate_forward) / 3600)
    smoke = estimate(spec, parse_budget("smoke"), [0])  # the budget's commands: 1 epoch, 120 images, ...
    assert smoke.targets == 120 * 10 and smoke.certify == 21 * 20 * (100 + 100)
    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    assert out.count("    work at the paper budget, ") == len(__import__("rsmooth.reproduce", fromlist=["TABLES"]).TABLES.names())
    assert "catrs:table12" in out and "work at the paper budget, 5 seeds: " in out
    assert "GPU-hours assume one A100-class GPU" in out and "an ASSUMPTION, not a measurement" in out


# ----------------------------------------------------------------------------- issue 21, item 4


@contextlib.contextmanager
def _file_size_limit(nbytes):
    """Writes past ``nbytes`` of a file fail with EFBIG, as on a full disk (SIGXFSZ ignored)."""
    import resource

    old_limit, old_handler = resource.getrlimit(resource.RLIMIT_FSIZE), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, old_limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)


def test_a_full_disk_at_the_record_write_leaves_no_record(tmp_path):
    """The record's write fails part-way, as on a full disk (or a kill); the folder must not keep a
    torn record that every rerun refuses."""
    out = tmp_path / "rep"
    with pytest.raises(OSError, match="File too large"), _file_size_limit(8):
        reproduce("rsmooth:digits", str(out), print_commands=True)
    assert [p.name for p in out.iterdir()] == []
    assert "rsmooth train" in reproduce("rsmooth:digits", str(out), print_commands=True)


def test_an_empty_record_of_an_earlier_version_is_taken_as_absent(tmp_path, capsys):
    out = tmp_path / "rep"
    out.mkdir()
    (out / "reproduce.json").write_bytes(b"")  # an earlier version killed at its (first) write
    assert main(["reproduce", "rsmooth:digits", "--out", str(out), "--print-commands"]) == 0
    assert "reproduce.json was empty (a run was stopped while writing it" in capsys.readouterr().err
    assert json.loads((out / "reproduce.json").read_text()) == {"table": "rsmooth:digits", "budget": "small"}


@pytest.mark.parametrize("sig,code,word", [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")])
def test_a_signal_during_a_step_is_told_once(tmp_path, monkeypatch, capsys, sig, code, word):
    """``reproduce --jobs 1`` runs each step through main: the signal arrives while the step's own
    main parses its arguments; the reproduction stops with the signal's status and one line."""
    import rsmooth.cli as cli

    real, calls = cli.build_parser, []

    def parser():
        calls.append(1)
        if len(calls) == 2:  # the first step's main
            os.kill(os.getpid(), sig)
        return real()

    monkeypatch.setattr(cli, "build_parser", parser)
    assert main(["reproduce", "test:tiny", "--budget", BUDGET, "--out", str(tmp_path)]) == code
    err = capsys.readouterr().err.strip()
    assert len(calls) == 2 and err == f"rsmooth: {word}; rerun the same command to continue (finished steps are kept)"


@pytest.mark.slow
@pytest.mark.parametrize("sig,code,word", [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")])
def test_a_signal_while_a_step_trains(tmp_path, sig, code, word):
    proc = _run(tmp_path)
    deadline = time.time() + 300
    while not list(tmp_path.glob("runs/digits/*/seed0/.lock")):  # the first step is training
        assert proc.poll() is None and time.time() < deadline, proc.stdout.read()
        time.sleep(0.02)
    proc.send_signal(sig)
    log, _ = proc.communicate(timeout=120)
    assert proc.returncode == code, log
    assert log.count("rsmooth: terminated") + log.count("rsmooth: interrupted") == 1, log
    assert f"rsmooth: {word}; rerun the same command" in log, log


def test_intervals_inside_and_stage_costs_against_scipy(tmp_path):
    """One seed: the 95% row is Clopper-Pearson's exact interval (scipy's binomtest) at each radius
    and mean +- 1.96 standard errors for the ACR; '(inside)'/'(outside)' compare the paper's value
    with it; the costs come from train.log's epoch times and the TSV's time column."""
    from scipy.stats import binomtest, norm

    from rsmooth.metrics import CertifyWriter, write_sidecar

    rng = np.random.default_rng(0)
    m = 400
    radius = np.where(rng.random(m) < 0.8, rng.uniform(0, 1.2, m), 0.0)
    correct = rng.random(m) < 0.9
    run = tmp_path / "runs" / "fashion-mnist" / "gaussian_0.25" / "seed0"
    run.mkdir(parents=True)
    with CertifyWriter(run / "certify.tsv") as w:
        for i in range(m):
            w.write(i, 0, 0 if correct[i] else 1, float(radius[i]), bool(correct[i]), 100.0 if i == 7 else 0.5)  # 7: suspended
    write_sidecar(run / "certify.tsv", {"complete": True, "mode": "certify", "n0": 100, "n": 100_000})
    (run / "train.log").write_text("".join(json.dumps({"epoch": e, "time": 30.0}) + "\n" for e in range(1, 91))
                                   + '{"epoch": 91, "ti')  # a line cut by a kill is not counted
    text = reproduce("catrs:table4", str(tmp_path), budget="paper,test=0.1", seeds=1, methods=["gaussian"],
                     sigmas=[0.25], collect=True)
    lines = text.splitlines()
    k = next(i for i, ln in enumerate(lines) if "| Gaussian | ours |" in ln)
    ci = [c.strip() for c in lines[k + 1].split("|")[1:-1]]
    diff = [c.strip() for c in lines[k + 3].split("|")[1:-1]]
    paper = select(get_table("catrs:table4"), ["gaussian"], [0.25]).rows[0].paper
    values = radius * correct
    half = norm.ppf(0.975) * np.std(values, ddof=1) / np.sqrt(m)
    assert ci[3] == f"[{values.mean() - half:.3f}, {values.mean() + half:.3f}]"
    assert diff[3].endswith("(inside)" if abs(values.mean() - paper.acr) <= half else "(outside)")
    radii = get_table("catrs:table4").radii
    for j, r in enumerate(radii):
        count = int(np.sum(correct & (radius >= r)))
        lo, hi = binomtest(count, m).proportion_ci(0.95, "exact")
        assert ci[4 + j] == f"[{100 * lo:.1f}, {100 * hi:.1f}]"
        a = paper.accuracy_at(r)
        assert diff[4 + j].endswith("(inside)" if 100 * lo <= a <= 100 * hi else "(outside)")
    assert "Clopper-Pearson, exact" in text and "whether the paper's value lies in it" in text
    assert ("- Gaussian sigma 0.25: train 90 epochs in 45m00s (median epoch 30.0 s); certify 400 examples in 5m00s, "
            f"{400 * 100_100 / 299.5:,.0f} samples/s (median example 0.5 s: {100_100 / 0.5:,.0f} samples/s)") in text
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["costs"][0]["certify"]["samples_per_s"] == pytest.approx(400 * 100_100 / 299.5)
    assert res["rows"][0]["paper"]["inside"]["acr"] in ("inside", "outside")


def test_the_parallel_status_shows_each_running_steps_latest_line(tmp_path):
    from rsmooth.reproduce.plan import Step
    from rsmooth.reproduce.run import Task, _status, last_line

    log = tmp_path / "a.log"
    log.write_bytes(b"epoch 1/90 done\n" + b"x" * 5000 + b"\nepoch 2/90: 30/235 steps\r\n\n")
    assert last_line(log) == "epoch 2/90: 30/235 steps" and last_line(tmp_path / "none.log") == ""
    lines = []
    _status({1: (Task(Step("train", "train fashion-mnist gaussian_0.25 seed 0", [], tmp_path)), log),
             2: (Task(Step("certify", "certify x", [], tmp_path), (1, 2)), tmp_path / "empty.log")}, lines.append)
    assert lines == ["   train fashion-mnist gaussian_0.25 seed 0: epoch 2/90: 30/235 steps",
                     "   certify x, shard 1/2: (no output yet)"]


def test_a_certification_still_running_is_shown_so_far(tmp_path):
    """--collect during a long certification: the rows written so far, marked, with the intervals
    of that many examples; a row cut mid-write is not read as damage."""
    from rsmooth.metrics import CertifyWriter, write_sidecar

    tsv = tmp_path / "runs" / "fashion-mnist" / "gaussian_0.25" / "seed0" / "certify.tsv"
    tsv.parent.mkdir(parents=True)
    with CertifyWriter(tsv) as w:
        for i in range(40):
            w.write(i * 10, i % 10, *((i % 10, 0.5) if i % 4 else (-1, 0.0)), bool(i % 4), 9.0)
    write_sidecar(tsv, {"complete": False, "mode": "certify", "n0": 100, "n": 100_000, "num_examples": 1000})
    text = reproduce("catrs:table4", str(tmp_path), budget="paper,test=0.1", seeds=1, methods=["gaussian"],
                     sigmas=[0.25], collect=True)
    row = next(ln for ln in text.splitlines() if "| Gaussian |" in ln)
    assert "| ours, so far (40 of 1,000 examples) | 0.375 | 75.0 | 75.0 | 75.0 | 0.0 |" in row
    assert "Note: so far: a certification still running" in text and "not certified yet" not in text
    assert json.loads((tmp_path / "results.json").read_text())["rows"][0]["seeds"]["0"]["complete"] is False
    with open(tsv, "a") as fh:
        fh.write("400\t3\t3\t0.4")  # a row being written
    again = reproduce("catrs:table4", str(tmp_path), budget="paper,test=0.1", seeds=1, methods=["gaussian"],
                      sigmas=[0.25], collect=True)
    assert again == text


def test_collect_on_a_folder_that_does_not_exist_writes_nothing(tmp_path, capsys):
    """A mistyped --out with --collect: the empty table, a note naming the folder, and no folder made."""
    out = tmp_path / "typo" / "rep"
    assert main(["reproduce", "catrs:table4", "--methods", "gaussian", "--sigmas", "0.25", "--collect",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"Note: {out} does not exist, so this table is empty and written nowhere; check --out" in printed
    assert "| 0.25 | Gaussian | ours | - |" in printed and not (tmp_path / "typo").exists()


# ----------------------------------------------------------------------------- --jobs K and idle cores

SUBSET = ["--start", "1", "--skip", "3", "--max", "11", "--device", "cpu", "--n0", "50"]


@pytest.fixture(scope="module")
def digits_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("model")
    assert main(["train", "--dataset", "digits", "--sigma", "0.25", "--epochs", "2", "--out", str(out)]) == 0
    return out


def certify_step(model, out, n):
    from rsmooth.reproduce.plan import Step

    argv = ["certify", "--checkpoint", str(model), *SUBSET, "--n", str(n), "--batch-size", "1000", "--out", str(out)]
    return Step("certify", f"certify {out.stem}", argv, out, [], 3)


def columns(path):
    """Every column but time, line by line."""
    return [line.split("\t")[:5] for line in Path(path).read_text().splitlines()]


def test_a_certification_starts_as_shards_over_the_slots_no_other_step_takes(tmp_path):
    from rsmooth.reproduce.plan import Step
    from rsmooth.reproduce.run import Task, _Pool

    cert, train = (Step(kind, f"{kind} {k}", [], tmp_path / f"{kind}{k}.tsv", [], 3) for k, kind in
                   ((0, "certify"), (1, "train")))
    pool = _Pool([cert, train], 4, tmp_path, print)
    assert pool._shard_count(Task(cert), others_ready=1) == 3  # 4 slots, the train step takes one
    assert pool._shard_count(Task(cert), others_ready=3) == 0  # one slot left: one process
    assert pool._shard_count(Task(train), others_ready=0) == 0 and pool._shard_count(Task(cert, (0, 2)), 0) == 0
    (tmp_path / "certify0.shard-1-of-5.tsv").write_text("")  # what a killed run left: its count wins
    assert pool._shard_count(Task(cert), others_ready=3) == 5


@pytest.mark.slow
def test_jobs_k_split_a_certification_running_alone_when_a_slot_idles(digits_model, tmp_path, monkeypatch):
    """One certification running alone when the other step ends is stopped and continued as
    shards, which take its rows; their merge is the one-process file."""
    from rsmooth.reproduce.run import run_steps

    monkeypatch.setenv("PYTHONPATH", SUBPROCESS_ENV["PYTHONPATH"])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # b draws 60x the samples of c, so it is still running, with examples to go, when c ends (at 15x,
    # a few seconds of work, a loaded machine once saw b nearly done when c ended: no split)
    assert main(certify_step(digits_model, tmp_path / "one" / "b.tsv", 6000).argv) == 0
    lines = []
    steps = [certify_step(digits_model, tmp_path / "b.tsv", 6000), certify_step(digits_model, tmp_path / "c.tsv", 100)]
    run_steps(steps, 2, tmp_path / "logs", log=lines.append)
    assert "   1 idle: certify b continues as 2 shards" in lines, lines
    assert [ln for ln in lines if ln.startswith("==")][2:] == [
        f"== [2/2] certify b, shard {i}/2 (log: {tmp_path}/logs/certify_b_shard_{i}-2.log)" for i in (0, 1)]
    assert any(ln.startswith("   merged 2 shards into") for ln in lines), lines
    assert columns(tmp_path / "b.tsv") == columns(tmp_path / "one" / "b.tsv")
    sessions = json.loads((tmp_path / "b.tsv.json").read_text())["sessions"]
    assert [e.get("shard") for e in sessions if "from" not in e] == [[0, 2], [1, 2]], sessions
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["b.tsv", "b.tsv.json", "c.tsv", "c.tsv.json"]


def test_shards_a_killed_reproduction_left_are_continued_with_their_count(digits_model, tmp_path):
    from rsmooth.reproduce.run import run_steps

    step = certify_step(digits_model, tmp_path / "a.tsv", 200)
    assert main([*step.argv, "--shard", "2/3"]) == 0  # what a killed --jobs 3 run left
    ran, lines = [], []
    run_steps([step], 1, tmp_path / "logs", log=lines.append, run_step=lambda argv: ran.append(argv) or main(argv))
    assert [argv[-2:] for argv in ran] == [["--shard", f"{i}/3"] for i in range(3)]
    assert lines[-2:] == [f"merged 3 shards into {tmp_path / 'a.tsv'}: 11 examples", lines[-1]]
    assert re.fullmatch(r"   certify a: done in \d+s", lines[-1])  # each step's time (issue 37)
    one = tmp_path / "one.tsv"
    assert main([*step.argv[:-1], str(one)]) == 0 and columns(tmp_path / "a.tsv") == columns(one)


# -- issue 37, item 18: a smoke table in minutes on a CPU, and what a budget costs there ------------

def test_i37_smoke_runs_every_step_at_its_least():
    """catrs:table4 at smoke: 1 epoch on 120 images evaluated on the 20 test images certified, 10
    target noises, n = n0 = 100; the model's CPU time for the whole table is minutes (18 with 2 cores
    shared at load 8-10, where it was measured)."""
    from rsmooth.reproduce.cost import estimate

    spec = get_table("catrs:table4")
    steps = plan(spec, parse_budget("smoke"), [0], Path("OUT"))
    trains = [s.settings["config"] for s in steps if s.kind == "train"]
    assert len(trains) == 21 and {(c.epochs, c.train_subset, c.eval_examples) for c in trains} == {(1, 120, 20)}
    assert [s.settings["num_samples"] for s in steps if s.kind == "targets"] == [10]
    assert {(s.settings["n"], s.settings["skip"]) for s in steps if s.kind == "certify"} == {(100, 500)}
    assert estimate(spec, parse_budget("smoke"), [0]).cpu_seconds < 20 * 60  # at the rates of 2 shared cores


def test_i37_list_and_the_run_give_the_budgets_cpu_time(tmp_path, capsys):
    """The CPU time is each step's overhead plus its passes at the measured rate, summed by hand."""
    from rsmooth.reproduce.cost import CPU_STEP_SECONDS, cpu_rate, estimate, step_passes

    spec, budget = get_table("catrs:table4"), parse_budget("smoke")
    by_hand = sum(CPU_STEP_SECONDS[kind] + passes / cpu_rate(arch, kind)
                  for _, kind, passes, arch in step_passes(plan(spec, budget, [0], Path("OUT"))))
    work = estimate(spec, budget, [0])
    assert work.cpu_seconds == pytest.approx(by_hand) and work.steps == 43
    from rsmooth.progress import format_duration
    assert main(["reproduce", "--list", "--budget", "smoke"]) == 0
    out = capsys.readouterr().out
    assert f"    at --budget smoke on a 2-core CPU: 43 steps, about {format_duration(by_hand)} one after" in out
    assert out.count("at --budget smoke on a 2-core CPU: ") == len(__import__(
        "rsmooth.reproduce", fromlist=["TABLES"]).TABLES.names())
    lines = []
    with pytest.raises(RsmoothError):  # the first step fails: the estimate came before it
        reproduce("catrs:table4", str(tmp_path / "r"), budget="smoke", methods=["gaussian"], sigmas=[0.25],
                  log=lines.append, run_step=lambda argv: 2)
    assert lines[0].startswith("catrs:table4, 1 seed(s): at --budget smoke on a 2-core CPU: 2 steps, about ")
