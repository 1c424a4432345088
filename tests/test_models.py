"""Tests for rsmooth.models: shapes, parameter counts against formulas, normalisation,
public checkpoint layouts and formats, dtype / memory-format support."""
import pytest
import torch
from torch import nn

from rsmooth.errors import RsmoothError
from rsmooth.models import (
    MODELS,
    Normalize,
    canonical_state_dict,
    count_parameters,
    create_model,
    default_arch,
    load_weights,
    strip_wrapper_prefixes,
)

DEFAULT_DATASET = {"lenet": "mnist", "digits_cnn": "digits", "resnet50": "imagenet"}
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2023, 0.1994, 0.2010)




@pytest.fixture(scope="module")
def resnet50():
    """One ImageNet ResNet-50 for the whole module (building it costs about a second)."""
    return create_model("resnet50", "imagenet").eval()


def _dataset(arch):
    return DEFAULT_DATASET.get(arch, "cifar10")


def _input_shape(dataset):
    return {"digits": (1, 8, 8), "mnist": (1, 28, 28), "fashion-mnist": (1, 28, 28),
            "cifar10": (3, 32, 32)}[dataset]


def _randomise(model, seed=0):
    """Random weights AND BN statistics, so a load that drops anything shows up."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if name.startswith("0.") or not t.is_floating_point():
                continue
            t.copy_(torch.rand(t.shape, generator=g) + 0.5 if "running_var" in name
                    else torch.randn(t.shape, generator=g) * 0.1)
    return model


# ---------------------------------------------------------------- registry and factory


def test_registry_holds_the_field_architectures():
    assert set(MODELS.names()) == {"lenet", "digits_cnn", "cifar_resnet20", "cifar_resnet110",
                                   "densenet40", "cifar_densenet40", "resnet50"}


@pytest.mark.parametrize("dataset, arch", [
    ("digits", "digits_cnn"), ("mnist", "lenet"), ("fashion-mnist", "lenet"),
    ("cifar10", "cifar_resnet110"), ("cifar100", "cifar_resnet110"), ("imagenet", "resnet50"),
])
def test_default_arch(dataset, arch):
    assert default_arch(dataset) == arch


@pytest.mark.parametrize("arch", [a for a in MODELS.names() if a != "resnet50"])
def test_forward_shape(arch):
    dataset = _dataset(arch)
    model = create_model(arch, dataset).eval()
    assert isinstance(model, nn.Sequential) and isinstance(model[0], Normalize)
    assert model.arch == arch and model.dataset == dataset
    with torch.no_grad():
        out = model(torch.rand(2, *_input_shape(dataset)))
    assert out.shape == (2, 10) and torch.isfinite(out).all()


def test_resnet50_forward_small_image(resnet50):
    with torch.no_grad():
        out = resnet50(torch.rand(1, 3, 64, 64))
    assert out.shape == (1, 1000) and torch.isfinite(out).all()


@pytest.mark.parametrize("arch", [a for a in MODELS.names() if a != "resnet50"])
def test_num_classes_override(arch):
    model = create_model(arch, _dataset(arch), num_classes=7)
    last = [m for m in model.modules() if isinstance(m, nn.Linear)][-1]
    assert last.out_features == 7


def test_cifar100_has_100_classes():
    model = create_model("cifar_resnet20", "cifar100").eval()
    with torch.no_grad():
        assert model(torch.rand(1, 3, 32, 32)).shape == (1, 100)


@pytest.mark.parametrize("arch, dataset", [
    ("lenet", "cifar10"), ("cifar_resnet20", "mnist"), ("digits_cnn", "mnist"),
    ("cifar_resnet110", "imagenet"), ("resnet50", "digits"), ("densenet40", "fashion-mnist"),
])
def test_incompatible_arch_and_dataset(arch, dataset):
    with pytest.raises(RsmoothError, match=f"{arch!r} needs inputs of shape") as e:
        create_model(arch, dataset)
    assert default_arch(dataset) in str(e.value)


def test_unknown_names_and_bad_num_classes():
    with pytest.raises(RsmoothError, match="unknown dataset 'svhn'.*cifar10.*mnist"):
        create_model("lenet", "svhn")
    with pytest.raises(RsmoothError, match="unknown dataset"):
        default_arch("svhn")
    with pytest.raises(RsmoothError, match="unknown model 'vgg16'.*cifar_resnet110"):
        create_model("vgg16", "cifar10")
    with pytest.raises(RsmoothError, match="num_classes"):
        create_model("lenet", "mnist", num_classes=1)


# ---------------------------------------------------------------- parameter counts


def _bn(c):
    return 2 * c


def _cifar_resnet_params(depth, k=10):
    """He et al. 2016 BasicBlock ResNet with 1x1-conv+BN projection shortcuts."""
    n = (depth - 2) // 6
    total = 3 * 16 * 9 + _bn(16)
    cin = 16
    for c in (16, 32, 64):
        for i in range(n):
            total += cin * c * 9 + _bn(c) + c * c * 9 + _bn(c)
            if cin != c:
                total += cin * c + _bn(c)
            cin = c
    return total + 64 * k + k


def _densenet_params(k=10):
    """Huang et al. 2017 DenseNet L=40, k=12: stem 16, 3 x 12 BN-ReLU-conv3x3, transitions."""
    total, c = 3 * 16 * 9, 16
    for b in range(3):
        for _ in range(12):
            total += _bn(c) + c * 12 * 9
            c += 12
        if b < 2:
            total += _bn(c) + c * c
    return total + _bn(c) + c * k + k


def _consistency_densenet_params(k=10):
    """jh-jeong/smoothing-consistency densenet40: stem 24, 3 x 6 bottleneck layers."""
    total, c = 3 * 24 * 9, 24
    for _ in range(18):
        total += _bn(c) + c * 48 + _bn(48) + 48 * 12 * 9
        c += 12
    return total + _bn(c) + c * k + k


@pytest.mark.parametrize("arch, expected, paper", [
    ("lenet", 520 + 25050 + 400500 + 5010, None),
    ("digits_cnn", 320 + 18496 + 131200 + 1290, None),
    ("cifar_resnet20", _cifar_resnet_params(20), 0.27e6),     # He et al. 2016 Table 6
    ("cifar_resnet110", _cifar_resnet_params(110), 1.7e6),    # He et al. 2016 Table 6
    ("densenet40", _densenet_params(), 1.0e6),                # Huang et al. 2017 Table 2
    ("cifar_densenet40", _consistency_densenet_params(), None),
    ("resnet50", 25_557_032, None),                           # torchvision's resnet50
])
def test_parameter_counts(arch, expected, paper, request):
    model = request.getfixturevalue("resnet50") if arch == "resnet50" else \
        create_model(arch, _dataset(arch))
    n = count_parameters(model)
    assert n == expected
    if paper is not None:
        assert abs(n - paper) / paper < 0.03
    assert count_parameters(model, trainable_only=True) == n


@pytest.mark.parametrize("arch, dataset, target", [
    ("cifar_resnet20", "cifar10", 0.27e6), ("cifar_resnet110", "cifar10", 1.73e6),
    ("densenet40", "cifar10", 1.02e6),
])
def test_parameter_counts_within_one_percent(arch, dataset, target):
    assert abs(count_parameters(create_model(arch, dataset)) - target) < 0.01 * target


# ---------------------------------------------------------------- parameter names of the field


def test_key_names_match_public_code(resnet50):
    # code/archs/lenet.py of jh-jeong/smoothing-consistency, inside Sequential(Identity, net)
    assert set(create_model("lenet", "mnist").state_dict()) == {
        f"1.{m}.{p}" for m in ("conv1", "conv2", "fc1", "fc2") for p in ("weight", "bias")}
    # code/archs/cifar_resnet.py of locuslab/smoothing: projection shortcut downsample.0/.1
    sd = create_model("cifar_resnet20", "cifar10").state_dict()
    assert sd["1.layer2.0.downsample.0.weight"].shape == (32, 16, 1, 1)
    assert "1.layer2.0.downsample.1.running_var" in sd
    assert "1.layer1.0.downsample.0.weight" not in sd
    assert sd["1.fc.weight"].shape == (10, 64) and "1.layer3.2.bn2.weight" in sd
    # code/archs/densenet.py of jh-jeong/smoothing-consistency
    sd = create_model("cifar_densenet40", "cifar10").state_dict()
    assert sd["1.features.block1.layer1.brc_1.conv.weight"].shape == (48, 24, 1, 1)
    assert sd["1.features.block3.layer6.brc_2.norm.weight"].shape == (48,)
    assert sd["1.features.norm_last.weight"].shape == (240,) and "1.classifier.bias" in sd
    # torchvision resnet50: 53 convs, 53 BNs x 5 tensors, fc
    sd = resnet50.state_dict()
    net = [k for k in sd if k.startswith("1.")]
    assert len(net) == 53 + 53 * 5 + 2
    assert sd["1.layer4.0.downsample.0.weight"].shape == (2048, 1024, 1, 1)
    assert sd["1.layer1.0.conv2.weight"].shape == (64, 64, 3, 3)
    assert sd["1.layer4.2.bn3.running_var"].shape == (2048,)
    assert sd["1.fc.weight"].shape == (1000, 2048)


# ---------------------------------------------------------------- normalisation


def test_normalize_buffers_and_formula():
    model = create_model("cifar_resnet20", "cifar10")
    sd = model.state_dict()
    assert sd["0.mean"].shape == (1, 3, 1, 1) and sd["0.std"].shape == (1, 3, 1, 1)
    assert sd["0.mean"].flatten().tolist() == pytest.approx(CIFAR10_MEAN)
    assert sd["0.std"].flatten().tolist() == pytest.approx(CIFAR10_STD)
    x = torch.rand(4, 3, 5, 6)
    z = model[0](x)
    for c in range(3):
        manual = (x[:, c] - CIFAR10_MEAN[c]) / CIFAR10_STD[c]
        torch.testing.assert_close(z[:, c], manual)


@pytest.mark.parametrize("dataset", ["mnist", "fashion-mnist", "digits"])
def test_normalize_identity_for_unnormalised_datasets(dataset):
    model = create_model(default_arch(dataset), dataset)
    assert not any(k.startswith("0.") for k in model.state_dict())
    assert list(model[0].buffers()) == []
    x = torch.rand(2, *_input_shape(dataset))
    assert model[0](x) is x


def test_normalize_validation_and_dtype():
    with pytest.raises(RsmoothError):
        Normalize((0.5,), None)
    with pytest.raises(RsmoothError, match="std > 0"):
        Normalize((0.5,), (0.0,))
    with pytest.raises(RsmoothError, match="same length"):
        Normalize((0.5, 0.5), (0.2,))
    model = create_model("cifar_resnet20", "cifar10").to(torch.bfloat16)
    # exact float32 constants are kept under dtype casts (they live in the checkpoint)
    assert model[0].mean.dtype == torch.float32
    assert model.state_dict()["0.mean"].flatten().tolist() == \
        torch.tensor(CIFAR10_MEAN).tolist()
    assert model[1].conv1.weight.dtype == torch.bfloat16


@pytest.mark.parametrize("arch", ["lenet", "cifar_resnet20"])
def test_channels_last_bfloat16_agrees_with_float32(arch):
    dataset = _dataset(arch)
    torch.manual_seed(0)
    ref_model = _randomise(create_model(arch, dataset)).eval()
    x = torch.rand(4, *_input_shape(dataset))
    with torch.no_grad():
        ref = ref_model(x)
    model = create_model(arch, dataset)
    model.load_state_dict(ref_model.state_dict())
    model = model.to(memory_format=torch.channels_last).to(torch.bfloat16).eval()
    xb = x.to(memory_format=torch.channels_last).to(torch.bfloat16)
    with torch.no_grad():
        out = model(xb)
        z = model[0](xb)
    assert out.dtype == torch.bfloat16 and out.shape == ref.shape
    assert z.is_contiguous(memory_format=torch.channels_last) or model[0].identity
    rel = (out.float() - ref).abs().max() / ref.abs().max()
    assert rel < 0.03, rel


# ---------------------------------------------------------------- checkpoint formats


def test_strip_wrapper_prefixes():
    assert strip_wrapper_prefixes("1.module.layer1.0.conv1.weight") == "1.layer1.0.conv1.weight"
    assert strip_wrapper_prefixes("module.conv1.weight") == "conv1.weight"
    assert strip_wrapper_prefixes("module.1.fc.bias") == "1.fc.bias"
    assert strip_wrapper_prefixes("_orig_mod.1.fc.bias") == "1.fc.bias"
    assert strip_wrapper_prefixes("1.layer1.0.module.weight") == "1.layer1.0.module.weight"
    assert strip_wrapper_prefixes("0.mean") == "0.mean"


def test_canonical_state_dict_is_pure():
    w = torch.ones(2)
    ckpt = {"net": {"module.fc.weight": w, "module.fc.bias": w}, "epoch": 3}
    assert set(canonical_state_dict(ckpt)) == {"1.fc.weight", "1.fc.bias"}
    assert set(ckpt["net"]) == {"module.fc.weight", "module.fc.bias"}  # input untouched
    legacy = canonical_state_dict({"0.means": torch.zeros(3), "0.sds": torch.ones(3), "1.w": w})
    assert legacy["0.mean"].shape == (1, 3, 1, 1) and legacy["0.std"].shape == (1, 3, 1, 1)


def _net_state(model):
    return {k: v.clone() for k, v in model.state_dict().items() if k.startswith("1.")}


def _formats(arch, src):
    """The public checkpoint formats of SPEC.md 3, built from a model's weights."""
    net = {k[2:]: v for k, v in _net_state(src).items()}  # bare net keys
    return {
        "rsmooth": src.state_dict(),
        "cohen": {"epoch": 90, "arch": arch, "state_dict": {"1." + k: v for k, v in net.items()},
                  "optimizer": {"state": {}, "param_groups": [{"lr": 0.1}]}},
        "cohen_imagenet": {"epoch": 90, "arch": arch, "optimizer": {},
                           "state_dict": {"1.module." + k: v for k, v in net.items()}},
        "bare": dict(net),
        "bare_module": {"module." + k: v for k, v in net.items()},
        "macer": {"net": {"module." + k: v for k, v in net.items()}, "epoch": 440},
        "macer_plain": {"net": dict(net), "epoch": 440},
    }


