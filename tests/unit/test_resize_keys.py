"""The records that let a resize re-run keep an output (issue 37), one function at a time (issue 49:
the guards mutation testing runs against): a record's fields, what a worker returns for one job,
how a manifest is written and read back, how results are counted and checkpointed.

Each test works on a few small files in ``tmp_path`` (one JPEG at most), no pool, no lock: a
mutant of these functions is judged in a fraction of a second."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch  # noqa: F401 - imported once here, not in the test of --decode fast (mutation testing forks per mutant)
from PIL import Image

from vsbench.abid import resize
from vsbench.abid.resize import (
    FAILED,
    PREVIOUS_RECORD_FIELDS,
    RECORD_FIELDS,
    RESIZED,
    SAME,
    UNKNOWN_DEVICE,
    UNKNOWN_DIGEST,
    UNREAD,
    UNVOUCHED,
    ResizeJob,
    ResizeSummary,
)
from vsbench.io.storage import stat_record

D1, D2 = "a" * 64, "0123456789abcdef" * 4


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def jpeg(seed: int = 0, width: int = 20, height: int = 16) -> bytes:
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(buffer, format="JPEG")
    return buffer.getvalue()


def record(name: str = "1.jpg", source: str = D1, output: str = D2) -> list:
    return [name, source, 1, 2, 3, 4, 5, output, 6, 7, 8, 9, 10]


# --- _source_fields --------------------------------------------------------------------------------

def stat(mtime: int, ctime: int) -> SimpleNamespace:
    return SimpleNamespace(st_dev=11, st_ino=12, st_size=13, st_mtime_ns=mtime, st_ctime_ns=ctime)


def test_a_source_record_holds_its_name_digest_and_stat(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resize, "RACY_NS", 100)
    assert resize._source_fields("/d/bin-images/7.jpg", D1, stat(1000, 900), 1100) == ["7.jpg", D1, 11, 12, 13, 1000, 900]


@pytest.mark.parametrize(("mtime", "ctime", "read_at", "vouched"), [
    (1000, 1000, 1099, False),  # changed less than RACY_NS before the read
    (1000, 1000, 1100, True),  # exactly RACY_NS before: settled
    (1000, 1050, 1100, False),  # the ctime is the later change
    (1050, 1000, 1100, False),  # the mtime is the later change
])
def test_a_source_read_right_after_a_change_is_not_vouched_for_by_its_stat(
        monkeypatch: pytest.MonkeyPatch, mtime: int, ctime: int, read_at: int, vouched: bool) -> None:
    monkeypatch.setattr(resize, "RACY_NS", 100)
    fields = resize._source_fields("7.jpg", D1, stat(mtime, ctime), read_at)
    assert fields[5] == (mtime if vouched else UNVOUCHED)
    assert fields[6] == ctime


# --- _kept_output ----------------------------------------------------------------------------------

def test_a_kept_output_keeps_its_recorded_half(tmp_path: Path) -> None:
    job = ResizeJob("s", str(tmp_path / "missing.jpg"), 32, 75, "full", record())
    assert resize._kept_output(job) == [D2, 6, 7, 8, 9, 10]  # nothing looked at


def test_a_kept_output_of_an_older_record_takes_its_device_and_digest_now(tmp_path: Path) -> None:
    target = tmp_path / "00001.jpg"
    target.write_bytes(b"output")
    old = record(output=UNKNOWN_DIGEST)
    old[8] = UNKNOWN_DEVICE
    kept = resize._kept_output(ResizeJob("s", str(target), 32, 75, "full", old))
    assert kept == [sha256(b"output"), os.stat(target).st_dev, 7, 8, 9, 10]
    assert old[8] == UNKNOWN_DEVICE  # the job's record is not changed in place


# --- _run_job --------------------------------------------------------------------------------------

def job_in(tmp_path: Path, data: bytes | None, expected: list | None = None) -> ResizeJob:
    source = tmp_path / "5.jpg"
    if data is not None:
        source.write_bytes(data)
    return ResizeJob(str(source), str(tmp_path / "out" / "00005.jpg"), 16, 75, "full", expected)


def test_a_job_resizes_and_records_both_halves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resize, "RACY_NS", 0)
    data = jpeg()
    job = job_in(tmp_path, data)
    done, reason, rec, status = resize._run_job(job)
    output = Path(job.target).read_bytes()
    assert (done, reason, status) == (job, "", RESIZED)
    assert output == resize.resize_image_bytes(data, 16, 75, "full")
    assert rec == [*resize._source_fields(job.source, sha256(data), os.stat(job.source), 0)[:5],
                   os.stat(job.source).st_mtime_ns, os.stat(job.source).st_ctime_ns,
                   sha256(output), *stat_record(os.stat(job.target))]
    assert len(rec) == len(RECORD_FIELDS)


def test_a_job_resizes_with_its_own_settings(tmp_path: Path) -> None:
    data = jpeg(3, 96, 80)  # over 2x the size on both sides: draft decodes at a reduced DCT scale
    job = ResizeJob(str(tmp_path / "3.jpg"), str(tmp_path / "00003.jpg"), 24, 60, "draft")
    Path(job.source).write_bytes(data)
    assert resize._run_job(job)[3] == RESIZED
    output = Path(job.target).read_bytes()
    assert output == resize.resize_image_bytes(data, 24, 60, "draft")
    assert output != resize.resize_image_bytes(data, 24, 60, "full")
    assert Image.open(io.BytesIO(output)).size == (24, 24)


def test_a_job_whose_source_still_has_the_recorded_bytes_keeps_the_output(tmp_path: Path) -> None:
    data = jpeg()
    job = job_in(tmp_path, data, record("5.jpg", sha256(data)))
    done, reason, rec, status = resize._run_job(job)
    assert (done, reason, status) == (job, "", SAME)
    assert rec[:2] == ["5.jpg", sha256(data)] and rec[7:] == [D2, 6, 7, 8, 9, 10]
    assert not Path(job.target).exists()  # not resized


def test_a_job_whose_source_has_other_bytes_is_resized(tmp_path: Path) -> None:
    data = jpeg()
    job = job_in(tmp_path, data, record("5.jpg", D1))
    _, reason, rec, status = resize._run_job(job)
    assert (reason, status) == ("", RESIZED)
    assert rec[7] == sha256(Path(job.target).read_bytes())


def test_a_source_that_cannot_be_read_removes_its_stale_output(tmp_path: Path) -> None:
    job = job_in(tmp_path, None)
    Path(job.target).parent.mkdir()
    Path(job.target).write_bytes(b"stale")
    done, reason, rec, status = resize._run_job(job)
    assert (done, rec, status) == (job, None, UNREAD)
    assert "No such file or directory" in reason
    assert not Path(job.target).exists()
    assert resize._run_job(job)[3] == UNREAD  # and with no output to remove either


def test_a_source_that_does_not_decode_fails_and_removes_its_stale_output(tmp_path: Path) -> None:
    job = job_in(tmp_path, b"not a jpeg")
    Path(job.target).parent.mkdir()
    Path(job.target).write_bytes(b"stale")
    assert resize._run_job(job) == (job, "not an image (unidentified format)", None, FAILED)
    assert not Path(job.target).exists()


def test_any_other_decoder_fault_is_the_images_not_the_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> bytes:
        raise RuntimeError("boom")

    monkeypatch.setattr(resize, "resize_image_bytes", broken)
    job = job_in(tmp_path, jpeg())
    assert resize._run_job(job) == (job, "RuntimeError: boom", None, FAILED)


# --- _is_record, _is_digest ------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "valid"), [
    (record(), True),
    (record(output=UNKNOWN_DIGEST), True),
    (record()[:-1], False),
    ([*record(), 1], False),
    (tuple(record()), False),
    ([7, *record()[1:]], False),
    (record(source=UNKNOWN_DIGEST), False),
    (record(source="A" * 63), False),
    (record(source="A" * 65), False),
    (record(source="é" * 64), False),
    (record(source="-" * 64), False),
    (record(output="b" * 63), False),
    ([*record()[:2], True, *record()[3:]], False),  # a bool is not an int here
    ([*record()[:6], 5.0, *record()[7:]], False),
    ([*record()[:8], "6", *record()[9:]], False),
    ([*record()[:12], None], False),
    (None, False),
])
def test_only_a_record_as_written_vouches_for_an_output(value: object, valid: bool) -> None:
    assert resize._is_record(value) is valid


def test_a_digest_is_64_ascii_letters_and_digits() -> None:
    assert resize._is_digest(D1) and resize._is_digest("Z9" * 32)
    assert not resize._is_digest(b"a" * 64)
    assert not resize._is_digest("a" * 63) and not resize._is_digest("a" * 65)
    assert not resize._is_digest("٣" * 64)  # digits, but not ASCII


# --- ResizeSummary.manifest_text -------------------------------------------------------------------

def summary(**outputs: list) -> ResizeSummary:
    return ResizeSummary("/données", "o", 32, 75, "full", 1, inputs=2, resized=1, outputs=dict(outputs))


def test_the_manifest_holds_the_summary_and_one_record_a_line() -> None:
    records = {"00002.jpg": record("2.jpg"), "00001.jpg": record('1 "é".jpg', output=UNKNOWN_DIGEST)}
    s = summary(**records)
    text = s.manifest_text()
    assert json.loads(text) == {**s.as_dict(), "record_fields": list(RECORD_FIELDS), "outputs": records}
    lines = text.splitlines()
    first = lines.index('  "outputs": {')
    assert lines[first + 1:] == [f"    {json.dumps(name)}: {json.dumps(records[name], ensure_ascii=False)}" + tail
                                 for name, tail in (("00001.jpg", ","), ("00002.jpg", ""))] + ["  }", "}"]
    head = json.dumps({**s.as_dict(), "record_fields": list(RECORD_FIELDS)}, indent=2, ensure_ascii=False)
    assert text.startswith(head[:-2] + ',\n  "outputs": {\n')  # the summary indented, for people
    assert text.endswith("}\n")


def test_a_manifest_without_records() -> None:
    s = summary()
    text = s.manifest_text()
    assert json.loads(text) == {**s.as_dict(), "record_fields": list(RECORD_FIELDS), "outputs": {}}
    assert text.endswith('  "outputs": {}\n}\n')
    assert text.startswith('{\n  "data": "/données",\n')  # UTF-8, not \\u escapes


# --- _previous -------------------------------------------------------------------------------------

def write(path: Path, manifest: object) -> Path:
    path.write_text(json.dumps(manifest))
    return path


SETTINGS = {"size": 32, "quality": 75, "decode": "full"}


@pytest.mark.parametrize("manifest", [None, "text", {"size": 32, "quality": 75}, {**SETTINGS, "size": "big"},
                                      {**SETTINGS, "quality": None}, [1]])
def test_no_readable_manifest_vouches_for_nothing(tmp_path: Path, manifest: object) -> None:
    path = tmp_path / "m.json"
    if manifest == "text":
        path.write_text("{not json")
    elif manifest is not None:
        write(path, manifest)
    assert resize._previous(path) == (None, {}, False)


def test_a_manifest_gives_its_settings_and_its_valid_records(tmp_path: Path) -> None:
    good, bad = record("1.jpg"), record("2.jpg", source="short")
    path = write(tmp_path / "m.json", {"size": "32", "quality": 75.0, "decode": "full",
                                       "record_fields": list(RECORD_FIELDS), "outputs": {"a": good, "b": bad}})
    assert resize._previous(path) == ((32, 75, "full"), {"a": good}, False)


@pytest.mark.parametrize("outputs", [None, [], "x"])
def test_a_manifest_without_an_outputs_object_keeps_its_settings_only(tmp_path: Path, outputs: object) -> None:
    manifest = {**SETTINGS, "record_fields": list(RECORD_FIELDS)}
    if outputs is not None:
        manifest["outputs"] = outputs
    assert resize._previous(write(tmp_path / "m.json", manifest)) == ((32, 75, "full"), {}, False)


def test_records_of_an_older_vsbench_vouch_for_nothing_and_are_said_to_be_old(tmp_path: Path) -> None:
    path = write(tmp_path / "m.json", {**SETTINGS, "outputs": {"a": record()}})
    assert resize._previous(path) == ((32, 75, "full"), {}, True)
    path = write(tmp_path / "m.json", {**SETTINGS, "record_fields": ["source"], "outputs": {}})
    assert resize._previous(path) == ((32, 75, "full"), {}, False)


def test_records_without_devices_are_read_as_of_an_unknown_device(tmp_path: Path) -> None:
    old = ["1.jpg", D1, 2, 3, 4, 5, 7, 8, 9, 10]
    path = write(tmp_path / "m.json", {**SETTINGS, "record_fields": list(PREVIOUS_RECORD_FIELDS),
                                       "outputs": {"a": old, "b": old[:9], "c": {str(n): n for n in range(10)},
                                                   "d": [*old[:2], "3", *old[3:]], "e": "0123456789"}})
    assert resize._previous(path) == (
        (32, 75, "full"), {"a": ["1.jpg", D1, UNKNOWN_DEVICE, 2, 3, 4, 5, UNKNOWN_DIGEST, UNKNOWN_DEVICE, 7, 8, 9, 10]},
        False)


# --- _same_output ----------------------------------------------------------------------------------

def test_a_copied_output_with_the_written_bytes_is_kept_with_its_new_stat(tmp_path: Path) -> None:
    target = tmp_path / "00001.jpg"
    target.write_bytes(b"out")
    made = os.stat(target)
    old = [*record(output=sha256(b"out"))[:10], 3, 0, 0]
    records = {"00001.jpg": old}
    assert resize._same_output(str(target), made, old, records, "00001.jpg") is True
    assert records == {"00001.jpg": [*old[:8], *stat_record(made)]}


def test_an_output_with_other_bytes_or_no_digest_is_not_the_one_written(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "00001.jpg"
    target.write_bytes(b"new")
    made = os.stat(target)
    reads: list[str] = []
    monkeypatch.setattr(resize, "file_sha256", lambda path: reads.append(path) or sha256(Path(path).read_bytes()))
    for old, read in (([*record(output=sha256(b"out"))[:10], 3, 0, 0], 1),  # other bytes, same size
                      ([*record(output=sha256(b"new"))[:10], 4, 0, 0], 0),  # another size: not even read
                      ([*record(output=UNKNOWN_DIGEST)[:10], 3, 0, 0], 0)):  # nothing to compare with
        records = {"00001.jpg": old}
        reads.clear()
        assert resize._same_output(str(target), made, old, records, "00001.jpg") is False
        assert records == {"00001.jpg": old}
        assert len(reads) == read
    gone = [*record(output=sha256(b"new"))[:10], 3, 0, 0]
    target.unlink()
    assert resize._same_output(str(target), made, gone, {}, "00001.jpg") is False


# --- _collect --------------------------------------------------------------------------------------

class Bar:
    def __init__(self) -> None:
        self.updates: list[int] = []

    def update(self, n: int) -> None:
        self.updates.append(n)


def test_results_are_counted_into_the_summary() -> None:
    def job(n: int, expected: list | None = None) -> ResizeJob:
        return ResizeJob(f"/d/bin-images/{n}.jpg", f"/o/0000{n}.jpg", 32, 75, "full", expected)

    results = [(job(1), "No such file", None, UNREAD), (job(2), "not a JPEG (PNG)", None, FAILED),
               (job(3), "", record("3.jpg"), SAME), (job(4, record("4.jpg")), "", record("4.jpg", D2), RESIZED),
               (job(5), "", record("5.jpg"), RESIZED)]
    s, bar = summary(), Bar()
    s.resized = 0
    resize._collect(results, s, bar, lambda: None)
    assert (s.hashed, s.failed, s.kept, s.resized) == (4, 2, 1, 2)
    assert s.failures == [{"file": "bin-images/1.jpg", "reason": "No such file"},
                          {"file": "bin-images/2.jpg", "reason": "not a JPEG (PNG)"}]
    assert s.outputs == {"00003.jpg": record("3.jpg"), "00004.jpg": record("4.jpg", D2), "00005.jpg": record("5.jpg")}
    assert s.redone == ["00004.jpg: its source changed since it was resized (other bytes); redone"]
    assert s.redone_count == 1
    assert bar.updates == [1] * 5


def test_the_manifest_is_checkpointed_every_minute_or_less_often_when_a_write_is_slow(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the clock: start, then (now[, after the checkpoint]) per result
    ticks = [0.0, 59.9, 60.0, 70.0, 569.0, 570.0, 571.0, 630.9, 631.0, 631.5]
    monkeypatch.setattr(resize, "time", SimpleNamespace(monotonic=lambda: ticks.pop(0)))
    written: list[int] = []
    s = summary()
    results = [(ResizeJob(f"{n}.jpg", f"{n}", 32, 75, "full"), "", record(), RESIZED) for n in range(6)]

    def checkpoint() -> None:
        written.append(len(s.outputs))

    resize._collect(results, s, Bar(), checkpoint)
    # at 60 s (the write took 10 s: the next 500 s later), at 570 s (took 1 s: 60 s later again, at 631 s)
    assert written == [2, 4, 6]
    assert ticks == []


def test_no_checkpoint_before_a_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = iter([100.0, 159.0, 159.99])
    monkeypatch.setattr(resize, "time", SimpleNamespace(monotonic=lambda: next(ticks)))
    written: list[int] = []
    results = [(ResizeJob(f"{n}.jpg", f"{n}", 32, 75, "full"), "", record(), RESIZED) for n in range(2)]
    resize._collect(results, summary(), Bar(), lambda: written.append(1))
    assert written == []


# --- _resize: what a re-run keeps, says and counts -------------------------------------------------

@pytest.fixture
def photos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Three small photos (ids 1, 9, 10), settled (RACY_NS 0) as a dataset downloaded long ago."""
    monkeypatch.setattr(resize, "RACY_NS", 0)
    monkeypatch.delenv("VSBENCH_VERIFY_INPUTS", raising=False)
    images = tmp_path / "data" / "bin-images"
    images.mkdir(parents=True)
    for n in (1, 9, 10):
        (images / f"{n}.jpg").write_bytes(jpeg(n))
    return tmp_path / "data"


