"""Resize bin images to a square (224x224 bilinear by default), in parallel, skipping bad files.

The challenge's way is ``Image.open(p).convert('RGB').resize((224, 224), BILINEAR).save(q)``
in one loop. We keep its filter (antialiased bilinear) and its encoder (Pillow's, quality 75)
and add:

* ``decode="full"`` (the default): the challenge's loop itself, byte for byte the same outputs
  on every input. It is the default because the faster modes decode photos that are at least
  2x the target on both sides (>= 448 px for 224: a third of a real ABID sample) at a reduced DCT
  scale, which moves their pixels ~1.5 levels from the challenge's (docs/abid.md "Resize");
* ``decode="fast"`` (named option): libjpeg-turbo decodes through simplejpeg into an array
  (:mod:`vsbench.imaging.jpeg`: the same pixels as Pillow's decoder, with less overhead; a plain
  JPEG's header is read without Pillow, :func:`~vsbench.imaging.jpeg.decode_plain_rgb`) and
  torch's uint8 kernel does the antialiased bilinear resize (:mod:`vsbench.imaging.resample`:
  within one level of Pillow's, ~4x faster). Large photos are decoded at 1/2, 1/4 or 1/8 scale
  in the DCT domain exactly as Pillow's draft mode does. Anything that is not a plain RGB or
  grayscale JPEG, or that libjpeg-turbo has any complaint about, takes the ``"draft"`` path
  below unchanged, so a bad file gives the same output or the same listed failure as there.
  On photos under 2x the target the outputs differ from the challenge's by ~0.04 levels of 255
  on average; on a realistic mix of ABID photo sizes by more (docs/abid.md "Resize");
* ``decode="draft"``: Pillow throughout, with JPEG draft mode (libjpeg decodes at 1/2, 1/4 or 1/8
  scale in the DCT domain when the image is at least that many times larger than the target on
  both sides), which skips most of the decode work for large photos;
* a process pool over the cores (one torch thread per process);
* a manifest listing every input that was not resized and why (empty, truncated, corrupt, not
  a JPEG, over the pixel cap of :mod:`vsbench.imaging.limits`, unreadable): such inputs never
  stop the step, unless their share passes ``max_failure_rate`` (then the step fails after
  writing the manifest, and says so);
* resumable, verified re-runs keyed on content (issue 37): the manifest records, for every output
  it vouches for, the sha256 of the source bytes it was made from, the source's stat record (device,
  inode, size, mtime and ctime in ns) when they were read, and the output's stat record as written. A
  re-run keeps an output when the size, quality and decode are the manifest's and both stat records
  still match: two ``stat`` calls per input and no read, as before. The ctime cannot be set back
  (``touch -r``, ``os.utime`` restore only the mtime), so a source replaced by other bytes of the
  same size with its mtime restored, truncated, or swapped with another by ``rename``, shows a
  changed record; such a source is read once, in the worker that would resize it, and hashed from
  the bytes read for decoding: the same bytes keep the output (only the record is refreshed), other
  bytes resize it again, with one line saying why. An output whose own record changed (rewritten,
  touched, replaced, missing) or that no manifest vouches for is redone. A source read within
  :data:`~vsbench.io.digests.RACY_NS` of its last change is recorded as not vouched for by its stat
  (a write in the same timestamp tick could leave the record unchanged), so the next run reads it
  again. With ``VSBENCH_VERIFY_INPUTS=full`` (``--verify-inputs full``) every source is read and
  hashed (its output kept when the bytes are the recorded ones); an output is still vouched for by
  its stat record (no digest of it is recorded). The manifest of a run is the merge of what earlier runs left valid and what this run did,
  and the failure rate is over every input (kept, resized or failed), so a run stopped by the rate
  resumes with a higher threshold instead of meeting "2 of 2 (100%)" again;
* one writer per output folder: a run holds :func:`~vsbench.io.locks.output_lock` on ``out`` (a
  shard: the folder shared and its own shard exclusively, :func:`~vsbench.io.locks.step_lock`), so
  a second run into the same folder stops with one line naming it instead of interleaving
  manifests; and it holds the folder as one of its writers
  (:func:`~vsbench.io.locks.writing_lock`), so it neither starts nor runs while a training
  reads it (the shards of one run write side by side).

bench/resize.py measures all three modes beside the challenge's loop.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Literal

import numpy as np
from PIL import Image, UnidentifiedImageError

from vsbench.abid.ids import IMAGES_DIR, local_name
from vsbench.abid.prepare import scan_ids
from vsbench.imaging import jpeg, limits
from vsbench.imaging.limits import open_image
from vsbench.imaging.resample import one_thread, resize_bilinear
from vsbench.io.digests import RACY_NS
from vsbench.io.inputs import read_json
from vsbench.io.locks import output_lock, step_lock, writing_lock
from vsbench.io.progress import progress_bar
from vsbench.io.storage import atomic_write_bytes, atomic_write_text, file_sha256, stat_record, stat_trusted
from vsbench.runtime.loaders import usable_cpus

MANIFEST_NAME = "_manifests/resize.json"
# Where fast's per-photo gain (2.4x full on a real size mix) repays loading torch once, on 2 workers
# (bench/resize_mix.py: 639 photos took fast 2.5 s, full 1.4 s, end to end; ~1.9 ms saved a photo-core).
FAST_PAYS_OFF_PHOTOS = 2_500
Decode = Literal["fast", "draft", "full"]
DECODES: tuple[str, ...] = ("fast", "draft", "full")
DEFAULT_DECODE: Decode = "full"  # the challenge's pixels; "fast" and "draft" are opt-in


# One output as the manifest records it (a list, not an object: full ABID has 536k of them):
# [source name, source sha256, source device, inode, size, mtime ns, ctime ns,
#  output sha256, output device, inode, size, mtime ns, ctime ns]: both files' content, and the two stat
# records (vsbench.io.storage.stat_record) that let an unchanged re-run vouch for both without reading
# either. The output's digest lets a copy of the folder (cp -a, a restored backup: new inodes and
# ctimes, the same bytes) be kept after one read of each output instead of resizing everything again.
Record = list[Any]
RECORD_FIELDS = ("source", "source_sha256", "source_dev", "source_ino", "source_size", "source_mtime_ns",
                 "source_ctime_ns", "output_sha256", "output_dev", "output_ino", "output_size", "output_mtime_ns",
                 "output_ctime_ns")
OUTPUT = slice(7, 13)  # the output's half: its digest and its stat record
OUTPUT_DEV = 8
UNKNOWN_DIGEST = ""  # an output kept from a manifest that recorded no digest of it (before issue 48)
# The records of vsbench before issue 46, without devices (or output digests): read as records of an
# unknown device (UNKNOWN_DEVICE), so each source is read and hashed once (its output kept when the bytes
# are the recorded ones: no resize, the output hashed then) and the next manifest holds both.
PREVIOUS_RECORD_FIELDS = ("source", "source_sha256", "source_ino", "source_size", "source_mtime_ns",
                          "source_ctime_ns", "output_ino", "output_size", "output_mtime_ns", "output_ctime_ns")
UNKNOWN_DEVICE = -1
UNVOUCHED = -1  # a source mtime recorded as this: read too soon after a change to vouch for by stat


@dataclass(frozen=True)
class ResizeJob:
    """One source to read; ``expected`` is the record of an output whose source's stat changed:
    the worker keeps that output when the bytes it reads still have the recorded sha256."""

    source: str
    target: str
    size: int
    quality: int
    decode: Decode
    expected: Record | None = None


MAX_NOTES = 20  # lines about redone outputs kept in the summary; the count is always exact
# A run writes its manifest as it goes, at most this often and at most ~2% of its time, so that a
# pod killed part-way leaves records for what it did (outputs no manifest vouches for are redone).
CHECKPOINT_SECONDS = 60.0
CHECKPOINT_SHARE = 0.02


@dataclass
class ResizeSummary:
    data: str
    out: str
    size: int
    quality: int
    decode: str
    workers: int
    inputs: int = 0
    resized: int = 0
    kept: int = 0
    failed: int = 0
    hashed: int = 0  # sources read (and hashed) this run: none on an unchanged re-run
    seconds: float = 0.0
    failures: list[dict[str, str]] = field(default_factory=list)
    redone: list[str] = field(default_factory=list)  # first MAX_NOTES outputs redone, and why
    redone_count: int = 0
    outputs: dict[str, Record] = field(default_factory=dict)  # the manifest's records (not in as_dict)

    def as_dict(self) -> dict[str, Any]:
        """The summary (the step's KFP manifest and MLflow artifact): counts and failures, not records."""
        # Not asdict: it would deep-copy every record only to drop them (a third of a resume's time).
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "outputs"}
        data["failures"] = [dict(failure) for failure in self.failures]
        data["redone"] = list(self.redone)
        data["images_per_second"] = round(self.resized / self.seconds, 2) if self.seconds else 0.0
        return data

    def manifest_text(self) -> str:
        """What ``out/_manifests/resize*.json`` holds: the summary (indented, for people) and every
        output's record, one a line (full ABID's 536k records indented would triple the file)."""
        head = json.dumps({**self.as_dict(), "record_fields": list(RECORD_FIELDS)}, indent=2, ensure_ascii=False)[:-2]
        # Keys are local_name()s, a digest is 64 ASCII letters and digits and a record's numbers are
        # ints (_is_record): only the source name needs escaping. Formatting by hand halves the
        # time of 536k json.dumps calls (~2.4 s).
        dumps = json.dumps
        records = ",\n".join(f'    "{name}": [{dumps(r[0], ensure_ascii=False)}, "{r[1]}", {r[2]}, {r[3]}, {r[4]}, '
                              f'{r[5]}, {r[6]}, "{r[7]}", {r[8]}, {r[9]}, {r[10]}, {r[11]}, {r[12]}]'
                              for name, r in sorted(self.outputs.items()))
        return f'{head},\n  "outputs": {{\n{records}\n  }}\n}}\n' if records else f'{head},\n  "outputs": {{}}\n}}\n'

    def note_redone(self, name: str, why: str) -> None:
        self.redone_count += 1
        if len(self.redone) < MAX_NOTES:
            self.redone.append(f"{name}: {why}; redone")


