"""Start-up and steady-state rate (vsbench.runtime.throughput), for the embed loop and training,
checked with a fake clock: the reported images/s is the images after the first batch over the
clock's seconds after it, exactly what a stopwatch started there reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from vsbench.models.registry import IMAGENET_MEAN, IMAGENET_STD, Embedder, Preprocessing
from vsbench.retrieval import embed
from vsbench.runtime import throughput
from vsbench.runtime.device import setup_device
from vsbench.runtime.throughput import Throughput


class FakeClock:
    """Time moves only when told to: ``tick`` seconds per call of ``advance``."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(throughput, "clock", fake)
    return fake


def test_startup_ends_at_the_first_batch_and_pauses_are_not_counted(clock: FakeClock) -> None:
    meter = Throughput()
    clock.advance(7.0)  # model build, workers, first batch
    meter.batch_done(32)
    for _ in range(4):
        clock.advance(0.5)
        meter.batch_done(32)
    meter.pause()
    clock.advance(30.0)  # validation and a checkpoint
    meter.resume()
    clock.advance(1.0)  # the next epoch's loader starting: training time
    meter.batch_done(16)
    meter.pause()
    assert meter.startup_seconds == 7.0
    assert meter.images == 4 * 32 + 16
    assert meter.steady_seconds == 3.0
    assert meter.steady_images_per_second == 48.0
    assert meter.as_dict() == {"startup_seconds": 7.0, "images_per_second_steady": 48.0}


def test_one_batch_has_no_steady_rate(clock: FakeClock) -> None:
    meter = Throughput()
    clock.advance(2.0)
    meter.batch_done(8)
    meter.pause()
    assert meter.startup_seconds == 2.0 and meter.steady_images_per_second is None


class SlowNetwork(nn.Module):
    """Each forward pass takes one second of the fake clock."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.fc = nn.Linear(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.clock.advance(1.0)
        return self.fc(x.mean(dim=(2, 3)))


def test_the_embed_loop_reports_what_a_stopwatch_sees_after_the_first_batch(clock: FakeClock,
                                                                              tmp_path: Path) -> None:
    """10 images in batches of 4 (4, 4, 2): start-up is the 5 s 'build' plus the first forward; after
    it 6 images in 2 forwards of 1 s: 3 images/s, whatever the machine's real speed."""
    rng = np.random.default_rng(0)
    paths = []
    for n in range(10):
        paths.append(tmp_path / f"{n}.png")
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(paths[-1])
    preprocessing = Preprocessing(input_size=8, resize_size=8, mean=IMAGENET_MEAN, std=IMAGENET_STD)
    model = Embedder("slow", SlowNetwork(clock), 4, preprocessing)
    meter = Throughput()
    clock.advance(5.0)  # building the model
    features, failed = embed.run_embedder(model, [str(n) for n in range(10)], paths, setup_device("cpu"),
                                          use_amp=False, batch_size=4, workers=0, progress=False, meter=meter)
    assert len(features) == 10 and failed == []
    assert meter.startup_seconds == 6.0
    assert meter.images == 6 and meter.steady_seconds == 2.0
    assert meter.steady_images_per_second == 3.0
