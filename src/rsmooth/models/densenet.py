"""DenseNets for CIFAR (Huang et al. 2017, arXiv 1608.06993).

Two registered architectures, because the paper and the field's code disagree:

- ``densenet40``: the classic DenseNet of Huang et al. 2017 (Sec. 3-4, Table 2, "DenseNet
  (L = 40, k = 12)", 1.0M parameters): a 3x3 stem with 16 channels, three dense blocks of 12
  BN-ReLU-conv3x3 layers (growth k = 12), transitions BN-ReLU-conv1x1-avgpool2 keeping the
  width, then BN-ReLU-global average pool-fc. 1,019,722 parameters for K = 10. This is the
  DenseNet-40 that Jeong & Shin 2020 (Consistency, arXiv 2006.04062, Sec. 4.5, Table 6) cites
  as [18].
- ``cifar_densenet40``: the network that jh-jeong/smoothing-consistency actually trains under
  that name (``code/archs/densenet.py``): a 24-channel stem, three blocks of 6 bottleneck
  layers (BN-ReLU-conv1x1 to 4k, BN-ReLU-conv3x3 to k), k = 12, no compression (so the
  transitions are a bare avgpool), 211,978 parameters for K = 10. Parameter names match that
  file (``features.conv0``, ``features.block1.layer1.brc_1.norm``, ..., ``features.norm_last``,
  ``classifier``), so the Consistency paper's DenseNet checkpoints load.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import torch
from torch import nn

from .factory import register_arch


def _brc(in_channels: int, out_channels: int, kernel_size: int) -> nn.Sequential:
    """BN-ReLU-Conv (no bias), submodules named norm/relu/conv."""
    return nn.Sequential(OrderedDict([
        ("norm", nn.BatchNorm2d(in_channels)),
        ("relu", nn.ReLU()),
        ("conv", nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2,
                           bias=False)),
    ]))


def _init(module: nn.Module) -> None:
    """Huang et al.'s init: He normal (fan_out) convs, BN = (1, 0), zero fc bias."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.zeros_(m.bias)


class _BasicDenseLayer(nn.Module):
    """Classic dense layer: BN-ReLU-conv3x3 -> k channels, concatenated to the input."""

    def __init__(self, in_channels: int, growth_rate: int) -> None:
        super().__init__()
        self.brc = _brc(in_channels, growth_rate, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.brc(x)], 1)


class DenseNet(nn.Module):
    """Classic (non-bottleneck, non-compressed) DenseNet for 32x32 inputs (Huang et al. 2017).

    Args:
        depth: L = 3n + 4, n layers per block (40 -> 12 layers per block).
        growth_rate: k.
        num_classes: K.

    Shapes: x [B, 3, 32, 32] -> logits [B, K].
    """

    def __init__(self, depth: int = 40, growth_rate: int = 12, num_classes: int = 10) -> None:
        super().__init__()
        n = (depth - 4) // 3
        channels = 16
        self.features = nn.Sequential(OrderedDict([
            ("conv0", nn.Conv2d(3, channels, kernel_size=3, padding=1, bias=False)),
        ]))
        for b in range(3):
            block = nn.Sequential()
            for i in range(n):
                block.add_module(f"layer{i + 1}", _BasicDenseLayer(channels, growth_rate))
                channels += growth_rate
            self.features.add_module(f"block{b + 1}", block)
            if b < 2:
                trans = _brc(channels, channels, 1)
                trans.add_module("pool", nn.AvgPool2d(2))
                self.features.add_module(f"trans{b + 1}", trans)
        self.features.add_module("norm_last", nn.BatchNorm2d(channels))
        self.features.add_module("relu_last", nn.ReLU())
        self.features.add_module("pool_last", nn.AdaptiveAvgPool2d(1))
        self.classifier = nn.Linear(channels, num_classes)
        _init(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


class _BottleneckDenseLayer(nn.Module):
    """Jeong et al.'s dense layer: BN-ReLU-conv1x1 (4k) then BN-ReLU-conv3x3 (k)."""

    def __init__(self, in_channels: int, growth_rate: int) -> None:
        super().__init__()
        self.brc_1 = _brc(in_channels, 4 * growth_rate, 1)
        self.brc_2 = _brc(4 * growth_rate, growth_rate, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.brc_2(self.brc_1(x))], 1)


class ConsistencyDenseNet(nn.Module):
    """The ``cifar_densenet40`` of jh-jeong/smoothing-consistency (see the module docstring).

    Args:
        block_config: bottleneck layers per block, (6, 6, 6).
        growth_rate: k.
        num_classes: K.

    Shapes: x [B, 3, 32, 32] -> logits [B, K].
    """

    def __init__(self, block_config: Sequence[int] = (6, 6, 6), growth_rate: int = 12,
                 num_classes: int = 10) -> None:
        super().__init__()
        channels = 2 * growth_rate
        self.features = nn.Sequential(OrderedDict([
            ("conv0", nn.Conv2d(3, channels, kernel_size=3, padding=1, bias=False)),
        ]))
        for b, n_layers in enumerate(block_config):
            block = nn.Sequential()
            for i in range(n_layers):
                block.add_module(f"layer{i + 1}", _BottleneckDenseLayer(channels, growth_rate))
                channels += growth_rate
            self.features.add_module(f"block{b + 1}", block)
            if b != len(block_config) - 1:
                # compression 1.0: the original's transition has no conv, only the pool
                self.features.add_module(f"trans{b + 1}", nn.Sequential(OrderedDict([
                    ("pool", nn.AvgPool2d(2))])))
        self.features.add_module("norm_last", nn.BatchNorm2d(channels))
        self.features.add_module("relu_last", nn.ReLU())
        self.features.add_module("pool_last", nn.AdaptiveAvgPool2d(1))  # = AvgPool2d(8) at 32x32
        self.classifier = nn.Linear(channels, num_classes)
        _init(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


@register_arch("densenet40", in_channels=3, input_size=(32, 32))
def densenet40(num_classes: int) -> nn.Module:
    return DenseNet(40, 12, num_classes)


@register_arch("cifar_densenet40", in_channels=3, input_size=(32, 32))
def cifar_densenet40(num_classes: int) -> nn.Module:
    return ConsistencyDenseNet((6, 6, 6), 12, num_classes)
