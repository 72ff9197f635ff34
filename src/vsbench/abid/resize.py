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
* idempotence: an output newer than its input is kept, so a re-run does only what is missing
  (and everything is redone when size, quality or decode differ from the manifest's).

bench/resize.py measures all three modes beside the challenge's loop.
"""

from __future__ import annotations

import io
import os
import time
from dataclasses import asdict, dataclass, field
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
from vsbench.storage import atomic_write_bytes, atomic_write_json

MANIFEST_NAME = "_manifests/resize.json"
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

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["images_per_second"] = round(self.resized / self.seconds, 2) if self.seconds else 0.0
        return data


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


def _run_job(job: ResizeJob) -> tuple[str, str]:
    """Worker entry point: returns (source, "" or the reason it failed)."""
    try:
        with open(job.source, "rb", buffering=0) as source:  # unbuffered: one read, a quarter of read_bytes' cost
            data = source.readall()
        atomic_write_bytes(job.target, resize_image_bytes(data, job.size, job.quality, job.decode))
        return job.source, ""
    except (ValueError, OSError) as exc:
        return job.source, str(exc)
    except Exception as exc:  # noqa: BLE001 - any other decoder fault is this image's, never the step's
        return job.source, f"{type(exc).__name__}: {exc}"


def _is_current(source: Path, target: Path) -> bool:
    try:
        return target.stat().st_mtime >= source.stat().st_mtime and target.stat().st_size > 0
    except FileNotFoundError:
        return False


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
    previous = _previous_settings(out / manifest)
    settings_changed = previous is not None and previous != (size, quality, decode)

    jobs: list[ResizeJob] = []
    for bin_id, source in sorted(sources.items()):
        target = out / local_name(bin_id, "image")
        if not settings_changed and _is_current(source, target):
            summary.kept += 1
        else:
            jobs.append(ResizeJob(str(source), str(target), size, quality, decode))
    out.mkdir(parents=True, exist_ok=True)

    fast = decode == "fast" and jpeg.available()
    if fast:
        # Imported here, before any fork, so that workers share it instead of each importing
        # torch (seconds). No torch operation runs in this process before the pool forks: an
        # OpenMP thread pool started in a parent does not survive fork().
        import torch  # noqa: F401
    with tqdm(total=len(jobs), desc="resize", unit="img", disable=not progress) as bar:
        if workers == 1 or len(jobs) < 2 * workers:
            with _one_torch_thread(fast):
                _collect(map(_run_job, jobs), summary, bar)
        else:
            with get_context("fork").Pool(workers, initializer=_init_worker if fast else None) as pool:
                _collect(pool.imap_unordered(_run_job, jobs, chunksize=8), summary, bar)

    summary.failures.sort(key=lambda item: item["file"])
    summary.seconds = round(time.perf_counter() - started, 3)
    atomic_write_json(out / manifest, summary.as_dict())
    limits.check_failure_rate("resize", summary.failed, summary.resized + summary.failed, rate, out / manifest)
    return summary


def _one_torch_thread(fast: bool):
    """In-process resizing counts as one core too: torch on one thread, restored afterwards."""
    import contextlib

    if not fast:
        return contextlib.nullcontext()
    return one_thread()


def _collect(results, summary: ResizeSummary, bar) -> None:
    for source, reason in results:
        if reason:
            summary.failed += 1
            summary.failures.append({"file": f"{IMAGES_DIR}/{Path(source).name}", "reason": reason})
        else:
            summary.resized += 1
        bar.update(1)


def _previous_settings(manifest: Path) -> tuple[int, int, str] | None:
    from vsbench.inputs import read_json

    try:
        previous = read_json(manifest)
        return int(previous["size"]), int(previous["quality"]), str(previous["decode"])
    except (FileNotFoundError, KeyError, ValueError, TypeError):
        return None
