"""Bench: resizing bin photos to 224x224 — images per second per core, and how far outputs drift.

Why: the challenge resizes every bin image with one Pillow loop on one core. vsbench's
``resize_abid`` keeps the same filter (antialiased bilinear) and encoder (Pillow's, quality 75)
and has three decode modes, all measured here in one run beside the challenge's loop:

* ``fast`` (named explicitly below; the step's default is ``full``): libjpeg-turbo through simplejpeg (Pillow's pixels, less overhead;
  draft-mode DCT scaling for large photos) and torch's uint8 antialiased bilinear kernel, one
  thread per process; bad or unusual files fall back to ``draft``;
* ``draft``: Pillow, with JPEG draft mode (libjpeg decodes at 1/2, 1/4, 1/8 scale when the photo
  is that much larger than the target);
* ``full``: the challenge's own steps, byte-identical outputs;

plus a process pool. Inputs: ABID-sized photos (~460x360, where draft scaling cannot reduce:
1/2 scale would fall under 224 px) and large 1600x1200 photos (where it reduces 4x). A
torchvision.io path (libjpeg-turbo decode, antialiased resize, encode; one thread) is measured
for comparison.

Throughput is reported per core because that is what carries over to a cluster: a step gets
N cores and goes N times faster (the all-cores row shows how close it gets on this machine,
which is shared with other work, so its per-core figure is a lower bound).

Where the outputs go: every method reads its inputs (hard links on ``--workdir``, in the page
cache) and writes one file per image. By default the outputs go to a tmpfs (``/dev/shm``), so the
figures measure the resize work and the file work every step does, not the disk: on the VM these
figures come from, creating a file on its ext4 disk costs anything from 0.03 to 0.7 ms depending
on where the file system is in a ~20 s cycle (6 us on tmpfs; tens of microseconds on an ordinary
node disk), which is as much as the whole image work of the fast path and is the same for every
method. The challenge's loop and ``fast`` are timed on ``--workdir``'s disk too, in the same run
(``abid_speedup_on_disk``), beside a method that does only the file work (read each input, write
it out), whose time per image is that file system's cost at that moment. In that on-disk pass
the methods take turns on chunks of the images within a round (``--chunks``), so that they share
the file system's state; elsewhere each method does a whole set in one call.

Difference: every method's JPEG output is decoded to an array and compared with the
challenge's output for the same input: mean absolute difference in 0..255 levels over all
pixels and channels.

Embedding input: ``vsbench.retrieval.embed.load_image`` (the fast decoder where no resize follows, Pillow
otherwise) against ``load_image_pillow`` (Pillow for everything, as before), images/s on one
core for two preprocessings (a 224 square, and 256 shorter side + 224 crop) on the resize step's
224x224 outputs (what ``abid_embeddings`` reads), the ABID-sized and the large photos, with a
check that both give the same arrays.

Run: ``python bench/resize.py [--images 400] [--large 40] [--repeat 3] [--chunks 4] [--outputs DIR]
[--json out.json]``. The JSON has, at the top level, ``abid_speedup`` (fast, 1 worker, per core /
the challenge's loop per core, ABID-sized, outputs as above), ``large_speedup`` (the same on
1600x1200 photos), ``abid_mean_abs_diff`` (fast's output vs the challenge's, ABID-sized),
``large_mean_abs_diff``, ``abid_speedup_in_memory`` (the same steps on bytes in memory, no file
reads or writes), ``abid_speedup_on_disk`` (outputs on ``--workdir``'s disk),
``file_work_ms_per_image`` (the file-work-only method, on the outputs' and on the disk's file
system), ``embed_loading`` (before/after per set and preprocessing) and ``descriptor_agreement``.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    DEFAULT_WORKDIR,
    cached_abid,
    canonical_files,
    format_table,
    fresh_dir,
    link_or_copy,
    log,
    machine_info,
    write_json,
)

LARGE_SIZE = (1600, 1200)
CHALLENGE = "challenge loop (PIL, 1 core)"
FAST = "vsbench resize_abid fast, 1 worker"
FILES = "file work only (read, write a copy)"


@dataclass
class Measured:
    """The best timed run of one method on one input set."""

    method: str
    images: int
    cores: int
    seconds: float
    images_per_second: float = 0.0
    per_core: float = 0.0
    vs_challenge_per_core: float | None = None
    vs_challenge_total: float | None = None
    mad_vs_challenge: float | None = None
    all_seconds: tuple[float, ...] = ()


Method = Callable[[Path, Path], None]  # (staged dataset root, output folder)


# --- inputs --------------------------------------------------------------------------------------


def stage_images(source_root: Path, count: int, stage: Path) -> list[Path]:
    """Hard-link the first ``count`` bin images (one spelling per id) as ``stage/bin-images/%05d.jpg``."""
    from vsbench.abid.ids import IMAGES_DIR, local_name

    chosen = canonical_files(source_root / IMAGES_DIR, "image")
    if len(chosen) < count:
        raise RuntimeError(f"only {len(chosen)} images under {source_root}, need {count}")
    if stage.exists():
        shutil.rmtree(stage)
    staged = []
    for bin_id in sorted(chosen)[:count]:
        target = stage / IMAGES_DIR / local_name(bin_id, "image")
        link_or_copy(chosen[bin_id], target)
        staged.append(target)
    return staged


def make_large(small: list[Path], stage: Path, size: tuple[int, int] = LARGE_SIZE) -> list[Path]:
    """Upscale synthetic photos to ``size`` (bicubic, JPEG q90 4:2:0), like a modern camera's.

    Decode cost depends on pixel count and JPEG structure, not on content, so an upscaled
    picture decodes as slowly as a real photo of that size.
    """
    from vsbench.abid.ids import IMAGES_DIR

    if stage.exists():
        shutil.rmtree(stage)
    (stage / IMAGES_DIR).mkdir(parents=True)
    made = []
    for path in small:
        target = stage / IMAGES_DIR / path.name
        with Image.open(path) as image:
            image.convert("RGB").resize(size, Image.Resampling.BICUBIC).save(
                target, format="JPEG", quality=90, subsampling="4:2:0")
        made.append(target)
    return made


# --- the methods ---------------------------------------------------------------------------------


def challenge_loop(size: int) -> Method:
    """The challenge's own code: open, convert, resize bilinear, save (quality 75 by default)."""

    def run(data: Path, out: Path) -> None:
        for p in sorted((data / "bin-images").iterdir()):
            q = out / p.name
            Image.open(p).convert("RGB").resize((size, size), Image.BILINEAR).save(q)

    return run


