"""ABID training's ``BatchTransform`` against values computed by hand (issue 49).

Why: the CPU and device decode paths both go through ``BatchTransform``, so the test comparing the
two compared two equally wrong inputs when mean and std were swapped in it. Here its output is
checked against ``(x/255 - mean)/std`` with ImageNet's published mean and std written out, and
against torchvision's ``Normalize``, on a known tensor; and each flip against the draw it stands for.
"""

from __future__ import annotations

import pytest
import torch
from torchvision.transforms import v2

from vsbench.abid.data import BatchTransform, flip_generator
from vsbench.imaging.batched import EncodedBatch

# ImageNet's statistics as torchvision's documentation gives them, written out rather than imported,
# so that a change of the constants themselves is seen too.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def _known_batch() -> torch.Tensor:
    """uint8 NCHW with every channel distinct and the extremes 0 and 255 present."""
    values = torch.arange(2 * 3 * 4 * 5, dtype=torch.int64).view(2, 3, 4, 5)
    batch = (values * 37 % 256).to(torch.uint8)
    batch[0, 0, 0, 0], batch[1, 2, 3, 4] = 0, 255
    return batch


def _by_hand(batch: torch.Tensor) -> torch.Tensor:
    out = torch.empty(batch.shape, dtype=torch.float64)
    for n in range(batch.shape[0]):
        for c in range(3):
            out[n, c] = (batch[n, c].double() / 255 - MEAN[c]) / STD[c]
    return out


def test_the_transform_is_imagenet_normalization_computed_by_hand() -> None:
    batch = _known_batch()
    result = BatchTransform(torch.device("cpu"))(batch)
    assert result.dtype == torch.float32 and result.shape == batch.shape
    assert result.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(result.double(), _by_hand(batch), rtol=0, atol=1e-5)
    # One pixel spelled out: black in the red channel is -mean/std, white in blue (1 - mean)/std.
    assert result[0, 0, 0, 0].item() == pytest.approx(-0.485 / 0.229, abs=1e-5)
    assert result[1, 2, 3, 4].item() == pytest.approx((1 - 0.406) / 0.225, abs=1e-5)


def test_the_transform_equals_torchvision_normalize() -> None:
    batch = _known_batch()
    reference = v2.Normalize(MEAN, STD)(batch.float() / 255)
    torch.testing.assert_close(BatchTransform(torch.device("cpu"))(batch), reference, rtol=0, atol=1e-5)


def test_each_image_is_flipped_exactly_when_its_draw_says_so() -> None:
    batch = torch.cat([_known_batch()] * 8)  # 16 images: both outcomes are drawn
    plain = BatchTransform(torch.device("cpu"))(batch)
    flipped = BatchTransform(torch.device("cpu"))(batch, flip_generator(4, 1, 2))
    draws = torch.rand(len(batch), generator=flip_generator(4, 1, 2)) < 0.5
    assert 0 < int(draws.sum()) < len(batch)
    for n, flip in enumerate(draws.tolist()):
        torch.testing.assert_close(flipped[n], plain[n].flip(-1) if flip else plain[n], rtol=0, atol=0)


def test_encoded_bytes_without_a_decoder_are_refused() -> None:
    with pytest.raises(ValueError, match="^a batch of undecoded files reached a BatchTransform without a decoder$"):
        BatchTransform(torch.device("cpu"))(EncodedBatch.__new__(EncodedBatch))


class StackingDecoder:
    """Stands for the device decoder: the packed batch it was given decodes to a known tensor."""

    def __init__(self, packed: EncodedBatch, pixels: torch.Tensor) -> None:
        self.packed, self.pixels = packed, pixels

    def stack(self, batch: EncodedBatch) -> torch.Tensor:
        assert batch is self.packed, "the decoder was not given the packed batch"
        return self.pixels


def test_a_packed_batch_is_decoded_then_normalized_the_same_way() -> None:
    batch = _known_batch()
    packed = EncodedBatch.__new__(EncodedBatch)
    decoder = StackingDecoder(packed, batch)
    result = BatchTransform(torch.device("cpu"), decoder=decoder)(packed)  # type: ignore[arg-type]
    torch.testing.assert_close(result.double(), _by_hand(batch), rtol=0, atol=1e-5)
