"""Record every benchmark number vsbench produces on small seeded data, to prove a change alters none.

Why: a restructuring (modules moved, code reorganized, nothing meant to change) should leave every
score identical, not merely close. This script runs each benchmark and each score command through the
``vsbench`` command line only (``python -m vsbench ...`` in a subprocess; it imports no vsbench module,
so it keeps working when module paths change), on data that ``vsbench synth`` generates with fixed
seeds, and writes one JSON record: every value of every ``metrics.json``, score output and
benchmark CSV, each written with ``repr`` (shortest round-trip form, so equal text means equal bits),
plus SHA-256 digests of the generated data, the embedded features and the search results (a change
too small to move a metric still shows there).

Run it before the change and after it, on the same machine, and compare::

    PYTHONPATH=$PWD/src python bench/records.py --out /work/records/before.json
    # ... restructure ...
    PYTHONPATH=$PWD/src python bench/records.py --compare /work/records/before.json --out after.json

``--compare`` prints each difference as ``name: before -> after`` and exits 1 when any value or
digest differs; otherwise it prints "all N numbers equal to the last bit". Records are comparable
bit for bit only on one machine with one environment: another CPU (other SIMD paths in torch, FAISS,
BLAS), another thread count or other library versions legitimately change the last bits. The record
keeps the CPU, thread count and package versions, and a comparison warns when they differ. Threads
are pinned (``--threads``, default 2) so that the load on a shared machine cannot change reduction
orders.

Every run starts from an empty work folder (a fresh temporary one by default): ``vsbench similarity
run`` keeps finished features and indexes, and a reused one would hide a change in the embedding.
The vsbench that runs is whichever ``python -m vsbench`` finds (set PYTHONPATH to the tree under
test); the record names it (``meta.vsbench_file``), and it is not compared.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "vsbench-records/1"
MARKER = ".vsbench-records-work"  # a work folder this script made, safe to empty on the next run
SEED = 0
ABID_BINS = 400
PACKAGES = ("numpy", "torch", "torchvision", "faiss-cpu", "faiss-gpu", "scikit-learn", "scipy", "pillow",
            "simplejpeg", "pandas", "timm", "efficientnet-pytorch", "geffnet", "vsbench")

# name -> `vsbench synth similarity` dataset
SYNTH = {"disc": "disc", "copydays": "copydays", "patch_pairs": "patch-pairs", "vsd": "vsd",
         "product_search": "product-search"}


def similarity_runs(data: Path, work: Path) -> list[tuple[str, str, Path, list[str]]]:
    """(record name, benchmark, root, extra arguments) of every `vsbench similarity run`."""
    lite = ["--model", "efficientnet_lite0"]
    random_net = ["--model", "resnet34", "--model-options", '{"weights": "random"}', "--seed", "0"]
    copydays_options = {"distractors": str(data / "copydays" / "distractors"),
                        "codec_train": str(data / "copydays" / "codec_train")}
    return [
        # 30 training rows: whitened PCA to 16 dims, IVF with 2 lists, PQ with 16 centroids (4 bits)
        ("similarity.disc", "disc", data / "disc",
         [*lite, "--codecs", "Flat;PCAW16,L2norm,Flat;IVF2,PQ8x4"]),
        ("similarity.disc_sharded", "disc", data / "disc",
         [*lite, "--codecs", "IVF4,Flat;IVF2,PQ8x4", "--search-params", "nprobe=2",
          "--num-shards", "2", "--search-shards", "2", "--reference-shards", "2"]),
        ("similarity.copydays", "copydays", data / "copydays" / "copydays",
         [*lite, "--codecs", "Flat;PCAW32,L2norm,Flat", "--benchmark-options", json.dumps(copydays_options)]),
        ("similarity.patch_pairs", "patch_pairs", data / "patch_pairs",
         [*lite, "--benchmark-options", json.dumps({"results_dir": str(work / "pairs-results")})]),
        ("similarity.vsd", "vsd", data / "vsd", lite),
        ("similarity.vsd_random_crops", "vsd", data / "vsd",
         [*random_net, "--benchmark-options", '{"crop_bbox": true}']),
        ("similarity.product_search", "product_search", data / "product_search", lite),
        ("similarity.product_search_submission", "product_search", data / "product_search",
         ["--benchmark-options", '{"submission": "features_valid.npz"}']),
        ("similarity.abid_embeddings", "abid_embeddings", data / "abid", lite),
        ("similarity.abid_embeddings_hard", "abid_embeddings", data / "abid",
         [*lite, "--benchmark-options", '{"hard": true}']),
    ]


# ------------------------------------------------------------------------------------------ running


class Runner:
    """Runs `python -m vsbench ...` with a pinned environment; logs each command's output to a file."""

    def __init__(self, work: Path, threads: int) -> None:
        self.work = work
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ)
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
            self.env[name] = str(threads)
        self.env["MLFLOW_TRACKING_URI"] = (work / "mlruns").as_uri()  # in case anything tracks after all
        self.env["PYTHONHASHSEED"] = "0"
        self.env.setdefault("COLUMNS", "200")
        self.steps: list[tuple[str, float]] = []

    def vsbench(self, name: str, *args: str | Path) -> None:
        command = [sys.executable, "-m", "vsbench", *map(str, args)]
        log = self.logs / f"{len(self.steps):02d}-{name}.log"
        started = time.perf_counter()
        with log.open("w") as out:
            out.write(" ".join(command) + "\n\n")
            out.flush()
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=self.work,
                                  stdin=subprocess.DEVNULL, check=False)
        seconds = time.perf_counter() - started
        self.steps.append((name, seconds))
        print(f"  {name:<48} {seconds:6.1f} s", file=sys.stderr, flush=True)
        if done.returncode != 0:
            tail = log.read_text(errors="replace").splitlines()[-25:]
            sys.exit(f"records: step {name!r} failed (exit {done.returncode}); {log}:\n" + "\n".join(tail))


