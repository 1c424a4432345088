"""The alpha split of the sequential modes (issue 39 item 2), measured on simulated votes.

For each ``alpha_share`` s (s = 1: the anytime bound alone, the rule before the split), this runs
rsmooth's own sequence (``sequence_steps`` driven round by round, every trial's looks settled in
one vectorised ``settle_looks`` call, as the packer does) and reports:

1. the estimation samples after which the lower bound certifies r = 3 sigma (threshold Phi(3))
   when every vote is for c_A (what the anytime share costs in early decisions);
2. for thresholds Phi(r / sigma), r / sigma in {0, 0.5, 1, 2}, and p_A where fixed CERTIFY with
   n = n_max certifies with probability 0.9 (exact binomial sums; Cohen, Rosenfeld, Kolter 2019,
   arXiv 1902.02918): the share of trials fixed CERTIFY certifies on the same votes that the
   sequence gives up (its final decision is not "robust"), the sequence's power (P(robust)) and
   its mean estimation samples.

Usage::

    python bench/alpha_split.py                        # n_max 100,000, alpha 0.001, beta 0.05
    python bench/alpha_split.py --trials 500 --shares 1 0.1
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.optimize import brentq
from scipy.stats import beta as beta_dist
from scipy.stats import binom, norm

from rsmooth.smoothing.sequential import (Decision, anytime_lower, check_points, decide, sequence_steps,
                                          settle_looks, split_levels)


def clopper_pearson_lower(k, n, alpha):
    return np.where(k > 0, beta_dist.ppf(alpha, np.maximum(k, 1), n - k + 1), 0.0)


def fixed_certifies(p, n, alpha, th):
    """Exact P(Clopper-Pearson lower bound of Binomial(n, p) votes > th)."""
    ks = np.arange(int(th * n), n + 1)
    k_min = ks[np.argmax(clopper_pearson_lower(ks, n, alpha) > th)]
    return float(binom.sf(k_min - 1, n, p))


def all_votes_samples(n_max, alpha, share, th):
    """The first look at which every vote for c_A certifies threshold ``th`` (anytime share only)."""
    level = split_levels(alpha, share, False)[0]
    for t in check_points(n_max):
        if anytime_lower(t, t, level) > th:
            return t
    return None


def run(p, n_max, alpha, beta, th, trials, share, rng):
    """(final decision per trial, estimation samples per trial, fixed CERTIFY certifies on the same votes)."""
    looks = np.array(check_points(n_max))
    votes = rng.binomial(np.diff(looks, prepend=0), p, size=(trials, len(looks)))
    done = lambda b: decide(b, [th])[0] is not Decision.OPEN  # noqa: E731
    steps = [sequence_steps(alpha, n_max, done, beta, alpha_share=share) for _ in range(trials)]
    at = np.zeros(trials, dtype=int)
    requests, out = {i: next(s) for i, s in enumerate(steps)}, {}
    while requests:
        asked = {}
        for i in requests:
            asked[i] = steps[i].send(int(votes[i, at[i]]))
            at[i] += 1
        requests = {}
        for i, bounds in zip(asked, settle_looks(list(asked.values()))):
            try:
                requests[i] = steps[i].send(bounds)
            except StopIteration as stop:
                out[i] = stop.value
    final = [out[i] for i in range(trials)]
    decision = np.array([decide(b, [th])[0].value for b in final])
    fixed = clopper_pearson_lower(votes.sum(1), n_max, alpha) > th
    return decision, np.array([b.n for b in final]), fixed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-max", type=int, default=100_000)
    ap.add_argument("--alpha", type=float, default=0.001)
    ap.add_argument("--futility", type=float, default=0.05)
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--shares", type=float, nargs="+", default=[1.0, 0.5, 0.25, 0.1, 0.05])
    ap.add_argument("--zs", type=float, nargs="+", default=[0.0, 0.5, 1.0, 2.0])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    n, alpha, beta = args.n_max, args.alpha, args.futility
    print(f"n_max = {n:,}, alpha = {alpha:g}, futility beta = {beta:g}, {args.trials:,} trials per row\n")
    print("every vote for c_A: estimation samples until r = 3 sigma is certified\n")
    print("| alpha_share | samples | vs share 1 |\n| ---: | ---: | ---: |")
    base = all_votes_samples(n, alpha, 1.0, norm.cdf(3))
    for s in args.shares:
        t = all_votes_samples(n, alpha, s, norm.cdf(3))
        print(f"| {s:g} | {t:,} | {t / base:.2f}x |")
    print("\np_A where fixed CERTIFY (n = n_max) certifies with probability 0.9; the same votes for both\n")
    print("| r / sigma | alpha_share | fixed certifies | sequence certifies | power vs fixed | gives up, given fixed "
          "certifies | mean samples | seconds |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for z in args.zs:
        th = float(norm.cdf(z))
        p = brentq(lambda x: fixed_certifies(x, n, alpha, th) - 0.9, th, min(1.0, th + 0.05), xtol=1e-12)
        for s in args.shares:
            t0 = time.perf_counter()
            decision, used, fixed = run(p, n, alpha, beta, th, args.trials, s, np.random.default_rng([args.seed, 7]))
            robust = decision == "robust"
            print(f"| {z:g} | {s:g} | {fixed.mean():.3f} | {robust.mean():.3f} | {robust.mean() / fixed.mean():.3f} "
                  f"| {(~robust[fixed]).mean():.3f} | {used.mean():,.0f} | {time.perf_counter() - t0:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
