"""frozen_eval: the attack context restores the model exactly."""
import torch

from rsmooth.attacks import frozen_eval
from rsmooth.models import create_model


def test_frozen_eval_freezes_and_restores():
    model = create_model("cifar_resnet20", "cifar10")
    model.train()
    model[1].fc.weight.requires_grad_(False)  # a user's own frozen layer stays frozen
    x = torch.rand(2, 3, 32, 32, requires_grad=True)
    stats = model[1].bn1.running_mean.clone()
    with frozen_eval(model):
        assert not model.training and not any(p.requires_grad for p in model.parameters())
        model(x).sum().backward()
    assert x.grad is not None and all(p.grad is None for p in model.parameters())
    assert torch.equal(stats, model[1].bn1.running_mean)  # eval mode: BN statistics untouched
    assert all(m.training for m in model.modules())
    assert not model[1].fc.weight.requires_grad
    assert all(p.requires_grad for n, p in model.named_parameters() if n != "1.fc.weight")