# ------------------------------------------------------------------------------------------ flattening


def _label(record: dict[str, Any]) -> str:
    """A record's identifying fields (its text values), e.g. ``codec=Flat,score_norm=none``."""
    return ",".join(f"{k}={v}" for k, v in record.items() if isinstance(v, str))


def flatten(value: Any, name: str, out: dict[str, str]) -> None:
    """Every leaf of a JSON value under a dotted name, written with ``repr`` (exact for floats)."""
    if isinstance(value, dict):
        for key, item in value.items():
            flatten(item, f"{name}.{key}", out)
    elif isinstance(value, list):
        for number, item in enumerate(value):
            tag = f"{number}:{_label(item)}" if isinstance(item, dict) and _label(item) else str(number)
            flatten(item, f"{name}[{tag}]", out)
    else:
        out[name] = repr(value)


def _number(text: str) -> int | float | None:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return None


def flatten_csv(path: Path, name: str, out: dict[str, str]) -> None:
    """A CSV with a header: numeric cells as ``repr`` of their value, other cells as text; rows are
    named by number and their text cells (``disc_metrics.csv[0:Flat,None].uAP``)."""
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    header, body = rows[0], rows[1:]
    for number, row in enumerate(body):
        label = ",".join(cell for cell in row if _number(cell) is None)
        for column, cell in zip(header, row, strict=True):
            value = _number(cell)
            out[f"{name}[{number}:{label}].{column}"] = repr(cell) if value is None else repr(value)


def array_digests(path: Path, name: str, out: dict[str, str]) -> None:
    """SHA-256 of each array of an .npz (dtype, shape and bytes)."""
    with np.load(path, allow_pickle=False) as arrays:
        for key in sorted(arrays.files):
            array = np.ascontiguousarray(arrays[key])
            digest = hashlib.sha256(f"{array.dtype.str}{array.shape}".encode())
            digest.update(array.tobytes())
            out[f"{name}:{key}"] = f"{digest.hexdigest()} {array.dtype} {list(array.shape)}"


def tree_digest(folder: Path, skip: Iterable[str] = ()) -> str:
    """SHA-256 over every file's relative path and bytes (sorted), leaving out names in ``skip``."""
    skip = set(skip)
    digest = hashlib.sha256()
    count = 0
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder)
        if skip & set(relative.parts):
            continue
        digest.update(f"{relative.as_posix()}\0{path.stat().st_size}\0".encode())
        digest.update(path.read_bytes())
        count += 1
    return f"{digest.hexdigest()} {count} files"


