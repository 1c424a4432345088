"""Smooth's fast sampling modes (channels-last, bfloat16, torch.compile) against float32.

Every mode draws the same noise from a generator, so modes must agree exactly on a model
whose votes do not depend on the arithmetic, and compiled mode must never recompile for a
shorter last batch.
"""
import pytest
import torch

from rsmooth.smoothing import Smooth
from rsmooth.smoothing.smooth import DEFAULT_BATCH_SIZE


class Threshold(torch.nn.Module):
    """Class 1 iff pixel (0, 0, 0) exceeds 0.5, through a 1x1 conv so that the memory format
    matters; exact in float32 (a comparison of the noisy pixel with 0.5)."""

    def __init__(self, channels=3):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, 1, 1, bias=False)
        with torch.no_grad():
            self.conv.weight.zero_()
            self.conv.weight[0, 0] = 1.0

    def forward(self, x):
        s = self.conv(x)[:, 0, 0, 0] - 0.5
        return torch.stack([-s, s], 1)


@pytest.fixture(scope="module")
def compiled():
    """One compiled Smooth shared by the tests below: each graph compiles once (seconds)."""
    return Smooth(Threshold(), 2, 0.25, channels_last=True, compile=True)


def _counts(smooth, xs, num, batch_size, seed=0):
    return smooth.count_votes(xs, num, batch_size, generator=torch.Generator().manual_seed(seed))


def test_default_batch_size_is_a_positive_int():
    assert isinstance(DEFAULT_BATCH_SIZE, int) and DEFAULT_BATCH_SIZE >= 1


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["channels_last", "compile"])
def test_fast_modes_give_identical_counts(mode, compiled):
    """Same generator => same noisy inputs in every mode, including padded last batches:
    300 copies = 4 x 64 + 44 (one image per pass); 20 copies of 5 images, 3 per pass."""
    xs = torch.rand(5, 3, 4, 4, generator=torch.Generator().manual_seed(1))
    fast = compiled if mode == "compile" else Smooth(Threshold(), 2, 0.25, channels_last=True)
    for num in (300, 20):
        expected = _counts(Smooth(Threshold(), 2, 0.25), xs, num, 64)
        assert torch.equal(_counts(fast, xs, num, 64), expected)
        assert bool((expected.sum(1) == num).all()) and bool((expected > 0).all())


def test_bf16_draws_the_same_noise():
    """bfloat16 only rounds the noisy input: the rare flips are points within bfloat16's
    spacing (2^-8 near 0.5) of the threshold."""
    xs = torch.full((1, 3, 4, 4), 0.5)
    c32 = _counts(Smooth(Threshold(), 2, 0.25), xs, 2000, 256)
    c16 = _counts(Smooth(Threshold(), 2, 0.25, precision="bf16", channels_last=True), xs, 2000, 256)
    assert abs(int(c16[0, 1]) - int(c32[0, 1])) <= 20


@pytest.mark.slow
def test_compiled_certify_compiles_full_passes_only_and_is_deterministic(compiled):
    x = torch.full((3, 4, 4), 0.6)

    def certify(smooth, n0, n, seed):
        return smooth.certify(x, n0, n, 0.001, 64, generator=torch.Generator().manual_seed(seed))

    first = certify(compiled, 100, 1000, 3)
    again = certify(compiled, 100, 1000, 3)
    certify(compiled, 37, 555, 4)  # other last-batch sizes
    assert first == again == certify(Smooth(Threshold(), 2, 0.25), 100, 1000, 3)
    assert first[0] == 1
    # one graph per full pass shape (64 noisy inputs; count_votes' 3 images x 20 copies above),
    # never one for a shorter last pass (100, 1000 % 64, 37, 555 % 64 copies)
    assert {tuple(key[0][:2]) for key in compiled._votes.graphs} <= {(64, 3), (60, 3)}
