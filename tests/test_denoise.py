"""Denoised smoothing's pure parts: the DnCNN denoiser, the MSE and stability losses and the
frozen composition classifier(denoiser(x)) (Salman et al. 2020, arXiv 2003.01908)."""

import pytest
import torch
from torch import nn

from rsmooth.data import get_dataset
from rsmooth.errors import RsmoothError
from rsmooth.methods import METHODS
from rsmooth.methods.denoise import (PAPER_HYPERPARAMETERS, DenoisedClassifier, denoise_mse_loss,
                                     denoise_stab_loss)
from rsmooth.models import (DENOISERS, MODELS, DnCNN, count_parameters, create_denoiser,
                            create_model)
from rsmooth.smoothing import Smooth


def _reference_keys(depth):
    """The state_dict keys of microsoft/denoised-smoothing ``code/archs/dncnn.py``: conv+ReLU,
    (conv+BN+ReLU) x (depth - 2), conv; only the first conv has a bias."""
    keys = ["dncnn.0.weight", "dncnn.0.bias"]
    for i in range(depth - 2):
        conv, bn = 2 + 3 * i, 3 + 3 * i
        keys.append(f"dncnn.{conv}.weight")
        keys += [f"dncnn.{bn}.{k}" for k in
                 ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")]
    keys.append(f"dncnn.{3 * depth - 4}.weight")
    return keys


def test_dncnn_layout_matches_the_reference():
    net = DnCNN(3, depth=17, width=64)
    assert list(net.state_dict()) == _reference_keys(17)
    kinds = [type(m) for m in net.dncnn]
    assert kinds == [nn.Conv2d, nn.ReLU] + [nn.Conv2d, nn.BatchNorm2d, nn.ReLU] * 15 + [nn.Conv2d]
    bn = net.dncnn[3]
    assert (bn.eps, bn.momentum) == (1e-4, 0.95)
    assert all(m.kernel_size == (3, 3) and m.padding == (1, 1) for m in net.dncnn
               if isinstance(m, nn.Conv2d))


@pytest.mark.parametrize("name,channels,expected", [
    # first conv C*64*9 + 64 bias; 15 x (64*64*9 conv + 2*64 BN); last conv 64*C*9
    ("dncnn", 3, 3 * 64 * 9 + 64 + 15 * (64 * 64 * 9 + 128) + 64 * 3 * 9),
    ("dncnn", 1, 1 * 64 * 9 + 64 + 15 * (64 * 64 * 9 + 128) + 64 * 1 * 9),
    # depth 10, width 32: 8 middle layers
    ("dncnn_small", 1, 1 * 32 * 9 + 32 + 8 * (32 * 32 * 9 + 64) + 32 * 1 * 9),
])
def test_parameter_counts(name, channels, expected):
    assert count_parameters(create_denoiser(name, channels)) == expected
    assert {558_400: "dncnn", 556_096: "dncnn", 74_848: "dncnn_small"}[expected] == name


@pytest.mark.parametrize("shape", [(2, 3, 32, 32), (3, 1, 28, 28), (1, 1, 8, 8), (2, 3, 5, 7)])
def test_a_fresh_dncnn_is_the_identity_and_keeps_the_shape(shape):
    torch.manual_seed(0)
    net = DnCNN(shape[1], depth=5, width=16).eval()
    x = torch.rand(shape)
    assert torch.equal(net(x), x)  # the last conv starts at zero, as in the reference


def test_dncnn_returns_the_input_minus_the_noise_estimate():
    torch.manual_seed(0)
    net = DnCNN(1, depth=4, width=8).eval()
    nn.init.normal_(net.dncnn[-1].weight)
    x = torch.rand(2, 1, 9, 9)
    noise_estimate = net.dncnn(x)
    assert noise_estimate.abs().max() > 0.1
    torch.testing.assert_close(net(x), x - noise_estimate)


def test_dncnn_initialisation_is_orthogonal():
    torch.manual_seed(0)
    net = DnCNN(3, depth=4, width=16)
    w = net.dncnn[2].weight.reshape(16, -1)  # 16 x 144: orthonormal rows
    torch.testing.assert_close(w @ w.T, torch.eye(16), atol=1e-5, rtol=0)
    assert torch.equal(net.dncnn[0].bias, torch.zeros(16))


def test_denoisers_have_their_own_registry():
    assert DENOISERS.names() == ["dncnn", "dncnn_small"]
    assert not set(DENOISERS.names()) & set(MODELS.names())
    assert create_model("lenet", "mnist")(torch.rand(1, 1, 28, 28)).shape == (1, 10)
    with pytest.raises(RsmoothError, match="unknown denoiser 'unet'; choose one of: dncnn"):
        create_denoiser("unet", 3)
    with pytest.raises(RsmoothError, match="depth >= 2"):
        DnCNN(3, depth=1)


def test_the_two_denoiser_methods_are_registered():
    assert {"denoise-mse", "denoise-stab"} <= set(METHODS.names())
    assert all(getattr(METHODS.get(n), "denoiser", False) == n.startswith("denoise") for n in METHODS.names())


def test_mse_loss_against_a_float64_loop():
    g = torch.Generator().manual_seed(1)
    denoised, clean = torch.rand(4, 3, 5, 6, generator=g), torch.rand(4, 3, 5, 6, generator=g)
    per_image = [((d.double() - c.double()) ** 2).sum() / d.numel() for d, c in zip(denoised, clean)]
    expected = sum(per_image) / len(per_image)
    assert abs(denoise_mse_loss(denoised, clean).item() - expected.item()) < 1e-6


def test_stab_loss_against_a_float64_loop_with_hard_targets():
    g = torch.Generator().manual_seed(2)
    logits_denoised = torch.randn(6, 5, generator=g, requires_grad=True)
    logits_clean = torch.randn(6, 5, generator=g, requires_grad=True)
    terms = []
    for ld, lc in zip(logits_denoised.double(), logits_clean.double()):
        target = max(range(5), key=lambda k: lc[k].item())
        terms.append(torch.logsumexp(ld, 0) - ld[target])
    expected = (sum(terms) / len(terms)).item()
    loss = denoise_stab_loss(logits_denoised, logits_clean)
    assert abs(loss.item() - expected) < 1e-6
    soft = -(logits_clean.softmax(1) * logits_denoised.log_softmax(1)).sum(1).mean()
    assert abs(loss.item() - soft.item()) > 1e-3  # hard labels, not the soft prediction
    loss.backward()
    assert logits_clean.grad is None and logits_denoised.grad.abs().sum() > 0


def _classifier():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 6 * 6, 10))


