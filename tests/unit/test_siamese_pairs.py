"""pairs_per_row: several fresh pairs per training row per epoch, grouped by row so the row's own
image goes through the trunk once; upstream's sampling at one pair a row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vsbench.abid.data import SiameseRowPairs, image_path
from vsbench.abid.models import SiameseNetwork
from vsbench.abid.pairs import Pair
from vsbench.abid.profiles import get_profile


class RecordingSampler:
    """Three rows; records which row each draw was for and hands out the generator's first draw."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, float]] = []

    def __len__(self) -> int:
        return 3

    def sample(self, index: int, rng: np.random.Generator) -> Pair:
        draw = float(rng.random())
        self.calls.append((index, draw))
        return Pair(index, int(draw * 1e6) % 3, int(draw * 1e6) % 2)


def _images(root: Path) -> Path:
    for idx in range(3):
        path = image_path(root, idx)
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (idx * 80, 0, 0)).save(path)
    return root


def test_each_row_gets_pairs_per_row_fresh_draws_around_its_own_image(tmp_path: Path) -> None:
    sampler = RecordingSampler()
    dataset = SiameseRowPairs(_images(tmp_path), sampler, 8, seed=4, pairs_per_row=3)
    assert len(dataset) == 3  # one item a row: its image and its three partners
    for row in range(len(dataset)):
        anchor, partners, labels = dataset[row]
        assert anchor.shape == (3, 8, 8) and partners.shape == (3, 3, 8, 8) and labels.shape == (3,)
        assert round(int(anchor[0, 0, 0]) / 80) == row  # the row's own image (JPEG: to a level or two)
        drawn = [draw for _, draw in sampler.calls[-3:]]
        for partner, draw in zip(partners, drawn):
            assert round(int(partner[0, 0, 0]) / 80) == int(draw * 1e6) % 3
        assert labels.tolist() == [float(int(d * 1e6) % 2) for d in drawn]
    rows = [row for row, _ in sampler.calls]
    assert rows == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert len({draw for _, draw in sampler.calls}) == 9  # every repeat of a row is its own draw


def test_one_pair_per_row_is_upstreams_sampling(tmp_path: Path) -> None:
    """At 1 (the full profile) row k's pair is drawn from (seed, epoch, k), as before the option."""
    sampler = RecordingSampler()
    dataset = SiameseRowPairs(_images(tmp_path), sampler, 8, seed=4)
    dataset.epoch = 2
    for item in range(len(dataset)):
        dataset[item]
    expected = [(k, float(np.random.default_rng([4, 2, k]).random())) for k in range(3)]
    assert sampler.calls == expected


@pytest.mark.parametrize("arch", ["resnet18", "resnet34"])
def test_grouped_forward_equals_the_pairs_written_out(arch: str) -> None:
    """Two rows of three partners: each row image embedded once gives the logits of the six pairs
    written out in full (eval mode, so batch statistics do not differ between the two batches)."""
    torch.manual_seed(0)
    model = SiameseNetwork(dropout=0.0, arch=arch).eval()
    anchors, partners = torch.randn(2, 3, 32, 32), torch.randn(6, 3, 32, 32)
    with torch.no_grad():
        grouped = model(anchors, partners)
        written_out = model(anchors.repeat_interleave(3, dim=0), partners)
    assert grouped.shape == (6,)
    torch.testing.assert_close(grouped, written_out, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="do not split evenly"):
        model(anchors, partners[:5])


def test_a_batch_must_hold_whole_rows() -> None:
    with pytest.raises(ValueError, match="not a multiple of pairs_per_row"):
        get_profile("demo", batch_size=30, pairs_per_row=4)


def test_symmetric_pair_features_answer_the_same_for_both_orders() -> None:
    """concat(|a - b|, a * b): the head sees the same 1024 inputs for (a, b) and (b, a), with the
    challenge's layer sizes; the challenge's concat(a, b) does not."""
    torch.manual_seed(0)
    a, b = torch.randn(3, 3, 32, 32), torch.randn(3, 3, 32, 32)
    symmetric = SiameseNetwork(dropout=0.0, arch="resnet18", pair_features="symmetric").eval()
    concat = SiameseNetwork(dropout=0.0, arch="resnet18").eval()
    concat.load_state_dict(symmetric.state_dict())  # same parameters, only the pair features differ
    with torch.no_grad():
        torch.testing.assert_close(symmetric(a, b), symmetric(b, a))
        assert not torch.allclose(concat(a, b), concat(b, a))
    with pytest.raises(ValueError, match="pair_features"):
        SiameseNetwork(pair_features="sum")


def test_the_export_rebuilds_the_profiles_head_from_its_weights(tmp_path: Path) -> None:
    """The demo's siamese network (ResNet-18, symmetric, 1024 wide) exports as it was trained."""
    from types import SimpleNamespace

    from vsbench.abid.trainer import BEST, save_state
    from vsbench.steps.abid import _best_model_for_export

    torch.manual_seed(3)
    trained = SiameseNetwork(dropout=0.0, arch="resnet18", pair_features="symmetric", head_width=64).eval()
    (tmp_path / "checkpoints").mkdir()
    save_state(tmp_path / "checkpoints" / BEST, {"model": trained.state_dict(), "epoch": 1, "score": 0.5})
    run = SimpleNamespace(fit=SimpleNamespace(checkpoint_dir=tmp_path / "checkpoints"))
    exported, example = _best_model_for_export(run, 32, "symmetric")
    pairs = torch.randn(2, 6, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(exported(pairs), torch.sigmoid(trained(pairs[:, :3], pairs[:, 3:])))
    assert example.shape == (2, 6, 32, 32)
