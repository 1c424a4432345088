"""``rsmooth reproduce carlini:imagenet|carlini:cifar10``: Carlini et al. 2023 ((Certified!!)
Adversarial Robustness for Free!, arXiv 2206.10550) as the authors ran it: released models, no
training, their README's protocol, their pipeline's flags; the published headline checked against
the paper's words."""
import re
import shlex

import pytest

from rsmooth.cli import main
from rsmooth.reproduce import get_table, list_tables, reproduce
from rsmooth.reproduce.released import PUBLISHED

# ethz-spylab/diffusion_denoised_smoothing README.md, "Evaluation" (alpha: certify.py's default 0.001)
README = {"cifar10": "python cifar10/certify.py --sigma 1.00 --skip 1 --N0 100 --N 100000 --batch_size 200",
          "imagenet": "python imagenet/certify.py --sigma 1.00 --skip 50 --N0 100 --N 10000 --batch_size 200"}
# arXiv 2206.10550, abstract
ABSTRACT = ("This allows us to certify 71% accuracy on ImageNet under adversarial perturbations constrained to be "
            "within an l2 norm of eps = 0.5")


def test_list_shows_the_released_tables():
    text = list_tables("paper")
    for table in ("carlini:imagenet", "carlini:cifar10"):
        assert f"{table}: Carlini, Tramer, Dvijotham, Rice, Sun, Kolter 2023" in text
    assert "certifies 3 released models at sigma 0.25, 0.5, 1 (no training" in text


@pytest.mark.parametrize("table, dataset", [("carlini:imagenet", "imagenet"), ("carlini:cifar10", "cifar10")])
def test_print_commands_are_the_authors_protocol_and_parse(tmp_path, table, dataset):
    out = reproduce(table, str(tmp_path / "r"), budget="paper", print_commands=True, log=lambda s: None)
    lines = [ln for ln in out.splitlines() if ln.startswith("rsmooth ")]
    assert len(lines) == 3 and "stage 4 (certify): 3 independent command(s)" in out
    readme = dict(zip(*[iter(shlex.split(README[dataset])[2:])] * 2))
    for line, sigma in zip(lines, ("0.25", "0.5", "1")):
        argv = shlex.split(line)[1:]
        flags = dict(zip(argv[1::2], argv[2::2]))
        assert (flags["--n0"], flags["--n"], flags["--skip"], flags["--alpha"]) == (
            readme["--N0"], readme["--N"], readme["--skip"], "0.001")
        assert flags["--sigma"] == sigma and flags["--dataset"] == dataset
        assert flags["--classifier-input"] == f"size={512 if dataset == 'imagenet' else 224},mode=bicubic,mean=0.5,std=0.5"
        assert str(tmp_path / "r" / "weights") in flags["--checkpoint"] and "--max" not in flags
        from rsmooth.cli import build_parser

        args = build_parser().parse_args(argv)  # every flag exists, with the defaults the authors' choices
        assert (args.diffusion_rounding, args.diffusion_noise, args.diffusion_steps) == ("up", "step", 1)


def test_collect_without_runs_is_an_empty_table(tmp_path):
    text = reproduce("carlini:cifar10", str(tmp_path / "r"), budget="paper", collect=True, log=lambda s: None)
    assert "Diffusion denoised smoothing" in text


def test_published_cells_are_the_papers_words():
    assert len(PUBLISHED) == 1
    dataset, radius, accuracy, where, words = PUBLISHED[0]
    assert words == ABSTRACT and where == "arXiv 2206.10550, abstract"
    found = re.search(r"certify (\d+)% accuracy on (\w+) .* norm of eps = ([\d.]+)", words)
    assert (float(found[1]), found[2].lower(), float(found[3])) == (accuracy, dataset, radius)
    assert "71% at radius 0.5" in get_table("carlini:imagenet").title
    assert "not transcribed" in get_table("carlini:cifar10").title


def test_a_released_row_without_its_files_fails_on_the_file(tmp_path, capsys):
    """Run here, the step fails on the missing weights, naming them (nothing is downloaded)."""
    out = reproduce("carlini:cifar10", str(tmp_path / "r"), budget="paper", print_commands=True, log=lambda s: None)
    argv = shlex.split([ln for ln in out.splitlines() if ln.startswith("rsmooth ")][0])[1:]
    assert main(argv) != 0
    assert "vit-base-patch16-224-in21k-finetuned-cifar10" in capsys.readouterr().err
