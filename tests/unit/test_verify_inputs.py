"""Records that cannot collide, and a full check on request (issue 46, item 2).

Why: a stat record without the device, (inode, size, mtime, ctime), can be the same for two files
on two volumes built from similar folders: a ``--root`` symlink switched between two filesystem
images was answered with the first one's digests. And where a record lies (a filesystem edited
offline or below the VFS), ``--verify-inputs full`` / ``VSBENCH_VERIFY_INPUTS=full`` must re-hash
every input. Mounting two volumes needs root, so ``os.stat`` is made to answer what such volumes
would: equal (inode, size, mtime, ctime), another device.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.digest_files import old_file
from vsbench.cli.app import app
from vsbench.io import storage
from vsbench.io.digests import DigestMemo

REAL_STAT = os.stat
VARIABLE = "VSBENCH_VERIFY_INPUTS"  # spelled out: the tests fail on main for what they test, not a name


class Forged:
    """A stat result with some fields replaced (the rest are the real file's)."""

    def __init__(self, real: os.stat_result, **fields: int) -> None:
        self._real, self._fields = real, fields

    def __getattr__(self, name: str) -> Any:
        return self._fields[name] if name in self._fields else getattr(self._real, name)


def _two_volumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """(root, volume a, volume b): ``root`` a symlink to a; each volume holds ``x.jpg`` of other bytes
    of one size, whose stat records differ only in the device."""
    volumes = tmp_path / "a", tmp_path / "b"
    for number, volume in enumerate(volumes):
        volume.mkdir()
        old_file(volume / "x.jpg", bytes([number]) * 100)
    common = REAL_STAT(volumes[0] / "x.jpg")

    def stat(path: Any, *args: Any, **kwargs: Any) -> Any:
        real = REAL_STAT(path, *args, **kwargs)
        where = os.path.realpath(path) if isinstance(path, (str, os.PathLike)) else ""
        for device, volume in enumerate(volumes, start=7):
            if where == str(volume / "x.jpg"):
                return Forged(real, st_dev=device, st_ino=common.st_ino, st_mtime_ns=common.st_mtime_ns,
                              st_ctime_ns=common.st_ctime_ns)
        return real

    monkeypatch.setattr(os, "stat", stat)
    (tmp_path / "root").symlink_to(volumes[0])
    return tmp_path / "root", *volumes


@pytest.mark.parametrize("call", ["digests", "digest"])
def test_a_root_switched_to_another_volume_with_colliding_records_is_hashed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settled: None, call: str) -> None:
    root, _, _ = _two_volumes(tmp_path, monkeypatch)
    image = root / "x.jpg"
    first = DigestMemo(tmp_path / "memo.json")
    assert getattr(first, call)([image] if call == "digests" else image) in (
        [hashlib.sha256(b"\0" * 100).hexdigest()], hashlib.sha256(b"\0" * 100).hexdigest())
    first.save()
    (tmp_path / "root").unlink()
    (tmp_path / "root").symlink_to(tmp_path / "b")  # the same path, the same record but the device
    again = DigestMemo(tmp_path / "memo.json")
    found = again.digests([image]) if call == "digests" else [again.digest(image)]
    assert found == [hashlib.sha256(b"\1" * 100).hexdigest()] and again.hashed == 1  # on main: volume a's


def test_a_verified_file_on_another_volume_with_a_colliding_record_is_hashed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, _, _ = _two_volumes(tmp_path, monkeypatch)
    digest = hashlib.sha256(b"\0" * 100).hexdigest()
    assert storage.sha256_matches(root / "x.jpg", digest)
    (root / storage.VERIFIED_JSON).rename(tmp_path / "b" / storage.VERIFIED_JSON)  # a block-level copy of it
    (tmp_path / "root").unlink()
    (tmp_path / "root").symlink_to(tmp_path / "b")
    assert not storage.sha256_matches(root / "x.jpg", digest)  # on main: believed from a's record