def test_the_composition_keeps_the_classifier_frozen():
    classifier = _classifier()
    denoiser = DnCNN(1, depth=3, width=8)
    model = DenoisedClassifier(denoiser, classifier).train().requires_grad_(True)
    assert denoiser.training and not any(m.training for m in classifier.modules())
    assert all(p.requires_grad for p in denoiser.parameters())
    assert not any(p.requires_grad for p in classifier.parameters())
    before = {k: v.clone() for k, v in classifier.state_dict().items()}
    denoiser_before = {k: v.clone() for k, v in denoiser.state_dict().items()}

    opt = torch.optim.Adam(denoiser.parameters(), lr=1e-2)
    x = torch.rand(8, 1, 8, 8)
    logits = model(x + 0.25 * torch.randn_like(x))
    assert logits.shape == (8, 10)
    denoise_stab_loss(logits, classifier(x)).backward()
    opt.step()
    assert all(p.grad is None for p in classifier.parameters())
    after = classifier.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # weights and BN statistics
    assert any(not torch.equal(denoiser_before[k], v) for k, v in denoiser.state_dict().items())


def test_the_composition_is_classifier_of_denoiser():
    classifier, denoiser = _classifier(), DnCNN(1, depth=3, width=8)
    nn.init.normal_(denoiser.dncnn[-1].weight, std=0.1)
    model = DenoisedClassifier(denoiser, classifier).eval()
    x = torch.rand(3, 1, 8, 8)
    torch.testing.assert_close(model(x), classifier(denoiser(x)))


def test_smoothing_certifies_the_composition():
    """Cohen's CERTIFY runs on DenoisedClassifier unchanged: with a fresh (identity) DnCNN it
    gives the classifier's own certificate for the same noise, and leaves the modes as found."""
    classifier = _classifier().eval()
    with torch.no_grad():
        classifier[-1].bias[4] += 0.45  # class 4 wins about 3/4 of the votes at sigma 1
    model = DenoisedClassifier(DnCNN(1, depth=3, width=8), classifier).train()
    x = torch.rand(1, 8, 8, generator=torch.Generator().manual_seed(3))
    certs = [Smooth(m, 10, 1.0).certify(x, 20, 400, 0.001, 100, torch.Generator().manual_seed(0))
             for m in (model, classifier)]
    assert certs[0] == certs[1] and certs[0][0] == 4 and 0.5 < certs[0][1] < 1.5
    assert model.denoiser.training and not classifier.training


def test_the_hyperparameter_table_is_complete():
    keys = {"denoiser", "init", "optimizer", "lr", "weight_decay", "batch_size", "epochs",
            "lr_step", "lr_gamma"}
    for objective, by_dataset in PAPER_HYPERPARAMETERS.items():
        for dataset, hp in by_dataset.items():
            assert set(hp) == keys and hp["denoiser"] in DENOISERS, (objective, dataset)
    assert PAPER_HYPERPARAMETERS["denoise-stab"]["cifar10"]["init"] == "denoise-mse"


@pytest.mark.slow
def test_an_mse_denoiser_learns_to_denoise_digits():
    """A few hundred Adam steps on the 8x8 digits at sigma 0.5 bring the held-out MSE of
    D(x + delta) far below that of the noisy input (sigma^2 = 0.25)."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    sigma = 0.5
    train, test = get_dataset("digits", "train"), get_dataset("digits", "test")
    xt, _ = test.get_batch(torch.arange(len(test)))
    noisy_test = xt + sigma * torch.randn(xt.shape, generator=g)
    denoiser = DnCNN(1, depth=5, width=16)
    opt = torch.optim.Adam(denoiser.parameters(), lr=1e-3)
    for _ in range(300):
        x, _ = train.get_batch(torch.randint(len(train), (64,), generator=g))
        loss = denoise_mse_loss(denoiser(x + sigma * torch.randn(x.shape, generator=g)), x)
        opt.zero_grad()
        loss.backward()
        opt.step()
    denoiser.eval()
    with torch.no_grad():
        baseline = denoise_mse_loss(noisy_test, xt).item()
        denoised = denoise_mse_loss(denoiser(noisy_test), xt).item()
    assert abs(baseline - sigma ** 2) < 0.01
    assert denoised < 0.25 * baseline, (denoised, baseline)
