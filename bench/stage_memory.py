"""Bench: where ``vsbench score copy-detection``'s peak memory goes, stage by stage (issue 54).

Why: ``big_tables.py --score`` gives one number, the whole command's peak; to lower it one must
know which step makes it. This runs the same command in this process with each of its stages
(reading, matching, metrics, units, groups, intervals, the unit file, the report) wrapped: before a
stage and after it the peak resident memory (``VmHWM``) is read and reset to the current resident
memory (writing ``5`` to ``/proc/self/clear_refs``, Linux), so that each stage's peak is its own
(a stage inside another counts in both). Sampling RSS from a thread misses peaks made while a
numpy call holds the GIL; the kernel's high-water mark does not.

Run: ``python bench/stage_memory.py --rows 3000000 --per-query 3`` (writes the files of
``big_tables.py --score`` into a temporary folder) or ``--predictions P --gt G``. Figures are MiB:
the stage's peak over the resident memory when the command began (imports done), its peak over its
own start, and what is resident after it.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from big_tables import write_predictions, write_score_ground_truth  # noqa: E402

MIB = 2**20


def _status(field: str) -> int:
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) for line in lines if line.startswith(field + ":")) * 1024


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as out:
        out.write("5")


class Stages:
    """Peak and resident memory per wrapped stage; stages nest (a stage's peak includes its children's)."""

    def __init__(self) -> None:
        self.start = _status("VmRSS")
        self.stack: list[list[Any]] = []  # [name, rss at entry, peak so far]
        self.rows: list[tuple[int, str, int, int, int]] = []  # depth, name, peak, entry rss, rss after

    def _fold(self) -> int:
        """The peak since the last reset, folded into every open stage; resets it."""
        peak = _status("VmHWM")
        for frame in self.stack:
            frame[2] = max(frame[2], peak)
        _reset_peak()
        return peak

    def wrap(self, owner: Any, attribute: str, name: str | None = None) -> None:
        original = getattr(owner, attribute)
        label = name or attribute

        @functools.wraps(original)
        def staged(*args: Any, **kwargs: Any) -> Any:
            self._fold()
            entry = _status("VmRSS")
            self.stack.append([label, entry, entry])
            depth = len(self.stack) - 1
            place = len(self.rows)
            self.rows.append((depth, label, 0, 0, 0))
            try:
                return original(*args, **kwargs)
            finally:
                self._fold()
                frame = self.stack.pop()
                self.rows[place] = (depth, label, frame[2], entry, _status("VmRSS"))

        setattr(owner, attribute, staged)

    def report(self) -> None:
        print(f"resident when the command began: {self.start / MIB:.0f} MiB; peak of the whole process "
              f"(VmHWM is reset, so this is the largest stage's): see below")
        print(f"{'stage':<44} {'peak-start':>10} {'peak-entry':>10} {'after-start':>11}")
        merged: list[list[Any]] = []  # a stage called many times in a row: one line, its largest figures
        for depth, label, peak, entry, after in self.rows:
            if merged and merged[-1][:2] == [depth, label]:
                last = merged[-1]
                last[2], last[3], last[4], last[5] = max(last[2], peak), max(last[3], peak - entry), after, last[5] + 1
            else:
                merged.append([depth, label, peak, peak - entry, after, 1])
        for depth, label, peak, rise, after, calls in merged:
            name = "  " * depth + label + (f" (x{calls})" if calls > 1 else "")
            print(f"{name:<44} {(peak - self.start) / MIB:>10.0f} {rise / MIB:>10.0f} {(after - self.start) / MIB:>11.0f}")


def instrument(stages: Stages) -> None:
    """Wrap the stages of ``score copy-detection`` (module attributes, looked up at call time)."""
    import vsbench.benchmarks.disc.metrics as metrics
    import vsbench.benchmarks.disc.readers as readers
    import vsbench.benchmarks.disc.units as disc_units
    import vsbench.cli.score as score
    import vsbench.stats.compare as compare
    import vsbench.stats.ranking as ranking
    import vsbench.stats.units as units

    stages.wrap(readers, "read_copy_detection_predictions", "read predictions")
    stages.wrap(readers, "read_copy_detection_ground_truth", "read ground truth")
    stages.wrap(metrics, "match_predictions")
    stages.wrap(metrics, "copy_detection_metrics")
    stages.wrap(readers, "count_unknown_queries")
    stages.wrap(disc_units, "copy_detection_units")
    stages.wrap(disc_units, "_arrow_unit_ids")
    stages.wrap(disc_units, "copy_groups")
    stages.wrap(score, "_add_units")
    stages.wrap(compare, "intervals")
    stages.wrap(compare, "replicates")
    stages.wrap(units.Units, "cluster_index")
    stages.wrap(ranking, "_micro_ap_ranking")
    stages.wrap(units.Units, "write", "write the unit file")
    stages.wrap(score, "_report")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--per-query", type=int, default=3)
    parser.add_argument("--predictions", type=Path)
    parser.add_argument("--gt", type=Path)
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()
    os.environ["VSBENCH_DEFAULT_STORE"] = "off"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        preds, gt = args.predictions, args.gt
        if preds is None or gt is None:
            preds, gt = folder / "preds.csv", folder / "gt.csv"
            write_predictions(preds, args.rows, args.per_query)
            write_score_ground_truth(gt, args.rows, args.per_query)
        import vsbench.benchmarks.disc.metrics
        import vsbench.benchmarks.disc.readers
        import vsbench.benchmarks.disc.units
        import vsbench.cli.score
        import vsbench.io.ids
        import vsbench.stats.compare
        import vsbench.stats.ranking  # noqa: F401
        from vsbench.cli.app import main as cli

        stages = Stages()
        instrument(stages)
        sys.argv = ["vsbench", "score", "copy-detection", "--predictions", str(preds), "--gt", str(gt),
                    "--output", str(folder / "metrics.json"), "--no-track", "--resamples", str(args.resamples)]
        try:
            cli()
        except SystemExit as exc:
            if exc.code:
                raise
        stages.report()
        print(f"file: {preds.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
