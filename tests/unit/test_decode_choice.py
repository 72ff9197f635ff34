"""``--decode auto`` takes the path measured faster on this kind of device (issue 58): on CUDA,
embedding goes to the Pillow workers (one H200: 1,108 against 738 images/s end to end), and the
manifest and the MLflow params say which path was taken and why. CUDA is mocked: nothing here
needs a GPU, and nothing is timed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from vsbench.imaging import batched, modes
from vsbench.io.features import ImageSet
from vsbench.retrieval import embed
from vsbench.tracking.runs import Tracker

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.fixture
def nvjpeg(monkeypatch: pytest.MonkeyPatch) -> None:
    """A torchvision that can decode on CUDA (and on the CPU), as on a GPU node."""
    monkeypatch.setattr(batched, "device_decode_available", lambda device: True)


def test_auto_embeds_with_the_workers_on_cuda_citing_the_measurement(nvjpeg):
    choice = batched.decode_choice("auto", CUDA, "embed")
    assert choice.path == modes.WORKERS and not choice.on_device
    assert "1,108" in choice.reason and "738" in choice.reason and "bench/README.md" in choice.reason
    assert not batched.uses_device_decode("auto", CUDA, "embed")


def test_auto_trains_with_the_device_decode_on_cuda_and_the_workers_elsewhere(nvjpeg):
    assert batched.decode_choice("auto", CUDA, "train").on_device  # issue 40's measured default, unchanged
    for workload in modes.WORKLOADS:
        assert batched.decode_choice("auto", CPU, workload).path == modes.WORKERS


def test_every_row_of_the_table_names_a_path_and_its_source():
    for (workload, device_type), (path, source) in modes.AUTO_DECODE.items():
        assert workload in modes.WORKLOADS and path in (modes.DEVICE, modes.WORKERS), (workload, device_type)
        assert "bench/README.md" in source, (workload, device_type)


def test_gpu_and_cpu_are_taken_as_asked_and_gpu_fails_in_one_line_where_nothing_decodes(monkeypatch):
    assert batched.decode_choice("gpu", CPU, "embed").on_device  # the test path: torchvision's CPU decoder
    assert batched.decode_choice("cpu", CUDA, "embed").path == modes.WORKERS
    monkeypatch.setattr(batched, "device_decode_available", lambda device: device.type != "cuda")
    assert batched.decode_choice("auto", CUDA, "train").path == modes.WORKERS  # a torchvision without nvJPEG
    with pytest.raises(ValueError, match="--decode gpu: torchvision cannot decode JPEGs on cuda"):
        batched.decode_choice("gpu", CUDA, "embed")
    with pytest.raises(ValueError, match="use one of auto, gpu, cpu"):
        batched.decode_choice("nvjpeg", CPU, "embed")
    with pytest.raises(ValueError, match="use one of embed, train"):
        batched.decode_choice("auto", CPU, "resize")


def _photos(folder: Path, count: int = 3) -> ImageSet:
    from PIL import Image

    folder.mkdir()
    rng = np.random.default_rng(0)
    paths = []
    for n in range(count):
        path = folder / f"{n}.jpg"
        Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return ImageSet(tuple(p.stem for p in paths), tuple(paths))


def test_the_embed_step_on_a_cuda_node_records_the_workers_and_why(tmp_path, nvjpeg, monkeypatch):
    """The step resolves ``auto`` for the device the run asks for (mocked to CUDA here; the network
    still runs on the CPU) and the manifest records the path and the reason."""
    monkeypatch.setenv("VSBENCH_EMBEDDING_CACHE", "off")
    monkeypatch.setattr(embed, "resolve_device", lambda device: CUDA)
    images = _photos(tmp_path / "photos")
    written = embed.embed_image_set("efficientnet_lite0", images, tmp_path / "out", set_name="photos", device="cpu",
                                    workers=0, model_options={"weights": "random"}, progress=False, compile="off")
    decode = json.loads(written.with_suffix(".json").read_text())["decode"]
    assert decode["mode"] == "auto" and decode["path"] == "workers" and decode["on_device"] is False
    assert "1,108" in decode["reason"]


def test_the_step_logs_the_decode_path_and_reason_as_params(tmp_path, monkeypatch):
    from vsbench.runspec.run import SimilarityRun
    from vsbench.steps.similarity import similarity_embed_step

    reason = modes.resolve_decode("auto", "cuda", "embed", device_decode_available=True).reason
    manifests = {"query": {"count": 2, "failed": [], "decode": {"mode": "auto", "path": "workers", "reason": reason}},
                 "reference": {"count": 3, "failed": [], "decode": {"mode": "auto", "path": "workers", "reason": reason}}}
    for name, manifest in manifests.items():
        (tmp_path / f"{name}.shard-0-of-1.json").write_text(json.dumps(manifest))

    class Engine:
        def embed_shard(self, model, **kwargs):
            return {name: str(tmp_path / f"{name}.shard-0-of-1.npz") for name in manifests}

    logged: dict[str, str] = {}
    monkeypatch.setattr(Tracker, "log_params", lambda self, params: logged.update(params))
    run = SimilarityRun(benchmark="disc", root=str(tmp_path), model="precomputed")
    similarity_embed_step(run, str(tmp_path / "out"), engine=Engine(), progress=False, compile="off")
    assert logged["decode"] == "auto" and logged["decode_path"] == "workers" and "1,108" in logged["decode_reason"]
