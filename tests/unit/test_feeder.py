"""The feeder (issue 58) on the CPU: batch i+1 is prepared before batch i reaches the network, the
embedding through it gives the Pillow path's descriptors within docs/fidelity.md's bound on both
decode paths, and the stage timeline lands in the manifest. Nothing is timed against a threshold:
the timeline's numbers are checked for shape only (wall time is no test's business)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from vsbench.benchmarks.disc.synth import procedural_image
from vsbench.io.features import ImageSet
from vsbench.retrieval import embed
from vsbench.runtime.device import setup_device
from vsbench.runtime.feeder import Fed, Feeder
from vsbench.runtime.stages import STAGES, Stages

CPU = torch.device("cpu")


def _run(batches: int, ahead: int = 1) -> list[str]:
    """The order of events when the consumer runs its 'network' on each batch the feeder yields."""
    log: list[str] = []
    stages = Stages(CPU)

    def source():
        for n in range(batches):
            log.append(f"read {n}")
            yield n

    def prepare(batch, stream, index):
        assert stream is None  # no streams on the CPU: the same code, in line
        log.append(f"prepare {batch}")
        return Fed([(torch.tensor([batch]), torch.zeros(1))], [], [(batch, None)])

    for fed in Feeder(source(), CPU, prepare, stages, ahead=ahead):
        log.append(f"network {fed.read[0][0]}")
    return log


def test_the_next_batch_is_prepared_before_the_network_takes_this_one():
    assert _run(3) == ["read 0", "prepare 0", "read 1", "prepare 1", "network 0", "read 2", "prepare 2",
                       "network 1", "network 2"]
    assert _run(0) == [] and _run(1) == ["read 0", "prepare 0", "network 0"]


def test_two_ahead_prepares_two_before_the_first_network():
    assert _run(4, ahead=2)[:7] == ["read 0", "prepare 0", "read 1", "prepare 1", "read 2", "prepare 2", "network 0"]
    with pytest.raises(ValueError, match="ahead must be at least 1"):
        Feeder([], CPU, lambda *a: None, Stages(CPU), ahead=0)  # type: ignore[arg-type, return-value]


def test_the_stages_summary_names_a_steady_batch_and_sums_every_batch():
    stages = Stages(CPU)
    for _ in range(5):
        index = stages.batch()
        for stage in ("read", "copy", "network", "copy"):  # a stage met twice: one span
            with stages.host_span(index, stage):
                pass
    summary = stages.summary()
    assert summary["batches"] == 5 and summary["steady_batch"] == 2 and summary["clock"] == "perf_counter"
    assert list(summary["timeline_ms"]) == ["read", "copy", "network"]  # in STAGES order, only those met
    assert all(v >= 0 for v in summary["total_ms"].values())
    with pytest.raises(ValueError, match="stage 'decoding': use one of read, copy"):
        with stages.host_span(0, "decoding"):
            pass
    assert Stages(CPU).summary()["steady_batch"] is None


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> ImageSet:
    """JPEGs of sizes that need a resize and a crop, and some that need none."""
    folder = tmp_path_factory.mktemp("feeder-photos")
    rng = np.random.default_rng(58)
    paths = []
    for n, size in enumerate([(224, 224), (300, 260), (480, 360), (224, 224), (640, 480), (257, 256), (224, 224)]):
        path = folder / f"{n}.jpg"
        procedural_image(rng, size).save(path, quality=90)
        paths.append(path)
    return ImageSet(tuple(p.stem for p in paths), tuple(paths))


def _embed(photos: ImageSet, out: Path, decode: str) -> tuple[np.ndarray, dict]:
    written = embed.embed_image_set("efficientnet_lite0", photos, out, set_name="photos", device="cpu", workers=0,
                                    batch_size=3, model_options={"weights": "random"}, progress=False, compile="off",
                                    decode=decode)
    return embed.load_features(written).features, json.loads(written.with_suffix(".json").read_text())


def test_both_paths_through_the_feeder_give_the_pillow_descriptors_and_a_timeline(photos, tmp_path, monkeypatch):
    """The batched decode (``gpu`` on the CPU: libjpeg-turbo through the same code) against the Pillow
    workers, through the same feeder: cosine per image within docs/fidelity.md's bound (0.9995)."""
    monkeypatch.setenv("VSBENCH_EMBEDDING_CACHE", "off")
    pillow, manifest_cpu = _embed(photos, tmp_path / "cpu", "cpu")
    batched, manifest_gpu = _embed(photos, tmp_path / "gpu", "gpu")
    cosine = (pillow * batched).sum(1) / np.linalg.norm(pillow, axis=1) / np.linalg.norm(batched, axis=1)
    assert len(cosine) == 7 and cosine.min() >= 0.9995, cosine
    assert manifest_gpu["decode"]["path"] == "device" and manifest_gpu["decode"]["cpu_fallbacks"] == 0
    for manifest, stages in ((manifest_cpu, {"read", "copy", "network", "write"}),
                             (manifest_gpu, {"read", "copy", "decode", "network", "write"})):
        summary = manifest["stages"]
        assert summary["batches"] == 3 and summary["steady_batch"] == 1, summary  # 7 images, batches of 3
        assert set(summary["timeline_ms"]) == stages and set(summary["total_ms"]) == stages
        assert set(summary["timeline_ms"]) <= set(STAGES)


