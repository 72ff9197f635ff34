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
* resumable, verified re-runs: the manifest records, for every output it vouches for, the source
  it came from (name, size, modification time in ns) and the output as written (size, time); a
  re-run keeps an output only when both ``stat`` results still match its record and the size,
  quality and decode are the manifest's, and redoes anything else with one line saying why (a
  changed source, a missing or changed output, an output no manifest vouches for). No file is
  read to decide: two ``stat`` calls per input, as the older "output newer than input" rule took.
  The manifest of a run is the merge of what earlier runs left valid and what this run did, and
  the failure rate is over every input (kept, resized or failed), so a run stopped by the rate
  resumes with a higher threshold instead of meeting "2 of 2 (100%)" again.

bench/resize.py measures all three modes beside the challenge's loop.
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
from collections.abc import Callable
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
from vsbench.io.inputs import read_json
from vsbench.io.storage import atomic_write_bytes, atomic_write_text

MANIFEST_NAME = "_manifests/resize.json"
# Where fast's per-photo gain (2.4x full on a real size mix) repays loading torch once, on 2 workers
# (bench/resize_mix.py: 639 photos took fast 2.5 s, full 1.4 s, end to end; ~1.9 ms saved a photo-core).
FAST_PAYS_OFF_PHOTOS = 2_500
Decode = Literal["fast", "draft", "full"]
DECODES: tuple[str, ...] = ("fast", "draft", "full")
DEFAULT_DECODE: Decode = "full"  # the challenge's pixels; "fast" and "draft" are opt-in


@dataclass(frozen=True)
class ResizeJob:
    source: str
    target: str
    size: int
    quality: int
    decode: Decode