def resize_image_bytes(data: bytes, size: int, quality: int = 75, decode: Decode = DEFAULT_DECODE) -> bytes:
    """Decode a JPEG, resize it to ``size`` x ``size`` bilinear, encode as JPEG (see module doc).

    Raises ValueError with a human reason for anything that is not a complete JPEG.
    """
    if decode not in DECODES:
        raise ValueError(f"decode must be one of {DECODES}, got {decode!r}")
    if not data:
        raise ValueError("empty file")
    if decode == "fast":  # a plain JPEG skips Pillow's header too (jpeg.decode_plain_rgb)
        pixels = jpeg.decode_plain_rgb(data, (size, size), rgbx=True)
        if pixels is not None:
            return _resize_and_encode(pixels, size, quality)
    pixels = None
    try:
        with open_image(io.BytesIO(data)) as image:  # refuses a pixel bomb from its header
            if image.format != "JPEG":
                raise ValueError(f"not a JPEG ({image.format or 'unknown format'})")
            if decode == "fast":
                pixels = jpeg.decode_rgb(data, image, (size, size), rgbx=True)  # None: the Pillow path below
            if pixels is None:
                if decode != "full":
                    image.draft("RGB", (size, size))
                rgb = image.convert("RGB")
                jpeg.check_complete(data)  # Pillow fills a scan that ends early with grey; refuse it
    except UnidentifiedImageError:
        raise ValueError("not an image (unidentified format)") from None
    except OSError as exc:
        raise ValueError(f"corrupt or truncated JPEG: {exc}") from None
    if pixels is not None:
        return _resize_and_encode(pixels, size, quality)
    return _encode(rgb.resize((size, size), Image.Resampling.BILINEAR), quality)


