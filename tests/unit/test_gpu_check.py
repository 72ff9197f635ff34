"""bench/gpu_check.sh cannot rot: its CPU dry run, at a tiny size, runs every stage and prints the table
(the same script, the same Python half, on the CPU: the batched decode's code path with torchvision's
CPU decoder, the demo profile at 32 px)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_cpu_dry_run_runs_every_stage_and_prints_one_table(tmp_path):
    # Batches of 8, not the script's 256: on the CPU the network alone was timed on 4 batches of 256
    # images at 224 px (most of this test's minutes, proving nothing a batch of 8 does not), and 16
    # photos in batches of 8 are two batches, so the embed's timeline picks a steady batch from several.
    env = {**os.environ, "GPU_CHECK_DEVICE": "cpu", "GPU_CHECK_IMAGES": "60", "GPU_CHECK_WORK": str(tmp_path),
           "GPU_CHECK_WORKERS": "1", "GPU_CHECK_EMBED_PHOTOS": "16", "GPU_CHECK_BATCH": "8",
           "GPU_CHECK_WHEELS": str(tmp_path / "no-wheels"), "PYTHON": sys.executable, "VSBENCH_MAX_FAILURE_RATE": "1"}
    done = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh")], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    table = done.stdout
    assert "vsbench GPU check:" in table and "device cpu" in table
    for row in ("embed", "decoded on the device, 0 CPU fallbacks", "decoded by Pillow in the workers",
                "descriptors: device vs Pillow decode", "decode+resize+crop, batched", "abid train counting, epoch 1",
                "abid train siamese, epoch 1", "similarity disc uap", "model only (tensors on the device)",
                "of model only", "ms per stage", "--decode auto embeds with"):
        assert row in table, row
    assert table.count("decoded on the device") >= 3  # the embed and both trainings took the batched path
    assert "batch 8, " in table  # the model-only row ran at the batch asked for
    assert table.count("ms per stage") == 2 and "decode " in table.split("ms per stage")[1].splitlines()[0]
    worst = float(table.split("cosine worst ")[1].split(",")[0])
    assert worst >= 0.999


def test_a_missing_wheel_is_named_in_one_line(tmp_path):
    """The preflight names what a bare machine lacks and where the header says to get it."""
    env = {**os.environ, "GPU_CHECK_DEVICE": "cpu", "GPU_CHECK_WORK": str(tmp_path), "PYTHON": sys.executable,
           "GPU_CHECK_WHEELS": str(tmp_path / "no-wheels"), "PYTHONPATH": str(tmp_path / "shadow")}
    (tmp_path / "shadow").mkdir()
    (tmp_path / "shadow" / "simplejpeg.py").write_text("raise ImportError('not on this machine')\n")
    done = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh")], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode != 0
    assert "gpu_check: missing: simplejpeg" in done.stderr and "bench/wheels/" in done.stderr


def test_the_script_turns_off_the_embedding_cache_vsbench_reads():
    """A GPU check that read an earlier run's embeddings back from the user cache would time nothing:
    the script must export the variable :mod:`vsbench.models.cache` reads (it once exported
    ``VSBENCH_EMBEDDING_CACHE``, a name nothing reads)."""
    from vsbench.models.cache import CACHE_ENV

    text = (ROOT / "bench" / "gpu_check.sh").read_text()
    assert f"export {CACHE_ENV}=off" in text