def _forged_old_record(path: Path, data: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """Write ``data`` over ``path`` and make ``os.stat`` answer its record from before (a record that lies)."""
    before = REAL_STAT(path)
    path.write_bytes(data)
    name = os.path.abspath(path)

    def stat(file: Any, *args: Any, **kwargs: Any) -> Any:
        real = REAL_STAT(file, *args, **kwargs)
        return before if isinstance(file, (str, os.PathLike)) and os.path.abspath(file) == name else real

    monkeypatch.setattr(os, "stat", stat)


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_a_full_check_hashes_a_file_whose_record_lies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      settled: None, how: str) -> None:
    image = old_file(tmp_path / "x.jpg", b"a" * 10)
    memo = DigestMemo(tmp_path / "memo.json")
    memo.digests([image])
    memo.save()
    _forged_old_record(image, b"b" * 10, monkeypatch)
    assert DigestMemo(tmp_path / "memo.json").digests([image]) == [hashlib.sha256(b"a" * 10).hexdigest()]  # lied to
    monkeypatch.setenv(VARIABLE, "full" if how == "environment" else "stat")
    full = DigestMemo(tmp_path / "memo.json", trust_stat=False) if how == "argument" else DigestMemo(tmp_path / "memo.json")
    assert full.digests([image]) == [full.digest(image)] == [hashlib.sha256(b"b" * 10).hexdigest()]
    assert full.hashed == 2
    full.save()  # the memo is still kept: the next stat run starts from verified digests
    assert DigestMemo(tmp_path / "memo.json", trust_stat=True).digests([image]) == [hashlib.sha256(b"b" * 10).hexdigest()]


def test_a_full_check_hashes_a_verified_file_whose_record_lies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shard = tmp_path / "shard.npz"
    shard.write_bytes(b"a" * 10)
    assert storage.sha256_matches(shard, hashlib.sha256(b"a" * 10).hexdigest())
    _forged_old_record(shard, b"b" * 10, monkeypatch)
    monkeypatch.setenv(VARIABLE, "stat")
    assert storage.sha256_matches(shard, hashlib.sha256(b"a" * 10).hexdigest())  # lied to
    monkeypatch.setenv(VARIABLE, "full")
    assert not storage.sha256_matches(shard, hashlib.sha256(b"a" * 10).hexdigest())


@pytest.mark.parametrize("where", ["option", "variable"])
def test_a_bad_mode_is_one_line_naming_the_option_and_the_valid_values(monkeypatch: pytest.MonkeyPatch,
                                                                         where: str) -> None:
    monkeypatch.setenv(VARIABLE, "sometimes" if where == "variable" else "stat")
    given = [] if where == "variable" else ["--verify-inputs", "sometimes"]
    result = CliRunner().invoke(app, ["abid", "resize", "--data", "/nonexistent", "--out", "/nonexistent/out",
                                      *given])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "--verify-inputs" in lines[0] and "stat, full" in lines[0] and "'sometimes'" in lines[0]


def test_a_bad_variable_read_by_a_step_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, "Full")
    with pytest.raises(ValueError, match=r"^VSBENCH_VERIFY_INPUTS='Full' is not one of stat, full"):
        DigestMemo()
    with pytest.raises(ValueError, match=r"^verify_inputs: 'Full' is not one of stat, full$"):
        storage.use_verify_inputs("Full")


def test_a_pipeline_argument_of_a_bad_mode_is_refused_before_submitting() -> None:
    from vsbench.platform.containers import step_environment
    from vsbench.platform.kfp_client import parse_arguments

    assert step_environment({VARIABLE: "full", "HOME": "/root"}) == {VARIABLE: "full"}  # container steps get it
    for pipeline in ("similarity", "nightly", "abid"):
        assert parse_arguments(["verify_inputs=full"], pipeline=pipeline) == {"verify_inputs": "full"}
        with pytest.raises(ValueError, match="verify_inputs: 'always' is not one of stat, full"):
            parse_arguments(["verify_inputs=always"], pipeline=pipeline)


def test_an_older_memo_without_devices_is_no_memo(tmp_path: Path, settled: None) -> None:
    image = old_file(tmp_path / "x.jpg", b"a")
    stat = image.stat()
    (tmp_path / "memo.json").write_text(json.dumps({
        "version": 2, "names": [str(image)], "stats": [[stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]],
        "digests": ["0" * 64]}))
    memo = DigestMemo(tmp_path / "memo.json")
    assert memo.digests([image]) == [hashlib.sha256(b"a").hexdigest()] and memo.hashed == 1

