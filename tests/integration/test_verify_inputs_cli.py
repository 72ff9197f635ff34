"""``--verify-inputs full`` through the CLI (issue 46, item 2): a `similarity run` re-hashes an image
whose bytes changed while its stat record was forged to the old one (a filesystem edited offline or
below the VFS keeps records that lie), so the embed step keys its features on the new bytes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from PIL import Image, ImageOps
from typer.testing import CliRunner

from tests.integration.test_input_changes import same_size_jpeg
from tests.integration.tiny_model import scripted_model
from tests.unit.test_verify_inputs import VARIABLE, _forged_old_record
from vsbench.benchmarks.disc.synth import generate_disc
from vsbench.cli.app import app

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:`torch.jit.*` is deprecated:FutureWarning")]


def _similarity_run(root: Path, out: Path, model: Path, *extra: str) -> str:
    result = CliRunner().invoke(app, [
        "similarity", "run", "--benchmark", "disc", "--root", str(root), "--out", str(out), "--model", "torchscript",
        "--model-options", json.dumps({"path": str(model)}), "--codecs", "Flat", "--batch-size", "8", "--no-track",
        "--device", "cpu", *extra], env={"VSBENCH_EMBED_CACHE": "off"})
    assert result.exit_code == 0, result.output[-2000:]
    return result.output


def _memo_digest(out: Path, image: Path) -> str:
    """The digest the embed step's memo holds for ``image`` (the one its features are keyed on)."""
    for memo in (out / "features" / ".inputs").glob("*.json"):
        data = json.loads(memo.read_text())
        if str(image) in data["names"]:
            return data["digests"][data["names"].index(str(image))]
    raise AssertionError(f"no memo names {image}")


def test_verify_inputs_full_rehashes_an_image_whose_record_lies_through_the_cli(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settled: None) -> None:
    monkeypatch.setenv(VARIABLE, "stat")  # restored after the CLI sets it
    root, out = tmp_path / "disc", tmp_path / "out"
    generate_disc(root, references=4, queries=3, train=4, seed=3)
    model = scripted_model(tmp_path / "model.pt", 0)
    _similarity_run(root, out, model)
    image = sorted((root / "val_query").glob("*.jpg"))[0]
    old = image.read_bytes()
    new = same_size_jpeg(old, ImageOps.invert(Image.open(image).convert("RGB")))
    _forged_old_record(image, new, monkeypatch)  # other bytes, and a stat record that says "unchanged"
    assert _memo_digest(out, image) == hashlib.sha256(old).hexdigest()
    _similarity_run(root, out, model, "--verify-inputs", "full")
    assert _memo_digest(out, image) == hashlib.sha256(new).hexdigest()  # on main: no such option (exit 2)
