"""The ``mean_colour`` model: each channel's mean and standard deviation, a 6-d descriptor.

The ``vsbench.models`` entry point names this module; importing it registers the builder with
:func:`vsbench.models.registry.register_model`, after which ``--model mean_colour`` works in every
command and pipeline step, and ``vsbench similarity models`` lists it. There are no weights: the
network is deterministic, so there is nothing to download and nothing to seed.
"""

from __future__ import annotations

import torch
from torch import nn

from vsbench.models.registry import Embedder, Preprocessing, register_model


class ChannelStatistics(nn.Module):
    """(N, 3, H, W) -> (N, 6): the mean of each channel over the image, then each channel's
    standard deviation (population, so a solid image gives exactly 0)."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return torch.cat([images.mean(dim=(2, 3)), images.std(dim=(2, 3), correction=0)], dim=1)


@register_model("mean_colour")
def mean_colour(size: int = 32) -> Embedder:
    """No weights: each channel's mean and standard deviation of the pixels in [0, 1] (6-d).

    ``size``: images are resized to ``size`` x ``size`` first (bilinear, no crop). vsbench loads and
    resizes them with the preprocessing returned here; mean 0 and std 1 leave the pixels in [0, 1].
    """
    preprocessing = Preprocessing(input_size=size, resize_size=size, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
    return Embedder("mean_colour", ChannelStatistics(), 6, preprocessing,
                    weights_source="none: channel statistics, nothing learned", output="channel mean and std")
