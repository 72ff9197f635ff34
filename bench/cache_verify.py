"""Bench: what verifying reused embeddings costs (issue 26, "Integrity").

Side by side in one run, over the same files and the same warm cache:

* a fully cached ``embed_image_set`` of ``--images`` small images (every row from the embedding
  cache) with the checks on read (key.json, then per chunk: dtype, shape, dimension, finiteness,
  content sha256) and with those checks switched off (what the cache did before);
* the cache look-up alone, inside those runs;
* :func:`vsbench.models.cache.check_chunk` alone, per row, for 512-, 1280- and 2048-d rows, and
  its two digests apart (issue 54): the content sha256 alone, the keyed part as written (an
  HMAC-SHA256 of that digest: microseconds a chunk) and, for comparison, an HMAC-SHA256 streamed
  over the whole content instead;
* the resume check of a finished shard: size only (before) against size, sha256 and content
  against the inputs (now).

Rounds alternate the two ways so that a noisy shared machine disturbs both alike; the table
gives medians. Usage: ``python bench/cache_verify.py [--images 4000] [--dim 1280] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from PIL import Image


class Pooled(torch.nn.Module):
    """A 1x1 conv to ``dim`` channels and a mean: cheap, so the cold fill takes seconds."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).mean(dim=(2, 3))


def make_images(folder: Path, count: int):
    from vsbench.io.features import ImageSet

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    ids, paths = [], []
    for n in range(count):
        path = folder / f"i{n:05d}.png"
        Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(path)
        ids.append(f"i{n:05d}")
        paths.append(path)
    return ImageSet(tuple(ids), tuple(paths))


