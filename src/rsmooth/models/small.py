"""Small networks for the MNIST family and the embedded ``digits`` dataset."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .factory import register_arch


class LeNet(nn.Module):
    """LeNet as the randomized-smoothing field uses it (LeCun et al. 1998).

    conv 1->20 k5, ReLU, maxpool 2, conv 20->50 k5, ReLU, maxpool 2, fc 800->500, ReLU,
    fc 500->K: 431,080 parameters for K = 10. Not LeNet-5. Attribute names ``conv1``,
    ``conv2``, ``fc1``, ``fc2`` match ``code/archs/lenet.py`` of jh-jeong/smoothing-consistency
    (also used by SmoothMix and CAT-RS), so the MNIST checkpoints of those codebases load.
    Each max-pool runs before its ReLU: the two commute (ReLU is monotone), so outputs and
    gradients are the reference's to the bit, with a quarter of the ReLUs.

    Shapes: x [B, 1, 28, 28] -> logits [B, K].
    """

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, 5, 1)
        self.conv2 = nn.Conv2d(20, 50, 5, 1)
        self.fc1 = nn.Linear(4 * 4 * 50, 500)
        self.fc2 = nn.Linear(500, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.max_pool2d(self.conv1(x), 2, 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2, 2))
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


class DigitsCNN(nn.Module):
    """A small CNN for scikit-learn's 8x8 ``digits`` (the embedded default dataset).

    conv 1->32 k3 p1, ReLU, conv 32->64 k3 p1, ReLU, maxpool 2, fc 1024->128, ReLU,
    fc 128->K (151,306 parameters for K = 10). rsmooth's own design, not from a paper:
    it reaches > 90% clean test accuracy within seconds on a CPU.

    Shapes: x [B, 1, 8, 8] -> logits [B, K].
    """

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 4 * 4, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


@register_arch("lenet", in_channels=1, input_size=(28, 28))
def lenet(num_classes: int) -> nn.Module:
    return LeNet(num_classes)


@register_arch("digits_cnn", in_channels=1, input_size=(8, 8))
def digits_cnn(num_classes: int) -> nn.Module:
    return DigitsCNN(num_classes)
