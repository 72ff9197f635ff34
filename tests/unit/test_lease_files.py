"""A lease file is data: parsed by a strict schema, never believed unchecked (issue 54).

``.vsbench-lease.json`` lies in a shared output folder, where anyone can write it by hand. Before
issue 54, ``"expires": NaN``, ``"tomorrow"`` or ``1e18`` ended ``--runner subprocess`` in a 22-line
traceback naming no file; ``claim_lease`` crashed on ``inf``, a list or ``taken_over: 5``, read
``taken_over: "my-run"`` letter by letter, and silently claimed over malformed JSON. Each such file is
now one line naming the file and the fix (remove it, or wait until the run it names ends), and the
command line exits 2 on it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vsbench.io import leases
from vsbench.io.leases import LEASE_FILE, MAX_LEASE_S, Lease, LeaseError, read_lease
from vsbench.io.locks import check_lease, claim_lease, release_lease, run_lease

NOW = 1_000_000.0
GOOD = {"run": "run-a", "expires": NOW + 3600, "renewed": "2026-12-06T10:00:00+0000",
        "since": "2026-12-06T09:00:00+0000", "host": "pod-1", "taken_over": ["run-0"]}

# (what is wrong, the file's bytes, a word the one line must carry)
BAD: list[tuple[str, bytes, str]] = [
    ("nan", b'{"run": "run-a", "expires": NaN}', "NaN"),
    ("infinity", b'{"run": "run-a", "expires": Infinity}', "Infinity"),
    ("minus infinity", b'{"run": "run-a", "expires": -Infinity}', "Infinity"),
    ("a word", b'{"run": "run-a", "expires": "tomorrow"}', "expires"),
    ("far ahead", b'{"run": "run-a", "expires": 1e18}', "days ahead"),
    ("a week and a day ahead", json.dumps({"run": "run-a", "expires": NOW + MAX_LEASE_S + 86400}).encode(),
     "days ahead"),
    ("huge", b'{"run": "run-a", "expires": 1e400}', "finite number"),
    ("negative", b'{"run": "run-a", "expires": -5}', "expires"),
    ("a list", b'{"run": "run-a", "expires": [1, 2]}', "expires"),
    ("a bool", b'{"run": "run-a", "expires": true}', "expires"),
    ("taken over a number", json.dumps({**GOOD, "taken_over": 5}).encode(), "taken_over"),
    ("taken over a word", json.dumps({**GOOD, "taken_over": "my-run"}).encode(), "taken_over"),
    ("taken over numbers", json.dumps({**GOOD, "taken_over": [1, 2]}).encode(), "taken_over"),
    ("run a number", json.dumps({**GOOD, "run": 7}).encode(), "run"),
    ("run empty", json.dumps({**GOOD, "run": ""}).encode(), "run"),
    ("run with a newline", json.dumps({**GOOD, "run": "a\nb"}).encode(), "run"),
    ("released a bool", json.dumps({**GOOD, "released": True}).encode(), "released"),
    ("an extra field", json.dumps({**GOOD, "owner": "me"}).encode(), "owner"),
    ("no run", json.dumps({"expires": NOW + 60}).encode(), "run"),
    ("no expiry", json.dumps({"run": "run-a"}).encode(), "expires"),
    ("a key twice", b'{"run": "run-a", "run": "run-b", "expires": 1}', "twice"),
    ("malformed", b'{"run": "run-a", "expires": ', "not valid JSON"),
    ("empty", b"", "not valid JSON"),
    ("a list at the top", b'["run-a"]', "list"),
    ("null", b"null", "null"),
    ("not UTF-8", b'{"run": "r\xff", "expires": 1}', "UTF-8"),
    ("too large", b'{"run": "' + b"a" * 70000 + b'", "expires": 1}', "KB"),
    ("nested too deep", b"[" * 20000 + b"]" * 20000, "nested too deep"),
]


@pytest.mark.parametrize(("what", "content", "word"), BAD, ids=[case[0] for case in BAD])
def test_each_bad_lease_is_one_line_naming_the_file_and_the_fix(tmp_path: Path, what: str, content: bytes,
                                                                 word: str) -> None:
    (tmp_path / LEASE_FILE).write_bytes(content)
    for attempt in (lambda: read_lease(tmp_path, NOW), lambda: claim_lease(tmp_path, "run-b", now=NOW),
                    lambda: check_lease(tmp_path, now=NOW)):
        with pytest.raises(LeaseError) as caught:
            attempt()
        line = str(caught.value)
        assert "\n" not in line and len(line) < 600, line
        assert line.startswith(f"{tmp_path / LEASE_FILE} ") and word in line, line
        assert "remove it if no pipeline run uses this folder" in line, line
    assert (tmp_path / LEASE_FILE).read_bytes() == content  # never claimed over


def test_a_malformed_lease_naming_a_run_says_to_wait_for_it(tmp_path: Path) -> None:
    (tmp_path / LEASE_FILE).write_text(json.dumps({"run": "run-a", "expires": "tomorrow"}))
    with pytest.raises(LeaseError, match=r"or wait until pipeline run 'run-a', which it names, ends\), then run again$"):
        read_lease(tmp_path, NOW)


def test_a_lease_vsbench_writes_reads_back(tmp_path: Path) -> None:
    assert read_lease(tmp_path, NOW) is None
    (tmp_path / LEASE_FILE).write_text(json.dumps(GOOD))
    assert read_lease(tmp_path, NOW) == Lease(**GOOD)  # type: ignore[arg-type]
    (tmp_path / LEASE_FILE).write_text(json.dumps({"run": "run-a", "expires": 5}))  # an int, long expired: fine
    assert read_lease(tmp_path, NOW) == Lease(run="run-a", expires=5.0)
    # the furthest a lease may lie ahead, with the clock skew between pods
    (tmp_path / LEASE_FILE).write_text(json.dumps({"run": "run-a", "expires": NOW + MAX_LEASE_S + leases.CLOCK_SKEW_S}))
    assert read_lease(tmp_path, NOW) is not None


def test_claims_and_releases_write_what_the_schema_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VSBENCH_RUN_LEASE", raising=False)
    monkeypatch.setenv("VSBENCH_LEASE_TTL_S", str(MAX_LEASE_S))  # the longest lifetime allowed reads back
    now = time.time()
    assert claim_lease(tmp_path, "run-a", now=now) == "claimed"
    assert read_lease(tmp_path, now).run == "run-a"  # type: ignore[union-attr]
    assert release_lease(tmp_path, "run-a")
    assert read_lease(tmp_path, time.time()).released  # type: ignore[union-attr]


def test_a_run_refuses_a_malformed_lease_before_its_first_step(tmp_path: Path) -> None:
    (tmp_path / LEASE_FILE).write_text('{"run": "run-a", "expires": NaN}')
    with pytest.raises(LeaseError, match=LEASE_FILE), run_lease([tmp_path]):
        pass


# --- through the command line: one error line, exit 2, under every runner --------------------------------

CLI = """
import json, sys
from typer.testing import CliRunner
from vsbench.cli.app import app
results = [[r.exit_code, r.output] for r in (CliRunner().invoke(app, args) for args in json.loads(sys.argv[1]))]
print(json.dumps(results))
"""


def _commands(tmp_path: Path) -> tuple[list[list[str]], list[Path]]:
    """`similarity run` under each runner into OUT, and `abid run-local` into DATA (its counting runs),
    with the folders whose lease file each reads."""
    from vsbench.platform.local_run import ABID_FOLDERS

    out, data = tmp_path / "out", tmp_path / "abid"
    (tmp_path / "disc").mkdir()
    out.mkdir()
    common = ["--benchmark", "disc", "--root", str(tmp_path / "disc"), "--out", str(out), "--no-track"]
    commands = [["similarity", "run", *common, "--runner", runner] for runner in ("inline", "subprocess", "container")]
    commands.append(["abid", "run-local", "--data-root", str(data), "--no-track"])
    folders = [out, out, out, data / ABID_FOLDERS[0]]
    return commands, folders


def _run_cli(commands: list[list[str]]) -> list[tuple[int, str]]:
    done = subprocess.run([sys.executable, "-c", CLI, json.dumps(commands)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [(code, output) for code, output in json.loads(done.stdout.strip().splitlines()[-1])]


@pytest.mark.parametrize("content", [b'{"run": "run-a", "expires": NaN}', b'{"run": "run-a", "expires": "tomorrow"}',
                                     b'{"run": "run-a", "expires": 1e18}', b'{"run": "run-a", "taken_over": 5',
                                     b'{"run": "run-a", "expires": 1, "taken_over": "my-run"}'])
def test_the_command_line_says_one_line_and_exits_2(tmp_path: Path, content: bytes) -> None:
    commands, folders = _commands(tmp_path)
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / LEASE_FILE).write_bytes(content)
    for args, folder, (code, output) in zip(commands, folders, _run_cli(commands), strict=True):
        errors = [line for line in output.splitlines() if line.startswith("error:")]
        assert code == 2 and len(errors) == 1 and "Traceback" not in output, (args, output)
        assert f"{folder / LEASE_FILE} " in errors[0] and "remove it" in errors[0], (args, output)
        assert (folder / LEASE_FILE).read_bytes() == content