def file_work_only() -> Method:
    """The file work of one image without the image work: read the input, write it out under
    the same name (one open and read, one create and write, as the challenge's loop does). What
    the file system alone costs per image at that moment; it is in every method's time."""

    def run(data: Path, out: Path) -> None:
        for p in sorted((data / "bin-images").iterdir()):
            (out / p.name).write_bytes(p.read_bytes())

    return run


def vsbench_resize(size: int, quality: int, decode: str, workers: int) -> Method:
    def run(data: Path, out: Path) -> None:
        from vsbench.abid.resize import resize_abid

        summary = resize_abid(data, out, size=size, quality=quality, decode=decode,  # type: ignore[arg-type]
                              workers=workers, progress=False)
        if summary.failed or summary.resized != summary.inputs:
            raise RuntimeError(f"resize_abid: {summary.failed} failed of {summary.inputs}: "
                               f"{summary.failures[:1]}")

    return run


def torchvision_path(size: int, quality: int) -> Method:
    """decode_jpeg -> v2.functional.resize(bilinear, antialias) -> encode_jpeg, one thread.

    Imports and one warm-up image happen here, untimed: torch's first call pays seconds of
    one-off initialisation that a long-running resize step would pay once.
    """
    import io

    import torch
    import torchvision.io as tio
    from torchvision.transforms.v2 import InterpolationMode
    from torchvision.transforms.v2 import functional as F

    torch.set_num_threads(1)
    warm = io.BytesIO()
    Image.new("RGB", (64, 48), (90, 120, 150)).save(warm, format="JPEG")
    warm_image = tio.decode_jpeg(torch.frombuffer(bytearray(warm.getvalue()), dtype=torch.uint8))
    tio.encode_jpeg(F.resize(warm_image, [size, size], interpolation=InterpolationMode.BILINEAR,
                             antialias=True), quality=quality)

    def run(data: Path, out: Path) -> None:
        torch.set_num_threads(1)
        for p in sorted((data / "bin-images").iterdir()):
            image = tio.decode_jpeg(tio.read_file(str(p)), mode=tio.ImageReadMode.RGB)
            small = F.resize(image, [size, size], interpolation=InterpolationMode.BILINEAR, antialias=True)
            (out / p.name).write_bytes(tio.encode_jpeg(small, quality=quality).numpy().tobytes())

    return run