# One output as the manifest records it: [source name, source bytes, source mtime ns, output bytes,
# output mtime ns]. A list, not an object: full ABID has 536k of them.
Record = list[Any]
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
        head = json.dumps(self.as_dict(), indent=2, ensure_ascii=False)[:-2]
        # Keys are local_name()s and a record's numbers are ints (_is_record): only the source name
        # needs escaping. Formatting by hand halves the time of 536k json.dumps calls (~2.4 s).
        dumps = json.dumps
        records = ",\n".join(f'    "{name}": [{dumps(r[0], ensure_ascii=False)}, {r[1]}, {r[2]}, {r[3]}, {r[4]}]'
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


def _run_job(job: ResizeJob) -> tuple[ResizeJob, str, Record | None]:
    """Worker entry point: (the job, "" or the reason it failed, the output's record or None).

    The source's size and time come from the open file (``fstat``: what was read), the output's
    from a ``stat`` after the rename: a microsecond or two beside the milliseconds of the resize."""
    try:
        with open(job.source, "rb", buffering=0) as source:  # unbuffered: one read, a quarter of read_bytes' cost
            info = os.fstat(source.fileno())
            data = source.readall()
        atomic_write_bytes(job.target, resize_image_bytes(data, job.size, job.quality, job.decode))
        written = os.stat(job.target)
        return job, "", [os.path.basename(job.source), info.st_size, info.st_mtime_ns,
                         written.st_size, written.st_mtime_ns]
    except (ValueError, OSError) as exc:
        return job, str(exc), None
    except Exception as exc:  # noqa: BLE001 - any other decoder fault is this image's, never the step's
        return job, f"{type(exc).__name__}: {exc}", None


def _why_redo(source: Path, target: Path, record: Record | None) -> str:
    """"" when ``target`` is the output ``record`` vouches for and ``source`` is the file it was made
    from (names, sizes and times as recorded: two ``stat`` calls, no read); otherwise why not."""
    try:
        made = os.stat(target)
    except FileNotFoundError:
        return "the output is missing" if record is not None else ""
    if record is None:
        return "no manifest vouches for this output"
    try:
        read = os.stat(source)
    except FileNotFoundError:
        return "its source is gone"
    if record[0] != source.name or record[1] != read.st_size or record[2] != read.st_mtime_ns:
        return "its source changed since it was resized"
    if record[3] != made.st_size or record[4] != made.st_mtime_ns:
        return "the output changed since it was written"
    return ""


def _is_record(value: Any) -> bool:
    return (isinstance(value, list) and len(value) == 5 and isinstance(value[0], str)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value[1:]))


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
    is raised after the manifest is written.
    """
    rate = limits.max_failure_rate(max_failure_rate)  # a bad value fails before any work
    if not 0 <= shard < num_shards:
        raise ValueError(f"shard {shard} is not in 0..{num_shards - 1}")
    from tqdm.auto import tqdm

    if size < 8:
        raise ValueError(f"size must be at least 8 pixels, got {size}")
    if decode not in DECODES:
        raise ValueError(f"decode must be one of {DECODES}, got {decode!r}")
    workers = workers or os.cpu_count() or 1
    started = time.perf_counter()
    sources = {i: p for i, p in scan_ids(data / IMAGES_DIR, "image").items() if i % num_shards == shard}
    manifest = MANIFEST_NAME if num_shards == 1 else f"_manifests/resize.shard-{shard}-of-{num_shards}.json"
    if not sources and not (data / IMAGES_DIR).is_dir():
        raise FileNotFoundError(f"no {IMAGES_DIR}/ folder under {data}")
    summary = ResizeSummary(str(data), str(out), size, quality, decode, workers, inputs=len(sources))
    settings, records = _previous(out / manifest)
    settings_changed = settings is not None and settings != (size, quality, decode)

    jobs: list[ResizeJob] = []
    for bin_id, source in sorted(sources.items()):
        name = local_name(bin_id, "image")
        target = out / name
        why = "the size, quality or decode changed" if settings_changed else _why_redo(source, target,
                                                                                          records.get(name))
        if not why and name in records:
            summary.kept += 1
            summary.outputs[name] = records[name]
        else:
            if why and not settings_changed:  # a change of settings is said once, by the counts
                summary.note_redone(name, why)
            jobs.append(ResizeJob(str(source), str(target), size, quality, decode))
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

    with tqdm(total=len(jobs), desc="resize", unit="img", disable=not progress) as bar:
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
    limits.check_failure_rate("resize", summary.failed, summary.inputs, rate, out / manifest)
    return summary


def _one_torch_thread(fast: bool):
    """In-process resizing counts as one core too: torch on one thread, restored afterwards."""
    import contextlib

    if not fast:
        return contextlib.nullcontext()
    return one_thread()


def _collect(results, summary: ResizeSummary, bar, checkpoint: Callable[[], None]) -> None:
    """Count each result into the summary (and its record), writing the manifest as it goes
    every :data:`CHECKPOINT_SECONDS`, or less often when a write takes more than
    :data:`CHECKPOINT_SHARE` of the time between writes (536k records: ~0.5 s a write)."""
    interval = CHECKPOINT_SECONDS
    last = time.monotonic()
    for job, reason, record in results:
        if reason:
            summary.failed += 1
            summary.failures.append({"file": f"{IMAGES_DIR}/{os.path.basename(job.source)}", "reason": reason})
        else:
            summary.resized += 1
            summary.outputs[os.path.basename(job.target)] = record
        bar.update(1)
        now = time.monotonic()
        if now - last >= interval:
            checkpoint()
            last = time.monotonic()
            interval = max(CHECKPOINT_SECONDS, (last - now) / CHECKPOINT_SHARE)


def _previous(manifest: Path) -> tuple[tuple[int, int, str] | None, dict[str, Record]]:
    """The settings and the per-output records of an earlier run's manifest; (None, {}) when there
    is none, or it cannot be read (then every existing output is redone, each said once)."""

    try:
        previous = read_json(manifest)
        settings = int(previous["size"]), int(previous["quality"]), str(previous["decode"])
    except (FileNotFoundError, KeyError, ValueError, TypeError):
        return None, {}
    outputs = previous.get("outputs")
    if not isinstance(outputs, dict):
        return settings, {}
    return settings, {name: record for name, record in outputs.items() if _is_record(record)}
