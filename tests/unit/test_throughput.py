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


def test_training_reports_startup_and_the_steady_rate_of_its_batch_loops(clock: FakeClock, tmp_path: Path) -> None:
    """Two epochs of three batches of 8 images; each step takes 1 s of the fake clock and each
    validation 10 s, which the steady rate leaves out: 5 batches after the first, 40 images in 5 s."""
    from vsbench.abid.checkpoints import TrainingIdentity
    from vsbench.abid.profiles import get_profile
    from vsbench.abid.trainer import fit

    model = nn.Linear(2, 2)
    batches = [torch.ones(8, 2)] * 3

    def step(trained, batch, device, epoch, index):
        clock.advance(1.0)
        return trained(batch).pow(2).mean(), 0, len(batch)

    def evaluate(trained):
        clock.advance(10.0)
        return {"score": 0.5}

    profile = get_profile("demo", epochs=2, batch_size=8, image_size=32, workers=0, optimizer="sgd", lr=0.01)
    result = fit(model=model, make_batches=lambda epoch: batches, step=step, evaluate=evaluate, profile=profile,
                 device=setup_device("cpu"), checkpoint_dir=tmp_path, seed=0,
                 identity=TrainingIdentity({"test": 1}, "0" * 64), images_per_batch=len, progress=False)
    assert result.startup_seconds == 1.0  # the clock moves only in steps: start-up is the first one
    assert result.steady_images_per_second == 8.0  # 40 images after the first batch in 5 s of steps
    assert result.images_per_second > 0  # the old figure, kept: every image over the whole fit's wall time


def test_the_embed_step_logs_startup_and_steady_rate_per_set_and_keeps_the_old_name(tmp_path: Path) -> None:
    """The step's metrics from each set's manifest: a measured shard gives all three, a kept one
    (no start-up measured) only the old images/s, never a made-up zero."""
    import json

    from vsbench.runspec.run import SimilarityRun
    from vsbench.steps.similarity import similarity_embed_step

    manifests = {"query": {"count": 10, "images_per_second": 50.0, "startup_seconds": 6.5,
                           "images_per_second_steady": 80.0, "failed": []},
                 "reference": {"count": 20, "images_per_second": 70.0, "failed": []}}
    for name, manifest in manifests.items():
        (tmp_path / f"{name}.shard-0-of-1.json").write_text(json.dumps(manifest))

    class Engine:
        def embed_shard(self, model, **kwargs):
            assert kwargs["compile"] == "off"
            return {name: str(tmp_path / f"{name}.shard-0-of-1.npz") for name in manifests}

    run = SimilarityRun(benchmark="disc", root=str(tmp_path), model="precomputed")
    result = similarity_embed_step(run, str(tmp_path / "out"), engine=Engine(), progress=False, compile="off")
    assert {k: v for k, v in result.metrics.items() if "second" in k and k != "step_seconds"} == {
        "query_images_per_second": 50.0, "query_images_per_second_steady": 80.0, "query_startup_seconds": 6.5,
        "reference_images_per_second": 70.0}
