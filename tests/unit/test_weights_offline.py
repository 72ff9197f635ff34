"""Weights that cannot be fetched (no network) are an expected failure: one line naming the fix, exit 2,
no traceback file (issue 48: it was "unexpected RuntimeError" and a traceback, though the message named
the fix)."""

from __future__ import annotations

from pathlib import Path
from urllib.error import URLError

import pytest
from typer.testing import CliRunner

from vsbench.benchmarks.disc.synth import generate_disc
from vsbench.cli.app import app


def test_imagenet_weights_without_network_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torchvision.models import ResNet50_Weights

    def offline(self, *args, **kwargs):
        raise URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(ResNet50_Weights.IMAGENET1K_V2.__class__, "get_state_dict", offline)
    monkeypatch.setenv("VSBENCH_ERROR_DIR", str(tmp_path / "errors"))
    generate_disc(tmp_path / "disc", references=6, queries=4, train=6, seed=1)
    result = CliRunner().invoke(app, [
        "similarity", "run", "--benchmark", "disc", "--root", str(tmp_path / "disc"), "--out", str(tmp_path / "out"),
        "--model", "resnet50", "--model-options", '{"weights": "imagenet"}', "--codecs", "Flat", "--no-track",
        "--device", "cpu"], env={"VSBENCH_EMBED_CACHE": "off"})
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2, result.output[-2000:]
    assert len(errors) == 1 and "unexpected" not in errors[0], errors
    assert "could not fetch torchvision's" in errors[0] and "weights='random'" in errors[0]
    assert not (tmp_path / "errors").exists()
