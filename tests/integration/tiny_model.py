"""The tiny TorchScript embedder the integration tests run `similarity run` with: a conv and a
linear layer, 6-d descriptors, a second per run on 32 images."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2)
        self.fc = nn.Linear(8, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def scripted_model(path: Path, seed: int) -> Path:
    """A :class:`Tiny` drawn with ``seed``, saved as TorchScript at ``path``."""
    torch.manual_seed(seed)
    torch.jit.script(Tiny().eval()).save(str(path))
    return path