@pytest.mark.parametrize("fmt", ["rsmooth", "cohen", "cohen_imagenet", "bare", "bare_module",
                                 "macer", "macer_plain"])
@pytest.mark.parametrize("arch, dataset", [("cifar_resnet20", "cifar10"), ("lenet", "mnist")])
def test_load_weights_round_trip(arch, dataset, fmt):
    src = _randomise(create_model(arch, dataset), seed=1).eval()
    dst = create_model(arch, dataset)
    assert load_weights(dst, _formats(arch, src)[fmt], dataset) is dst
    for k, v in src.state_dict().items():
        assert torch.equal(dst.state_dict()[k], v), k
    dst.eval()
    x = torch.rand(3, *_input_shape(dataset))
    with torch.no_grad():
        torch.testing.assert_close(dst(x), src(x), rtol=0, atol=0)


def test_load_weights_keeps_dataset_normalisation():
    src = _randomise(create_model("cifar_resnet20", "cifar10"))
    dst = create_model("cifar_resnet20", "cifar10")
    load_weights(dst, _formats("cifar_resnet20", src)["cohen"], "cifar10")
    assert dst[0].mean.flatten().tolist() == pytest.approx(CIFAR10_MEAN)
    # a fork that stores the NormalizeLayer's means/sds as 1-D buffers
    legacy = {"0.means": torch.tensor(CIFAR10_MEAN), "0.sds": torch.tensor(CIFAR10_STD),
              **_net_state(src)}
    load_weights(create_model("cifar_resnet20", "cifar10"), {"state_dict": legacy}, "cifar10")


