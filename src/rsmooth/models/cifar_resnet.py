"""CIFAR ResNets (He et al. 2016, arXiv 1512.03385, Sec. 4.2) in the layout of Cohen et al.'s code.

Depth 6n+2 with BasicBlocks on 16/32/64 channels; a shortcut that changes shape is a
1x1 convolution + BatchNorm (``downsample.0`` / ``downsample.1``), as in
``code/archs/cifar_resnet.py`` of locuslab/smoothing (itself from bearpaw's
pytorch-classification), which Salman et al., MACER, Consistency, SmoothMix and CAT-RS reuse.
Parameter names match that file (``conv1, bn1, layer1..3.i.{conv1,bn1,conv2,bn2,downsample},
fc``), so their CIFAR checkpoints load: 272,474 parameters for ResNet-20 and 1,730,714 for
ResNet-110 (K = 10).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import check
from .factory import register_arch


def _conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN, plus the (projected) shortcut, then ReLU."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = _conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        shortcut = x if self.downsample is None else self.downsample(x)
        return F.relu(out + shortcut)


class CifarResNet(nn.Module):
    """ResNet-(6n+2) for 32x32 inputs (He et al. 2016).

    Args:
        depth: 6n+2, e.g. 20, 32, 44, 56, 110.
        num_classes: K.

    Shapes: x [B, 3, 32, 32] -> logits [B, K].
    """

    def __init__(self, depth: int, num_classes: int = 10) -> None:
        super().__init__()
        check((depth - 2) % 6 == 0 and depth >= 8, f"CIFAR ResNet depth must be 6n+2, got {depth}")
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(3, 16, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.layer1 = self._make_layer(16, 16, n, stride=1)
        self.layer2 = self._make_layer(16, 32, n, stride=2)
        self.layer3 = self._make_layer(32, 64, n, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)  # = AvgPool2d(8) of the original at 32x32
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():  # the original's init: He normal (fan_out), BN = (1, 0)
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    @staticmethod
    def _make_layer(inplanes: int, planes: int, blocks: int, stride: int) -> nn.Sequential:
        layers = [BasicBlock(inplanes, planes, stride)]
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


@register_arch("cifar_resnet20", in_channels=3, input_size=(32, 32))
def cifar_resnet20(num_classes: int) -> nn.Module:
    return CifarResNet(20, num_classes)


@register_arch("cifar_resnet110", in_channels=3, input_size=(32, 32))
def cifar_resnet110(num_classes: int) -> nn.Module:
    return CifarResNet(110, num_classes)
