"""Bench: what the intervals (issue 45) and the failure sheets (issue 47) add to the score steps of
real runs (each: at most 10%).

Why: bench/intervals.py times the scorers alone; a user waits for the step. This times, in one
process, alternating, the score step with intervals off (``VSBENCH_RESAMPLES=0``: the unit files are
still written) and on (the default, 1000 resamples), on

* the synthetic DISC run: ``vsbench synth similarity disc``, embedded once with ``efficientnet_lite0``
  (random weights), then ``similarity_score_step`` (merge the searches, score, write, no tracking);
* the demo: ``abid_score_step`` on the task files and result files of a finished ``vsbench demo``
  (``--demo DIR``, default ``demo-output``; skipped when there is none).

Each is run ``--repeats`` times per setting (median reported; the first of each discarded as a
warm-up), so the ratio compares like with like on a shared machine. The intervals are compared with
the failure sheets off (``VSBENCH_FAILURE_ROWS=0``).

The failure sheets: the demo's ABID score step with ``VSBENCH_FAILURE_ROWS=0`` (off) and 24 (the
default: three sheets, counting, verification and quantity, of 24 rows each, written as PNG and
HTML), intervals on, alternating in this process; and the same step as the pipeline runs it, a
fresh process per call (imports and all, no tracking), alternating, wall seconds.

Run: ``python bench/intervals_steps.py [--demo demo-output] [--repeats 5] [--no-disc] [--json out.json]``
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

RESAMPLES = ("VSBENCH_RESAMPLES", ("0", "1000"))  # intervals off, the default resamples


def demo_process(demo: Path, work: Path) -> Callable[[], Any]:
    """The demo's ABID score step in a fresh process (as a pipeline task runs it, without tracking)."""
    tasks, runs = demo / "data" / "tasks", demo / "data" / "runs"
    code = ("import sys; from vsbench.steps.abid import abid_score_step as s; s(*sys.argv[1:5], units_dir=sys.argv[5])")
    args = [sys.executable, "-c", code, str(tasks), str(runs / "counting" / "counting_result.txt"),
            str(runs / "siamese" / "obj_verification_result.txt"),
            str(runs / "quantity" / "obj_num_verification_result.txt"), str(work / "abid-units-process")]
    return lambda: subprocess.run(args, check=True, env={**os.environ, "TQDM_DISABLE": "1"},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def disc_step(work: Path) -> Callable[[], Any]:
    """The score step of a finished similarity run on the disc generator's set."""
    from vsbench.runspec.run import BenchmarkRun
    from vsbench.steps.similarity import similarity_score_step

    data, out = work / "disc", work / "disc-run"
    vsbench = [sys.executable, "-m", "vsbench"]
    env = {**os.environ, "TQDM_DISABLE": "1", "VSBENCH_NO_TRACK": "1"}
    subprocess.run([*vsbench, "synth", "similarity", "disc", "--out", str(data)], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    subprocess.run([*vsbench, "similarity", "run", "--benchmark", "disc", "--root", str(data), "--out", str(out),
                    "--model", "efficientnet_lite0", "--model-options", '{"weights": "random"}', "--no-track"],
                   check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = BenchmarkRun.parse(benchmark="disc", root=str(data), benchmark_options={})
    return lambda: similarity_score_step(run, str(out), model="efficientnet_lite0")


def demo_step(demo: Path, work: Path) -> Callable[[], Any] | None:
    """The ABID score step on a finished demo's files (the newest run's result files)."""
    from vsbench.steps.abid import abid_score_step

    tasks, runs = demo / "data" / "tasks", demo / "data" / "runs"
    counting, verification, quantity = (runs / "counting" / "counting_result.txt",
                                        runs / "siamese" / "obj_verification_result.txt",
                                        runs / "quantity" / "obj_num_verification_result.txt")
    if not tasks.is_dir() or not all(path.is_file() for path in (counting, verification, quantity)):
        return None
    return lambda: abid_score_step(str(tasks), str(counting), str(verification), str(quantity),
                                   units_dir=str(work / "abid-units"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", type=Path, default=Path("demo-output"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--no-disc", action="store_true", help="leave the synthetic DISC run out (the demo only)")
    args = parser.parse_args()
    os.environ["VSBENCH_NO_TRACK"] = "1"
    os.environ["VSBENCH_FAILURE_ROWS"] = "0"  # the intervals alone; the sheets are measured below
    rows: list[dict[str, Any]] = []
    sheet_rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="vsbench-bench-") as tmp:
        work = Path(tmp)
        if not args.no_disc:
            log("preparing the synthetic DISC run (embedding once)")
            rows.append({"step": "similarity score, synthetic DISC run",
                         **side_by_side(disc_step(work), args.repeats, *RESAMPLES)})
        step = demo_step(args.demo, work)
        if step is None:
            log(f"no finished demo under {args.demo}: the ABID score step is left out (run make demo first)")
        else:
            rows.append({"step": f"abid score, the demo ({args.demo})", **side_by_side(step, args.repeats, *RESAMPLES)})
            sheets = ("VSBENCH_FAILURE_ROWS", ("0", "24"))
            os.environ.pop("VSBENCH_RESAMPLES", None)
            sheet_rows.append({"step": "abid score, the demo, in this process",
                               **side_by_side(step, args.repeats, *sheets)})
            sheet_rows.append({"step": "abid score, the demo, a process per call",
                               **side_by_side(demo_process(args.demo, work), args.repeats, *sheets)})
    print(format_table(["step", "intervals off s", "on (1000 resamples) s", "added"],
                       [[r["step"], f"{r['off_s']:.3f}", f"{r['on_s']:.3f}", f"{100 * r['added']:+.1f}%"]
                        for r in rows]))
    if sheet_rows:
        print(format_table(["step", "failure sheets off s", "on (24 rows) s", "added"],
                           [[r["step"], f"{r['off_s']:.3f}", f"{r['on_s']:.3f}", f"{100 * r['added']:+.1f}%"]
                            for r in sheet_rows]))
    write_json(args.json, {"machine": machine_info(), "repeats": args.repeats, "rows": rows, "sheets": sheet_rows})


if __name__ == "__main__":
    main()