def _resize_and_encode(pixels: np.ndarray, size: int, quality: int) -> bytes:
    """The fast path's end: an (H, W, 4) RGBX array resized by torch's kernel, Pillow's encoder."""
    if pixels.shape[:2] != (size, size):
        pixels = resize_bilinear(pixels, (size, size))
    return _encode(Image.frombuffer("RGB", (size, size), pixels, "raw", "RGBX", 0, 1), quality)


def _encode(image: Image.Image, quality: int) -> bytes:
    """Pillow's JPEG encoder, as the challenge's ``save``. (simplejpeg's encoder is faster but its
    libjpeg-turbo build quantizes differently: ~0.6 levels from Pillow's bytes for the same pixels.)"""
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def _init_worker() -> None:
    """Pool initializer: one torch thread per process (the pool already has one per core)."""
    import torch

    torch.set_num_threads(1)

# What a worker did with one job (the fourth item of its result).
RESIZED = "resized"  # read, hashed, resized and written
SAME = "same"  # read and hashed: the recorded bytes, so the output stands (only its record is refreshed)
FAILED = "failed"  # read and hashed, not resized (the reason says why)
UNREAD = "unread"  # the source could not be opened or read
Result = tuple[ResizeJob, str, Record | None, str]


def _source_fields(source: str, digest: str, info: os.stat_result, read_at: int) -> Record:
    """The source's half of a record. Its mtime is :data:`UNVOUCHED` when the file changed less than
    :data:`~vsbench.io.digests.RACY_NS` before it was read: a write in the same timestamp tick could
    leave the whole stat record as it is, so the next run must read it again (git's "racily clean")."""
    recent = read_at - max(info.st_mtime_ns, info.st_ctime_ns) < RACY_NS
    return [os.path.basename(source), digest, info.st_dev, info.st_ino, info.st_size,
            UNVOUCHED if recent else info.st_mtime_ns, info.st_ctime_ns]


