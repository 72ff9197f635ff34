"""torch.compile for the embedding network (vsbench.runtime.compile): the same descriptors as
eager within float tolerance, a fallback to eager (exactly eager's descriptors) when compiling
fails, one compile per process for every set and shard, and --compile checked at the CLI."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn
from typer.testing import CliRunner

from vsbench.cli.app import app
from vsbench.io.features import ImageSet
from vsbench.models.registry import IMAGENET_MEAN, IMAGENET_STD, Embedder, Preprocessing
from vsbench.retrieval import embed
from vsbench.runtime import compile as compiling
from vsbench.runtime.compile import compile_status, compile_wanted, network_for, use_inductor_cache
from vsbench.runtime.device import setup_device

from .test_embed import TinyDescriptor

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.*` is deprecated:FutureWarning")


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(1)
    found = []
    for n in range(10):  # batches of 4, 4 and 2: the last runs eager even when compiled
        found.append(folder / f"{n}.png")
        Image.fromarray(rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)).save(found[-1])
    return found


def _model() -> Embedder:
    torch.manual_seed(3)
    return Embedder("tiny", TinyDescriptor(), 5, Preprocessing(input_size=16, resize_size=20, mean=IMAGENET_MEAN,
                                                     std=IMAGENET_STD))


def _embed(model: Embedder, paths: list[Path], mode: str) -> np.ndarray:
    features, failed = embed.run_embedder(model, [p.stem for p in paths], paths, setup_device("cpu"), use_amp=False,
                                          batch_size=4, workers=0, progress=False, compile_mode=mode)
    assert failed == []
    return features.features


def test_compile_is_on_for_cuda_in_auto_and_refuses_other_words() -> None:
    assert compile_wanted("auto", torch.device("cuda")) and not compile_wanted("auto", torch.device("cpu"))
    assert compile_wanted("on", torch.device("cpu")) and not compile_wanted("off", torch.device("cuda"))
    with pytest.raises(ValueError, match="expected one of auto, on, off"):
        compile_wanted("yes", torch.device("cpu"))


@pytest.mark.slow
def test_compiled_on_the_cpu_gives_the_eager_descriptors(paths: list[Path]) -> None:
    """Inductor on the CPU (it needs a C++ compiler: g++ here). Where it cannot compile, the
    fallback is what this shows: 'active' False with the reason, descriptors eager's exactly."""
    eager = _embed(_model(), paths, "off")
    model = _model()
    compiled = _embed(model, paths, "on")
    status = compile_status(model, "on", torch.device("cpu"), None)
    assert status["wanted"] is True
    if status["active"]:
        np.testing.assert_allclose(compiled, eager, rtol=1e-4, atol=1e-5)
    else:
        assert status["failure"], "not compiled and no reason given"
        np.testing.assert_array_equal(compiled, eager)


def test_a_failing_compile_falls_back_to_eager_with_one_warning(paths: list[Path], monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    def refuse(*args, **kwargs):
        raise RuntimeError("Compiler: cc is not found\nmore lines that stay out of the warning")

    monkeypatch.setattr(torch, "compile", refuse)
    eager = _embed(_model(), paths, "off")
    model = _model()
    with caplog.at_level(logging.WARNING, logger="vsbench.runtime.compile"):
        fallen = _embed(model, paths, "on")
    np.testing.assert_array_equal(fallen, eager)
    assert [r.getMessage() for r in caplog.records] == [
        "torch.compile failed (RuntimeError: Compiler: cc is not found); embedding with the eager network"]
    assert compile_status(model, "on", torch.device("cpu"), None)["active"] is False


def test_a_compile_that_fails_at_its_first_call_falls_back_too(paths: list[Path],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.compile itself returns at once; Dynamo and Inductor run at the first call."""
    def lazy(module: nn.Module, **kwargs):
        def call(x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("BackendCompilerFailed: backend='inductor' raised: C++ compile error")
        return call

    monkeypatch.setattr(torch, "compile", lazy)
    model = _model()
    np.testing.assert_array_equal(_embed(model, paths, "on"), _embed(_model(), paths, "off"))
    assert "BackendCompilerFailed" in compile_status(model, "on", torch.device("cpu"), None)["failure"]


def test_one_compile_per_network_and_only_the_first_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    calls, shapes = [], []

    def fake(module: nn.Module, **kwargs):
        calls.append(kwargs)

        def call(x: torch.Tensor) -> torch.Tensor:
            shapes.append(tuple(x.shape))
            return module(x)
        return call

    monkeypatch.setattr(torch, "compile", fake)
    network = TinyDescriptor()
    wrapped = network_for(network, "on", torch.device("cpu"))
    assert network_for(network, "on", torch.device("cpu")) is wrapped  # a second set or shard: no new compile
    for batch in (4, 4, 2):
        wrapped(torch.zeros(batch, 3, 8, 8))
    assert calls == [{"dynamic": False}]
    assert shapes == [(4, 3, 8, 8), (4, 3, 8, 8)]  # the smaller last batch ran eager
    assert network_for(network, "off", torch.device("cpu")) is network


def test_the_embed_step_builds_and_compiles_once_for_every_set(tmp_path: Path, paths: list[Path],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[str] = []
    monkeypatch.setattr(torch, "compile", lambda module, **kwargs: compiled.append(type(module).__name__) or module)
    monkeypatch.setenv("VSBENCH_EMBED_CACHE", "off")
    scripted = tmp_path / "tiny.pt"
    torch.jit.script(TinyDescriptor().eval()).save(str(scripted))
    options = {"path": str(scripted), "input_size": 16, "resize_size": 20, "preserve_aspect_ratio": False}
    images = ImageSet(tuple(p.stem for p in paths), tuple(paths))
    networks: dict = {}  # what an Engine keeps for its run
    for name in ("queries", "references"):
        embed.embed_image_set("torchscript", images, tmp_path / "out", set_name=name, batch_size=4, workers=0,
                              model_options=options, progress=False, compile="on", reuse=networks)
    assert len(compiled) == 1
    manifest = (tmp_path / "out" / "references.shard-0-of-1.json").read_text()
    assert '"active": true' in manifest and '"mode": "on"' in manifest


def test_inductor_caches_go_beside_the_embedding_cache_unless_named(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    assert use_inductor_cache(None) is None
    folder = use_inductor_cache(tmp_path / "embeddings")
    assert folder == tmp_path / "embeddings" / compiling.INDUCTOR_DIR and folder.is_dir()
    assert compiling.os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(folder)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert use_inductor_cache(tmp_path / "embeddings") == tmp_path / "mine"


def test_the_cli_refuses_an_unknown_compile_mode_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["similarity", "run", "--benchmark", "disc", "--root", str(tmp_path),
                                      "--out", str(tmp_path / "out"), "--compile", "maybe"])
    assert result.exit_code == 2
    assert "--compile" in result.output and "'maybe' is not one of 'auto', 'on', 'off'" in result.output
