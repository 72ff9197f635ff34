"""Bench: a gallery of millions on one node, vsbench's index tasks and search beside raw FAISS.

Why: DISC21 has 1 M references, ABID as a gallery 1 M+ images, product catalogs tens of millions,
ILIAS 100 M distractors. vsbench's index step trains each codec once and fills each reference shard
in a task of its own, reading only that shard's rows (so a fill's memory follows its shard, not the
gallery); it adds to FAISS's own work the digests that decide reuse and atomic writes. Its search
step reads one shard, projects its queries, writes a result file; the merge keeps each query's top
k. This bench measures what that costs on a generated gallery (clustered, so that IVF/PQ recall
means something), per codec, each method in its own process so that peak memory is its own:

* **faiss build**: ``index_factory``, ``train``, ``add`` in one process (the whole index in memory);
* **one-pod build** (``--before-src``): another checkout's ``build_index`` in one process;
* **vsbench train, fill x M, finish**: the pipeline's index tasks, each in its own process;
* **faiss search**: ``read_index`` of faiss's one index, ``search``;
* **vsbench search**: ``search_shard`` of every (query shard, reference shard) task, then ``collect``;
  the two searches take turns, ``--rounds`` times each, and their medians are compared;
* with ``--merge-ondisk`` (IVF codecs): **merge**, the finish task merging the filled shards into one
  on-disk index, and **merged search**, ``search_merged`` of every query shard (one probe of the whole
  gallery, its lists mapped from disk) then ``collect``, taking turns with the sharded search; a second
  table puts the two side by side (merge seconds, queries/s and their ratio, recall, same ids).

and reports build seconds, queries/s, peak RSS (MB), recall@10 against exact (brute-force) search
and whether both searches found the same ids. Both searches of an IVF codec use ``--search-params``.
The data is generated once into ``--workdir`` (float32 ``.npy``, read memory-mapped, a chunk at a time).

Run: ``python bench/gallery.py [--references 1000000] [--dim 256] [--queries 10000] [--train 100000]
[--codecs 'IVF4096,PQ32;IVF4096,SQ8'] [--search-params nprobe=16] [--reference-shards 1] [--rounds 3]
[--no-faiss] [--before-src OTHER/src] [--merge-ondisk] [--json out.json]``
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import DEFAULT_WORKDIR, format_table, log, machine_info, write_json


def data_folder(folder: Path, references: int, queries: int, train: int, dim: int, seed: int = 0) -> Path:
    return folder / f"gallery-{references}-{queries}-{train}-{dim}-s{seed}"


def run_folder(workdir: Path, references: int, dim: int, codec: str) -> Path:
    """Where one codec's index and search results of a gallery run live (bench/integrity.py reuses them)."""
    return workdir / f"gallery-run-{references}-{dim}" / codec.replace(",", "_")


def add_gallery_arguments(parser: argparse.ArgumentParser) -> None:
    """The gallery's shape and search settings, shared with bench/integrity.py."""
    parser.add_argument("--references", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--train", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--search-params", default="nprobe=16")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--json", type=Path)


def generate(folder: Path, references: int, queries: int, train: int, dim: int, seed: int = 0) -> Path:
    """Clustered float32 descriptors (2,000 centres in a 64-dim subspace plus noise), written once."""
    target = data_folder(folder, references, queries, train, dim, seed)
    if (target / "done").exists():
        return target
    target.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    basis = rng.standard_normal((64, dim)).astype(np.float32) / 8
    centres = rng.standard_normal((2000, 64)).astype(np.float32) * 3
    for name, count in (("references", references), ("queries", queries), ("train", train)):
        out = np.lib.format.open_memmap(target / f"{name}.npy", mode="w+", dtype=np.float32, shape=(count, dim))
        for start in range(0, count, 100_000):
            n = min(100_000, count - start)
            latent = centres[rng.integers(0, len(centres), n)] + rng.standard_normal((n, 64), dtype=np.float32)
            out[start:start + n] = latent @ basis + 0.05 * rng.standard_normal((n, dim), dtype=np.float32)
        out.flush()
        del out
    (target / "done").write_text("ok\n")
    return target


def chunks(references: np.ndarray, size: int):
    """``(start, contiguous rows)`` of a memory-mapped array, ``size`` rows at a time, each chunk's
    mapped pages dropped once copied, so that a 10 GB gallery costs a chunk of resident memory."""
    try:
        from vsbench.io.features import _release
    except ImportError:  # an older checkout (--before-src) has no such helper
        def _release(part, lo, hi):
            return None
    for start in range(0, len(references), size):
        rows = np.ascontiguousarray(references[start:start + size])
        _release(references, start, start + len(rows))
        yield start, rows


