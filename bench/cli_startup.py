"""How long a command takes to answer when it does no work: every help page, and a run its checks
refuse (issue 48: help under 0.5 s, a refused command under 2 s), with the imports that cost it.

Each case runs ``python -m vsbench ...`` in a fresh process (no warm interpreter: what a person
typing the command gets), ``--repeat`` times, cases taking turns so that a shared machine's load
falls on all alike; the table gives the median and the best wall time. With ``--against SRC`` (the
``src`` folder of another checkout, e.g. the main branch before a change) every case also runs with
that tree first on ``PYTHONPATH``, side by side. Then ``python -X importtime`` of ``--help`` and of
a refused ``similarity run``: the vsbench modules and top-level libraries that cost the most
(cumulative, ms), and which heavy libraries each case loaded.

    python bench/cli_startup.py [--repeat 3] [--against /path/to/other/src] [--top 12] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAVY = ("numpy", "pandas", "pyarrow", "faiss", "torch", "mlflow", "kfp")
HERE = Path(__file__).resolve().parents[1] / "src"


def _env(src: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("MLFLOW_TRACKING_URI", "file:///nonexistent-not-used")
    return env


def _help_cases(src: Path) -> list[list[str]]:
    """Every help page of the tree at ``src`` (hidden spellings left out), as argv lists."""
    listing = subprocess.run([sys.executable, "-c", """
import json, typer
from vsbench.cli.app import app
paths = []
def walk(group, prefix):
    paths.append(prefix + ["--help"])
    for name, command in group.commands.items():
        if getattr(command, "hidden", False):
            continue
        if hasattr(command, "commands"):
            walk(command, prefix + [name])
        else:
            paths.append(prefix + [name, "--help"])
walk(typer.main.get_command(app), [])
print(json.dumps(paths))
"""], env=_env(src), capture_output=True, text=True, check=True)
    return json.loads(listing.stdout)


def _refused_cases(scratch: Path) -> dict[str, list[str]]:
    """Runs whose checks refuse them: the mistakes a first hour makes."""
    run = ["similarity", "run", "--benchmark", "disc", "--out", str(scratch / "out"), "--no-track"]
    return {
        "similarity run: missing --root": [*run, "--root", str(scratch / "no-such-root")],
        "similarity run: unknown benchmark option": [*run, "--root", str(scratch), "--benchmark-options",
                                                     '{"nosuch": 1}'],
        "similarity run: bad codec": [*run, "--root", str(scratch / "no-such-root"), "--codecs", "Bogus,Flat"],
        "similarity run: --device gpu": [*run, "--root", str(scratch / "no-such-root"), "--device", "gpu"],
        "score copy-detection: missing file": ["score", "copy-detection", "--predictions", str(scratch / "none.csv"),
                                               "--gt", str(scratch / "none.csv"), "--output", str(scratch / "m.json"),
                                               "--no-track"],
    }


def _time(argv: list[str], src: Path, cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "vsbench", *argv], env=_env(src), cwd=cwd, capture_output=True)
    return time.perf_counter() - started


def _importtime(argv: list[str], src: Path, cwd: Path) -> list[tuple[str, int, int]]:
    """(module, depth, cumulative µs) of each import ``python -X importtime -m vsbench argv`` made."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "vsbench", *argv], env=_env(src), cwd=cwd,
                          capture_output=True, text=True)
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|")
        rows.append((name.strip(), (len(name) - len(name.lstrip()) - 1) // 2, int(cumulative)))
    return rows


def _top(rows: list[tuple[str, int, int]], top: int) -> list[str]:
    """The costliest imports by cumulative time: each top-level package and each vsbench module (a
    module's time includes what it imported, so a vsbench module shows the libraries it pulled in)."""
    cost: dict[str, int] = {}
    for name, _depth, cumulative in rows:
        if name.startswith("vsbench.") or "." not in name:
            cost[name] = max(cost.get(name, 0), cumulative)
    ranked = sorted(cost.items(), key=lambda item: -item[1])[:top]
    return [f"    {us / 1000:8.1f} ms  {name}" for name, us in ranked]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another checkout's src folder, timed side by side")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    trees = {"this tree": HERE, **({"against": args.against.resolve()} if args.against else {})}
    with tempfile.TemporaryDirectory(prefix="vsbench-cli-startup-") as tmp:
        scratch = Path(tmp)
        cases = {" ".join(argv): argv for argv in _help_cases(HERE)}
        cases.update(_refused_cases(scratch))
        times: dict[str, dict[str, list[float]]] = {case: {tree: [] for tree in trees} for case in cases}
        for round_ in range(args.repeat):
            print(f"round {round_ + 1}/{args.repeat} ...", file=sys.stderr)
            for case, argv in cases.items():
                for tree, src in trees.items():
                    times[case][tree].append(_time(argv, src, scratch))
        width = max(len(case) for case in cases)
        header = f"{'case':<{width}}" + "".join(f"  {tree + ' median':>18}  {'best':>6}" for tree in trees)
        print(f"wall time per command, fresh process, {args.repeat} rounds (s); python {sys.version.split()[0]}, "
              f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
        print(header)
        for case in cases:
            cells = "".join(f"  {statistics.median(times[case][tree]):>18.3f}  {min(times[case][tree]):>6.3f}"
                            for tree in trees)
            print(f"{case:<{width}}{cells}")
        helps = [case for case in cases if case.endswith("--help")]
        for tree in trees:
            worst = max(helps, key=lambda case: statistics.median(times[case][tree]))
            print(f"{tree}: slowest help {statistics.median(times[worst][tree]):.3f} s ({worst}); refused runs "
                  f"{max(statistics.median(times[c][tree]) for c in cases if c not in helps):.3f} s at most")
        shown = {"--help": ["--help"], "similarity run --help": ["similarity", "run", "--help"],
                 "refused similarity run (unknown benchmark option)":
                     cases["similarity run: unknown benchmark option"],
                 "refused similarity run (bad codec)": cases["similarity run: bad codec"]}
        imports: dict[str, dict[str, list[str]]] = {}
        for tree, src in trees.items():
            for title, argv in shown.items():
                rows = _importtime(argv, src, scratch)
                loaded = sorted({name.split(".")[0] for name, _, _ in rows} & set(HEAVY))
                print(f"\n{tree}: python -X importtime -m vsbench {title}: heavy libraries loaded: "
                      f"{', '.join(loaded) or 'none'}; costliest imports (cumulative):")
                top = _top(rows, args.top)
                print("\n".join(top))
                imports.setdefault(tree, {})[title] = loaded
    if args.json:
        args.json.write_text(json.dumps({"times": times, "heavy_loaded": imports}, indent=2) + "\n")


if __name__ == "__main__":
    main()