def _kept_output(job: ResizeJob) -> Record:
    """The output's half of a record whose source hashed to the recorded digest: the recorded one,
    with the device taken now where an older manifest did not record it, and the output's digest
    taken now where it recorded none (an output of ~10 kB: a fraction of the source's read)."""
    assert job.expected is not None
    kept = list(job.expected[OUTPUT])
    if kept[1] == UNKNOWN_DEVICE:
        kept[1] = os.stat(job.target).st_dev
    if kept[0] == UNKNOWN_DIGEST:
        kept[0] = file_sha256(job.target)
    return kept


def _run_job(job: ResizeJob) -> Result:
    """Worker entry point: (the job, "" or the reason it failed, the output's record or None, and
    :data:`RESIZED`, :data:`SAME`, :data:`FAILED` or :data:`UNREAD`).

    The source is read once (unbuffered: a quarter of ``read_bytes``' cost) and its sha256 taken
    from the bytes read for decoding (~0.1 ms for a 50 kB photo with the CPU's SHA extensions,
    beside milliseconds of decoding); its stat record comes from the open file (``fstat``: what was
    read), the output's from a ``stat`` after the rename. A source that fails leaves no output under
    its name: one from an earlier run (of other bytes) would otherwise be used downstream although
    no manifest vouches for it."""
    try:
        with open(job.source, "rb", buffering=0) as source:
            read_at = time.time_ns()
            info = os.fstat(source.fileno())
            data = source.readall()
    except OSError as exc:
        _remove_stale(job.target)
        return job, str(exc), None, UNREAD
    try:
        record = _source_fields(job.source, hashlib.sha256(data).hexdigest(), info, read_at)
        if job.expected is not None and job.expected[1] == record[1]:
            return job, "", record + _kept_output(job), SAME
        resized = resize_image_bytes(data, job.size, job.quality, job.decode)
        atomic_write_bytes(job.target, resized)
        written = os.stat(job.target)
        return job, "", record + [hashlib.sha256(resized).hexdigest(), *stat_record(written)], RESIZED
    except (ValueError, OSError) as exc:
        reason = str(exc)
    except Exception as exc:  # noqa: BLE001 - any other decoder fault is this image's, never the step's
        reason = f"{type(exc).__name__}: {exc}"
    _remove_stale(job.target)
    return job, reason, None, FAILED


