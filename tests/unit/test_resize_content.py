"""Issue 37: resize outputs are kept on their source's content, and one run writes an output folder.

On main an output was kept on the source's name, size and mtime and the output's size and mtime:
a source replaced by other bytes of the same size with its mtime restored kept the old output
("kept 39"), as did two sources of one size and time swapped by ``rename``, and an output rewritten
in place with its mtime restored. Two resizes into one ``--out`` ran side by side."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.locking import held_elsewhere
from vsbench.abid import resize
from vsbench.abid.resize import MANIFEST_NAME, resize_abid
from vsbench.io.locks import OutputBusy, output_lock, step_lock

SIZE = 32  # small outputs: the tests are about what is kept, not about pixels


def _jpeg(seed: int, width: int = 80, height: int = 60) -> bytes:
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def _padded(data: bytes, length: int) -> bytes:
    """``data`` grown to exactly ``length`` bytes by a JPEG comment after SOI: the same pixels, so
    two different photos can have one size."""
    pad = length - len(data) - 4
    assert pad >= 0
    return data[:2] + b"\xff\xfe" + (pad + 2).to_bytes(2, "big") + b"\0" * pad + data[2:]


def _same_size_pair(seed_a: int, seed_b: int) -> tuple[bytes, bytes]:
    a, b = _jpeg(seed_a), _jpeg(seed_b)
    length = max(len(a), len(b)) + 16
    return _padded(a, length), _padded(b, length)


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Six photos; files written this instant count as settled (RACY_NS 0), as a dataset
    downloaded long before the run is."""
    monkeypatch.setattr(resize, "RACY_NS", 0)
    images = tmp_path / "data" / "bin-images"
    images.mkdir(parents=True)
    for i in range(1, 7):
        (images / f"{i}.jpg").write_bytes(_jpeg(i))
    return tmp_path / "data"


def _run(data: Path, out: Path):
    return resize_abid(data, out, size=SIZE, workers=1, progress=False, max_failure_rate=1.0)


def _fresh(data: Path, tmp_path: Path, name: str) -> bytes:
    """The output a resize into a new folder makes of the source as it is now."""
    fresh = tmp_path / f"fresh-{len(list(tmp_path.glob('fresh-*')))}"
    _run(data, fresh)
    return (fresh / name).read_bytes()


def _restore_times(path: Path, before: os.stat_result) -> None:
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_source_replaced_by_other_bytes_of_its_size_with_its_mtime_restored_is_resized_again(data, tmp_path):
    images, out = data / "bin-images", tmp_path / "out"
    old, new = _same_size_pair(3, 33)
    (images / "3.jpg").write_bytes(old)
    _run(data, out)
    before = os.stat(images / "3.jpg")
    (images / "3.jpg").write_bytes(new)
    _restore_times(images / "3.jpg", before)
    assert os.stat(images / "3.jpg").st_size == before.st_size
    again = _run(data, out)
    assert (out / "00003.jpg").read_bytes() == _fresh(data, tmp_path, "00003.jpg")  # on main: the old photo's
    assert (again.resized, again.kept, again.hashed) == (1, 5, 1)
    assert again.redone == ["00003.jpg: its source changed since it was resized (other bytes); redone"]
    assert json.loads((out / MANIFEST_NAME).read_text())["outputs"]["00003.jpg"][1] == resize.hashlib.sha256(
        new).hexdigest()