def exact_neighbours(data: Path, k: int) -> np.ndarray:
    """Brute-force top k (L2) of every query, cached beside the data; 1 M references at a time, so
    that memory stays bounded at any gallery size."""
    path = data / f"exact-{k}.npy"
    if path.exists():
        return np.load(path)
    import faiss

    references = np.load(data / "references.npy", mmap_mode="r")
    queries = np.load(data / "queries.npy")
    best_d = np.full((len(queries), k), np.inf, np.float32)
    best_i = np.full((len(queries), k), -1, np.int64)
    for start, rows in chunks(references, 1_000_000):
        index = faiss.IndexFlatL2(references.shape[1])
        index.add(rows)
        d, i = index.search(queries, k)
        d, i = np.concatenate([best_d, d], 1), np.concatenate([best_i, i + start], 1)
        order = np.argsort(d, axis=1, kind="stable")[:, :k]
        best_d, best_i = np.take_along_axis(d, order, 1), np.take_along_axis(i, order, 1)
    np.save(path, best_i)
    return best_i


def recall(found: np.ndarray, exact: np.ndarray, k: int) -> float:
    return float(np.mean([len(set(a[:k].tolist()) & set(b[:k].tolist())) / k for a, b in zip(found, exact)]))


# --- the measurements, each run in a child process (python bench/gallery.py --child ...) ---

FAISS_ADD_CHUNK = 262_144  # a multiple of vsbench's encode block (65,536) and of faiss's query block (4,096)


def _request(data: Path, codec: str, k: int, search_params: str, *, train: bool):
    """What vsbench's steps are given: the references read in place (memory-mapped, as the fill
    tasks read the embed step's files), keyed by the data folder's name; a search needs no training
    rows (no score normalization here)."""
    from vsbench.index.plan import SearchRequest

    references = np.load(data / "references.npy", mmap_mode="r")
    try:  # this checkout's fill reads rows in place; an older one (--before-src) takes the array
        from vsbench.io.features import MappedRows, RowSource

        references = MappedRows([references], [RowSource(f"{data.name}/references.npy", data.name)])
    except ImportError:
        pass
    return SearchRequest("gallery", np.load(data / "queries.npy"), references,
                         np.load(data / "train.npy") if train else None, codec, "l2", k,
                         search_params=search_params, reference_ids=_ids(len(references)))


def _ids(count: int) -> tuple[str, ...]:
    return tuple(map(str, range(count)))


def child(kind: str, data: Path, codec: str, k: int, search_params: str, folder: Path, reference_shards: int,
          search_shards: int, shard: int = -1) -> dict[str, Any]:
    import faiss

    started = time.perf_counter()
    result: dict[str, Any] = {}
    if kind == "faiss-build":  # raw faiss, one process: the whole index in memory, then written for its search
        references = np.load(data / "references.npy", mmap_mode="r")
        index = faiss.index_factory(references.shape[1], codec, faiss.METRIC_L2)
        index.train(np.load(data / "train.npy"))
        for _, rows in chunks(references, FAISS_ADD_CHUNK):
            index.add(rows)
        result["seconds"] = time.perf_counter() - started
        faiss.write_index(index, str(folder / "faiss.index"))
    elif kind == "faiss-search":
        queries = np.load(data / "queries.npy")
        index = faiss.read_index(str(folder / "faiss.index"))
        if search_params:
            faiss.ParameterSpace().set_index_parameters(index, search_params)
        result["ids"] = index.search(queries, k)[1].tolist()
    elif kind == "vsbench-build":  # the index step in one process (or an older checkout's, --before-src)
        from vsbench.index.store import build_index

        request = _request(data, codec, k, search_params, train=True)
        started = time.perf_counter()
        (info,) = build_index(request, folder / "index", reference_shards=reference_shards)
        result["reused"] = info.meta["reused"]
    elif kind in ("vsbench-train", "vsbench-fill", "vsbench-finish"):  # the pipeline's index tasks, one process each
        from vsbench.index.store import fill_shard, finish_index, train_index

        request = _request(data, codec, k, search_params, train=kind != "vsbench-fill")
        started = time.perf_counter()
        if kind == "vsbench-train":
            result["reused"] = train_index(request, folder / "index", codec, reference_shards=reference_shards)["reused"]
        elif kind == "vsbench-fill":
            result["kept"] = fill_shard(request, folder / "index", codec, shard, reference_shards=reference_shards)["kept"]
        else:
            finish_index(request, folder / "index", codec, reference_shards=reference_shards)
    elif kind == "vsbench-merge":  # the finish task with --merge-ondisk: the filled shards merged on disk
        from vsbench.index.store import finish_index

        request = _request(data, codec, k, search_params, train=True)
        started = time.perf_counter()
        info = finish_index(request, folder / "index", codec, reference_shards=reference_shards, merge_ondisk=True)
        result["merged_mb"] = sum((info.folder / name).stat().st_size for name in info.merged_names) / 2**20
    elif kind == "vsbench-search-merged":  # one task per query shard, each probing the whole gallery once
        from vsbench.index.results import collect, search_merged

        request = _request(data, codec, k, search_params, train=False)
        started = time.perf_counter()
        for query_shard in range(search_shards):
            search_merged(request, folder / "index", folder / "search-merged", query_shard=query_shard,
                          query_shards=search_shards)
        found = collect(request, folder / "index", folder / "search-merged", query_shards=search_shards, merged=True)
        result["ids"] = found[(codec, "none")][1].tolist()
    elif kind == "vsbench-search":
        from vsbench.index.results import collect, search_shard, shard_tasks

        request = _request(data, codec, k, search_params, train=False)
        started = time.perf_counter()  # the inputs are the caller's; what vsbench does with them is timed
        for query_shard, reference_shard in shard_tasks(search_shards, reference_shards):
            search_shard(request, folder / "index", folder / "search", query_shard=query_shard,
                         query_shards=search_shards, reference_shard=reference_shard)
        found = collect(request, folder / "index", folder / "search", query_shards=search_shards)
        result["ids"] = found[(codec, "none")][1].tolist()
    result.setdefault("seconds", time.perf_counter() - started)
    result["peak_rss_mb"] = peak_rss_mb()
    return result


