"""The ResNet trunks ABID's baselines are built on, and how a saved state names its architecture.

Here, below both users, because :mod:`vsbench.models.backbones` embeds with an ABID-trained trunk
and :mod:`vsbench.abid.models` trains one: the models layer must not import the ABID layer above
it (issue 58, "house"), so what both need lives in the lower one.
"""

from __future__ import annotations

from torch import nn

ARCHES = ("resnet34", "resnet18")  # the challenge's; and half its compute, with the same 512-d features


def resnet(arch: str, num_classes: int = 1000) -> nn.Module:
    """A torchvision ResNet of :data:`ARCHES` with random weights (ABID's baselines train from scratch)."""
    import torchvision.models

    if arch not in ARCHES:
        raise ValueError(f"unknown trunk {arch!r}; choose from {', '.join(ARCHES)}")
    return getattr(torchvision.models, arch)(weights=None, num_classes=num_classes)


def arch_of_trunk(state: dict[str, object], prefix: str = "") -> str:
    """Which of ``ARCHES`` a (trunk-prefixed) state dict holds: ResNet-34's first stage has three
    blocks, ResNet-18's two. Saved models carry no architecture name, their keys tell it."""
    return "resnet34" if f"{prefix}layer1.2.conv1.weight" in state else "resnet18"


def resnet_trunk(arch: str = "resnet34") -> nn.Module:
    """ResNet without its classifier: images -> 512-d features."""
    trunk = resnet(arch)
    trunk.fc = nn.Identity()
    return trunk