def run(data: Path, out: Path, size: int = 16, **options: object) -> ResizeSummary:
    return resize.resize_abid(data, out, size=size, progress=False, **{"max_failure_rate": 1.0, "workers": 1, **options})


def manifest_records(out: Path) -> dict:
    return json.loads((out / resize.MANIFEST_NAME).read_text())["outputs"]


def test_an_unchanged_rerun_reads_no_output_either(photos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "a" / "b" / "out"  # folders made as needed
    first = run(photos, out)
    assert (first.resized, first.kept, first.hashed, first.failed, first.inputs) == (3, 0, 3, 0, 3)
    assert (first.data, first.out, first.size, first.quality, first.decode, first.workers) == (
        str(photos), str(out), 16, 75, "full", 1)

    def no_read(path: object) -> str:
        raise AssertionError(f"{path} read")

    monkeypatch.setattr(resize, "file_sha256", no_read)
    again = run(photos, out)
    assert (again.resized, again.kept, again.hashed, again.redone_count) == (0, 3, 0, 0)
    assert again.outputs == manifest_records(out) == first.outputs


def test_an_output_whose_stat_alone_changed_is_read_once_and_its_record_renewed(photos: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run(photos, out)
    for field, change in (("ctime", lambda p: os.chmod(p, 0o600)), ("mtime", lambda p: os.utime(p, ns=(1, 1)))):
        path = out / "00009.jpg"
        change(path)
        now = os.stat(path)
        again = run(photos, out)
        assert (again.resized, again.kept, again.redone_count) == (0, 3, 0), field
        assert manifest_records(out)["00009.jpg"][8:] == list(stat_record(now)), field


@pytest.mark.parametrize("change", ["dev", "ino", "size", "mtime", "ctime"])
def test_an_output_whose_record_differs_in_one_field_is_looked_at_again(photos: Path, tmp_path: Path,
                                                                        change: str) -> None:
    out = tmp_path / "out"
    run(photos, out)
    manifest = out / resize.MANIFEST_NAME
    data = json.loads(manifest.read_text())
    position = {"dev": 8, "ino": 9, "size": 10, "mtime": 11, "ctime": 12}[change]
    data["outputs"]["00009.jpg"][position] += 1
    manifest.write_text(json.dumps(data))
    again = run(photos, out)
    if change == "size":  # another size: other bytes, without reading them
        assert (again.resized, again.kept) == (1, 2)
        assert again.redone == ["00009.jpg: the output's bytes are not those written; redone"]
    else:  # read: the bytes written, kept, and its record renewed
        assert (again.resized, again.kept, again.redone_count) == (0, 3, 0)
    assert manifest_records(out)["00009.jpg"][8:] == list(stat_record(os.stat(out / "00009.jpg")))


def test_an_output_replaced_by_a_copy_of_itself_is_kept(photos: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run(photos, out)
    path = out / "00001.jpg"
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data)  # a new inode (and times): the same bytes
    again = run(photos, out)
    assert (again.resized, again.kept, again.redone_count) == (0, 3, 0)
    assert manifest_records(out)["00001.jpg"][8:] == list(stat_record(os.stat(path)))


def test_an_output_of_another_size_is_redone_without_being_read(photos: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    run(photos, out)
    (out / "00010.jpg").write_bytes(b"short")
    monkeypatch.setattr(resize, "file_sha256", lambda path: pytest.fail(f"{path} read"))
    again = run(photos, out)
    assert (again.resized, again.kept) == (1, 2)
    assert again.redone == ["00010.jpg: the output's bytes are not those written; redone"]


def test_an_output_without_a_recorded_digest_that_changed_is_redone(photos: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run(photos, out)
    manifest = out / resize.MANIFEST_NAME
    data = json.loads(manifest.read_text())
    data["outputs"]["00010.jpg"][7] = UNKNOWN_DIGEST
    manifest.write_text(json.dumps(data))
    os.chmod(out / "00010.jpg", 0o600)  # its ctime changes
    again = run(photos, out)
    assert (again.resized, again.kept) == (1, 2)
    assert again.redone == ["00010.jpg: the output changed since it was written; redone"]


def test_a_record_of_an_unknown_device_does_not_compare_the_device(photos: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    run(photos, out)
    manifest = out / resize.MANIFEST_NAME
    data = json.loads(manifest.read_text())
    data["outputs"]["00010.jpg"][8] = UNKNOWN_DEVICE
    data["outputs"]["00009.jpg"][8] += 1  # another device: looked at again (read, the same bytes)
    manifest.write_text(json.dumps(data))
    reads: list[str] = []
    real = resize.file_sha256
    monkeypatch.setattr(resize, "file_sha256", lambda path: reads.append(os.path.basename(path)) or real(path))
    again = run(photos, out)
    assert (again.resized, again.kept, again.redone_count) == (0, 3, 0)
    assert reads == ["00009.jpg"]


def test_missing_outputs_are_redone_and_said_when_a_manifest_vouched_for_them(photos: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run(photos, out)
    (out / "00001.jpg").unlink()
    again = run(photos, out)
    assert (again.resized, again.kept, again.redone) == (1, 2, ["00001.jpg: the output is missing; redone"])
    (out / resize.MANIFEST_NAME).unlink()
    (out / "00009.jpg").unlink()
    third = run(photos, out)  # no manifest: a missing output is the ordinary first run, the others unvouched
    assert (third.resized, third.kept) == (3, 0)
    assert third.redone == ["00001.jpg: no manifest vouches for this output; redone",
                            "00010.jpg: no manifest vouches for this output; redone"]


def test_other_settings_redo_everything_without_a_line_each(photos: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run(photos, out)
    for options in ({"size": 24}, {"quality": 80}, {"decode": "draft"}):
        again = run(photos, out, **options)
        assert (again.resized, again.kept, again.redone_count) == (3, 0, 0), options
        assert (again.size, again.quality, again.decode) == (options.get("size", 16), options.get("quality", 75),
                                                             options.get("decode", "full"))


def test_outputs_under_a_manifest_of_an_older_vsbench_are_said_to_be_so(photos: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run(photos, out)
    manifest = out / resize.MANIFEST_NAME
    data = json.loads(manifest.read_text())
    data["record_fields"] = ["source"]
    manifest.write_text(json.dumps(data))
    again = run(photos, out)
    assert (again.resized, again.kept, again.redone_count) == (3, 0, 3)
    assert again.redone[0] == f"00001.jpg: {resize.LEGACY_WHY}; redone"


@pytest.mark.parametrize("change", ["name", "ino", "size", "mtime", "ctime", "dev"])
def test_a_source_whose_record_differs_in_one_field_is_read(photos: Path, tmp_path: Path, change: str) -> None:
    out = tmp_path / "out"
    run(photos, out)
    manifest = out / resize.MANIFEST_NAME
    data = json.loads(manifest.read_text())
    position = {"name": 0, "dev": 2, "ino": 3, "size": 4, "mtime": 5, "ctime": 6}[change]
    old = data["outputs"]["00009.jpg"]
    old[position] = "8.jpg" if change == "name" else old[position] + 1
    manifest.write_text(json.dumps(data))
    again = run(photos, out)
    assert (again.resized, again.kept, again.hashed, again.redone_count) == (0, 3, 1, 0)
    now = os.stat(photos / "bin-images" / "9.jpg")
    assert manifest_records(out)["00009.jpg"][:7] == ["9.jpg", sha256(jpeg(9)), *stat_record(now)]


def test_a_source_gone_since_the_scan_is_said_and_listed(photos: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    run(photos, out)
    scan = resize.scan_ids
    (photos / "bin-images" / "9.jpg").unlink()
    monkeypatch.setattr(resize, "scan_ids", lambda folder, kind: {**scan(folder, kind), 9: folder / "9.jpg"})
    again = run(photos, out)
    assert (again.resized, again.kept, again.failed, again.hashed) == (0, 2, 1, 0)
    assert again.redone == ["00009.jpg: its source is gone; redone"]
    assert not (out / "00009.jpg").exists()


def test_failures_are_listed_by_file_name_and_count_against_every_input(photos: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    images = photos / "bin-images"
    (images / "9.jpg").write_bytes(b"not a photo")
    (images / "10.jpg").write_bytes(b"")
    for n in range(2, 6):
        (images / f"{n}.jpg").write_bytes(jpeg(n))
    first = run(photos, out)
    assert [f["file"] for f in first.failures] == ["bin-images/10.jpg", "bin-images/9.jpg"]
    assert (first.inputs, first.failed, first.resized) == (7, 2, 5)
    from vsbench.imaging.limits import TooManyFailures

    with pytest.raises(TooManyFailures) as stopped:
        run(photos, out, max_failure_rate=0.28)  # kept outputs count as done: 2/7 = 0.2857
    assert str(stopped.value) == (
        f"resize: 2 of 7 images (28.6%) could not be used, over the maximum failure rate of 28.0%; the reasons "
        f"are listed in {out / resize.MANIFEST_NAME}. Fix or remove those files, or accept them with "
        "--max-failure-rate (or VSBENCH_MAX_FAILURE_RATE) set higher")
    again = run(photos, out, max_failure_rate=0.29)
    assert (again.kept, again.failed) == (5, 2)
    assert json.loads((out / resize.MANIFEST_NAME).read_text())["failures"] == again.failures


def test_a_run_says_how_long_it_took(photos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = [100.0, 102.34567]
    monkeypatch.setattr(resize.time, "perf_counter", lambda: ticks.pop(0) if ticks else 200.0)
    assert run(photos, tmp_path / "out").seconds == 2.346


def test_fast_on_a_small_job_says_the_other_modes_finish_sooner(photos: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from vsbench.imaging import jpeg as jpeg_module

    if not jpeg_module.available():
        pytest.skip("no simplejpeg")
    run(photos, tmp_path / "out", decode="fast")
    assert capsys.readouterr().err == ("note: --decode fast loads torch first (about 2 s); on 3 photos 'draft' or "
                                       "'full' finish sooner (fast gains from ~2,500 photos: bench/resize_mix.py)\n")
    (photos / "bin-images" / "1.jpg").write_bytes(jpeg(11))
    run(photos, tmp_path / "out", decode="fast")
    assert "on 1 photo 'draft'" in capsys.readouterr().err
    run(photos, tmp_path / "out", decode="fast")  # nothing to do: nothing said
    monkeypatch.setattr(resize, "FAST_PAYS_OFF_PHOTOS", 3)
    run(photos, tmp_path / "other", decode="fast")  # 3 photos: where fast pays off
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("workers", [1, 2])
def test_the_manifest_is_checkpointed_as_the_run_goes(photos: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    out = tmp_path / "out"
    (photos / "bin-images" / "2.jpg").write_bytes(jpeg(2))
    monkeypatch.setattr(resize, "get_context", lambda method: Pool([], method))  # 2 workers: the pool's path
    monkeypatch.setattr(resize, "CHECKPOINT_SECONDS", 0.0)  # a write after every image,
    monkeypatch.setattr(resize, "CHECKPOINT_SHARE", float("inf"))  # however long a write takes
    seen: list[list[str]] = []
    run_job = resize._run_job

    def watched(job: ResizeJob) -> tuple:
        manifest = out / resize.MANIFEST_NAME
        seen.append(sorted(json.loads(manifest.read_text())["outputs"]) if manifest.exists() else [])
        return run_job(job)

    monkeypatch.setattr(resize, "_run_job", watched)
    run(photos, out, workers=workers)
    assert seen == [[], ["00001.jpg"], ["00001.jpg", "00002.jpg"], ["00001.jpg", "00002.jpg", "00009.jpg"]]


class Pool:
    """get_context("fork").Pool, in process: which pool a run asks for, and how."""

    def __init__(self, asked: list, method: str) -> None:
        self.asked, self.method = asked, method

    def Pool(self, workers: int, initializer: object = None) -> Pool:  # noqa: N802 - multiprocessing's name
        self.asked.append((self.method, workers, initializer))
        return self

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def imap_unordered(self, function, jobs, chunksize: int):  # noqa: ANN001
        self.asked.append(chunksize)
        return map(function, jobs)


@pytest.mark.parametrize(("workers", "photos_count", "pool"), [(1, 3, False), (2, 3, False), (2, 4, True),
                                                               (3, 6, True), (3, 5, False)])
def test_a_pool_is_started_only_for_two_images_a_worker_or_more(photos: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch, workers: int,
                                                                photos_count: int, pool: bool) -> None:
    for n in range(2, photos_count - 1):
        (photos / "bin-images" / f"{n}.jpg").write_bytes(jpeg(n))
    asked: list = []
    monkeypatch.setattr(resize, "get_context", lambda method: Pool(asked, method))
    done = run(photos, tmp_path / "out", workers=workers)
    assert done.resized == photos_count
    assert asked == ([("fork", workers, None), 8] if pool else [])


def test_a_fast_run_resizes_on_one_torch_thread(photos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vsbench.imaging import jpeg as jpeg_module

    if not jpeg_module.available():
        pytest.skip("no simplejpeg")
    threads: list[int] = []
    run_job = resize._run_job
    monkeypatch.setattr(resize, "_run_job", lambda job: threads.append(torch.get_num_threads()) or run_job(job))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        run(photos, tmp_path / "fast", decode="fast")
        assert threads == [1, 1, 1]
        assert torch.get_num_threads() == 2  # restored
    finally:
        torch.set_num_threads(before)


def test_a_fast_pool_starts_each_worker_on_one_torch_thread(photos: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from vsbench.imaging import jpeg as jpeg_module

    if not jpeg_module.available():
        pytest.skip("no simplejpeg")
    for n in range(2, 5):
        (photos / "bin-images" / f"{n}.jpg").write_bytes(jpeg(n))
    asked: list = []
    monkeypatch.setattr(resize, "get_context", lambda method: Pool(asked, method))
    run(photos, tmp_path / "out", decode="fast", workers=2)
    assert asked == [("fork", 2, resize._init_worker), 8]


def test_a_full_or_draft_run_says_nothing_of_fast(photos: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    run(photos, tmp_path / "full")
    run(photos, tmp_path / "draft", decode="draft")
    assert capsys.readouterr().err == ""