# --- in memory ----------------------------------------------------------------------------------


def in_memory(paths: list[Path], size: int, quality: int, repeat: int) -> dict[str, Any]:
    """The challenge's steps and ``resize_image_bytes(decode="fast")`` on bytes already in memory,
    outputs kept in memory: the compute alone, without reading and writing files (whose cost,
    the same for both, depends on the file system and dilutes the ratio). One thread."""
    import io

    import torch

    from vsbench.abid.resize import resize_image_bytes

    datas = [p.read_bytes() for p in paths]

    def challenge(data: bytes) -> bytes:
        buffer = io.BytesIO()
        Image.open(io.BytesIO(data)).convert("RGB").resize((size, size), Image.BILINEAR).save(buffer, format="JPEG")
        return buffer.getvalue()

    def fast(data: bytes) -> bytes:
        return resize_image_bytes(data, size, quality, "fast")

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    best = {"challenge": math.inf, "fast": math.inf}
    try:
        for _ in range(max(1, repeat)):
            for name, function in (("challenge", challenge), ("fast", fast)):
                started = time.perf_counter()
                for data in datas:
                    function(data)
                best[name] = min(best[name], time.perf_counter() - started)
    finally:
        torch.set_num_threads(threads)
    result = {"images": len(datas), "challenge_ms_per_image": round(best["challenge"] / len(datas) * 1e3, 3),
              "fast_ms_per_image": round(best["fast"] / len(datas) * 1e3, 3),
              "speedup": round(best["challenge"] / best["fast"], 3)}
    log(f"  in memory: {result}")
    return result


# --- embedding input ------------------------------------------------------------------------------


def _preprocessings() -> dict[str, Any]:
    from vsbench.models.registry import Preprocessing

    imagenet = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    return {
        "224 square, bilinear (abid_trunk)": Preprocessing(224, 224, *imagenet),
        "256 shorter side, bicubic, 224 crop (efficientnet_lite0)": Preprocessing(224, 256, *imagenet, "bicubic"),
    }


PREPROCESSINGS = _preprocessings()


def resized_images(data: Path, out: Path, size: int, quality: int, decode: str) -> list[Path]:
    """The resize step's own outputs (what ``abid_embeddings`` embeds), made untimed."""
    from vsbench.abid.resize import resize_abid

    shutil.rmtree(out, ignore_errors=True)
    resize_abid(data, out, size=size, quality=quality, decode=decode, workers=1, progress=False)  # type: ignore[arg-type]
    return sorted(out.glob("*.jpg"))


