"""What verifying reused index files and search results costs (issue 26), side by side in one run.

On the gallery that ``bench/gallery.py`` built (1M x 256-d by default, its index folder under
``--workdir``), each round times, with the checks on and then off (the file digests replaced by a
size check, which is what a reuse checked before), taking turns so that a shared machine's load falls
on both alike:

* the index step reusing the built index (``build_index``: every file's sha256 on; sizes off);
* one search task and the merge (``search_shard`` + ``collect``, results deleted before each: on,
  the shard's sha256 when read, the result's content digest and array checks when merged).

Prints medians, the difference and the ratio on/off; ``--json`` writes them.

    python bench/gallery.py --codecs IVF4096,SQ8        # once: data and index
    python bench/integrity.py --codec IVF4096,SQ8 [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gallery import _request, add_gallery_arguments, data_folder, run_folder  # noqa: E402

from vsbench.index import results, store  # noqa: E402


@contextmanager
def checks(on: bool):
    """Off: an index file passes when its size is the recorded one, and a search result when it
    reads: the checks of the files' content are what is measured."""
    real_problem, real_result = store._file_problem, results._check_result
    if not on:
        def size_only(path: Path, recorded: Any) -> str | None:
            return None if path.stat().st_size == recorded["bytes"] else "size"

        store._file_problem = size_only
        results._check_result = lambda *args, **kwargs: None
    try:
        yield
    finally:
        store._file_problem, results._check_result = real_problem, real_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_gallery_arguments(parser)
    parser.add_argument("--codec", default="IVF4096,SQ8")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    data = data_folder(args.workdir, args.references, args.queries, args.train, args.dim)
    folder = run_folder(args.workdir, args.references, args.dim, args.codec)
    if not (folder / "index").is_dir():
        raise SystemExit(f"no index under {folder}: run python bench/gallery.py --codecs '{args.codec}' first")
    build_request = _request(data, args.codec, args.k, args.search_params, train=True)
    search_request = _request(data, args.codec, args.k, args.search_params, train=False)
    times: dict[str, dict[str, list[float]]] = {"index reuse": {"on": [], "off": []},
                                                "search + merge": {"on": [], "off": []}}
    for number in range(args.rounds):
        for side in ("on", "off") if number % 2 == 0 else ("off", "on"):  # neither always goes first
            with checks(side == "on"):
                begun = time.perf_counter()
                (info,) = store.build_index(build_request, folder / "index", reference_shards=1)
                times["index reuse"][side].append(time.perf_counter() - begun)
                assert info.meta["reused"], "the index step must reuse the gallery's index"
                shutil.rmtree(folder / "integrity-search", ignore_errors=True)
                begun = time.perf_counter()
                results.search_shard(search_request, folder / "index", folder / "integrity-search", query_shard=0,
                                   query_shards=1, reference_shard=0)
                results.collect(search_request, folder / "index", folder / "integrity-search", query_shards=1)
                times["search + merge"][side].append(time.perf_counter() - begun)
    shutil.rmtree(folder / "integrity-search", ignore_errors=True)
    size_mb = sum(p.stat().st_size for p in (folder / "index").rglob("*.faiss")) / 2**20
    print(f"{args.references:,} x {args.dim}-d, {args.codec}, index files {size_mb:.0f} MB, {args.queries:,} queries, "
          f"median of {args.rounds} rounds (checks on and off taking turns, each first every other round)")
    print(f"{'stage':<16} {'checks on s':>12} {'checks off s':>13} {'difference s':>13} {'on/off':>7}")
    figures = {}
    for stage, sides in times.items():
        on, off = statistics.median(sides["on"]), statistics.median(sides["off"])
        figures[stage] = {"on_s": on, "off_s": off, "ratio": on / off}
        print(f"{stage:<16} {on:>12.3f} {off:>13.3f} {on - off:>13.3f} {on / off:>6.3f}x")
    if args.json:
        args.json.write_text(json.dumps({"codec": args.codec, "references": args.references, "dim": args.dim,
                                         "index_mb": size_mb, "rounds": args.rounds, "stages": figures}, indent=1))


if __name__ == "__main__":
    main()
