"""Bench: what an unchanged re-run of `vsbench similarity run` costs now against a git revision before.

Why: issue 46 checks more on every run (the device in each stat record, the step commands' check of
their features against --root, the run lease, the digests taken in the loader's workers); its goal is
that a re-run of an unchanged run stays within 3% of what it cost before. This bench makes the
synthetic DISC set (``vsbench synth similarity disc``), runs `similarity run` once with each version
into its own folder (and embedding cache), then times re-runs of both, taking turns (old, new, old,
...), each a fresh ``python -m vsbench`` process as a user runs it, so a shared machine's load falls
on both alike. The old version is ``git archive``d from ``--old-ref`` (default: the commit before
issue 46) and run with its ``src`` first on ``PYTHONPATH``.

Prints each version's median and the ratio new/old; ``--json`` writes them.

    python bench/rerun_cost.py [--old-ref d934201] [--rounds 5] [--runner inline]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import format_table, log, machine_info, write_json

REPO = Path(__file__).resolve().parents[1]


def old_source(ref: str, into: Path) -> Path:
    """``src/`` of ``ref``, unpacked under ``into``."""
    archive = into / "old.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", "-o", str(archive), ref, "src"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "old", filter="data")
    return into / "old" / "src"


def run(src: Path, data: Path, out: Path, cache: Path, runner: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `similarity run` (a fresh process and the processes it
    starts), which must succeed. The CPU time is the steadier figure on a shared machine."""
    env = {**os.environ, "PYTHONPATH": str(src), "VSBENCH_EMBED_CACHE": str(cache), "TQDM_DISABLE": "1",
           "VSBENCH_DEFAULT_STORE": "off"}
    command = [sys.executable, "-m", "vsbench", "similarity", "run", "--benchmark", "disc", "--root", str(data),
               "--out", str(out), "--model", "efficientnet_lite0", "--model-options", '{"weights": "random"}',
               "--codecs", "Flat", "--device", "cpu", "--no-track", "--runner", runner]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"similarity run failed ({src}):\n{done.stderr[-3000:]}")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old-ref", default="d934201")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runner", default="inline", choices=("inline", "subprocess"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        versions = {"old": old_source(args.old_ref, work), "new": REPO / "src"}
        data = work / "disc"
        subprocess.run([sys.executable, "-m", "vsbench", "synth", "similarity", "disc", "--out", str(data)],
                       check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
        for name, src in versions.items():
            log(f"first run ({name}) ...")
            run(src, data, work / f"out-{name}", work / f"cache-{name}", args.runner)
        seconds: dict[str, list[float]] = {name: [] for name in versions}
        cpu: dict[str, list[float]] = {name: [] for name in versions}
        for round_ in range(args.rounds):
            for name in (versions if round_ % 2 == 0 else reversed(list(versions))):
                wall, used = run(versions[name], data, work / f"out-{name}", work / f"cache-{name}", args.runner)
                seconds[name].append(wall)
                cpu[name].append(used)
            log(f"round {round_ + 1}: old {seconds['old'][-1]:.2f} s ({cpu['old'][-1]:.2f} s CPU), "
                f"new {seconds['new'][-1]:.2f} s ({cpu['new'][-1]:.2f} s CPU)")
    old, new = statistics.median(seconds["old"]), statistics.median(seconds["new"])
    old_cpu, new_cpu = statistics.median(cpu["old"]), statistics.median(cpu["new"])
    print(format_table(["version", "median re-run (s)", "median CPU (s)", "runs"],
                       [[f"old ({args.old_ref})", f"{old:.2f}", f"{old_cpu:.2f}", len(seconds["old"])],
                        ["new (this checkout)", f"{new:.2f}", f"{new_cpu:.2f}", len(seconds["new"])]]))
    print(f"new / old: wall {new / old:.3f} ({(new / old - 1) * 100:+.1f}%), CPU {new_cpu / old_cpu:.3f} "
          f"({(new_cpu / old_cpu - 1) * 100:+.1f}%), {args.runner} runner")
    write_json(args.json, {"machine": machine_info(), "old_ref": args.old_ref, "runner": args.runner,
                           "seconds": seconds, "cpu_seconds": cpu, "old_median": old, "new_median": new,
                           "ratio": new / old, "cpu_ratio": new_cpu / old_cpu})


if __name__ == "__main__":
    main()
