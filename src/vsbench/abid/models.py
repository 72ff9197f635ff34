"""The challenge's two baseline networks (ResNet-34 from scratch; ResNet-18 for a CPU budget)."""

from __future__ import annotations

import torch
from torch import nn

from vsbench.models.trunks import ARCHES, arch_of_trunk, resnet, resnet_trunk  # noqa: F401 - re-exported (callers import them here)

# What the head sees of a pair: the challenge's concat(a, b), or concat(|a - b|, a * b).
PAIR_FEATURES = ("concat", "symmetric")


def counting_network(num_classes: int = 6, arch: str = "resnet34") -> nn.Module:
    """ResNet classifier over quantities 0..num_classes-1 (6 for the moderate task)."""
    return resnet(arch, num_classes)


class SiameseNetwork(nn.Module):
    """Shared ResNet-34 trunk -> concat(512, 512) -> Dropout -> FC 4096 -> ReLU -> Dropout -> FC 4096
    -> ReLU -> FC 1 (the challenge's; ``arch``, ``pair_features`` and ``head_width`` vary it for a
    CPU budget). Returns logits: training uses BCE-with-logits, which is sigmoid + BCE (the
    challenge's loss) computed stably."""

    def __init__(self, dropout: float = 0.5, freeze_trunk: bool = False, arch: str = "resnet34",
                 pair_features: str = "concat", head_width: int = 4096) -> None:
        super().__init__()
        if pair_features not in PAIR_FEATURES:
            raise ValueError(f"unknown pair_features {pair_features!r}; choose from {', '.join(PAIR_FEATURES)}")
        self.freeze_trunk = freeze_trunk
        self.pair_features = pair_features
        self.trunk = resnet_trunk(arch)
        self.head = nn.Sequential(
            nn.Dropout(dropout), nn.Linear(1024, head_width), nn.ReLU(inplace=True),
            nn.Dropout(dropout), nn.Linear(head_width, head_width), nn.ReLU(inplace=True),
            nn.Linear(head_width, 1),
        )
        if freeze_trunk:
            self.trunk.requires_grad_(False)

    def train(self, mode: bool = True) -> SiameseNetwork:
        """A frozen trunk stays in eval mode: its batch-norm statistics are part of what was learned."""
        super().train(mode)
        if self.freeze_trunk:
            self.trunk.eval()
        return self

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        return self.trunk(images)

    def compare(self, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        """Logits for pairs of trunk features (lets inference embed each image only once)."""
        if self.pair_features == "symmetric":  # the same 1024 inputs, the same for (a, b) and (b, a)
            return self.head(torch.cat([(first - second).abs(), first * second], dim=1)).squeeze(1)
        return self.head(torch.cat([first, second], dim=1)).squeeze(1)

    def forward(self, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        """Logits of the pairs (first[i // k], second[i]), k = len(second) / len(first).

        k = 1 is one pair per row; k > 1 is k partners for each first image, which then goes
        through the trunk once for all its pairs. One trunk pass for both sides either way."""
        per_first, rest = divmod(second.shape[0], first.shape[0])
        if rest or not per_first:
            raise ValueError(f"{second.shape[0]} second images do not split evenly over {first.shape[0]} first images")
        features = self.embed(torch.cat([first, second]))
        anchors, partners = features.split([first.shape[0], second.shape[0]])
        return self.compare(anchors.repeat_interleave(per_first, dim=0) if per_first > 1 else anchors, partners)


class SiamesePairClassifier(nn.Module):
    """One-tensor view of :class:`SiameseNetwork` for export: (N, 6, H, W) = two RGB images stacked
    on channels -> probability that they share an object. MLflow's pt2 format (a traced graph,
    loaded without unpickling code) takes single-tensor inputs."""

    def __init__(self, network: SiameseNetwork) -> None:
        super().__init__()
        self.network = network

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:
        features = self.network.embed(torch.cat([pairs[:, :3], pairs[:, 3:]]))  # no shape arithmetic to trace
        return torch.sigmoid(self.network.compare(*features.chunk(2)))