def descriptor_agreement(fast: list[Path], full: list[Path], sources: list[Path], count: int,
                         scratch: Path) -> dict[str, Any]:
    """ImageNet ``efficientnet_lite0`` descriptors of the same photos resized with ``fast`` and
    with ``full`` (the challenge's bytes): cosine of each pair, and whether each fast image's
    nearest neighbour among the full ones is its own twin. How much the ~0.04-level difference
    moves what a network sees; for scale, the same between the challenge's output and its own
    pixels before the JPEG encoding (lossless PNG), a loss every baseline already lives with."""
    import torch

    from vsbench.models.registry import build_model
    from vsbench.retrieval.embed import load_image, normalizer

    model = build_model("efficientnet_lite0").eval()
    model_size = Image.open(full[0]).size
    scale, shift = normalizer(model.preprocessing, torch.device("cpu"))

    def describe_all(paths: list[Path]) -> torch.Tensor:
        batch = torch.from_numpy(np.stack([load_image(p, model.preprocessing) for p in paths]))
        with torch.inference_mode():
            x = batch.permute(0, 3, 1, 2).float().mul_(scale).add_(shift)
            return torch.nn.functional.normalize(model(x).float(), dim=1)

    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    unencoded = []
    for source in sources[:count]:
        with Image.open(source) as image:
            target = scratch / f"{source.stem}.png"
            image.convert("RGB").resize(model_size, Image.BILINEAR).save(target)
        unencoded.append(target)
    a, b, c = describe_all(fast[:count]), describe_all(full[:count]), describe_all(unencoded)
    shutil.rmtree(scratch, ignore_errors=True)
    cosine, encoding = (a * b).sum(1), (b * c).sum(1)
    same_nearest = float((a @ b.T).argmax(1).eq(torch.arange(len(a))).float().mean())
    result = {"model": "efficientnet_lite0 (ImageNet)", "images": len(a), "mean_cosine": round(float(cosine.mean()), 6),
              "min_cosine": round(float(cosine.min()), 6), "nearest_is_twin": round(same_nearest, 4),
              "challenge_vs_unencoded_mean_cosine": round(float(encoding.mean()), 6),
              "challenge_vs_unencoded_min_cosine": round(float(encoding.min()), 6)}
    log(f"  descriptors fast vs full: {result}")
    return result


def embed_loading(label: str, paths: list[Path], name: str, preprocessing: Any, repeat: int) -> dict[str, Any]:
    """load_image (fast decoder) against load_image_pillow (before) on the same files, one process,
    rounds interleaved, best kept; and whether every array is the same."""
    from vsbench.retrieval.embed import load_image, load_image_pillow

    for path in paths:  # page cache warm for both
        path.read_bytes()
    best = {"before": math.inf, "after": math.inf}
    arrays: dict[str, list[np.ndarray]] = {}
    for _ in range(max(1, repeat)):
        for key, function in (("before", load_image_pillow), ("after", load_image)):
            started = time.perf_counter()
            arrays[key] = [function(p, preprocessing) for p in paths]
            best[key] = min(best[key], time.perf_counter() - started)
    identical = all(np.array_equal(a, b) for a, b in zip(arrays["before"], arrays["after"], strict=True))
    before, after = len(paths) / best["before"], len(paths) / best["after"]
    log(f"  embed loading {label}, {name}: before {before:.0f}/s, after {after:.0f}/s, identical {identical}")
    return {"images": label, "preprocessing": name, "count": len(paths),
            "before_images_per_second": round(before, 1), "after_images_per_second": round(after, 1),
            "speedup": round(after / before, 3), "identical": identical}


# --- measuring -----------------------------------------------------------------------------------


def mean_abs_diff(out: Path, reference: Path) -> float:
    """Mean |a - b| over every pixel and channel of every ``reference`` image and its twin in ``out``."""
    total = 0.0
    values = 0
    for ref_path in sorted(reference.glob("*.jpg")):
        with Image.open(ref_path) as ref_image, Image.open(out / ref_path.name) as image:
            a = np.asarray(ref_image.convert("RGB"), dtype=np.int16)
            b = np.asarray(image.convert("RGB"), dtype=np.int16)
        if a.shape != b.shape:
            raise RuntimeError(f"{out / ref_path.name}: shape {b.shape} != challenge's {a.shape}")
        total += float(np.abs(a - b).sum())
        values += a.size
    return total / values if values else math.nan


