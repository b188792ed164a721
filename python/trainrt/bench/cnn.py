"""A ResNet-style CNN for 32x32 images, written in plain torch (torchvision does not import beside
torch 2.13 here), and its FLOP count.

    stem:    Conv3x3(3 -> w0) + BatchNorm + ReLU, MaxPool 2x2                     (32x32 -> 16x16)
    stages:  per width w_i a residual BasicBlock (two Conv3x3 + BatchNorm, ReLU, identity or
             1x1-conv shortcut); stages after the first halve the resolution with stride 2
    head:    GlobalAveragePool, Flatten, Linear(w_last -> classes), cross-entropy

`groups` and `dilation` set the second conv of every block (grouped / dilated convolution), so
the same class covers the variants the tests need.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, groups: int = 1, dilation: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=dilation, dilation=dilation, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNetCNN(nn.Module):
    """forward(images (B, 3, H, W) float, labels (B,) class ids) -> cross-entropy loss."""

    def __init__(self, widths=(32, 64, 128), classes: int = 10, groups: int = 1, dilation: int = 1):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, padding=1, bias=False), nn.BatchNorm2d(widths[0]),
                                  nn.ReLU(), nn.MaxPool2d(2))
        blocks, c_in = [], widths[0]
        for i, w in enumerate(widths):
            blocks.append(BasicBlock(c_in, w, stride=1 if i == 0 else 2, groups=groups, dilation=dilation))
            c_in = w
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, classes))

    def forward(self, images, labels):
        return nn.functional.cross_entropy(self.head(self.blocks(self.stem(images))), labels)


def training_flops(model: nn.Module, image_shape: tuple[int, int, int], batch: int) -> int:
    """FLOPs of one training step for the convolutions and Linear layers (one multiply-add = 2 FLOPs;
    backward = 2x forward: input and weight gradients), found by one forward pass with hooks."""
    forward = 0

    def count(module, inputs, output):
        nonlocal forward
        if isinstance(module, nn.Conv2d):
            k = module.kernel_size[0] * module.kernel_size[1] * module.in_channels // module.groups
            forward += 2 * k * output.numel()
        elif isinstance(module, nn.Linear):
            forward += 2 * module.in_features * output.numel()

    hooks = [m.register_forward_hook(count) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    try:
        with torch.no_grad():
            was_training = model.training
            model.eval()
            model(torch.zeros(1, *image_shape), torch.zeros(1, dtype=torch.long))
            model.train(was_training)
    finally:
        for h in hooks:
            h.remove()
    return 3 * forward * batch