def _remove_stale(target: str) -> None:
    try:
        os.unlink(target)
    except OSError:
        pass


def _is_record(value: Any) -> bool:
    """A record as :meth:`ResizeSummary.manifest_text` writes it (anything else vouches for nothing;
    a digest is checked to be plain ASCII letters and digits, which is all the text writer assumes)."""
    return (type(value) is list and len(value) == len(RECORD_FIELDS) and type(value[0]) is str
            and _is_digest(value[1]) and (value[7] == UNKNOWN_DIGEST or _is_digest(value[7]))
            and list(map(type, value[2:7] + value[8:])) == _INTS)  # not bool (a subclass), not float


def _is_digest(value: Any) -> bool:
    return type(value) is str and len(value) == 64 and value.isascii() and value.isalnum()


_INTS = [int] * (len(RECORD_FIELDS) - 3)


def resize_abid(
    data: Path,
    out: Path,
    *,
    size: int = 224,
    quality: int = 75,
    decode: Decode = DEFAULT_DECODE,
    workers: int | None = None,
    progress: bool = True,
    shard: int = 0,
    num_shards: int = 1,
    max_failure_rate: float | None = None,
) -> ResizeSummary:
    """Resize every ``data/bin-images/<id>.jpg`` to ``out/<'%05d' id>.jpg``; see module doc.

    With ``num_shards`` > 1 only ids with ``id % num_shards == shard`` (and their own manifest).
    When the share of inputs that failed passes ``max_failure_rate`` (default
    :func:`vsbench.imaging.limits.max_failure_rate`: 1%), :class:`~vsbench.imaging.limits.TooManyFailures`
    is raised after the manifest is written. Another run writing ``out`` (the whole folder, or this
    shard) raises :class:`~vsbench.io.locks.OutputBusy` before anything is read or written there.
    """
    rate = limits.max_failure_rate(max_failure_rate)  # a bad value fails before any work
    if not 0 <= shard < num_shards:
        raise ValueError(f"shard {shard} is not in 0..{num_shards - 1}")
    if size < 8:
        raise ValueError(f"size must be at least 8 pixels, got {size}")
    if decode not in DECODES:
        raise ValueError(f"decode must be one of {DECODES}, got {decode!r}")
    started = time.perf_counter()
    sources = {i: p for i, p in scan_ids(data / IMAGES_DIR, "image").items() if i % num_shards == shard}
    if not sources and not (data / IMAGES_DIR).is_dir():
        raise FileNotFoundError(f"no {IMAGES_DIR}/ folder under {data}")
    # Shards of one run write one folder side by side, each its own outputs and manifest.
    lock = output_lock(out) if num_shards == 1 else step_lock(out, f"resize-shard-{shard}-of-{num_shards}")
    # and as one of its writers: no training reads the folder while it changes (issue 46)
    with lock, writing_lock(out, what=f"the resized images' folder {out}"):
        return _resize(sources, data, out, size=size, quality=quality, decode=decode,
                       workers=workers or usable_cpus(), progress=progress, rate=rate, started=started,
                       manifest=MANIFEST_NAME if num_shards == 1 else
                       f"_manifests/resize.shard-{shard}-of-{num_shards}.json")