def test_load_weights_architecture_mismatch():
    big = create_model("cifar_resnet110", "cifar10")
    ckpt = {"epoch": 1, "arch": "cifar_resnet110", "state_dict": _net_state(big), "optimizer": {}}
    with pytest.raises(RsmoothError) as e:
        load_weights(create_model("cifar_resnet20", "cifar10"), ckpt, "cifar10")
    msg = str(e.value)
    assert "architecture does not match 'cifar_resnet20'" in msg
    assert "unexpected keys 1.layer1.10.bn1.bias" in msg and "(540 in all)" in msg
    assert "the checkpoint says arch 'cifar_resnet110'" in msg
    assert "\n" not in msg

    lenet = _net_state(create_model("lenet", "mnist"))
    with pytest.raises(RsmoothError, match="missing keys 1.bn1.bias.*unexpected keys 1.conv1.bias"):
        load_weights(create_model("cifar_resnet20", "cifar10"), lenet, "cifar10")


def test_load_weights_num_classes_mismatch():
    ckpt = {"state_dict": _net_state(create_model("cifar_resnet20", "cifar100"))}
    with pytest.raises(RsmoothError, match=r"shape mismatch 1\.fc\.bias: checkpoint \(100,\) "
                                           r"vs model \(10,\)"):
        load_weights(create_model("cifar_resnet20", "cifar10"), ckpt, "cifar10")