def test_a_source_truncated_and_zero_filled_to_its_size_fails_and_leaves_no_output(data, tmp_path):
    images, out = data / "bin-images", tmp_path / "out"
    _run(data, out)
    path = images / "4.jpg"
    before = os.stat(path)
    os.truncate(path, before.st_size // 3)  # cut short, then zeros up to the old size, mtime restored
    os.truncate(path, before.st_size)
    _restore_times(path, before)
    again = _run(data, out)
    assert (again.resized, again.kept, again.failed) == (0, 5, 1)
    assert [f["file"] for f in again.failures] == ["bin-images/4.jpg"]
    assert not (out / "00004.jpg").exists()  # the old photo's output is not left under its name
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert "00004.jpg" not in manifest["outputs"]


def test_two_sources_of_one_size_and_time_swapped_by_rename_are_both_resized_again(data, tmp_path):
    images, out = data / "bin-images", tmp_path / "out"
    first, second = _same_size_pair(1, 2)
    (images / "1.jpg").write_bytes(first)
    (images / "2.jpg").write_bytes(second)
    for name in ("1.jpg", "2.jpg"):
        os.utime(images / name, ns=(1_700_000_000 * 10**9, 1_700_000_000 * 10**9))
    _run(data, out)
    os.rename(images / "1.jpg", images / "swap.tmp")
    os.rename(images / "2.jpg", images / "1.jpg")
    os.rename(images / "swap.tmp", images / "2.jpg")
    again = _run(data, out)
    assert (again.resized, again.kept) == (2, 4)
    for name in ("00001.jpg", "00002.jpg"):
        assert (out / name).read_bytes() == _fresh(data, tmp_path, name)


def test_an_unchanged_rerun_keeps_everything_and_reads_no_source(data, tmp_path, monkeypatch):
    out = tmp_path / "out"
    first = _run(data, out)
    assert (first.resized, first.hashed) == (6, 6)  # each source read once, its digest from those bytes
    opened: list[str] = []
    real_open = open

    def watching_open(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", watching_open)
    again = _run(data, out)
    assert (again.resized, again.kept, again.hashed, again.redone_count) == (0, 6, 0, 0)
    assert not [name for name in opened if "bin-images" in name]


def test_a_source_touched_but_unchanged_is_read_and_its_output_kept(data, tmp_path):
    images, out = data / "bin-images", tmp_path / "out"
    _run(data, out)
    written = os.stat(out / "00005.jpg")
    os.utime(images / "5.jpg")  # a new mtime (and ctime), the same bytes
    again = _run(data, out)
    assert (again.resized, again.kept, again.hashed, again.redone) == (0, 6, 1, [])
    assert os.stat(out / "00005.jpg").st_mtime_ns == written.st_mtime_ns  # not written again
    third = _run(data, out)  # the record now has the new stat: nothing read
    assert (third.kept, third.hashed) == (6, 0)


def test_a_source_read_just_after_it_changed_is_read_again_next_time(data, tmp_path, monkeypatch):
    """A write in the same timestamp tick as the read could leave its stat record as it was."""
    monkeypatch.setattr(resize, "RACY_NS", 10**18)  # every source counts as just written
    out = tmp_path / "out"
    _run(data, out)
    again = _run(data, out)
    assert (again.resized, again.kept, again.hashed) == (0, 6, 6)


def test_an_output_rewritten_with_its_size_and_mtime_restored_is_redone(data, tmp_path):
    out = tmp_path / "out"
    _run(data, out)
    path = out / "00002.jpg"
    before = os.stat(path)
    original = path.read_bytes()
    path.write_bytes(bytes(255 - b for b in original))  # other bytes, the same size
    _restore_times(path, before)
    again = _run(data, out)
    assert path.read_bytes() == original == _fresh(data, tmp_path, "00002.jpg")  # on main: kept as edited
    assert (again.resized, again.kept, again.hashed) == (1, 5, 1)
    assert again.redone == ["00002.jpg: the output's bytes are not those written; redone"]


def test_a_manifest_of_an_older_vsbench_vouches_for_nothing(data, tmp_path):
    out = tmp_path / "out"
    _run(data, out)
    manifest = out / MANIFEST_NAME
    old = json.loads(manifest.read_text())
    old.pop("record_fields")
    old["outputs"] = {name: [r[0], r[3], r[4], r[7], r[8]] for name, r in old["outputs"].items()}
    manifest.write_text(json.dumps(old))
    again = _run(data, out)
    assert (again.resized, again.kept, again.redone_count) == (6, 0, 6)
    assert "no source digest (written by an older vsbench)" in again.redone[0]


def test_a_second_resize_into_a_held_folder_stops_with_one_line_naming_it(data, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(resize.__file__).parents[2]),
                                                        os.environ.get("PYTHONPATH", "")])}
    env.pop("VSBENCH_LOCK_WAIT_S", None)
    with output_lock(out):  # another run writing it
        result = subprocess.run([sys.executable, "-m", "vsbench", "abid", "resize", "--data", str(data),
                                 "--out", str(out), "--size", str(SIZE), "--workers", "1"],
                                env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {out} is being written by another vsbench run"), lines
    assert not list(out.glob("*.jpg")) and not (out / MANIFEST_NAME).exists()


def test_shards_share_their_folder_and_an_unsharded_run_waits_for_none(data, tmp_path):
    out = tmp_path / "out"
    with held_elsewhere(step_lock(out, "resize-shard-0-of-2")):  # shard 0 running
        shard = resize_abid(data, out, size=SIZE, workers=1, progress=False, shard=1, num_shards=2)
        assert (shard.inputs, shard.resized) == (3, 3)
        with pytest.raises(OutputBusy, match="resize-shard-0-of-2"):
            resize_abid(data, out, size=SIZE, workers=1, progress=False, shard=0, num_shards=2)
        with pytest.raises(OutputBusy, match=str(out)):
            _run(data, out)
    with held_elsewhere(output_lock(out)), pytest.raises(OutputBusy):  # a whole run holds it: no shard goes in
        resize_abid(data, out, size=SIZE, workers=1, progress=False, shard=1, num_shards=2)


def test_verify_inputs_full_reads_every_source_and_resizes_one_whose_record_lies(data, tmp_path, monkeypatch):
    """Issue 46: a source rewritten below the VFS keeps its stat record; a full check reads it anyway."""
    images, out = data / "bin-images", tmp_path / "out"
    old, new = _same_size_pair(4, 44)
    (images / "4.jpg").write_bytes(old)
    _run(data, out)
    before, real_stat, name = os.stat(images / "4.jpg"), os.stat, str(images / "4.jpg")
    (images / "4.jpg").write_bytes(new)
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: before if os.fspath(path) == name else real_stat(path, *a, **k))
    monkeypatch.setenv("VSBENCH_VERIFY_INPUTS", "stat")
    lied = _run(data, out)
    assert (lied.resized, lied.kept, lied.hashed) == (0, 6, 0)  # what a record that lies gets
    monkeypatch.setenv("VSBENCH_VERIFY_INPUTS", "full")
    full = _run(data, out)
    assert (full.resized, full.kept, full.hashed) == (1, 5, 6)  # on main: (0, 6, 0)
    assert (out / "00004.jpg").read_bytes() == _fresh(data, tmp_path, "00004.jpg")