def digest_ways(cache_module, secret, names: np.ndarray, rows: np.ndarray) -> dict:
    """What is timed per chunk: check_chunk whole, the content sha256, its HMAC (as written), and an
    HMAC streamed over the same content (the alternative, not used)."""
    key, dim = "k" * 64, rows.shape[1]
    digest = cache_module.chunk_digest(key, names, rows)
    recorded, signed = np.asarray(digest), np.asarray(cache_module.chunk_hmac(secret, digest))

    def streamed_hmac() -> str:
        mac = secret.mac()
        mac.update(f"{key}|{rows.shape}|{rows.dtype.str}\n".encode())
        mac.update("\n".join(names.tolist()).encode("utf-8"))
        mac.update(np.ascontiguousarray(rows).view(np.uint8).reshape(-1).data)
        return mac.hexdigest()

    return {"check_chunk": lambda: cache_module.check_chunk(key, names, rows, recorded, dim, secret, signed),
            "sha256": lambda: cache_module.chunk_digest(key, names, rows),
            "hmac of the sha256": lambda: cache_module.chunk_hmac(secret, digest),
            "hmac streamed": streamed_hmac}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=4000)
    parser.add_argument("--dim", type=int, default=1280)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=FutureWarning)  # torch.jit deprecation, once per load

    from vsbench.io.cache_secret import CacheSecret
    from vsbench.models import cache as cache_module
    from vsbench.retrieval.embed import _is_complete, embed_image_set

    work = Path(tempfile.mkdtemp(prefix="vsbench-cache-verify-"))
    os.environ[cache_module.CACHE_ENV] = str(work / "cache")
    images = make_images(work / "images", args.images)
    torch.manual_seed(0)
    model_path = work / "pooled.pt"
    torch.jit.script(Pooled(args.dim)).save(str(model_path))
    options = {"path": str(model_path), "input_size": 16, "resize_size": 16, "preserve_aspect_ratio": False}

    def embed_into(out: Path) -> Path:
        return embed_image_set("torchscript", images, out, set_name="s", workers=0, progress=False, device="cpu",
                               model_options=options)

    started = time.perf_counter()
    embed_into(work / "cold")
    cold = time.perf_counter() - started

    lookups: list[float] = []
    real_lookup = cache_module.EmbeddingCache.lookup

    def timed_lookup(self, digests, dim):
        begun = time.perf_counter()
        try:
            return real_lookup(self, digests, dim)
        finally:
            lookups.append(time.perf_counter() - begun)

    cache_module.EmbeddingCache.lookup = timed_lookup
    real_check, real_key = cache_module.check_chunk, cache_module.EmbeddingCache._key_file_matches
    times: dict[str, list[float]] = {"verified": [], "unverified": []}
    look: dict[str, list[float]] = {"verified": [], "unverified": []}
    for round_ in range(args.rounds):
        for way in ("verified", "unverified") if round_ % 2 == 0 else ("unverified", "verified"):
            if way == "unverified":  # the checks off: what a cached read did before
                cache_module.check_chunk = lambda *a, **k: None
                cache_module.EmbeddingCache._key_file_matches = lambda self: True
            else:
                cache_module.check_chunk, cache_module.EmbeddingCache._key_file_matches = real_check, real_key
            out = work / f"{way}-{round_}"
            started = time.perf_counter()
            path = embed_into(out)
            times[way].append(time.perf_counter() - started)
            look[way].append(lookups[-1])
            manifest = json.loads(path.with_suffix(".json").read_text())
            assert manifest["cache"]["hits"] == args.images, manifest["cache"]
    cache_module.check_chunk, cache_module.EmbeddingCache._key_file_matches = real_check, real_key

    # check_chunk alone, per row; and its digests apart: sha256, the HMAC of it, an HMAC streamed over the content
    secret = CacheSecret.from_secret(b"bench" * 8, "bench")
    per_row, digests_per_row = {}, {}
    for dim in (512, 1280, 2048):
        rows = np.random.default_rng(1).standard_normal((args.images, dim)).astype(np.float32)
        names = np.asarray([f"{n:064x}" for n in range(args.images)])
        ways = digest_ways(cache_module, secret, names, rows)
        samples: dict[str, list[float]] = {way: [] for way in ways}
        for _ in range(args.rounds):
            for way, call in ways.items():
                begun = time.perf_counter()
                call()
                samples[way].append(time.perf_counter() - begun)
        per_row[dim] = statistics.median(samples.pop("check_chunk")) / args.images
        digests_per_row[dim] = {way: statistics.median(v) / args.images for way, v in samples.items()}

    # the resume check of the finished cold shard: size only (before) vs verified (now)
    shard = work / "cold" / "s.shard-0-of-1.npz"
    key = json.loads(shard.with_suffix(".json").read_text())["key"]  # the run's own: the check that follows is timed
    resume = {"size only": [], "verified": []}
    for _ in range(args.rounds):
        begun = time.perf_counter()
        shard.stat().st_size == json.loads(shard.with_suffix(".json").read_text())["features_bytes"]  # noqa: B015
        resume["size only"].append(time.perf_counter() - begun)
        begun = time.perf_counter()
        assert _is_complete(shard, shard.with_suffix(".json"), key, list(images.ids)) is None
        resume["verified"].append(time.perf_counter() - begun)

    med = {k: statistics.median(v) for k, v in times.items()}
    med_look = {k: statistics.median(v) for k, v in look.items()}
    print(f"{args.images} images, {args.dim}-d rows ({args.images * args.dim * 4 / 2**20:.1f} MiB in one chunk), "
          f"{args.rounds} rounds, medians; cold fill {cold:.2f} s; torch threads 1; {os.cpu_count()} CPUs")
    print(f"{'fully cached embed_image_set':<40}{'checks off (before)':>22}{'checks on (now)':>18}{'overhead':>12}")
    print(f"{'  whole call (s)':<40}{med['unverified']:>22.3f}{med['verified']:>18.3f}"
          f"{(med['verified'] / med['unverified'] - 1) * 100:>11.1f}%")
    print(f"{'  cache look-up (s)':<40}{med_look['unverified']:>22.3f}{med_look['verified']:>18.3f}"
          f"{(med_look['verified'] - med_look['unverified']) * 1e3:>9.1f} ms")
    print("check_chunk alone: " + ", ".join(f"{d}-d {t * 1e6:.2f} us/row" for d, t in per_row.items()))
    for dim, ways in digests_per_row.items():
        print(f"  {dim}-d digests: " + ", ".join(f"{way} {t * 1e6:.3f} us/row" for way, t in ways.items()))
    print(f"resume check of the finished shard: size only {statistics.median(resume['size only']) * 1e3:.2f} ms, "
          f"verified {statistics.median(resume['verified']) * 1e3:.2f} ms")
    (work / "result.json").write_text(json.dumps(
        {"images": args.images, "dim": args.dim, "rounds": args.rounds, "cold_s": cold, "embed_s": times,
         "lookup_s": look, "check_chunk_s_per_row": per_row, "digests_s_per_row": digests_per_row,
         "resume_s": resume}, indent=1))
    print(f"raw figures: {work / 'result.json'}")


if __name__ == "__main__":
    main()