def test_load_weights_normalisation_mismatch():
    c100 = create_model("cifar_resnet20", "cifar100", num_classes=10).state_dict()
    with pytest.raises(RsmoothError, match="normalisation mean .* differs from dataset 'cifar10'"):
        load_weights(create_model("cifar_resnet20", "cifar10"), c100, "cifar10")
    digits = create_model("digits_cnn", "digits")
    with pytest.raises(RsmoothError, match="normalises its inputs .* 'digits' is not normalised"):
        load_weights(digits, {"0.mean": torch.zeros(1, 1, 1, 1), **digits.state_dict()}, "digits")
    with pytest.raises(RsmoothError, match="does not match dataset 'cifar100'"):
        load_weights(create_model("cifar_resnet20", "cifar10"), c100, "cifar100")


def test_load_weights_needs_a_create_model_model():
    with pytest.raises(RsmoothError, match="expects a model from create_model"):
        load_weights(create_model("lenet", "mnist")[1], {"conv1.weight": torch.zeros(1)}, "mnist")


def test_load_weights_unrecognised_format():
    with pytest.raises(RsmoothError, match="unrecognised checkpoint.*'epoch'"):
        load_weights(create_model("lenet", "mnist"), {"epoch": 3, "weights": [1, 2]}, "mnist")
    with pytest.raises(RsmoothError, match="must be a dict"):
        load_weights(create_model("lenet", "mnist"), [torch.zeros(1)], "mnist")