def test_a_source_record_of_another_device_is_read_again(data, tmp_path):
    out = tmp_path / "out"
    _run(data, out)
    manifest = out / MANIFEST_NAME
    written = json.loads(manifest.read_text())
    assert written["record_fields"][2] == "source_dev" and written["record_fields"][8] == "output_dev"
    written["outputs"]["00002.jpg"][2] += 1  # the same (inode, size, mtime, ctime) on another volume
    manifest.write_text(json.dumps(written))
    again = _run(data, out)
    assert (again.resized, again.kept, again.hashed) == (0, 6, 1)  # read and hashed: the same bytes keep it


def test_a_manifest_without_devices_reads_each_source_once_and_keeps_its_outputs(data, tmp_path):
    """A manifest of issue 37 (no devices): no output is resized again for want of a device; each
    source is read and hashed once, and the next manifest holds the devices."""
    out = tmp_path / "out"
    _run(data, out)
    manifest = out / MANIFEST_NAME
    written = json.loads(manifest.read_text())
    written["record_fields"] = list(resize.PREVIOUS_RECORD_FIELDS)
    written["outputs"] = {name: r[:2] + r[3:7] + r[9:] for name, r in written["outputs"].items()}
    manifest.write_text(json.dumps(written))
    again = _run(data, out)
    assert (again.resized, again.kept, again.hashed) == (0, 6, 6)
    third = _run(data, out)
    assert (third.resized, third.kept, third.hashed) == (0, 6, 0)
    records = json.loads(manifest.read_text())["outputs"]
    assert all(r[2] == r[8] == os.stat(out).st_dev for r in records.values())
    assert all(r[7] == hashlib.sha256((out / name).read_bytes()).hexdigest() for name, r in records.items())
