"""Issue 39 item 2: the sequential modes split alpha between the anytime bound and Clopper-Pearson
over all n_max samples at the cap; exact soundness over the binomial lattice, the sidecar and
resuming files made before the split with their rule."""
import json

import numpy as np
import pytest
import torch
from scipy.stats import beta as beta_dist, binom

from rsmooth import RsmoothError
from rsmooth.cli.flags import ALPHA_SHARE_TEXT
from rsmooth.engine import CertifyJob, run_certification
from rsmooth.metrics import read_certify_tsv
from rsmooth.models import create_model
from rsmooth.smoothing.procedures import Sequential
from rsmooth.smoothing.sequential import (ALPHA_SHARE, FUTILITY, LEGACY_SHARE, Look, anytime_lower, check_points,
                                          settle_looks, split_levels)

QUIET = dict(progress=False, log=lambda s: None)


def _lower_at_every_look(n_max, alpha, share):
    """[looks] arrays: the lower bound settle_looks gives for every vote count k at each look (no earlier
    looks: the running maximum is the union of these events over the path)."""
    out = []
    for t in check_points(n_max):
        looks = [Look(t, k, 0.0, 1.0, alpha, n_max, FUTILITY, share) for k in range(t + 1)]
        out.append((t, np.array([b.lower for b in settle_looks(looks)])))
    return out


@pytest.mark.parametrize("alpha,share", [(0.1, 1.0), (0.1, 0.5), (0.1, 0.1), (0.01, 0.1)])
def test_exact_soundness_over_the_binomial_lattice(alpha, share):
    """P(the lower bound exceeds p_A at some look up to n_max = 300), the worst stopping rule, summed
    exactly over the binomial lattice (the votes at each look, absorbed once a bound passes p_A) for
    400 values of p_A in [0.5, 0.998]: at most alpha.  Measured worst P(false certificate) / alpha:
    0.708 (alpha 0.1, share 1: the anytime bound alone), 0.722 (share 0.5), 0.925 (share 0.1);
    0.923 (alpha 0.01, share 0.1): the Clopper-Pearson part at the cap is nearly exact."""
    n_max = 300
    bounds = _lower_at_every_look(n_max, alpha, share)
    worst = 0.0
    for p in np.linspace(0.5, 0.998, 400):
        alive, false, last = np.array([1.0]), 0.0, 0
        for t, lower in bounds:
            alive = np.convolve(alive, binom.pmf(np.arange(t - last + 1), t - last, p))
            last = t
            passed = lower > p
            false += alive[passed].sum()
            alive[passed] = 0.0
        worst = max(worst, false / alpha)
    assert worst <= 1.0, worst
    assert worst > 0.3  # not vacuous
    print(f"alpha {alpha}, share {share}: worst P(false certificate) / alpha = {worst:.3f}")


def test_the_cap_uses_clopper_pearson_at_the_rest_of_alpha():
    alpha, share, n_max = 0.001, 0.1, 1000
    any_level, cap_level = split_levels(alpha, share, False)
    assert (any_level, cap_level) == pytest.approx((1e-4, 9e-4)) and split_levels(alpha, 1.0, True) == (alpha / 2, 0)
    (b,) = settle_looks([Look(n_max, 900, 0.0, 1.0, alpha, n_max, FUTILITY, share)])
    assert b.lower == pytest.approx(beta_dist.ppf(cap_level, 900, 101)) and b.projected == b.lower
    (early,) = settle_looks([Look(500, 450, 0.0, 1.0, alpha, n_max, FUTILITY, share)])
    assert early.lower == pytest.approx(float(anytime_lower(450, 500, any_level)))
    (old,) = settle_looks([Look(n_max, 900, 0.0, 1.0, alpha, n_max, FUTILITY)])  # share 1: the anytime bound
    assert old.lower == pytest.approx(float(anytime_lower(900, n_max, alpha))) and old.lower < b.lower


def test_defaults_and_errors(tmp_path):
    assert ALPHA_SHARE_TEXT == f"{ALPHA_SHARE:g}" and LEGACY_SHARE == 1.0
    assert Sequential(10, 0.01, 100, FUTILITY, (0.5,)).alpha_share == ALPHA_SHARE
    with pytest.raises(RsmoothError, match=r"alpha_share must be in \(0, 1\]"):
        Sequential(10, 0.01, 100, FUTILITY, (0.5,), alpha_share=0)
    with pytest.raises(RsmoothError, match="alpha_share goes with the sequential modes"):
        CertifyJob("ck", str(tmp_path / "c.tsv"), alpha_share=0.5)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("model") / "model.pt"
    torch.save(create_model("digits_cnn", "digits").state_dict(), path)
    return path


def test_files_made_before_the_split_resume_with_their_rule(ckpt, tmp_path):
    kw = dict(dataset="digits", sigma=0.25, model_options={"arch": "digits_cnn"}, mode="sequential",
              radii=[0.0, 0.25], n_max=400, n0=20, max=4, skip=100, batch_size=400, **QUIET)
    old = tmp_path / "old.tsv"
    run_certification(str(ckpt), str(old), alpha_share=1.0, **kw)
    meta = json.loads((tmp_path / "old.tsv.json").read_text())
    assert meta["alpha_share"] == 1.0
    lines = old.read_text().splitlines(keepends=True)
    part = tmp_path / "part.tsv"  # an earlier version's file, killed after 2 examples
    part.write_text("".join(lines[:3]))
    seq = (tmp_path / "old.tsv.seq").read_text().splitlines(keepends=True)
    (tmp_path / "part.tsv.seq").write_text("".join(seq[:3]))
    del meta["alpha_share"]
    (tmp_path / "part.tsv.json").write_text(json.dumps({**meta, "complete": False}))
    run_certification(str(ckpt), str(part), **kw)  # no alpha_share: the file's rule
    assert json.loads((tmp_path / "part.tsv.json").read_text())["alpha_share"] == LEGACY_SHARE
    a, b = read_certify_tsv(old), read_certify_tsv(part)
    assert np.array_equal(a.radius, b.radius) and (tmp_path / "part.tsv.seq").read_text() == "".join(seq)
    with pytest.raises(RsmoothError, match=f"holds a run with alpha_share=1.0, not {ALPHA_SHARE!r}"):
        run_certification(str(ckpt), str(part), alpha_share=ALPHA_SHARE, overwrite=False, **kw)
    new = tmp_path / "new.tsv"
    run_certification(str(ckpt), str(new), **kw)
    assert json.loads((tmp_path / "new.tsv.json").read_text())["alpha_share"] == ALPHA_SHARE
