"""Mutation testing of the guards: the code that decides whether a number can be trusted (issue 49).

Why: a guard whose test cannot fail is a guard nobody notices losing. Planted by hand, 3 of 19
small bugs in the guard modules passed every fast test. This runs mutmut over those modules: each
mutant (an operator flipped, a constant changed, a field dropped) is run against the fast tests
that cover the function it lives in, and one that no test kills is printed as a survivor.

Why mutmut (3.x): it mutates a *copy* of the sources (``mutants/``), records which tests reach
which function in one pytest pass and then runs each mutant against those tests only, forking from
a process that has already imported torch and the tests (a mutant costs milliseconds to start, not
the ~3 s of a fresh ``python -m pytest``). cosmic-ray runs one test command per mutant (the import
cost each time, and no per-function test selection); pytest-gremlins is younger and was not tried. mutmut reads its settings from ``[tool.mutmut]``, which this script writes
into the copy only.

Nothing of the working tree or the user's caches is touched: for each module in turn, the tree
(tracked and untracked files git does not ignore, so a clean clone gives the same set) is copied
into a temporary folder, mutmut runs there with HOME, XDG_CACHE_HOME and vsbench's caches pointed
inside it, and the folder is removed at the end (``--keep`` keeps it, to look at a survivor with
``mutmut show``). One module a run: mutmut picks each mutant's tests among those that reach its
function, so one run for two modules would run one's slow tests against the other's mutants.

    make mutate                                  # every guard module (about 45 min on 2 cores)
    make mutate MODULES="significance sheets"    # some modules: minutes
    make mutate CHANGED=1                        # the guards whose module or tests this branch changed
    make mutate CHANGED=HEAD~3                   # ... or changed since any commit
    python bench/mutate.py --modules digests locks --json build/mutation.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Guard:
    """One guard module and the fast tests (unit level, no training, no server) that cover it.

    ``functions``: where only part of a module is a guard (the keys in ``embed.py`` and
    ``resize.py``, the normalization in ``data.py``), the functions counted, as mutmut names them
    (``x_name`` for a function, ``xǁClassǁname`` for a method, ``xǁClassǁ`` for all of a class's);
    only their mutants are run (the rest of the file is mutated by mutmut but neither run nor counted)."""

    name: str
    source: str
    tests: tuple[str, ...]
    functions: tuple[str, ...] = ()

    @property
    def prefix(self) -> str:
        """The dotted module name mutmut gives this file's mutants (``vsbench.io.digests``)."""
        return self.source.removeprefix("src/").removesuffix(".py").replace("/", ".")

    def stems(self) -> tuple[str, ...]:
        """How the counted mutants' names start: a function's ``x_name__mutmut_`` (not ``x_name``:
        ``x__resize`` would take in ``x__resize_and_encode``), a class's ``xǁClassǁ`` whole."""
        return tuple(name if name.endswith("ǁ") else f"{name}__mutmut_" for name in self.functions)

    def counts(self, mutant: str) -> bool:
        function = mutant.rsplit(".", 1)[-1]
        return not self.functions or function.startswith(self.stems())

    def patterns(self) -> list[str]:
        """What ``mutmut run`` is given: the counted mutants only (fnmatch patterns of the names
        :meth:`counts` takes). The rest of the file is mutated (mutmut mutates whole files) but never
        run: a guard's mutants cost their own tests only, not those of every function beside it."""
        return [f"{self.prefix}.{stem}*" for stem in self.stems() or ("",)]


# The unit-file tests of the benchmarks (each checks its statistics against its scorer on resampled
# data), the fast ones, and the comparison's own (issue 56): a surviving mutant costs every test that
# reaches it, so test_units_vsd.py, test_units_abid.py and test_units_coverage.py (25 s together) are
# left out (they run in `make test`); docs/mutation.md's figures are measured with this list
STATS_TESTS = tuple(f"tests/unit/test_{name}.py" for name in (
    "units_trust", "units_copy_detection", "units_copydays", "units_patch_pairs", "units_product_search",
    "units_records", "decision_mutants", "verdicts", "expanded_interval", "unit_groups"))

GUARDS: tuple[Guard, ...] = (
    Guard("digests", "src/vsbench/io/digests.py", ("tests/unit/test_digests_locks.py",
                                                  "tests/unit/test_digests_mutants.py",
                                                  "tests/unit/test_memo_damage.py")),
    # not test_digests_locks.py, test_download_lock.py or test_run_lease.py: they hold locks from other
    # processes and wait in real time (seconds a mutant); these hold them from open files and count the waits
    Guard("locks", "src/vsbench/io/locks.py", ("tests/unit/test_locks_mutants.py",)),
    Guard("checkpoints", "src/vsbench/abid/checkpoints.py", ("tests/unit/test_training_identity.py",
                                                          "tests/unit/test_checkpoint_resume.py",
                                                          "tests/unit/test_checkpoint_inputs.py")),
    Guard("profiles", "src/vsbench/abid/profiles.py", ("tests/unit/test_training_identity.py",
                                                     "tests/unit/test_profile_problems.py")),
    # not test_bundle_integrity.py: an MLflow store a test (seconds a mutant); it runs in `make test`
    Guard("bundles", "src/vsbench/tracking/bundles.py", ("tests/unit/test_bundles_mutants.py",)),
    Guard("normalization", "src/vsbench/abid/data.py", ("tests/unit/test_batch_transform.py",
                                                        "tests/unit/test_distributed.py"),
          ("xǁBatchTransformǁ", "x_flip_generator")),
    Guard("embed_keys", "src/vsbench/retrieval/embed.py", ("tests/unit/test_embed_keys.py",),
          ("x_input_key", "x__resume_key", "x__key_change", "x__is_complete", "x_option_file_digests")),
    Guard("feeder", "src/vsbench/runtime/feeder.py", ("tests/unit/test_feeder.py", "tests/unit/test_embed_keys.py"),
          ("xǁFeederǁ", "x_normalizer")),  # the hand-over order and stream waits (issue 58); the normalizer moved here
    Guard("resize_keys", "src/vsbench/abid/resize.py", ("tests/unit/test_resize_keys.py",
                                                        "tests/unit/test_resize_content.py"),
          ("x__source_fields", "x__kept_output", "x__run_job", "x__is_record", "x__is_digest", "x__same_output",
           "x__previous", "x__resize", "x__collect", "xǁResizeSummaryǁmanifest_text")),
    Guard("preflight", "src/vsbench/runspec/preflight.py", ("tests/unit/test_preflight_mutants.py",
                                                            "tests/unit/test_cli_errors.py")),
    Guard("scorer_abid", "src/vsbench/abid/metrics.py", ("tests/unit/test_metrics_abid.py",
                                                         "tests/unit/test_metrics_abid_mutants.py")),
    Guard("scorer_disc", "src/vsbench/benchmarks/disc/metrics.py", ("tests/unit/test_metrics_copy_detection.py",
                                                                   "tests/unit/test_scorer_disc_mutants.py")),
    Guard("scorer_copydays", "src/vsbench/benchmarks/copydays/metrics.py",
          ("tests/unit/test_metrics_copydays.py", "tests/unit/test_metrics_copydays_mutants.py")),
    Guard("scorer_patch_pairs", "src/vsbench/benchmarks/patch_pairs/metrics.py",
          ("tests/unit/test_metrics_patch_pairs.py",)),
    Guard("scorer_vsd", "src/vsbench/benchmarks/vsd/metrics.py", ("tests/unit/test_metrics_vsd.py",)),
    Guard("scorer_product_search", "src/vsbench/benchmarks/product_search/metrics.py",
          ("tests/unit/test_metrics_product_search.py",)),
    # issue 56: what decides whether a difference is real, whether a night failed, what a sheet shows
    Guard("stats_compare", "src/vsbench/stats/compare.py", ("tests/unit/test_compare_mutants.py",
                                                           "tests/unit/test_difference_notes.py", *STATS_TESTS)),
    # test_scoring_memory_bits.py: the bits of each summing order (the one-replicate-at-a-time path)
    Guard("stats_ranking", "src/vsbench/stats/ranking.py", ("tests/unit/test_ranking_mutants.py",
                                                           "tests/unit/test_units_copy_detection.py",
                                                           "tests/unit/test_units_copydays.py",
                                                           "tests/unit/test_scoring_memory_bits.py")),
    # its own tests: the unit-file tests (17 s a survivor) reach it too but add no kill of their own
    Guard("stats_resample", "src/vsbench/stats/resample.py", ("tests/unit/test_resample_mutants.py",
                                                             "tests/unit/test_resample_blocks.py",
                                                             "tests/unit/test_expanded_interval.py",
                                                             "tests/unit/test_verdicts.py")),
    Guard("stats_units", "src/vsbench/stats/units.py", ("tests/unit/test_units_mutants.py",
                                                       "tests/unit/test_coded_labels.py",
                                                       "tests/unit/test_sorted_merges.py", *STATS_TESTS)),
    Guard("stats_statistics", "src/vsbench/stats/statistics.py", ("tests/unit/test_statistics_mutants.py", *STATS_TESTS,
                                                                 "tests/unit/test_units_abid.py")),
    Guard("stats_curves", "src/vsbench/stats/curves.py", ("tests/unit/test_curves_mutants.py",
                                                         "tests/unit/test_units_patch_pairs.py",
                                                         "tests/unit/test_units_vsd.py")),
    Guard("stats_records", "src/vsbench/stats/records.py", ("tests/unit/test_records_mutants.py",
                                                           "tests/unit/test_units_records.py")),
    # issue 55's interval choice: Clopper-Pearson or the bootstrap, the draws an expansion counts, the edge notes
    Guard("stats_proportions", "src/vsbench/stats/proportions.py", ("tests/unit/test_proportions_mutants.py",
                                                                   "tests/unit/test_expanded_interval.py",
                                                                   "tests/unit/test_units_records.py",
                                                                   "tests/unit/test_units_abid.py",
                                                                   "tests/unit/test_units_copy_detection.py")),
    Guard("stats_outcomes", "src/vsbench/stats/outcomes.py", ("tests/unit/test_compare_sheets.py",
                                                             "tests/unit/test_failure_sheets_retrieval.py",
                                                             "tests/unit/test_outcomes_judged.py",
                                                             "tests/unit/test_changes_mutants.py")),
    Guard("significance", "src/vsbench/reporting/significance.py", ("tests/unit/test_reporting_intervals.py",
                                                                    "tests/unit/test_decision_mutants.py"),
          ("x_format_p", "x_resampling_of", "x_intervals_disjoint", "x_compare_metric", "x_bad_direction",
           "x_difference_line")),
    Guard("regression_decision", "src/vsbench/reporting/regression.py", ("tests/unit/test_reporting_intervals.py",
                                                                         "tests/unit/test_decision_mutants.py"),
          ("x_judge_drops", "x_deciding_tests")),
    Guard("sheets", "src/vsbench/reporting/sheets.py", ("tests/unit/test_sheets_mutants.py", "tests/unit/test_sheets.py",
                                                       "tests/unit/test_failure_sheets_retrieval.py")),
    # test_record_sheets.py first in cost: it checks what each record hands the writer without drawing (milliseconds)
    Guard("record_sheets", "src/vsbench/reporting/record_sheets.py", ("tests/unit/test_record_sheets.py",
                                                                     "tests/unit/test_failure_sheets_retrieval.py",
                                                                     "tests/unit/test_failure_sheets_abid_pairs.py")),
    Guard("changes", "src/vsbench/reporting/changes.py", ("tests/unit/test_changes_mutants.py",
                                                         "tests/unit/test_compare_sheets.py")),
    Guard("abid_failures", "src/vsbench/abid/failures.py", ("tests/unit/test_abid_failures_mutants.py",
                                                           "tests/unit/test_failure_sheets_abid_pairs.py")),
    Guard("batched_decode", "src/vsbench/imaging/batched.py", ("tests/unit/test_batched_mutants.py",
                                                               "tests/unit/test_decode_choice.py",
                                                               "tests/unit/test_batched_decode.py")),
    # the cluster-run lease files (claim, renew, release, check); test_lease_files.py starts runs in subprocesses: not here;
    # test_lease_commands.py is the one that reaches check_lease (its subprocess test, 8 s, runs last: the slowest)
    Guard("leases", "src/vsbench/io/locks.py", ("tests/unit/test_locks_mutants.py", "tests/unit/test_decision_mutants.py",
                                             "tests/unit/test_lease_commands.py"),
          ("x_lease_ttl", "x__write_lease", "x__when", "x__live_refusal", "x_check_lease", "x_claim_lease",
           "x_release_lease", "x_folder_lease", "x_leased_folders", "x_run_lease")),
    # _ids_digest and inputs_path moved here from embed.py (kept out of torch's import): test_embed_keys checks them
    Guard("origin", "src/vsbench/retrieval/origin.py", ("tests/unit/test_origin_checked.py",
                                                        "tests/unit/test_embed_keys.py")),
    # the embed's one read, its hash and the decode of those bytes (the race inside a worker)
    Guard("embed_read", "src/vsbench/retrieval/embed.py", ("tests/unit/test_embed_race.py",
                                                         "tests/unit/test_memo_damage.py"),
          ("x_read_image_file", "xǁImageFilesǁ__getitem__", "xǁEncodedFilesǁ__getitem__", "x_collate_encoded_files",
           "x_collate_by_shape", "x_changed_while_read")),
)
KILLED = {"killed", "timeout", "caught by type check", "segfault"}


def tree_files(root: Path) -> list[str]:
    """The files a clean clone would hold plus untracked ones git does not ignore (no .venv, no
    build output, no caches): what the copy is made of."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            check=True, capture_output=True).stdout.decode()
    return sorted({name for name in listed.split("\0") if name and (root / name).is_file()})


def copy_tree(root: Path, destination: Path) -> None:
    for name in tree_files(root):
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)


def write_config(copy: Path, guards: list[Guard]) -> None:
    """``[tool.mutmut]`` in the copy's pyproject.toml only: what to mutate and which tests may run."""
    tests = sorted({test for guard in guards for test in guard.tests})
    lines = ["", "[tool.mutmut]", 'source_paths = ["src"]',
             f"only_mutate = {json.dumps([guard.source for guard in guards])}",
             f"pytest_add_cli_args_test_selection = {json.dumps(tests)}",
             'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-m", "not slow"]',
             # torch's threads do not survive a plain fork from a process that ran tests
             'process_isolation = "forkserver"', "use_git_change_detection = false", ""]
    pyproject = copy / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n".join(lines))


def private_env(copy: Path) -> dict[str, str]:
    """The environment of the run: every cache inside the copy, one torch thread per mutant."""
    home = copy / ".mutation-home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"),
           "VSBENCH_EMBED_CACHE": str(home / "embedding-cache"), "VSBENCH_HOME": str(home / "vsbench"),
           "VSBENCH_DEFAULT_STORE": "off", "MPLCONFIGDIR": str(home / "matplotlib"),
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)  # mutmut puts mutants/src first; the working tree's src must not be seen
    return env