def run_outputs(out: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(values, digests) of one `similarity run` folder: metrics.json, each CSV, features, search results."""
    values: dict[str, str] = {}
    digests: dict[str, str] = {}
    flatten(json.loads((out / "metrics.json").read_text()), "metrics.json", values)
    for table in sorted(out.glob("*.csv")):
        flatten_csv(table, table.name, values)
    for array_file in sorted((out / "features").glob("*.npz")):
        if ".shard-" not in array_file.name:  # the merged sets (the shards hold the same rows)
            array_digests(array_file, f"features/{array_file.name}", digests)
    for array_file in sorted((out / "search").rglob("*.npz")) if (out / "search").is_dir() else []:
        array_digests(array_file, array_file.relative_to(out).as_posix(), digests)
    return values, digests


# ------------------------------------------------------------------------------------------ the record


def _lines(values: Iterable[Any]) -> str:
    return "".join(f"{v}\n" for v in values)


def write_predictions(data: Path, scores: Path) -> dict[str, Path]:
    """Deterministic prediction files for the score commands (seeded numpy RNG, fixed formats)."""
    rng = np.random.default_rng(SEED)
    tasks = data / "abid" / "tasks"
    files: dict[str, Path] = {}
    for suffix in ("", "_hard"):
        truth = json.loads((tasks / f"counting_val{suffix}.json").read_text())
        counts = [max(0, int(count) + int(rng.integers(-2, 3))) if rng.random() < 0.6 else int(rng.integers(0, 6))
                  for _, count in truth]
        files[f"counting{suffix}"] = scores / f"counting_result{suffix}.txt"
        files[f"counting{suffix}"].write_text(_lines(counts))
        truth = json.loads((tasks / f"obj_verification_val{suffix}.json").read_text())
        answers = [int(row[2]) if rng.random() < 0.7 else int(rng.integers(0, 2)) for row in truth]
        files[f"verification{suffix}"] = scores / f"obj_verification_result{suffix}.txt"
        files[f"verification{suffix}"].write_text(_lines(answers))
    truth = json.loads((tasks / "obj_num_verification_val.json").read_text())
    files["quantity"] = scores / "obj_num_verification_result.txt"
    files["quantity"].write_text(_lines(int(rng.integers(0, 2)) for _ in truth))

    disc = data / "disc"
    queries = sorted(p.stem for p in (disc / "val_query").iterdir())
    references = sorted(p.stem for p in (disc / "val_ref").iterdir())
    with (disc / "val_groundtruth_matches.csv").open(newline="") as handle:
        matches = {(row["query_id"], row["reference_id"]) for row in csv.DictReader(handle) if row["reference_id"]}
    lines = ["query_id,reference_id,score"]
    for query in queries:
        candidates = rng.choice(references, size=8, replace=False).tolist()
        candidates += [r for q, r in sorted(matches) if q == query and r not in candidates and rng.random() < 0.7]
        for reference in candidates:
            score = rng.random() + (0.5 if (query, reference) in matches else 0.0)
            lines.append(f"{query},{reference},{round(score, 2)!r}")  # two decimals: tied scores too
    files["copy_detection"] = scores / "predictions.csv"
    files["copy_detection"].write_text(_lines(lines))
    return files


def machine() -> dict[str, Any]:
    """What decides whether two records can be compared bit for bit (compared with a warning only)."""
    cpu = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith(("model name", "flags")) and ":" in line:
                key, value = line.split(":", 1)
                cpu += f"{key.strip()}: {value.strip()}\n"
                if key.strip() == "flags":
                    break
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    return {"platform": platform.platform(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "cpu_sha256": hashlib.sha256(cpu.encode()).hexdigest()[:16], "cpu": cpu.splitlines()[0] if cpu else "",
            "python": sys.version.split()[0], "packages": versions}


def source_commit(folder: Path) -> str:
    """The git commit of the tree vsbench ran from, "+dirty" when it has uncommitted changes ("" outside git)."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "HEAD")
    return commit + ("+dirty" if commit and git("status", "--porcelain", "--", ".") else "")


def build_record(work: Path, threads: int, abid_bins: int) -> dict[str, Any]:
    data, runs, scores = work / "data", work / "runs", work / "scores"
    for folder in (data, runs, scores):
        folder.mkdir(parents=True)
    vs = Runner(work, threads)
    sections: dict[str, dict[str, Any]] = {}

    def section(name: str, command: Sequence[str | Path], values: dict[str, str], digests: dict[str, str]) -> None:
        shown = [str(a).replace(str(work), "$WORK") for a in command]
        sections[name] = {"command": " ".join(shown), "values": values, "digests": digests}

    print(f"records: work folder {work}", file=sys.stderr)
    started = time.perf_counter()
    data_digests: dict[str, str] = {}
    for name, dataset in SYNTH.items():
        vs.vsbench(f"synth.{name}", "synth", "similarity", dataset, "--out", data / name, "--seed", SEED)
        data_digests[name] = tree_digest(data / name)
    abid = data / "abid"
    vs.vsbench("synth.abid", "synth", "abid", "--out", abid / "raw", "--bins", abid_bins, "--seed", SEED,
               "--workers", 1)
    vs.vsbench("abid.prepare", "abid", "prepare", "--data", abid / "raw", "--out", abid / "tasks", "--seed", SEED)
    vs.vsbench("abid.resize", "abid", "resize", "--data", abid / "raw", "--out", abid / "bin-images-resize",
               "--workers", 1)
    data_digests["abid"] = tree_digest(abid, skip=("_manifests", "prepare_report.json"))
    section("data", ["vsbench synth similarity|abid --seed", SEED, "; vsbench abid prepare; vsbench abid resize"],
            {}, data_digests)

    for name, benchmark, root, extra in similarity_runs(data, work):
        out = runs / name.removeprefix("similarity.")
        command = ["similarity", "run", "--benchmark", benchmark, "--root", root, "--out", out, *extra,
                   "--no-track"]
        vs.vsbench(name, *command)
        section(name, ["vsbench", *command], *run_outputs(out))

    pairs_results = work / "pairs-results" / "classification" / "descriptor"
    pairs_digests = {f"{p.name}": hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(pairs_results.iterdir())}
    sections["similarity.patch_pairs"]["digests"].update({f"results/{k}": v for k, v in pairs_digests.items()})

    files = write_predictions(data, scores)
    tasks = abid / "tasks"
    score_runs: list[tuple[str, list[str | Path]]] = []
    for suffix in ("", "_hard"):
        score_runs.append((f"score.abid_counting{suffix}", ["abid-counting", "--pred", files[f"counting{suffix}"],
                                                            "--gt", tasks / f"counting_val{suffix}.json"]))
        score_runs.append((f"score.abid_verification{suffix}",
                           ["abid-verification", "--pred", files[f"verification{suffix}"],
                            "--gt", tasks / f"obj_verification_val{suffix}.json"]))
    score_runs += [
        ("score.abid_quantity", ["abid-quantity", "--pred", files["quantity"],
                                 "--gt", tasks / "obj_num_verification_val.json"]),
        ("score.copy_detection", ["copy-detection", "--predictions", files["copy_detection"],
                                  "--gt", data / "disc" / "val_groundtruth_matches.csv"]),
        ("score.pairs", ["pairs", "--results", pairs_results]),
        ("score.product_search", ["product-search", "--queries", data / "product_search" / "queries.jsonl",
                                  "--gallery", data / "product_search" / "gallery.csv",
                                  "--features", data / "product_search" / "features_valid.npz"]),
    ]
    for name, arguments in score_runs:
        output = scores / f"{name}.json"
        command = ["score", *arguments, "--output", output, "--no-track"]
        vs.vsbench(name, *command)
        values: dict[str, str] = {}
        flatten(json.loads(output.read_text()), "output", values)
        inputs = {f"input:{Path(a).name}": hashlib.sha256(Path(a).read_bytes()).hexdigest()
                  for a in arguments if isinstance(a, Path) and Path(a).is_file() and Path(a).parent == scores}
        section(name, ["vsbench", *command], values, inputs)

    located = subprocess.run([sys.executable, "-c", "import vsbench; print(vsbench.__file__)"], env=vs.env,
                             capture_output=True, text=True, check=False, cwd=work).stdout.strip()
    return {
        "format": FORMAT,
        "meta": {"threads": threads, "abid_bins": abid_bins, "seed": SEED, **machine(),
                 "vsbench_file": located, "vsbench_commit": source_commit(Path(located).parent), "seconds": round(time.perf_counter() - started, 1),
                 "step_seconds": {name: round(seconds, 1) for name, seconds in vs.steps}},
        "sections": sections,
    }


# ------------------------------------------------------------------------------------------ comparing


def is_number(text: str) -> bool:
    return _number(text) is not None or text in ("nan", "inf", "-inf")


def count(record: dict[str, Any]) -> tuple[int, int, int]:
    """(numbers, other values, digests) in a record."""
    values = [v for s in record["sections"].values() for v in s["values"].values()]
    numbers = sum(is_number(v) for v in values)
    return numbers, len(values) - numbers, sum(len(s["digests"]) for s in record["sections"].values())


def compare(before: dict[str, Any], after: dict[str, Any]) -> int:
    """Print every difference (name, before, after); return the number of differences."""
    for key in ("cpu", "cpu_sha256", "machine", "cpus", "threads", "python", "packages", "abid_bins"):
        if before["meta"].get(key) != after["meta"].get(key):
            print(f"warning: meta.{key} differs ({before['meta'].get(key)!r} -> {after['meta'].get(key)!r}): "
                  "records are comparable bit for bit only on one machine with one environment")
    differences = 0
    for name in sorted(before["sections"].keys() | after["sections"].keys()):
        old, new = before["sections"].get(name), after["sections"].get(name)
        if old is None or new is None:
            print(f"{name}: {'missing' if old is None else 'present'} -> {'missing' if new is None else 'present'}")
            differences += 1
            continue
        if old["command"] != new["command"]:
            print(f"note: {name} ran another command:\n  before: {old['command']}\n  after:  {new['command']}")
        for kind in ("values", "digests"):
            for key in sorted(old[kind].keys() | new[kind].keys()):
                a, b = old[kind].get(key, "<missing>"), new[kind].get(key, "<missing>")
                if a != b:
                    print(f"{name} {key}: {a} -> {b}")
                    differences += 1
    return differences


def summary(record: dict[str, Any]) -> str:
    lines = []
    for name, section in record["sections"].items():
        numbers = sum(is_number(v) for v in section["values"].values())
        lines.append(f"  {name:<40} {numbers:4d} numbers {len(section['values']) - numbers:3d} texts "
                     f"{len(section['digests']):3d} digests")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ main


def prepare_work(path: Path | None) -> tuple[Path, bool]:
    """(empty work folder, whether to remove it afterwards)."""
    if path is None:
        return Path(tempfile.mkdtemp(prefix="vsbench-records-")).resolve(), True
    path = path.resolve()
    if path.exists() and any(path.iterdir()):
        if not (path / MARKER).exists():
            sys.exit(f"records: {path} is not empty and was not made by this script; give an empty or new folder")
        for child in path.iterdir():
            if child.name != MARKER:
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER).write_text("made by bench/records.py; emptied on its next run\n")
    return path, False


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="Where the JSON record goes.")
    parser.add_argument("--compare", type=Path, help="An earlier record: print every difference, exit 1 if any.")
    parser.add_argument("--work", type=Path, help="Work folder (emptied first; default: a temporary one, removed).")
    parser.add_argument("--threads", type=int, default=2, help="OMP/MKL/OpenBLAS threads of every command (2).")
    parser.add_argument("--abid-bins", type=int, default=ABID_BINS, help=f"Synthetic ABID bins ({ABID_BINS}).")
    args = parser.parse_args(argv)

    before = json.loads(args.compare.read_text()) if args.compare else None  # fail early on a bad path
    if before is not None and before.get("format") != FORMAT:
        sys.exit(f"records: {args.compare} is not a {FORMAT} record")
    work, temporary = prepare_work(args.work)
    try:
        record = build_record(work, args.threads, args.abid_bins)
    finally:
        if temporary:
            shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    numbers, texts, digests = count(record)
    print(summary(record))
    print(f"{args.out}: {numbers} numbers, {texts} other values, {digests} digests "
          f"in {record['meta']['seconds']} s")
    if before is None:
        return 0
    differences = compare(before, record)
    if differences:
        print(f"{differences} differences between {args.compare} and {args.out}")
        return 1
    print(f"all {numbers} numbers equal to the last bit (and {texts} other values and {digests} digests identical)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