def test_the_feeder_path_decodes_the_bytes_it_hashed(photos, tmp_path, monkeypatch):
    """A photo replaced after the key hashed it and before the worker read it: the batched path
    through the feeder stops with InputsChanged naming it, as the Pillow path does (issue 46)."""
    monkeypatch.setenv("VSBENCH_EMBEDDING_CACHE", "off")
    root = tmp_path / "root"
    root.mkdir()
    paths = []
    for path in photos.paths:
        paths.append(root / path.name)
        paths[-1].write_bytes(path.read_bytes())
    images = ImageSet(photos.ids, tuple(paths))
    victim = paths[4]
    original = embed.read_image_file

    def read_then_change(path):
        if Path(path) == victim:
            victim.write_bytes(photos.paths[0].read_bytes())  # other bytes, after the key hashed the file
        return original(path)

    monkeypatch.setattr(embed, "read_image_file", read_then_change)
    for decode in ("gpu", "cpu"):
        victim.write_bytes(photos.paths[4].read_bytes())
        with pytest.raises(embed.InputsChanged, match=rf"^{victim}: changed while embed photos.shard-0-of-1 read it"):
            embed.embed_image_set("efficientnet_lite0", images, tmp_path / decode, set_name="photos", device="cpu",
                                  workers=0, batch_size=3, model_options={"weights": "random"}, progress=False,
                                  compile="off", decode=decode)


def test_setup_on_the_cpu_has_no_stream():
    assert Feeder([], setup_device("cpu").device, lambda *a: None, Stages(CPU)).stream is None  # type: ignore[arg-type, return-value]


def test_on_cuda_the_network_waits_for_each_batch_on_the_device_not_on_the_host(monkeypatch):
    """CUDA mocked: each batch is prepared inside the feeder's stream, the network's stream waits for
    that batch's event (a device-side wait: no synchronize), and every tensor handed over is marked
    as used on the network's stream (else the allocator could reuse its memory early)."""
    import contextlib

    calls: list[tuple] = []

    class Stream:
        def __init__(self, name: str) -> None:
            self.name = name

        def wait_event(self, event) -> None:
            calls.append(("wait_event", self.name, event.batch))

        def wait_stream(self, other) -> None:
            calls.append(("wait_stream", self.name, other.name))

        def synchronize(self) -> None:
            calls.append(("synchronize", self.name))

    class Event:
        def record(self, stream) -> None:
            self.batch = len([c for c in calls if c[0] == "prepare"]) - 1
            calls.append(("record", stream.name, self.batch))

    class Tensor:
        def __init__(self, batch: int) -> None:
            self.batch = batch

        def record_stream(self, stream) -> None:
            calls.append(("record_stream", stream.name, self.batch))

    main, side = Stream("main"), Stream("feeder")
    monkeypatch.setattr(torch.cuda, "Stream", lambda device: side)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: main)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext(calls.append(("enter", stream.name))))

    def prepare(batch, stream, index):
        calls.append(("prepare", stream.name, batch))
        return Fed([(torch.tensor([batch]), Tensor(batch))], [], [(batch, None)])  # type: ignore[list-item]

    seen = [fed.read[0][0] for fed in Feeder(range(2), torch.device("cuda"), prepare, Stages(CPU))]
    assert seen == [0, 1]
    assert calls == [("wait_stream", "feeder", "main"),
                     ("enter", "feeder"), ("prepare", "feeder", 0), ("record", "feeder", 0),
                     ("enter", "feeder"), ("prepare", "feeder", 1), ("record", "feeder", 1),
                     ("wait_event", "main", 0), ("record_stream", "main", 0),
                     ("wait_event", "main", 1), ("record_stream", "main", 1)]
