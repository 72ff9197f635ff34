"""timm:, open_clip: and hf: models end to end through the similarity steps (embed shards, merge,
index, score) on a generated DISC set, offline; a second run with another codec embeds
nothing again (the embedding cache)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vsbench.benchmarks.disc.synth import generate_disc
from vsbench.tracking.config import ARTIFACT_LOCATION_ENV

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")]
pytest.importorskip("timm")
pytest.importorskip("open_clip")
pytest.importorskip("transformers")

TINY_OPEN_CLIP = {"embed_dim": 16,
                  "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 8, "head_width": 16},
                  "text_cfg": {"context_length": 8, "vocab_size": 64, "width": 16, "heads": 2, "layers": 1}}


def _hf_dinov2(folder: Path) -> Path:
    import torch
    from safetensors.torch import save_file
    from transformers import BitImageProcessor, Dinov2Config, Dinov2Model

    torch.manual_seed(2)
    model = Dinov2Model(Dinov2Config(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, mlp_ratio=2,
                                     image_size=28, patch_size=14))
    model.config.save_pretrained(folder)  # config only: the weights come as a file option
    BitImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 28, "width": 28}).save_pretrained(folder)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "weights.safetensors"))
    return folder


@pytest.mark.parametrize("family", ["timm", "open_clip", "hf"])
def test_a_library_model_runs_a_benchmark_end_to_end(family: str, tmp_path: Path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from vsbench.cli.app import app

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv(ARTIFACT_LOCATION_ENV, str(tmp_path / "artifacts"))
    generate_disc(tmp_path / "disc", references=8, queries=6, train=8, seed=5)
    if family == "timm":
        model, options = "timm:test_vit", {"weights": "random"}
    elif family == "open_clip":
        config = tmp_path / "tiny-vit.json"
        config.write_text(json.dumps(TINY_OPEN_CLIP))
        model, options = "open_clip:tiny-vit", {"weights": "random", "config": str(config)}
    else:
        folder = _hf_dinov2(tmp_path / "dinov2")
        model, options = f"hf:{folder}", {"weights": str(folder / "weights.safetensors")}
    manifests = {}
    for run, codecs in (("first", "Flat"), ("second", "L2norm,Flat")):
        result = CliRunner().invoke(app, [
            "similarity", "run", "--benchmark", "disc", "--root", str(tmp_path / "disc"), "--out", str(tmp_path / run),
            "--model", model, "--model-options", json.dumps(options), "--codecs", codecs, "--batch-size", "4",
            "--num-shards", "2", "--device", "cpu"])
        assert result.exit_code == 0, result.output[-3000:]
        assert "codec,score_norm,uAP" in result.output and codecs in result.output
        manifests[run] = [json.loads(p.read_text()) for p in sorted((tmp_path / run / "features").glob("*.shard-*.json"))]
    first = sum(m["cache"]["embedded"] for m in manifests["first"])
    assert first == 8 + 6 + 8 and all(m["cache"]["hits"] == 0 for m in manifests["first"])
    assert sum(m["cache"]["embedded"] for m in manifests["second"]) == 0
    assert sum(m["cache"]["hits"] for m in manifests["second"]) == first
    assert {m["cache"]["key_sha256"] for m in manifests["first"] + manifests["second"]} == {
        manifests["first"][0]["cache"]["key_sha256"]}

