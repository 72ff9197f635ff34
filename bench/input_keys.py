"""What keying the embed step's shards on the content of their inputs costs (issue 37), side by side.

On ``--images`` files of ``--kb`` kB each (random bytes: the key reads bytes, it decodes nothing;
ABID photos are ~50 kB, DISC's ~100 kB) and a finished shard of ``--dim``-d features for them, each
round times, taking turns so that a shared machine's load falls on all alike:

* **keep (before)**: what a re-run did before issue 37 to keep a finished shard: the manifest,
  the feature file's sha256, its rows checked (``_is_complete`` with a key of names only);
* **keep (now)**: the same plus the content key (``input_key``): every image's digest from the
  memo's stat record, one combined digest; nothing is read but the memo;
* **first run's key**: ``input_key`` with no memo, every image hashed (sha256, the threads the
  embed step gives it). The embedding cache hashes every image anyway, with the same digests now
  shared, so with the cache on (the default) this is not an extra cost; with it off it is one read
  of each file, set here against the embed step's own time for the same images at
  ``--images-per-second`` (default 2,166/s, the H100's steady end-to-end rate of issue 40: the
  fastest step there is; on a CPU the step is ~10-100x slower and the share smaller still);
* **keep (full)**: the keep check of a re-run under ``--verify-inputs full`` (issue 46): every
  image hashed again whatever its stat record, page cache warm;
* **keep (full, cold)**: the same after each file's pages were dropped from the page cache
  (``posix_fadvise(DONTNEED)``, not timed: no root needed), so every byte comes from the disk,
  as on a night whose data was not read since the last one.

Prints medians and ratios; ``--json`` writes them. Page cache warm except for the cold column (the
second of two runs is the case that matters: the files were just read or written).

    python bench/input_keys.py [--images 100000] [--kb 50] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from vsbench.io.digests import DigestMemo
from vsbench.io.features import FeatureSet, save_features
from vsbench.io.storage import atomic_write_json, file_sha256
from vsbench.retrieval import embed


def _files(folder: Path, count: int, kb: int) -> list[Path]:
    marker = folder / f".complete-{count}-{kb}"
    paths = [folder / f"{i // 1000:03d}" / f"{i:07d}.jpg" for i in range(count)]
    if marker.exists():
        return paths
    shutil.rmtree(folder, ignore_errors=True)
    rng = np.random.default_rng(0)
    block = rng.bytes(kb * 1024 + 4096)
    for i, path in enumerate(paths):
        path.parent.mkdir(parents=True, exist_ok=True)
        offset = i % 4096
        path.write_bytes(i.to_bytes(8, "little") + block[offset:offset + kb * 1024 - 8])
    marker.write_text("ok")
    time.sleep(embed_racy_s())
    return paths


def _drop_from_page_cache(paths: list[Path]) -> None:
    """Evict the files' (clean) pages, so the next read comes from the disk."""
    os.sync()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def embed_racy_s() -> float:
    from vsbench.io.digests import RACY_NS
    return RACY_NS / 1e9 + 0.1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=100_000)
    parser.add_argument("--kb", type=int, default=50)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=max(2, os.cpu_count() or 2))
    parser.add_argument("--images-per-second", type=float, default=2166.0)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/vsbench-bench/input-keys"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    print(f"[bench] {args.images:,} files of {args.kb} kB under {args.workdir}", file=sys.stderr)
    paths = _files(args.workdir / "images", args.images, args.kb)
    ids = [p.stem for p in paths]
    out = args.workdir / "out"
    out.mkdir(parents=True, exist_ok=True)
    features_path, manifest_path = out / "set.shard-0-of-1.npz", out / "set.shard-0-of-1.json"
    rows = np.random.default_rng(1).standard_normal((len(ids), args.dim)).astype(np.float32)
    save_features(features_path, FeatureSet(np.asarray(ids), rows))
    memo_path = embed.inputs_path(features_path)
    memo = DigestMemo(memo_path)
    inputs, _ = embed.input_key(paths, ids, {}, memo, threads=args.threads)
    memo.save()
    old_key = embed._resume_key("m", {}, ids, True, 0)
    new_key = embed._resume_key("m", {}, ids, True, 0, inputs)
    manifest = {"complete": True, "count": len(ids), "failed": [], "dim": args.dim, "features": features_path.name,
                "features_bytes": features_path.stat().st_size, "features_sha256": file_sha256(features_path)}

    def keep_before() -> None:
        atomic_write_json(manifest_path, {**manifest, "key": old_key})
        assert embed._is_complete(features_path, manifest_path, old_key, ids) is None

    def keep_now() -> None:
        atomic_write_json(manifest_path, {**manifest, "key": new_key})
        memo = DigestMemo(memo_path)
        now, _ = embed.input_key(paths, ids, {}, memo, threads=args.threads)
        assert memo.hashed == 0
        assert embed._is_complete(features_path, manifest_path, embed._resume_key("m", {}, ids, True, 0, now), ids) is None
        memo.save()

    def keep_full() -> None:
        atomic_write_json(manifest_path, {**manifest, "key": new_key})
        memo = DigestMemo(memo_path, trust_stat=False)
        now, _ = embed.input_key(paths, ids, {}, memo, threads=args.threads)
        assert memo.hashed == len(paths)
        assert embed._is_complete(features_path, manifest_path, embed._resume_key("m", {}, ids, True, 0, now), ids) is None
        memo.save()

    def first_key() -> None:
        memo = DigestMemo(None)
        embed.input_key(paths, ids, {}, memo, threads=args.threads)
        assert memo.hashed == len(paths)

    methods = {"keep (before)": keep_before, "keep (now)": keep_now, "first run's key": first_key,
               "keep (full)": keep_full, "keep (full, cold)": keep_full}
    times: dict[str, list[float]] = {name: [] for name in methods}
    for round_ in range(args.rounds):
        for name, method in methods.items():
            if "cold" in name:
                _drop_from_page_cache(paths)
            started = time.perf_counter()
            method()
            times[name].append(time.perf_counter() - started)
        print(f"[bench] round {round_ + 1}: " + ", ".join(f"{n} {t[-1]:.2f} s" for n, t in times.items()),
              file=sys.stderr)
    median = {name: statistics.median(t) for name, t in times.items()}
    step = args.images / args.images_per_second
    first = "first run's key"
    print(f"{args.images:,} images of {args.kb} kB, {args.dim}-d features, {args.threads} threads, "
          f"median of {args.rounds}")
    print(f"{'what':<22}{'seconds':>10}")
    for name, value in median.items():
        print(f"{name:<22}{value:>10.3f}")
    print(f"keep: now / before = {median['keep (now)'] / median['keep (before)']:.2f}x "
          f"(+{median['keep (now)'] - median['keep (before)']:.3f} s)")
    print(f"keep: full / now = {median['keep (full)'] / median['keep (now)']:.1f}x warm "
          f"(+{median['keep (full)'] - median['keep (now)']:.2f} s), "
          f"{median['keep (full, cold)'] / median['keep (now)']:.1f}x cold "
          f"(+{median['keep (full, cold)'] - median['keep (now)']:.2f} s; "
          f"{args.images * args.kb / 1024 / median['keep (full, cold)']:.0f} MB/s)")
    print(f"first run's key vs the embed step at {args.images_per_second:,.0f} images/s ({step:.1f} s): "
          f"{100 * median[first] / step:.1f}% (0% with the embedding cache on: it hashes them anyway)")
    if args.json:
        args.json.write_text(json.dumps({"median_s": median, "images": args.images, "kb": args.kb,
                                         "embed_step_s": step}, indent=2))


if __name__ == "__main__":
    main()
