"""ResNet-50 for ImageNet (He et al. 2016, arXiv 1512.03385) in torchvision's layout.

Parameter names and shapes are those of ``torchvision.models.resnet50`` (``conv1, bn1,
layer1..4.i.{conv1,bn1,conv2,bn2,conv3,bn3,downsample.0,downsample.1}, fc``; 25,557,032
parameters for K = 1000), which the public ImageNet checkpoints of Cohen et al., Salman
et al. and Jeong et al. were trained with (stored under ``1.module.``), so they load.
The stride of a downsampling Bottleneck sits on its 3x3 convolution (torchvision's
"ResNet v1.5"); it does not change any parameter shape.
"""
from __future__ import annotations

from typing import List

import torch
from torch import nn
from torch.nn import functional as F

from .factory import register_arch


class Bottleneck(nn.Module):
    """1x1 reduce - 3x3 (stride) - 1x1 expand (x4), each followed by BN; ReLU after the sum."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        out = planes * self.expansion
        self.conv1 = nn.Conv2d(inplanes, planes, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or inplanes != out:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, out, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(out),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        shortcut = x if self.downsample is None else self.downsample(x)
        return F.relu(out + shortcut)


class ResNet(nn.Module):
    """ImageNet ResNet with Bottleneck blocks (He et al. 2016, Table 1).

    Args:
        layers: blocks per stage, [3, 4, 6, 3] for ResNet-50.
        num_classes: K.

    Shapes: x [B, 3, H, W] (224x224 for ImageNet) -> logits [B, K].
    """

    def __init__(self, layers: List[int], num_classes: int = 1000) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, layers[0], stride=1)
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512 * Bottleneck.expansion, num_classes)
        for m in self.modules():  # torchvision's init
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def _make_layer(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
        layers = [Bottleneck(self.inplanes, planes, stride)]
        self.inplanes = planes * Bottleneck.expansion
        layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


@register_arch("resnet50", in_channels=3, min_size=32)
def resnet50(num_classes: int) -> nn.Module:
    return ResNet([3, 4, 6, 3], num_classes)