LEGACY_WHY = "the manifest's record of it has no source digest (written by an older vsbench)"


def _resize(sources: dict[int, Path], data: Path, out: Path, *, size: int, quality: int, decode: Decode,
            workers: int, progress: bool, rate: float, started: float, manifest: str) -> ResizeSummary:
    """:func:`resize_abid` once ``out`` is this run's: decide what to keep (stat records only), then
    read, hash and resize the rest in a pool."""

    summary = ResizeSummary(str(data), str(out), size, quality, decode, workers, inputs=len(sources))
    settings, records, legacy = _previous(out / manifest)
    settings_changed = settings is not None and settings != (size, quality, decode)
    if settings_changed:
        records = {}

    jobs: list[ResizeJob] = []
    stat = os.stat
    trusted = stat_trusted()  # VSBENCH_VERIFY_INPUTS=full: every source is read and hashed again
    folder = os.path.join(out, "")  # targets as plain strings: a Path per input was ~10% of a re-run
    for bin_id, source in sorted(sources.items()):
        name = local_name(bin_id, "image")
        target = folder + name
        record = records.get(name)
        expected = None
        try:
            made = stat(target)
        except FileNotFoundError:
            why = "the output is missing" if record is not None else ""
        else:
            if record is None:  # a change of settings is said once, by the counts
                why = "" if settings_changed else LEGACY_WHY if legacy else "no manifest vouches for this output"
            elif (made.st_ctime_ns != record[12] or made.st_mtime_ns != record[11] or made.st_size != record[10]
                  or made.st_ino != record[9] or (made.st_dev != record[8] and record[8] != UNKNOWN_DEVICE)) and \
                    not _same_output(target, made, record, records, name):
                why = ("the output changed since it was written" if record[7] == UNKNOWN_DIGEST
                       else "the output's bytes are not those written")
            else:
                record = records[name]  # (its stat record renewed when a copy kept the bytes)
                try:
                    read = stat(source)
                except FileNotFoundError:
                    why = "its source is gone"
                else:
                    if (trusted and read.st_ctime_ns == record[6] and read.st_mtime_ns == record[5]
                            and read.st_size == record[4] and read.st_ino == record[3] and read.st_dev == record[2]
                            and record[0] == source.name):
                        summary.kept += 1
                        summary.outputs[name] = record
                        continue
                    why, expected = "", record  # its stat changed: the worker reads it, same bytes keep the output
        if why:
            summary.note_redone(name, why)
        jobs.append(ResizeJob(str(source), target, size, quality, decode, expected))
    out.mkdir(parents=True, exist_ok=True)

    fast = decode == "fast" and jpeg.available()
    if fast:
        if 0 < len(jobs) < FAST_PAYS_OFF_PHOTOS:
            photos = f"{len(jobs)} photo{'s' if len(jobs) != 1 else ''}"
            print(f"note: --decode fast loads torch first (about 2 s); on {photos} 'draft' or 'full' "
                  f"finish sooner (fast gains from ~{FAST_PAYS_OFF_PHOTOS:,} photos: bench/resize_mix.py)",
                  file=sys.stderr, flush=True)
        # Imported here, before any fork, so that workers share it instead of each importing
        # torch (seconds). No torch operation runs in this process before the pool forks: an
        # OpenMP thread pool started in a parent does not survive fork().
        import torch  # noqa: F401

    def checkpoint() -> None:
        atomic_write_text(out / manifest, summary.manifest_text())

    with progress_bar(total=len(jobs), desc="resize", unit="img", disable=not progress) as bar:
        if workers == 1 or len(jobs) < 2 * workers:
            with _one_torch_thread(fast):
                _collect(map(_run_job, jobs), summary, bar, checkpoint)
        else:
            with get_context("fork").Pool(workers, initializer=_init_worker if fast else None) as pool:
                _collect(pool.imap_unordered(_run_job, jobs, chunksize=8), summary, bar, checkpoint)

    summary.failures.sort(key=lambda item: item["file"])
    summary.seconds = round(time.perf_counter() - started, 3)
    atomic_write_text(out / manifest, summary.manifest_text())
    # Over every input: what earlier runs left valid counts as done, so a re-run with a raised
    # threshold passes instead of meeting its own retried failures alone.
    limits.check_failure_rate("resize", summary.failed, summary.inputs, rate, out / manifest,
                              option="--max-failure-rate")
    return summary