def test_load_weights_through_torch_save(tmp_path):
    src = _randomise(create_model("cifar_densenet40", "cifar10"))
    path = tmp_path / "checkpoint.pth.tar"
    torch.save(_formats("cifar_densenet40", src)["cohen"], path)
    obj = torch.load(path, map_location="cpu", weights_only=True)
    dst = load_weights(create_model("cifar_densenet40", "cifar10"), obj, "cifar10")
    key = "1.classifier.weight"
    assert torch.equal(dst.state_dict()[key], src.state_dict()[key])


# ---------------------------------------------------------------- the embedded default


@pytest.mark.slow
def test_digits_cnn_trains_quickly():
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    from sklearn.model_selection import train_test_split

    digits = sklearn_datasets.load_digits()
    x = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(digits.target)
    train, test = train_test_split(range(len(y)), test_size=360, stratify=digits.target,
                                   random_state=0)
    train, test = torch.tensor(train), torch.tensor(test)
    torch.manual_seed(0)
    model = create_model("digits_cnn", "digits")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    for _ in range(4):
        perm = train[torch.randperm(len(train), generator=g)]
        for i in range(0, len(perm), 32):
            b = perm[i:i + 32]
            loss = nn.functional.cross_entropy(model(x[b]), y[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        acc = (model(x[test]).argmax(1) == y[test]).float().mean().item()
    assert acc > 0.9, acc


def test_lenet_pools_before_relu_with_the_references_outputs_and_gradients():
    """relu(max_pool(.)) = max_pool(relu(.)) exactly: the reference's order
    (jh-jeong/smoothing-consistency code/archs/lenet.py) gives the same bits, forward and backward."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    net = create_model("lenet", "mnist")[1]
    x = torch.rand(64, 1, 28, 28)
    x[:8] = 0.0  # ties in the pooling windows

    def reference(v):
        v = F.max_pool2d(F.relu(net.conv1(v)), 2, 2)
        v = F.max_pool2d(F.relu(net.conv2(v)), 2, 2)
        return net.fc2(F.relu(net.fc1(torch.flatten(v, 1))))

    grads = []
    for f in (net, reference):
        net.zero_grad()
        out = f(x)
        out.square().sum().backward()
        grads.append((out.detach(), [q.grad.clone() for q in net.parameters()]))
    assert torch.equal(grads[0][0], grads[1][0])
    assert all(torch.equal(a, b) for a, b in zip(grads[0][1], grads[1][1]))