def peak_rss_mb() -> float:
    """This process's peak resident memory (``VmHWM``: unlike ``ru_maxrss`` it starts afresh at exec,
    so a child does not report the parent's peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(*args: str, src: Path | None = None) -> dict[str, Any]:
    import os

    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    output = subprocess.run([sys.executable, __file__, "--child", *args], check=True, capture_output=True, text=True,
                            env=env)
    return json.loads(output.stdout.strip().splitlines()[-1])


def _median(values: list[float]) -> float:
    return float(np.median(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_gallery_arguments(parser)
    parser.add_argument("--codecs", default="IVF4096,PQ32;IVF4096,SQ8")
    parser.add_argument("--reference-shards", type=int, default=1)
    parser.add_argument("--search-shards", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="searches of each side, taking turns going first")
    parser.add_argument("--no-faiss", action="store_true", help="skip raw faiss (when its one-process index does "
                        "not fit this machine's memory)")
    parser.add_argument("--before-src", type=Path, help="another checkout's src/: its one-pod index step is "
                        "measured too (before_build_*)")
    parser.add_argument("--merge-ondisk", action="store_true", help="IVF codecs: also merge the filled shards into "
                        "one on-disk index and search it, beside the sharded search (merged_* figures)")
    parser.add_argument("--child", nargs=9, metavar=("KIND", "DATA", "CODEC", "K", "PARAMS", "FOLDER", "RSHARDS",
                                                    "QSHARDS", "SHARD"))
    args = parser.parse_args()
    if args.child:
        kind, data, codec, k, params, folder, reference_shards, search_shards, shard = args.child
        print(json.dumps(child(kind, Path(data), codec, int(k), params, Path(folder), int(reference_shards),
                               int(search_shards), int(shard))))
        return

    data = generate(args.workdir, args.references, args.queries, args.train, args.dim)
    log(f"data: {data}; exact neighbours ...")
    exact = exact_neighbours(data, args.k)
    rows, merged_rows, figures = [], [], {"machine": machine_info(), "references": args.references, "queries": args.queries,
                         "train": args.train, "dim": args.dim, "k": args.k, "search_params": args.search_params,
                         "reference_shards": args.reference_shards, "search_shards": args.search_shards,
                         "rounds": args.rounds, "codecs": {}}
    import shutil

    for codec in args.codecs.split(";"):
        folder = run_folder(args.workdir, args.references, args.dim, codec)
        params = args.search_params if "IVF" in codec else ""  # nprobe means nothing to other codecs
        common = [str(data), codec, str(args.k), params, str(folder), str(args.reference_shards),
                  str(args.search_shards)]
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        entry: dict[str, Any] = {}
        if not args.no_faiss:
            log(f"{codec}: faiss one-process build ...")
            faiss_build = run_child("faiss-build", *common, "-1")
            entry.update(faiss_build_seconds=faiss_build["seconds"], faiss_build_peak_mb=faiss_build["peak_rss_mb"],
                         one_pod_build_peak_mb=faiss_build["peak_rss_mb"])
        if args.before_src is not None:
            log(f"{codec}: one-pod index step of {args.before_src} ...")
            before = run_child("vsbench-build", *common[:4], str(folder / "before"), *common[5:], "-1",
                               src=args.before_src)
            entry.update(before_build_seconds=before["seconds"], before_build_peak_mb=before["peak_rss_mb"],
                         one_pod_build_peak_mb=before["peak_rss_mb"])
            shutil.rmtree(folder / "before")
        log(f"{codec}: vsbench train, {args.reference_shards} fill task(s), finish ...")
        train = run_child("vsbench-train", *common, "-1")
        fills = [run_child("vsbench-fill", *common, str(shard)) for shard in range(args.reference_shards)]
        finish = run_child("vsbench-finish", *common, "-1")
        log(f"{codec}: the index step in one process again (it must reuse every shard) ...")
        reused = run_child("vsbench-build", *common, "-1")
        entry.update({
            "train_seconds": train["seconds"], "train_peak_mb": train["peak_rss_mb"],
            "fill_seconds": [fill["seconds"] for fill in fills], "fill_peak_mb": [fill["peak_rss_mb"] for fill in fills],
            "fill_task_peak_mb": max(fill["peak_rss_mb"] for fill in fills), "finish_seconds": finish["seconds"],
            "vsbench_build_seconds": train["seconds"] + sum(fill["seconds"] for fill in fills) + finish["seconds"],
            "vsbench_reuse_seconds": reused["seconds"], "reused": reused["reused"],
        })
        merging = args.merge_ondisk and "IVF" in codec
        if merging:
            log(f"{codec}: the finish task again, merging the {args.reference_shards} shard(s) on disk ...")
            merge = run_child("vsbench-merge", *common, "-1")
            entry.update(merge_seconds=merge["seconds"], merge_peak_mb=merge["peak_rss_mb"],
                         merged_mb=merge["merged_mb"])
        log(f"{codec}: searches, {args.rounds} round(s), taking turns ...")
        searches: dict[str, list[dict[str, Any]]] = {"faiss": [], "vsbench": [], "merged": []}
        sides = ["faiss", "vsbench"] + (["merged"] if merging else [])
        for number in range(args.rounds):
            order = sides[number % len(sides):] + sides[:number % len(sides)]  # each side goes first in turn
            for side in order:
                if side == "faiss" and not args.no_faiss:
                    searches["faiss"].append(run_child("faiss-search", *common, "-1"))
                elif side == "vsbench":
                    shutil.rmtree(folder / "search", ignore_errors=True)
                    searches["vsbench"].append(run_child("vsbench-search", *common, "-1"))
                elif side == "merged":
                    shutil.rmtree(folder / "search-merged", ignore_errors=True)
                    searches["merged"].append(run_child("vsbench-search-merged", *common, "-1"))
        vsbench_search = searches["vsbench"][-1]
        vsbench_seconds = _median([s["seconds"] for s in searches["vsbench"]])
        entry.update({
            "vsbench_search_seconds": [s["seconds"] for s in searches["vsbench"]],
            "vsbench_search_qps": args.queries / vsbench_seconds,
            "vsbench_search_peak_mb": max(s["peak_rss_mb"] for s in searches["vsbench"]),
            "vsbench_recall_at_k": recall(np.asarray(vsbench_search["ids"]), exact, args.k),
        })
        if searches["merged"]:
            merged_search = searches["merged"][-1]
            merged_seconds = _median([s["seconds"] for s in searches["merged"]])
            entry.update({
                "merged_search_seconds": [s["seconds"] for s in searches["merged"]],
                "merged_search_qps": args.queries / merged_seconds,
                "merged_search_peak_mb": max(s["peak_rss_mb"] for s in searches["merged"]),
                "merged_recall_at_k": recall(np.asarray(merged_search["ids"]), exact, args.k),
                "merged_speedup": vsbench_seconds / merged_seconds,
                "merged_same_ids": merged_search["ids"] == vsbench_search["ids"],
                "merged_rows_with_other_ids": int(np.sum(np.any(np.asarray(merged_search["ids"])
                                                                != np.asarray(vsbench_search["ids"]), axis=1))),
            })
            fill_seconds = sum(entry["fill_seconds"])
            merged_rows.append([
                codec, f"{fill_seconds:.1f}", f"{entry['merge_seconds']:.1f}",
                f"{entry['merge_seconds'] / fill_seconds:.2f}x", f"{entry['merge_peak_mb']:.0f}",
                f"{entry['vsbench_search_qps']:.0f}", f"{entry['merged_search_qps']:.0f}",
                f"{entry['merged_speedup']:.2f}x",
                f"{entry['vsbench_search_peak_mb']:.0f}/{entry['merged_search_peak_mb']:.0f}",
                f"{entry['vsbench_recall_at_k']:.4f}/{entry['merged_recall_at_k']:.4f}",
                f"{entry['merged_same_ids']} ({entry['merged_rows_with_other_ids']} rows differ)",
                f"{entry['merged_mb']:.0f}"])
        if searches["faiss"]:
            faiss_search = searches["faiss"][-1]
            faiss_seconds = _median([s["seconds"] for s in searches["faiss"]])
            entry.update({"faiss_search_seconds": [s["seconds"] for s in searches["faiss"]],
                          "faiss_search_qps": args.queries / faiss_seconds,
                          "faiss_search_peak_mb": max(s["peak_rss_mb"] for s in searches["faiss"]),
                          "faiss_recall_at_k": recall(np.asarray(faiss_search["ids"]), exact, args.k),
                          "search_overhead": vsbench_seconds / faiss_seconds,
                          "build_overhead": entry["vsbench_build_seconds"] / entry["faiss_build_seconds"],
                          "same_ids": faiss_search["ids"] == vsbench_search["ids"],
                          "rows_with_other_ids": int(np.sum(np.any(np.asarray(faiss_search["ids"])
                                                                   != np.asarray(vsbench_search["ids"]), axis=1)))})
            (folder / "faiss.index").unlink(missing_ok=True)
        index_bytes = sum(p.stat().st_size for p in (folder / "index").rglob("*.faiss")
                          if not p.name.startswith("merged-"))  # the shards and the trained codec, as before
        entry["index_mb"] = index_bytes / 2**20
        entry["load_average_1m"] = machine_info().get("load_average_1m")
        figures["codecs"][codec] = entry
        nan = float("nan")
        rows.append([codec, f"{entry.get('faiss_build_seconds', nan):.1f}", f"{entry['vsbench_build_seconds']:.1f}",
                     f"{entry.get('build_overhead', nan):.2f}x", f"{entry['vsbench_reuse_seconds']:.1f}",
                     f"{entry.get('faiss_search_qps', nan):.0f}", f"{entry['vsbench_search_qps']:.0f}",
                     f"{entry.get('search_overhead', nan):.3f}x",
                     f"{entry.get('one_pod_build_peak_mb', nan):.0f}/{entry['fill_task_peak_mb']:.0f}",
                     f"{entry.get('faiss_search_peak_mb', nan):.0f}/{entry['vsbench_search_peak_mb']:.0f}",
                     f"{entry.get('faiss_recall_at_k', nan):.3f}/{entry['vsbench_recall_at_k']:.3f}",
                     str(entry.get("same_ids", "-")), f"{entry['index_mb']:.0f}"])
    print(f"{args.references:,} x {args.dim}-d references, {args.queries:,} queries, {args.train:,} training rows, "
          f"k={args.k}, {args.search_params or 'default search settings'}, {args.reference_shards} reference "
          f"shard(s), {args.search_shards} query shard(s), median of {args.rounds} search(es) a side, 1-min load "
          f"{machine_info().get('load_average_1m', '?')}")
    print(format_table(["codec", "faiss build s", "vsbench build s", "build x", "reuse s", "faiss q/s", "vsbench q/s",
                        "search x", "build peak MB one-pod/fill", "search peak MB f/v", f"recall@{args.k} f/v",
                        "same ids", "index MB"], rows))
    if merged_rows:
        print(f"\nmerged on disk (--merge-ondisk) beside the {args.reference_shards}-shard search, "
              f"{args.search_shards} query shard(s): search tasks {args.search_shards} vs "
              f"{args.search_shards * args.reference_shards}")
        print(format_table(["codec", "fills s (sum)", "merge s", "merge/fills", "merge peak MB", "sharded q/s",
                            "merged q/s", "merged speed-up", "search peak MB s/m", f"recall@{args.k} s/m", "same ids",
                            "merged MB"], merged_rows))
    if args.json:
        write_json(args.json, figures)


if __name__ == "__main__":
    main()
