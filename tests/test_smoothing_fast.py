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


FAST_MODES = [dict(channels_last=True), dict(compile=True), dict(channels_last=True, compile=True)]


def _counts(smooth, xs, num, batch_size, seed=0):
    return smooth.count_votes(xs, num, batch_size, generator=torch.Generator().manual_seed(seed))


def test_default_batch_size_is_a_positive_int():
    assert isinstance(DEFAULT_BATCH_SIZE, int) and DEFAULT_BATCH_SIZE >= 1


@pytest.mark.parametrize("opts", FAST_MODES, ids=str)
@pytest.mark.parametrize("num,batch_size", [(300, 64), (20, 64)])  # one image / several per pass
def test_fast_modes_give_identical_counts(opts, num, batch_size):
    """Same generator => same noisy inputs in every mode, including padded last batches
    (300 = 4 x 64 + 44; 5 images of 20 copies at 3 images per pass)."""
    xs = torch.rand(5, 3, 4, 4, generator=torch.Generator().manual_seed(1))
    model = Threshold()
    expected = _counts(Smooth(model, 2, 0.25), xs, num, batch_size)
    assert torch.equal(_counts(Smooth(model, 2, 0.25, **opts), xs, num, batch_size), expected)
    assert bool((expected.sum(1) == num).all()) and bool((expected > 0).all())


def test_bf16_draws_the_same_noise():
    """bfloat16 only rounds the noisy input: the rare flips are points within bfloat16's
    spacing (2^-8 near 0.5) of the threshold."""
    xs = torch.full((1, 3, 4, 4), 0.5)
    model = Threshold()
    c32 = _counts(Smooth(model, 2, 0.25), xs, 2000, 256)
    c16 = _counts(Smooth(model, 2, 0.25, precision="bf16", channels_last=True), xs, 2000, 256)
    assert abs(int(c16[0, 1]) - int(c32[0, 1])) <= 20


def test_compiled_certify_never_recompiles_and_is_deterministic():
    import torch._dynamo

    model = Threshold()
    s = Smooth(model, 2, 0.25, compile=True)
    x = torch.full((3, 4, 4), 0.6)
    first = s.certify(x, 10, 1000, 0.001, 128, generator=torch.Generator().manual_seed(3))  # compiles
    with torch._dynamo.config.patch(error_on_recompile=True):
        again = s.certify(x, 10, 1000, 0.001, 128, generator=torch.Generator().manual_seed(3))
        s.certify(x, 37, 555, 0.001, 128)  # other tail sizes: same graph
    assert first == again == Smooth(model, 2, 0.25).certify(x, 10, 1000, 0.001, 128,
                                                           generator=torch.Generator().manual_seed(3))
    assert first[0] == 1
