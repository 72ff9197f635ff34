"""Bench: what the failure sheets add to the score step of the synthetic DISC run (issue 47: at most 10%).

Why: a sheet is drawn by the score step (its thumbnails read, a PNG and an HTML page written per
evaluation), so a user waits for it. As bench/intervals_steps.py does for the intervals, this times,
alternating, the score step with the sheets off (``VSBENCH_FAILURE_ROWS=0``) and on (the default,
24 rows a sheet) on ``vsbench synth similarity disc`` embedded once with ``efficientnet_lite0``
(random weights; two evaluations, two sheets):

* ``in process``: ``similarity_score_step`` called in this (warm) process, no tracking: the
  step's own work, where the sheets' share is the largest;
* ``command``: ``vsbench similarity score --no-track`` in a process of its own, as a pipeline's
  score task runs it (its imports included; MLflow calls excluded).

Each setting ``--repeats`` times (median; the first of each discarded as a warm-up), so the ratio
compares like with like on a shared machine.

Run: ``python bench/failure_sheets.py [--repeats 5] [--json out.json]``
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import format_table, log, machine_info, side_by_side, write_json

SETTINGS = ("0", "24")  # VSBENCH_FAILURE_ROWS: off, the default


def sheets_side_by_side(step: Callable[[], Any], repeats: int) -> dict[str, float]:
    """``step`` with the sheets off and at the default rows, taking turns."""
    return side_by_side(step, repeats, "VSBENCH_FAILURE_ROWS", SETTINGS)


def prepare(work: Path) -> tuple[Path, Path]:
    """The disc generator's set and a finished similarity run on it (embedded once)."""
    data, out = work / "disc", work / "disc-run"
    vsbench = [sys.executable, "-m", "vsbench"]
    env = {**os.environ, "TQDM_DISABLE": "1", "VSBENCH_NO_TRACK": "1"}
    subprocess.run([*vsbench, "synth", "similarity", "disc", "--out", str(data)], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    subprocess.run([*vsbench, "similarity", "run", "--benchmark", "disc", "--root", str(data), "--out", str(out),
                    "--model", "efficientnet_lite0", "--model-options", '{"weights": "random"}', "--no-track"],
                   check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return data, out


def in_process(data: Path, out: Path) -> Callable[[], Any]:
    from vsbench.runspec.run import BenchmarkRun
    from vsbench.steps.similarity import similarity_score_step

    run = BenchmarkRun.parse(benchmark="disc", root=str(data), benchmark_options={})
    return lambda: similarity_score_step(run, str(out), model="efficientnet_lite0")


def command(data: Path, out: Path) -> Callable[[], Any]:
    def step() -> None:
        subprocess.run([sys.executable, "-m", "vsbench", "similarity", "score", "--benchmark", "disc", "--root",
                        str(data), "--out", str(out), "--no-track"], check=True,
                       env={**os.environ, "TQDM_DISABLE": "1"}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    os.environ["VSBENCH_NO_TRACK"] = "1"
    rows = []
    with tempfile.TemporaryDirectory(prefix="vsbench-bench-") as tmp:
        log("preparing the synthetic DISC run (embedding once)")
        data, out = prepare(Path(tmp))
        rows.append({"step": "similarity score, in process", **sheets_side_by_side(in_process(data, out), args.repeats)})
        rows.append({"step": "vsbench similarity score (a process)", **sheets_side_by_side(command(data, out), args.repeats)})
    print(format_table(["synthetic DISC run", "sheets off s", "on (24 rows) s", "added", "CPU off s", "CPU on s",
                        "CPU added"],
                       [[r["step"], f"{r['off_s']:.3f}", f"{r['on_s']:.3f}", f"{100 * r['added']:+.1f}%",
                         f"{r['off_cpu_s']:.3f}", f"{r['on_cpu_s']:.3f}", f"{100 * r['added_cpu']:+.1f}%"]
                        for r in rows]))
    write_json(args.json, {"machine": machine_info(), "repeats": args.repeats, "rows": rows})


if __name__ == "__main__":
    main()
