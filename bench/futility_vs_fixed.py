"""How often ``certify --sequential`` gives up a radius that fixed CERTIFY with n = n_max certifies.

The sequence's lower bound (``rsmooth.smoothing.sequential.anytime_lower``) holds at every sample
size at once, so at a given n it is wider than Clopper-Pearson's (one-sided, level alpha; Cohen,
Rosenfeld, Kolter 2019, arXiv 1902.02918).  Futility stopping (level beta) gives up a radius when
the upper bound falls to the threshold or when even the projected lower bound at n_max stays at
or below it; the chance that it gives up a radius the *sequence's own* bound at n_max would
certify is at most 2 beta.  Against fixed CERTIFY the loss is larger, because Clopper-Pearson
certifies p_A closer to the threshold.  This script measures both, independently of the code it
checks except for the bound functions themselves:

1. width ratio: (p_hat - LB_anytime) / (p_hat - LB_CP) at n = n_max, alpha, for several p_hat
   (scipy's beta quantile gives LB_CP);
2. for thresholds Phi(r / sigma) and p_A "just above" them, defined as the p_A at which fixed
   CERTIFY with n_max samples certifies with probability q (exact binomial sums; q = 0.5, 0.7,
   0.9): the probability that the sequence ends without "robust" (given up: "no", "cap", or not
   certified at n_max), overall and given that fixed CERTIFY on the same votes certifies (the
   sequence reads a prefix of the same vote stream), and how often it stopped early although its
   own bound at n_max would have certified (<= 2 beta).  "of which before n_max": given up by
   futility stopping (the rest ran to n_max and its bound stayed at or below the threshold).

The sequence is re-implemented here vectorised over trials (the looks of ``check_points``, the
running min/max, the projection with the upper beta-quantile of the votes to come); its decisions
are checked against ``run_sequence`` itself on the first trials.

Usage::

    python bench/futility_vs_fixed.py                 # n_max 100,000, alpha 0.001, beta 0.05
    python bench/futility_vs_fixed.py --trials 20000 --seed 1
"""
from __future__ import annotations

import argparse

import numpy as np
from scipy.optimize import brentq
from scipy.stats import beta as beta_dist
from scipy.stats import binom, norm

from rsmooth.smoothing.sequential import (Decision, anytime_lower, anytime_upper, check_points, decide,
                                          log_lower_martingale, run_sequence)


def clopper_pearson_lower(k, n, alpha):
    """One-sided level-alpha Clopper-Pearson lower bound (0 at k = 0)."""
    return np.where(k > 0, beta_dist.ppf(alpha, np.maximum(k, 1), n - k + 1), 0.0)


def fixed_certifies(p, n, alpha, th):
    """Exact P(Clopper-Pearson lower bound of Binomial(n, p) votes > th)."""
    ks = np.arange(int(th * n), n + 1)
    k_min = ks[np.argmax(clopper_pearson_lower(ks, n, alpha) > th)]
    return float(binom.sf(k_min - 1, n, p))


def sequences(p, n_max, alpha, beta, th, trials, rng):
    """(first decision per trial, the look it came at, votes at each look [trials x looks], looks,
    whether the lower bound passed th at some look up to n_max: what the sequence run to n_max
    certifies, from the test's martingale at th, as LB_t > th exactly when th is rejected)."""
    looks = np.array(check_points(n_max))
    votes = np.cumsum(rng.binomial(np.diff(looks, prepend=0), p, size=(trials, len(looks))), axis=1)
    decision = np.full(trials, "open", dtype=object)
    at = np.full(trials, len(looks) - 1)
    lower, upper, full = np.zeros(trials), np.ones(trials), np.zeros(trials, dtype=bool)
    for j, t in enumerate(looks):
        full |= log_lower_martingale(votes[:, j], t, th) >= np.log(1 / alpha)
        o = np.flatnonzero(decision == "open")  # the bounds of the sequences still running
        n_a = votes[o, j]
        upper[o] = np.minimum(upper[o], anytime_upper(n_a, t, beta))
        future = binom.ppf(1 - beta, n_max - t, upper[o]) if t < n_max else 0.0
        lower[o] = np.maximum(lower[o], anytime_lower(n_a, t, alpha))
        projected = np.maximum(lower[o], anytime_lower(n_a + future, n_max, alpha))
        now = np.where(lower[o] > th, "robust", np.where(upper[o] <= th, "no",
                                                         np.where(projected <= th, "cap", "open")))
        decision[o], at[o] = now, np.where(now != "open", j, at[o])
    return decision, at, votes, looks, full


def check_against_run_sequence(votes, looks, decision, alpha, beta, th, n_max, count=5):
    """The vectorised sequence decides as rsmooth's run_sequence on the same votes."""
    for i in range(min(count, len(votes))):
        increments = iter(np.diff(votes[i], prepend=0))
        bounds = run_sequence(lambda m: next(increments), alpha, n_max,
                              lambda b: decide(b, [th])[0] is not Decision.OPEN, beta)
        assert decide(bounds, [th])[0].value == decision[i], (i, decide(bounds, [th]), decision[i])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-max", type=int, default=100_000)
    ap.add_argument("--alpha", type=float, default=0.001)
    ap.add_argument("--futility", type=float, default=0.05)
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    n, alpha, beta = args.n_max, args.alpha, args.futility
    rng = np.random.default_rng(args.seed)

    print(f"n = {n:,}, alpha = {alpha:g}, futility beta = {beta:g}, {args.trials:,} trials per row\n")
    print("| p_hat | p_hat - LB_CP | p_hat - LB_anytime | ratio |\n| ---: | ---: | ---: | ---: |")
    for p_hat in (0.55, 0.6915, 0.8413, 0.9, 0.95, 0.9772, 0.99, 0.999):
        k = round(p_hat * n)
        cp, seq = float(clopper_pearson_lower(k, n, alpha)), float(anytime_lower(k, n, alpha))
        print(f"| {k / n:.4f} | {k / n - cp:.5f} | {k / n - seq:.5f} | {(k / n - seq) / (k / n - cp):.3f} |")

    print("\np_A: where fixed CERTIFY (n = n_max) certifies with probability q.  Sequence given up: "
          "its final decision is not robust (no, cap, or not certified at n_max).\n")
    print("| r / sigma | threshold | q | p_A - threshold | fixed certifies (sim.) | sequence gives up "
          "| gives up, given fixed certifies | of which before n_max | stopped early, own bound at n_max certifies |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for z in (0.0, 0.5, 1.0, 2.0):
        th = float(norm.cdf(z))
        for q in (0.5, 0.7, 0.9, 0.99):
            p = brentq(lambda x: fixed_certifies(x, n, alpha, th) - q, th, min(1.0, th + 0.05), xtol=1e-12)
            decision, at, votes, looks, full = sequences(p, n, alpha, beta, th, args.trials, rng)
            check_against_run_sequence(votes, looks, decision, alpha, beta, th, n)
            fixed = clopper_pearson_lower(votes[:, -1], n, alpha) > th
            given_up = decision != "robust"
            own = full & given_up & (looks[at] < n)
            early = given_up & (looks[at] < n)
            print(f"| {z:g} | {th:.4f} | {q:g} | {p - th:.5f} | {fixed.mean():.3f} | {given_up.mean():.3f} "
                  f"| {given_up[fixed].mean():.3f} | {early[fixed].mean():.3f} | {own.mean():.3f} |")


if __name__ == "__main__":
    main()