def _one_torch_thread(fast: bool):
    """In-process resizing counts as one core too: torch on one thread, restored afterwards."""
    import contextlib

    if not fast:
        return contextlib.nullcontext()
    return one_thread()


def _collect(results: Iterable[Result], summary: ResizeSummary, bar, checkpoint: Callable[[], None]) -> None:
    """Count each result into the summary (and its record), writing the manifest as it goes
    every :data:`CHECKPOINT_SECONDS`, or less often when a write takes more than
    :data:`CHECKPOINT_SHARE` of the time between writes (536k records: ~0.5 s a write)."""
    interval = CHECKPOINT_SECONDS
    last = time.monotonic()
    for job, reason, record, done in results:
        if done != UNREAD:
            summary.hashed += 1
        name = os.path.basename(job.target)
        if reason:
            summary.failed += 1
            summary.failures.append({"file": f"{IMAGES_DIR}/{os.path.basename(job.source)}", "reason": reason})
        elif done == SAME:
            summary.kept += 1
            summary.outputs[name] = record
        else:
            summary.resized += 1
            summary.outputs[name] = record
            if job.expected is not None:
                summary.note_redone(name, "its source changed since it was resized (other bytes)")
        bar.update(1)
        now = time.monotonic()
        if now - last >= interval:
            checkpoint()
            last = time.monotonic()
            interval = max(CHECKPOINT_SECONDS, (last - now) / CHECKPOINT_SHARE)


def _same_output(target: str, made: os.stat_result, record: Record, records: dict[str, Record], name: str) -> bool:
    """Whether an output whose stat record changed still holds the bytes written (a copy of the folder:
    ``cp -a``, a restored backup): its digest is read and compared, and on a match its record takes the
    new stat record, so the next run vouches for it by ``stat`` again. False when no digest was recorded."""
    if record[7] == UNKNOWN_DIGEST or made.st_size != record[10]:
        return False
    try:
        same = file_sha256(target) == record[7]
    except OSError:
        return False
    if same:
        records[name] = [*record[:8], *stat_record(made)]
    return same


def _previous(manifest: Path) -> tuple[tuple[int, int, str] | None, dict[str, Record], bool]:
    """The settings, the per-output records of an earlier run's manifest, and whether its records
    are of an older vsbench (keyed on names and times, not content: they vouch for nothing);
    (None, {}, False) when there is none, or it cannot be read (then every existing output is
    redone, each said once)."""

    try:
        previous = read_json(manifest)
        settings = int(previous["size"]), int(previous["quality"]), str(previous["decode"])
    except (FileNotFoundError, KeyError, ValueError, TypeError):
        return None, {}, False
    outputs = previous.get("outputs")
    if not isinstance(outputs, dict):
        return settings, {}, False
    if previous.get("record_fields") == list(PREVIOUS_RECORD_FIELDS):  # no devices: read each source once
        outputs = {name: [*record[:2], UNKNOWN_DEVICE, *record[2:6], UNKNOWN_DIGEST, UNKNOWN_DEVICE, *record[6:]]
                   for name, record in outputs.items() if type(record) is list and len(record) == 10}
    elif previous.get("record_fields") != list(RECORD_FIELDS):
        return settings, {}, bool(outputs)
    return settings, {name: record for name, record in outputs.items() if _is_record(record)}, False
