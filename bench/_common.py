"""Helpers shared by the benches: a cached synthetic dataset, staging, tables, CPU time, JSON.

The benches compare methods on the same inputs, so the inputs are built once and cached on
disk: regenerating 1500 bins on every run would cost more than the measurements themselves.
The cache key includes a hash of the generator's source, so a change to
``vsbench.abid.synth`` (someone polishing the images) invalidates the cache instead of
silently benchmarking yesterday's pictures.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import resource
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

DEFAULT_WORKDIR = Path(os.environ.get("VSBENCH_BENCH_DIR", "/tmp/vsbench-bench"))


def generator_fingerprint() -> str:
    """A short hash of the synthetic-ABID generator's source (part of the cache key)."""
    import vsbench.abid.synth as synth

    return hashlib.sha256(Path(synth.__file__).read_bytes()).hexdigest()[:12]


def cached_abid(workdir: Path, bins: int, seed: int = 0, *, workers: int | None = None) -> Path:
    """Generate (once) a synthetic ABID of ``bins`` bins under ``workdir``; return its root.

    A ``.complete.json`` marker is written last, so an interrupted generation is redone
    rather than reused half-written.
    """
    from vsbench.abid.synth import generate_abid

    root = workdir / f"abid-{bins}-s{seed}-{generator_fingerprint()}"
    marker = root / ".complete.json"
    if marker.exists():
        return root
    workers = workers or min(os.cpu_count() or 1, 4)
    started = time.perf_counter()
    log(f"generating {bins} synthetic bins into {root} ({workers} workers) ...")
    summary = generate_abid(root, bins, seed, workers=workers, progress=False)
    log(f"  generated in {time.perf_counter() - started:.1f} s")
    marker.write_text(json.dumps({"bins": bins, "seed": seed, "summary": repr(summary)}) + "\n")
    return root


def canonical_files(folder: Path, kind: str) -> dict[int, Path]:
    """One file per bin id in ``folder``: the unpadded spelling when the id has both.

    The synthetic bucket, like the real one, stores ~1% of ids under two spellings. vsbench's
    downloader fetches one of them, s5cmd and a plain loop fetch both; the benches stage one
    spelling per id so that every method moves exactly the same objects.
    """
    from vsbench.abid.ids import parse_name

    chosen: dict[int, Path] = {}
    for path in sorted(folder.iterdir()):
        bin_id = parse_name(path.name, kind)  # type: ignore[arg-type]
        if bin_id is None or not path.is_file():
            continue
        if bin_id not in chosen or path.stem == str(bin_id):
            chosen[bin_id] = path
    return chosen


def link_or_copy(source: Path, target: Path) -> None:
    """Hard-link ``source`` to ``target`` (a copy across file systems)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def fresh_dir(path: Path) -> Path:
    """An empty folder at ``path`` (whatever was there is removed)."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def count_files(root: Path, skip_dirs: Iterable[str] = ("_manifests",)) -> int:
    """Plain files under ``root``, ignoring vsbench's manifest folder and temporary files."""
    skip = set(skip_dirs)
    total = 0
    for _dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in skip]
        total += sum(1 for name in filenames if not (name.startswith(".") and ".tmp-" in name))
    return total


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value >= 100:
            return f"{value:,.0f}"
        if value >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    return str(value)


def machine_info() -> dict[str, Any]:
    """What the figures were measured on (they mean little without it)."""
    import PIL

    from vsbench.tracking.provenance import machine_tags

    info: dict[str, Any] = {
        **machine_tags(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "pillow": PIL.__version__,
    }
    try:
        info["load_average_1m"] = round(os.getloadavg()[0], 2)
    except OSError:
        pass
    return info


def write_json(path: Path | None, payload: dict[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")
    log(f"wrote {path}")


def log(message: str) -> None:
    """Progress to stderr, so that stdout carries only the tables."""
    print(message, file=sys.stderr, flush=True)


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process (and its reaped children) has used, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    # fields[0] is the state (field 3); utime, stime, cutime, cstime are fields 14..17.
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks


def cpu_seconds() -> float:
    """CPU seconds of this process and its finished children: the steadier figure on a shared machine."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def side_by_side(step: Callable[[], Any], repeats: int, variable: str, settings: tuple[str, str]) -> dict[str, float]:
    """Median wall and CPU seconds of ``step`` with the environment ``variable`` set to each of
    ``settings`` (off, on), taking turns after one warm-up of each, so that both see the same
    machine load; ``added`` and ``added_cpu`` are the ratios on/off - 1."""
    seconds: dict[str, list[float]] = {value: [] for value in settings}
    cpu: dict[str, list[float]] = {value: [] for value in settings}
    before = os.environ.get(variable)
    try:
        for round_ in range(repeats + 1):
            for value in settings:
                os.environ[variable] = value
                started, used = time.perf_counter(), cpu_seconds()
                step()
                if round_:
                    seconds[value].append(time.perf_counter() - started)
                    cpu[value].append(cpu_seconds() - used)
    finally:
        if before is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = before
    off, on = (statistics.median(seconds[value]) for value in settings)
    off_cpu, on_cpu = (statistics.median(cpu[value]) for value in settings)
    return {"off_s": off, "on_s": on, "added": on / off - 1, "off_cpu_s": off_cpu, "on_cpu_s": on_cpu,
            "added_cpu": on_cpu / off_cpu - 1 if off_cpu else float("nan")}