def split_into_chunks(data: Path, chunks: int, stage: Path) -> list[Path]:
    """``data/bin-images`` hard-linked into ``chunks`` dataset roots of consecutive images."""
    files = sorted((data / "bin-images").iterdir())
    chunks = max(1, min(chunks, len(files)))
    roots = []
    for index in range(chunks):
        root = fresh_dir(stage / f"chunk-{index}")
        for source in files[index * len(files) // chunks:(index + 1) * len(files) // chunks]:
            link_or_copy(source, root / "bin-images" / source.name)
        roots.append(root)
    return roots


def measure(label: str, data: Path, count: int, methods: list[tuple[str, int, Method]], scratch: Path,
            repeat: int, chunks: int = 1) -> list[Measured]:
    """Time every method ``repeat`` times, keep the best; then compare outputs.

    Within a round the images are split into ``chunks`` and every method does a chunk before any
    goes on to the next, so that the methods share the machine's state at each moment: on the VM
    these figures come from, creating a file costs 0.03 to 0.7 ms depending on where the file
    system is in a ~20 s cycle, more than the whole image work of some methods, so one method timed
    whole after another could land in a slow phase the other escaped. Each chunk is one call of
    the method (one ``resize_abid`` run, start-up included). The differences use each method's
    last-round outputs: every round writes the same bytes.
    """
    roots = [data] if chunks <= 1 else split_into_chunks(data, chunks, scratch / label / "input")
    seconds: dict[str, list[float]] = {name: [] for name, _, _ in methods}
    outputs: dict[str, Path] = {}
    for index in range(max(1, repeat)):
        for slot, (name, _cores, _method) in enumerate(methods):
            outputs[name] = fresh_dir(scratch / label / f"m{slot}")
            seconds[name].append(0.0)
        for root in roots:
            for name, _cores, method in methods:
                started = time.perf_counter()
                method(root, outputs[name])
                seconds[name][-1] += time.perf_counter() - started
        for name, _cores, _method in methods:
            produced = sum(1 for p in outputs[name].glob("*.jpg"))
            if produced != count:
                raise RuntimeError(f"{name}: {produced} outputs for {count} inputs")
            log(f"  {label} round {index + 1}: {name}: {seconds[name][-1]:.2f} s")

    results = []
    for name, cores, _ in methods:
        best = min(seconds[name])
        rate = count / best
        results.append(Measured(name, count, cores, best, rate, rate / cores,
                                all_seconds=tuple(seconds[name])))
    reference = next(r for r in results if r.method == CHALLENGE)
    for result in results:
        if result.method == FILES:
            continue  # not a resize: its time is the file system's share of the others'
        result.vs_challenge_per_core = result.per_core / reference.per_core
        result.vs_challenge_total = result.images_per_second / reference.images_per_second
        result.mad_vs_challenge = mean_abs_diff(outputs[result.method], outputs[CHALLENGE])
    shutil.rmtree(scratch / label, ignore_errors=True)
    return results


def table(results: list[Measured]) -> str:
    return format_table(
        ["method", "images", "cores", "seconds", "images/s", "img/s/core", "x challenge/core",
         "x challenge total", "MAD vs challenge"],
        [[r.method, r.images, r.cores, r.seconds, r.images_per_second, r.per_core,
          "-" if r.vs_challenge_per_core is None else r.vs_challenge_per_core,
          "-" if r.vs_challenge_total is None else r.vs_challenge_total,
          "-" if r.mad_vs_challenge is None else f"{r.mad_vs_challenge:.3f}"] for r in results],
    )


def default_outputs(workdir: Path) -> Path:
    """/dev/shm/vsbench-resize-runs where /dev/shm is a writable tmpfs, else workdir/resize-outputs."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK) and filesystem(shm) == "tmpfs":
        return shm / "vsbench-resize-runs"
    return workdir / "resize-outputs"


def filesystem(path: Path) -> str:
    """The type of the file system ``path`` (or its nearest existing parent) is on, from /proc/mounts."""
    path = path.resolve()
    while not path.exists():
        path = path.parent
    try:
        mounts = [line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return "unknown"
    best = max((m for m in mounts if path.is_relative_to(m[0])), key=lambda m: len(m[0]), default=None)
    return best[1] if best else "unknown"


def describe(paths: list[Path]) -> str:
    with Image.open(paths[0]) as image:
        width, height = image.size
    mean_kb = sum(p.stat().st_size for p in paths) / len(paths) / 1024
    return f"{len(paths)} JPEGs, {width}x{height} (first), mean {mean_kb:.0f} kB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=400, help="ABID-sized images to resize")
    parser.add_argument("--large", type=int, default=40, help="1600x1200 images for the draft-mode test "
                        "(0 to skip)")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--quality", type=int, default=75, help="JPEG quality of the outputs (Pillow's "
                        "default, which the challenge's save() uses)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes for the "
                        "all-cores row")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the best per method is kept")
    parser.add_argument("--chunks", type=int, default=4, help="parts of the set the methods take turns on "
                        "within a round of the on-disk pass (see measure)")
    parser.add_argument("--descriptors", type=int, default=64, help="photos whose fast and full outputs are "
                        "embedded with efficientnet_lite0 to compare descriptors (0 to skip)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help="cache and scratch folder")
    parser.add_argument("--outputs", type=Path, default=None, help="where the methods write their outputs "
                        "(default: a folder in /dev/shm where it is a tmpfs, else under --workdir; see the "
                        "module doc); the challenge loop and fast are timed on --workdir's disk as well")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)

    # ~2% of bins have no image; generate a little more than needed.
    bins = math.ceil(args.images * 1.06) + 10
    root = cached_abid(args.workdir, bins, args.seed)
    small = stage_images(root, args.images, args.workdir / "resize-stage" / "small")
    small_data = small[0].parent.parent
    scratch = args.outputs or default_outputs(args.workdir)
    disk_scratch = args.workdir / "resize-runs"
    log(f"outputs under {scratch} ({filesystem(scratch)}); the on-disk pass under {disk_scratch} "
        f"({filesystem(disk_scratch)})")

    size, quality, workers = args.size, args.quality, max(1, args.workers)
    methods: list[tuple[str, int, Method]] = [
        (CHALLENGE, 1, challenge_loop(size)),
        (FAST, 1, vsbench_resize(size, quality, "fast", 1)),
        ("vsbench resize_abid draft, 1 worker", 1, vsbench_resize(size, quality, "draft", 1)),
        ("vsbench resize_abid full, 1 worker", 1, vsbench_resize(size, quality, "full", 1)),
        (f"vsbench resize_abid fast, {workers} workers", workers, vsbench_resize(size, quality, "fast", workers)),
        ("torchvision.io decode+resize+encode, 1 thread", 1, torchvision_path(size, quality)),
        (FILES, 1, file_work_only()),
    ]
    log(f"small set: {describe(small)}")
    small_results = measure("small", small_data, len(small), methods, scratch, args.repeat)
    disk_results = measure("disk", small_data, len(small), [methods[0], methods[1], methods[-1]],
                           disk_scratch, args.repeat, args.chunks)

    large_results: list[Measured] = []
    large_desc = ""
    large: list[Path] = []
    if args.large > 0:
        large = make_large(small[: args.large], args.workdir / "resize-stage" / "large")
        large_desc = describe(large)
        log(f"large set: {large_desc}")
        large_methods = [
            (CHALLENGE, 1, challenge_loop(size)),
            (FAST, 1, vsbench_resize(size, quality, "fast", 1)),
            ("vsbench resize_abid draft, 1 worker", 1, vsbench_resize(size, quality, "draft", 1)),
            ("vsbench resize_abid full, 1 worker", 1, vsbench_resize(size, quality, "full", 1)),
            ("torchvision.io decode+resize+encode, 1 thread", 1, torchvision_path(size, quality)),
        ]
        large_results = measure("large", large[0].parent.parent, len(large), large_methods, scratch,
                                args.repeat)
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.rmtree(disk_scratch, ignore_errors=True)

    memory = in_memory(small, size, quality, args.repeat)
    resized = resized_images(small_data, args.workdir / "resize-stage" / "resized", size, quality, "fast")
    agreement = None
    if args.descriptors > 0:
        exact = resized_images(small_data, args.workdir / "resize-stage" / "resized-full", size, quality, "full")
        agreement = descriptor_agreement(resized, exact, small, args.descriptors,
                                         args.workdir / "resize-stage" / "unencoded")
    loading = [embed_loading(f"{size}x{size} (resize output)", resized, name, prep, args.repeat)
               for name, prep in PREPROCESSINGS.items()]
    loading += [embed_loading("ABID-sized", small, name, prep, args.repeat) for name, prep in PREPROCESSINGS.items()]
    if large:
        loading += [embed_loading("1600x1200", large, name, prep, args.repeat)
                    for name, prep in PREPROCESSINGS.items()]

    print(f"Resize to {size}x{size} (JPEG q{quality}); best of {max(1, args.repeat)}; "
          f"{os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f}")
    print()
    print(f"ABID-sized photos: {describe(small)}")
    print(table(small_results))
    if large_results:
        print()
        print(f"Large photos (draft-scale effect): {large_desc}")
        print(table(large_results))
    print()
    print("MAD = mean absolute difference to the challenge loop's output, 0..255 levels, decoded arrays.")
    print()
    print(f"In memory (no file reads or writes), ABID-sized, 1 thread: challenge {memory['challenge_ms_per_image']} "
          f"ms/image, fast {memory['fast_ms_per_image']} ms/image: {memory['speedup']:.2f}x")
    print()
    print("Embedding input (vsbench.retrieval.embed): decode + resize + crop, one core")
    print(format_table(
        ["images", "preprocessing", "count", "before (Pillow) img/s", "after img/s", "x before", "same arrays"],
        [[r["images"], r["preprocessing"], r["count"], r["before_images_per_second"], r["after_images_per_second"],
          r["speedup"], r["identical"]] for r in loading]))
    print()
    print(f"The same on {filesystem(disk_scratch)} under {disk_scratch}, file work included as above:")
    print(table(disk_results))
    fast_small = next(r for r in small_results if r.method == FAST)
    fast_disk = next(r for r in disk_results if r.method == FAST)
    files = {label: round(1e3 / next(r for r in results if r.method == FILES).per_core, 3)
             for label, results in (("outputs", small_results), ("disk", disk_results))}
    print(f"File work alone (read, write a copy), ms per image: {files['outputs']} on {filesystem(scratch)}, "
          f"{files['disk']} on {filesystem(disk_scratch)}")
    fast_large = next((r for r in large_results if r.method == FAST), None)
    figures = {
        "abid_speedup": round(fast_small.vs_challenge_per_core or 0.0, 3),
        "large_speedup": round(fast_large.vs_challenge_per_core or 0.0, 3) if fast_large else None,
        "abid_mean_abs_diff": round(fast_small.mad_vs_challenge or 0.0, 4),
        "large_mean_abs_diff": round(fast_large.mad_vs_challenge or 0.0, 4) if fast_large else None,
        "abid_speedup_in_memory": memory["speedup"],
        "abid_speedup_on_disk": round(fast_disk.vs_challenge_per_core or 0.0, 3),
    }
    if agreement:
        print()
        print(f"Descriptors, fast vs full outputs ({agreement['model']}, {agreement['images']} photos): "
              f"mean cosine {agreement['mean_cosine']}, min {agreement['min_cosine']}, "
              f"nearest neighbour is the twin for {agreement['nearest_is_twin']:.0%}; for scale, the challenge's "
              f"output vs its pixels before JPEG encoding: mean {agreement['challenge_vs_unencoded_mean_cosine']}, "
              f"min {agreement['challenge_vs_unencoded_min_cosine']}")
    print()
    print("  ".join(f"{k} {v}" for k, v in figures.items()))
    write_json(args.json, {
        **figures,
        "bench": "resize", "size": size, "quality": quality, "repeat": args.repeat, "chunks": args.chunks,
        "outputs": {"folder": str(scratch), "filesystem": filesystem(scratch)},
        "disk": {"folder": str(disk_scratch), "filesystem": filesystem(disk_scratch),
                 "results": [asdict(r) for r in disk_results]},
        "file_work_ms_per_image": files,
        "small": {"inputs": describe(small), "results": [asdict(r) for r in small_results]},
        "large": {"inputs": large_desc, "results": [asdict(r) for r in large_results]},
        "in_memory": memory,
        "embed_loading": loading,
        "descriptor_agreement": agreement,
        "machine": machine_info(),
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
