"""What kfp's resource setters cost `vsbench compile`, with their stack walk and without it.

kfp's ``set_cpu_request``, ``set_memory_limit`` and the rest each call ``inspect.stack()`` to name
themselves in an error message; ``cluster.apply`` runs them under ``_setters_without_stack_walk``,
which makes the same check without reading every frame's source file. The cost of the walk grows
with the stack's depth and with the number of loaded modules (``inspect.getmodule`` scans
``sys.modules``), so both are measured: a plain ``vsbench compile``, and compiling from 40 frames
deep with torch and MLflow loaded (as a test, or a notebook, does).

The two ways take turns after a warm-up of each, so both see the same machine load; medians printed.

    python bench/compile.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_seconds, format_table, machine_info  # noqa: E402

from vsbench.platform import cluster  # noqa: E402
from vsbench.platform.compile import compile_all  # noqa: E402


def _deep(depth: int, call: Callable[[], object]) -> object:
    return call() if depth == 0 else _deep(depth - 1, call)


# A frame whose code has no source file, as pytest's stack has (functions made from strings: dataclass
# and attrs initialisers, pluggy's hook callers): for it, inspect.getmodule scans all of sys.modules.
_namespace: dict[str, object] = {"_deep": _deep}
exec("def _from_a_string(depth, call):\n    return _deep(depth, call)\n", _namespace)  # noqa: S102
_from_a_string = _namespace["_from_a_string"]


def _measure(repeats: int, depth: int, out: Path) -> dict[str, float]:
    """Medians of compiling the three pipelines both ways, called ``depth`` frames deep (one of them a
    frame without a source file when ``depth`` > 0)."""
    through = _from_a_string if depth else _deep
    quick = cluster._setters_without_stack_walk
    ways = {"kfp's own": contextlib.nullcontext, "without the walk": quick}
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for round_ in range(repeats + 1):
            for name, setters in ways.items():
                cluster._setters_without_stack_walk = setters
                started, used = time.perf_counter(), cpu_seconds()
                target = out / name.replace(" ", "-").replace("'", "")
                through(depth, lambda target=target: compile_all(target))
                if round_:  # the first round warms both up
                    seconds[name].append(time.perf_counter() - started)
                    cpu[name].append(cpu_seconds() - used)
    finally:
        cluster._setters_without_stack_walk = quick
    own, ours = (statistics.median(seconds[name]) for name in ways)
    return {"own_s": own, "ours_s": ours, "speedup": own / ours,
            "own_cpu_s": statistics.median(cpu["kfp's own"]), "ours_cpu_s": statistics.median(cpu["without the walk"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch)
        plain = _measure(args.repeats, 0, out)
        rows.append(["vsbench compile (3 pipelines)", f"{plain['own_s']:.2f}", f"{plain['ours_s']:.2f}",
                     f"{plain['speedup']:.1f}x"])
        import mlflow  # noqa: F401  the modules a test process has loaded
        import torch  # noqa: F401

        deep = _measure(args.repeats, 40, out)
        rows.append([f"40 frames deep (one from a string), {len(sys.modules)} modules loaded", f"{deep['own_s']:.2f}",
                     f"{deep['ours_s']:.2f}", f"{deep['speedup']:.1f}x"])
        same = all((out / "kfps-own" / p.name).read_bytes() == p.read_bytes()
                   for p in (out / "without-the-walk").iterdir())
    print(machine_info())
    print(format_table(["compile", "kfp's setters s", "without the walk s", "speed-up"], rows))
    print(f"same YAML both ways: {same}")


if __name__ == "__main__":
    main()
