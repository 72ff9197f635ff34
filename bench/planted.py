"""Issue 56's fifteen hand-planted bugs, planted again in a clean copy of the tree: does a fast test kill each?

Why: issue 56 ("guard the guards") planted 15 realistic one-line bugs in the guards by hand, at
f3e2dc9, and every one of them passed every fast test. Tests were written since to kill each, and
the issue is done when "each survivor above is killed by the fast tests (planted again from a clean
clone)". A claim like that rots: a test is loosened, code moves, the bug would pass again and
nobody sees it. This script makes the claim a command anyone can re-run.

For each bug in :data:`PLANTED`: the tree (tracked files and untracked ones git does not ignore:
what a clean clone holds, :func:`bench.mutate.tree_files`) is copied into a temporary folder of its
own, the bug's ``old`` text is replaced by its ``new`` text there (``old`` must occur exactly once
in the file, else the script stops naming the bug: "the code moved: update PLANTED", so the list
cannot silently go stale), and its fast tests are run in the copy::

    python -m pytest -x -q -p no:cacheprovider -m "not slow" <its tests>

with the copy's ``src`` and root first on ``PYTHONPATH`` (checked with a probe: ``vsbench`` and the
planted module are imported from the copy, not from the working tree or the venv's editable
install) and HOME, XDG_CACHE_HOME and vsbench's caches inside the copy (:func:`bench.mutate.private_env`).
pytest's exit code 1 (tests failed) is "killed"; 0 is "SURVIVED"; 2-5 (interrupted, internal
error, usage error, no tests collected), a timeout or anything else is "broken": the tests did not
judge the bug. First, the tests of every bug asked for are run once on an unmodified copy: they must
pass there, else a "kill" would mean nothing and the script says so and stops.

    python bench/planted.py                          # all fifteen, one after another (minutes)
    python bench/planted.py --only embed_digest_reread origin_stem_in_checked
    python bench/planted.py --json build/planted.json

Exit status 0 when every bug was killed, 1 when one survived or broke, 2 when the list is stale or
the unmodified tree fails its tests. Not part of ``make test`` (each bug costs a pytest start, about
3 s of imports, plus its tests); tests/unit/test_planted_list.py keeps the list itself from rotting.
Results: bench/README.md, "planted.py".
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python bench/planted.py`: bench/ is on the path, the root is not
    sys.path.insert(0, str(ROOT))

from bench.mutate import copy_tree, private_env, tree_files  # noqa: E402  (after the path above)

PYTEST = ("-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow")
TIMEOUT_S = 900  # one bug's tests; past it the bug is "broken", not killed


@dataclass(frozen=True)
class Bug:
    """One of issue 56's bugs as it reads in today's code: in ``file`` (relative to the root), the
    one occurrence of ``old`` becomes ``new``; ``tests``: the fast test files or node ids written to
    kill it (the most pointed first: ``-x`` stops at the first failure)."""

    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    description: str

    @property
    def module(self) -> str:
        """The dotted module the bug lives in (``vsbench.io.locks``), for the import probe."""
        return self.file.removeprefix("src/").removesuffix(".py").replace("/", ".")

    def test_files(self) -> tuple[str, ...]:
        """The files of :attr:`tests` (a node id's part before ``::``)."""
        return tuple(dict.fromkeys(test.split("::")[0] for test in self.tests))


DECISION = "tests/unit/test_decision_mutants.py"
EMBED_RACE = "tests/unit/test_embed_race.py"
SHEETS = "tests/unit/test_sheets.py"

PLANTED: tuple[Bug, ...] = (
    Bug("ranking_cache_shape_only", "src/vsbench/stats/ranking.py",
        "if last is not None and last[0] == content:", "if last is not None and last[0][0] == content[0]:",
        ("tests/unit/test_units_copy_detection.py::"
         "test_one_unit_file_under_a_sequence_of_weight_blocks_gives_each_its_own_values",
         "tests/unit/test_units_copy_detection.py", "tests/unit/test_ranking_mutants.py"),
        "the weights cache compares shapes only: a block refilled in place gets the last block's values"),
    Bug("units_clusters_dropped_on_read", "src/vsbench/stats/units.py",
        "    clusters = _read_labels(table.column(CLUSTER)) if CLUSTER in table.column_names else None",
        "    clusters = None", (DECISION,),
        "a unit file read back loses its clusters (resampled unit by unit, intervals too narrow)"),
    # At f3e2dc9 bad_direction took `high < 0` / `low > 0` and p < 0.05, and the two bugs swapped
    # high and low there. Since aca75c3 (issue 55) it returns False unless the interval excludes 0, and then
    # low and high have the same sign: that literal swap is an equivalent mutant now (it survives, and
    # rightly). What the same slip does to today's code: the two directions swapped, and one side's test
    # turned to the other side. Both must be killed.
    Bug("significance_directions_swapped", "src/vsbench/reporting/significance.py",
        "difference.high < 0 if higher_is_better else difference.low > 0",
        "difference.low > 0 if higher_is_better else difference.high < 0", (DECISION,),
        "bad_direction: the two directions swapped (a rise called worse when higher is better)"),
    Bug("significance_lower_is_better", "src/vsbench/reporting/significance.py",
        "else difference.low > 0)", "else difference.high < 0)", (DECISION,),
        "bad_direction, lower is better: `low > 0` -> `high < 0` (a fall called worse)"),
    Bug("regression_refused_to_noise", "src/vsbench/reporting/regression.py",
        "        if difference is None:\n            kept.append(drop)",
        "        if difference is None:\n            noise.append(drop)", (DECISION,),
        "judge_drops: a drop whose unit files are refused goes to the noise instead of failing the night"),
    Bug("sheets_reason_unescaped", "src/vsbench/reporting/sheets.py",
        '<div class="missing">{_e(why)}</div>', '<div class="missing">{why}</div>', (SHEETS,),
        "a missing tile's reason written into the HTML unescaped"),
    Bug("sheets_row_cap_dropped", "src/vsbench/reporting/sheets.py",
        "    return min(rows, MAX_ROWS)", "    return rows", (SHEETS,),
        "sheet_rows: VSBENCH_FAILURE_ROWS no longer capped at MAX_ROWS"),
    Bug("outcomes_second_section_order", "src/vsbench/stats/outcomes.py",
        "second_only.sort(key=lambda p: -float(first.severity[p[0]]))",
        "second_only.sort(key=lambda p: -float(second.severity[p[1]]))",
        ("tests/unit/test_compare_sheets.py::test_worst_first_in_both_sections_by_the_wrong_runs_severity",
         "tests/unit/test_compare_sheets.py", "tests/unit/test_outcomes_judged.py"),
        "the second section (right in the second run) sorted by the right run's severity, not the wrong one's"),
    Bug("locks_renewed_ttl_times_4", "src/vsbench/io/locks.py",
        "stop.wait(lease_ttl() / 4)", "stop.wait(lease_ttl() * 4)", (DECISION, "tests/unit/test_locks_mutants.py"),
        "a held lease renewed every ttl*4 instead of ttl/4: it expires while its holder works"),
    Bug("embed_decode_rereads_path", "src/vsbench/retrieval/embed.py",
        "_load(path, self.preprocessing, fast=True, data=data)", "_load(path, self.preprocessing, fast=True)",
        (EMBED_RACE,), "a Pillow worker decodes the path again instead of the buffer it hashed"),
    Bug("embed_digest_rereads_path", "src/vsbench/retrieval/embed.py",
        "return data, hashlib.sha256(data).hexdigest()",
        "return data, hashlib.sha256(Path(path).read_bytes()).hexdigest()", (EMBED_RACE,),
        "the digest taken from a second read of the file, not from the bytes decoded"),
    Bug("embed_device_rereads_path", "src/vsbench/retrieval/embed.py",
        "batched.encoded_bytes(data, check_complete=True, name=path)",
        "batched.encoded_bytes(Path(path).read_bytes(), check_complete=True, name=path)", (EMBED_RACE,),
        'the device decode (decode="gpu") hands over bytes read again from the path, not those hashed'),
    Bug("embed_deleted_mid_read_passes", "src/vsbench/retrieval/embed.py",
        "zip(paths, hashed, used) if h != u]", "zip(paths, hashed, used) if u is not None and h != u]",
        (EMBED_RACE,),
        "`h != u` -> `u is not None and h != u`: a file deleted mid-read no longer raises InputsChanged"),
    Bug("origin_stem_in_checked", "src/vsbench/retrieval/origin.py",
        "checked.get(stem) == recorded", "stem in checked", ("tests/unit/test_origin_checked.py",),
        "a shard spared re-checking against --root under any digest, not only the one it was checked with"),
    Bug("record_sheets_sha256_empty", "src/vsbench/reporting/record_sheets.py",
        'str(digests.get(kind, ""))', '""',
        ("tests/unit/test_failure_sheets_retrieval.py::test_a_sheet_that_cannot_be_made_is_one_warning",
         "tests/unit/test_failure_sheets_retrieval.py", "tests/unit/test_record_sheets.py"),
        "a sheet's sha256 left empty in what the evaluation logs (never checked)"),
)


class Stale(Exception):
    """A bug's ``old`` text is not in its file exactly once: the code moved."""


def stale(bug: Bug, root: Path = ROOT) -> str | None:
    """Why ``bug`` cannot be planted in ``root`` (its file missing, its ``old`` text not there exactly
    once: the code moved), in one line naming the bug and the file; None when it can."""
    path = root / bug.file
    if not path.is_file():
        return f"planted.py: bug {bug.name!r}: {bug.file}: no such file: the code moved: update PLANTED"
    found = path.read_text(encoding="utf-8").count(bug.old)
    if found != 1:
        return (f"planted.py: bug {bug.name!r}: {bug.file}: its old text is found {found} times, not once: "
                "the code moved: update PLANTED")
    return None


def plant(bug: Bug, root: Path) -> None:
    """Replace the one occurrence of ``bug.old`` in ``root / bug.file``; :class:`Stale` when there is
    not exactly one (the list must be updated, never a bug silently skipped)."""
    why = stale(bug, root)
    if why is not None:
        raise Stale(why)
    path = root / bug.file
    path.write_text(path.read_text(encoding="utf-8").replace(bug.old, bug.new), encoding="utf-8")


def copy_env(copy: Path) -> dict[str, str]:
    """:func:`bench.mutate.private_env` (caches and HOME inside the copy) with the copy's ``src`` and
    root first on ``PYTHONPATH``: ahead of the venv's editable install, which names another checkout."""
    env = private_env(copy)
    env["PYTHONPATH"] = f"{copy / 'src'}:{copy}"
    return env


def probe(copy: Path, env: dict[str, str], modules: tuple[str, ...]) -> None:
    """Stop (SystemExit) unless ``vsbench`` and ``modules`` import from the copy: a run that tested
    another checkout's code would call every bug killed or survived for nothing."""
    names = ("vsbench", *modules)
    code = "import importlib, sys\nfor name in sys.argv[1:]: print(importlib.import_module(name).__file__)"
    done = subprocess.run([sys.executable, "-c", code, *names], cwd=copy, env=env, capture_output=True, text=True)
    files = done.stdout.split()
    inside = [Path(f).resolve().is_relative_to(copy.resolve()) for f in files]
    if done.returncode != 0 or len(files) != len(names) or not all(inside):
        raise SystemExit(f"planted.py: the copy's code is not what Python imports in {copy}: "
                         f"{dict(zip(names, files))} {done.stderr.strip()[-300:]}")


def run_tests(copy: Path, env: dict[str, str], tests: tuple[str, ...]) -> tuple[int, str]:
    """(pytest's exit code, its output's last lines) for ``tests`` run in ``copy``; -1 for a timeout.
    pytest's temporary folders go inside the copy too (a failed test's are kept), removed with it."""
    try:
        done = subprocess.run([sys.executable, *PYTEST, f"--basetemp={copy / '.pytest-tmp'}", *tests], cwd=copy,
                              env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {TIMEOUT_S} s"
    return done.returncode, "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])


def failed_test(tail: str) -> str:
    """The node id of the test that failed (pytest's ``-ra`` summary line ``FAILED <id> - ...``), or "":
    a kill is read by which test made it, not only that one did."""
    for line in tail.splitlines():
        if line.startswith("FAILED "):
            return line.removeprefix("FAILED ").split(" - ")[0].strip()
    return ""


def verdict(code: int) -> str:
    """pytest's exit code as a result: only 1 (tests failed) kills a bug."""
    return {0: "SURVIVED", 1: "killed"}.get(code, "broken")


def in_copy(bug: Bug | None, tests: tuple[str, ...], source: Path = ROOT) -> tuple[int, str, float]:
    """Copy the tree, plant ``bug`` (None: leave it as it is), probe the imports, run ``tests``:
    (exit code, output tail, seconds). The copy is removed afterwards."""
    started = time.monotonic()
    copy = Path(tempfile.mkdtemp(prefix=f"vsbench-planted-{bug.name if bug else 'unmodified'}-"))
    try:
        copy_tree(source, copy)
        if bug is not None:
            plant(bug, copy)
        env = copy_env(copy)
        probe(copy, env, (bug.module,) if bug else ())
        code, tail = run_tests(copy, env, tests)
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    return code, tail, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help=f"some bugs: {[b.name for b in PLANTED]}")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    known = {bug.name: bug for bug in PLANTED}
    unknown = sorted(set(args.only or ()) - set(known))
    if unknown:
        parser.error(f"unknown bugs {unknown}; choose from {sorted(known)}")
    bugs = [known[name] for name in args.only] if args.only else list(PLANTED)
    for bug in bugs:  # every bug checked before anything runs
        why = stale(bug)
        if why is not None:
            print(why, file=sys.stderr)
            return 2
    if not tree_files(ROOT):
        print("planted.py: git lists no files to copy", file=sys.stderr)
        return 2

    started = time.monotonic()
    every_test = tuple(dict.fromkeys(test for bug in bugs for test in bug.tests))
    print(f"[planted] the unmodified tree: {len(every_test)} test selections", file=sys.stderr)
    code, tail, seconds = in_copy(None, every_test)
    if code != 0:
        print(f"planted.py: the fast tests fail (exit {code}) on the unmodified tree, so no kill would mean "
              f"anything; fix them first:\n{tail}", file=sys.stderr)
        return 2
    print(f"[planted] unmodified: passed in {seconds:.0f} s", file=sys.stderr)

    rows: list[dict[str, object]] = []
    for number, bug in enumerate(bugs, 1):
        try:
            code, tail, seconds = in_copy(bug, bug.tests)
        except Stale as exc:
            print(exc, file=sys.stderr)
            return 2
        result = verdict(code)
        failed = failed_test(tail)
        rows.append({"bug": bug.name, "file": bug.file, "tests": list(bug.test_files()), "result": result,
                     "exit_code": code, "seconds": round(seconds, 1), "description": bug.description,
                     "failed": failed, "last_line": tail.splitlines()[-1] if tail else ""})
        by = f" by {failed}" if failed else ""
        print(f"[planted] {number}/{len(bugs)} {bug.name}: {result} ({seconds:.0f} s){by}", file=sys.stderr)
        if result != "killed":
            print(tail, file=sys.stderr)

    total = time.monotonic() - started
    print(f"{'bug':32} {'file':40} {'result':9} {'seconds':>7}  tests")
    for row in rows:
        tests = ", ".join(Path(str(t)).name for t in row["tests"])  # type: ignore[union-attr]
        print(f"{row['bug']:32} {row['file']:40} {row['result']:9} {row['seconds']:>7}  {tests}")
    killed = sum(row["result"] == "killed" for row in rows)
    print(f"[planted] {killed} of {len(rows)} killed, {total:.0f} s wall")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"seconds": round(total), "bugs": rows}, indent=1) + "\n")
    return 0 if killed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