def mutant_results(copy: Path, guards: list[Guard], env: dict[str, str]) -> dict[str, dict[str, str]]:
    """{module name: {mutant name: status}} from mutmut's own listing."""
    listing = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=copy,
                             env=env, capture_output=True, text=True).stdout
    by_module: dict[str, dict[str, str]] = {guard.name: {} for guard in guards}
    prefixes = {guard.prefix: guard for guard in guards}
    for line in listing.splitlines():
        match = re.match(r"\s*(\S+): (.+)$", line)
        if not match:
            continue
        mutant, status = match.groups()
        guard = next((g for prefix, g in prefixes.items() if mutant.startswith(prefix + ".")), None)
        if guard is not None and guard.counts(mutant):
            by_module[guard.name][mutant] = status.strip()
    return by_module


def summary(by_module: dict[str, dict[str, str]]) -> list[dict[str, object]]:
    rows = []
    for module, mutants in by_module.items():
        statuses = list(mutants.values())
        killed = sum(status in KILLED for status in statuses)
        tested = sum(status not in {"not checked", "skipped"} for status in statuses)
        rows.append({"module": module, "mutants": len(statuses), "tested": tested, "killed": killed,
                     "no_tests": sum(status == "no tests" for status in statuses),
                     "killed_rate": round(killed / tested, 3) if tested else None,
                     "survivors": sorted(m for m, status in mutants.items() if status not in KILLED)})
    return rows


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def changed_files(root: Path, since: str = "") -> tuple[str, set[str]]:
    """(what was compared against, the files that differ from it): the commits since the merge base
    of HEAD and ``since`` (default ``main``: on a branch, what the branch changed), the uncommitted
    changes and the untracked files git does not ignore. On ``main`` itself, its uncommitted work."""
    base = since or "main"
    try:
        point = _git(root, "merge-base", "HEAD", base).strip()
    except subprocess.CalledProcessError:
        raise SystemExit(f"error: {base!r} is not a commit git knows here; give one: make mutate CHANGED=<ref>") from None
    files = set(_git(root, "diff", "--name-only", point).split())
    files |= set(_git(root, "ls-files", "--others", "--exclude-standard").split())
    return f"{base} ({point[:10]})", files


def changed_guards(files: set[str], guards: tuple[Guard, ...] = GUARDS) -> list[Guard]:
    """The guards a change can weaken: their module changed, or one of the tests that kill its mutants."""
    return [guard for guard in guards if guard.source in files or files.intersection(guard.tests)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modules", nargs="*", help=f"guards to mutate (default: all): {[g.name for g in GUARDS]}")
    parser.add_argument("--max-children", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--json", type=Path, help="also write the figures here (outside the copy)")
    parser.add_argument("--show", type=int, default=40, help="print the diff of at most this many survivors a module")
    parser.add_argument("--keep", action="store_true", help="keep the copies, one a module (to run `mutmut show` in them)")
    parser.add_argument("--changed", nargs="?", const="main", default=None, metavar="REF",
                        help="only the guards whose module or tests changed since the merge base with REF "
                             "(default main), uncommitted changes included")
    args = parser.parse_args(argv)
    known = {guard.name: guard for guard in GUARDS}
    unknown = sorted(set(args.modules or []) - set(known))
    if unknown:
        parser.error(f"unknown guard modules {unknown}; choose from {sorted(known)}")
    guards = [known[name] for name in args.modules] if args.modules else list(GUARDS)
    if args.changed is not None:
        against, files = changed_files(ROOT, args.changed)
        guards = [guard for guard in guards if guard in changed_guards(files)]
        print(f"[mutate] changed since {against}: {', '.join(g.name for g in guards) or 'no guard module'}")
        if not guards:
            return 0

    started = time.monotonic()
    rows, failed = [], 0
    for guard in guards:
        row, code = mutate_one(guard, args.max_children, args.show, args.keep)
        rows.append(row)
        failed = failed or code
    seconds = time.monotonic() - started
    print(f"\n[mutate] {seconds:.0f} s wall for {len(guards)} modules")
    print(f"{'module':24} {'mutants':>8} {'killed':>7} {'rate':>6} {'no tests':>9} {'seconds':>8}")
    for row in rows:
        rate = f"{row['killed_rate']:.0%}" if row["killed_rate"] is not None else "-"
        print(f"{row['module']:24} {row['mutants']:>8} {row['killed']:>7} {rate:>6} {row['no_tests']:>9} "
              f"{row['seconds']:>8}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"seconds": round(seconds), "modules": rows}, indent=1) + "\n")
    return failed


def mutate_one(guard: Guard, max_children: int, show: int, keep: bool) -> tuple[dict[str, object], int]:
    """One guard in a copy of its own: mutmut picks a mutant's tests among those that reach its
    function, so with two guards in one run a slow test of one (the lock tests in
    test_digests_locks.py) would be run against the other's mutants too. Returns the module's row
    (with its wall seconds) and mutmut's exit code; prints its survivors."""
    copy = Path(tempfile.mkdtemp(prefix=f"vsbench-mutation-{guard.name}-"))
    started = time.monotonic()
    try:
        copy_tree(ROOT, copy)
        write_config(copy, [guard])
        env = private_env(copy)
        print(f"[mutate] {guard.name}: {guard.source} against {len(guard.tests)} test files, in {copy}", flush=True)
        log = copy / "mutmut-run.log"
        with log.open("w") as sink:  # mutmut redraws a spinner per mutant: kept out of the terminal
            run = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children),
                                  *guard.patterns()], cwd=copy, env=env, stdout=sink, stderr=subprocess.STDOUT)
        if run.returncode:
            print(log.read_text()[-4000:])
        [row] = summary(mutant_results(copy, [guard], env))
        row["seconds"] = round(time.monotonic() - started)
        rate = f"{row['killed_rate']:.0%}" if row["killed_rate"] is not None else "-"
        survivors: list[str] = row["survivors"]  # type: ignore[assignment]
        print(f"[mutate] {guard.name}: {row['killed']} of {row['mutants']} killed ({rate}), {len(survivors)} "
              f"survivors, {row['seconds']} s; mutmut exited {run.returncode}", flush=True)
        for mutant in survivors[:show]:
            shown = subprocess.run([sys.executable, "-m", "mutmut", "show", mutant], cwd=copy,
                                   env=env, capture_output=True, text=True).stdout
            print(shown.strip() or mutant)
        for mutant in survivors[show:]:
            print(mutant)
        return row, run.returncode
    finally:
        if keep:
            print(f"[mutate] kept {copy}")
        else:
            shutil.rmtree(copy, ignore_errors=True)

if __name__ == "__main__":
    sys.exit(main())
