"""A run's locks die with the run, not with the workers it forked (issue 54).

flock belongs to the open file, which ``fork`` shares: before issue 54 a DataLoader worker forked
while its run held the output folder kept the lock after the run was killed (``kill -9``), and the
next run was refused for 1.3-2.6 s naming the dead pid as the holder. Forked children now close their
copies of every lock descriptor (``os.register_at_fork``), and a holder that has ended is never named
as the holder. Each test kills a real process holding a real lock; the child is stopped by the test.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.locking import held_elsewhere
from vsbench.io import locks
from vsbench.io.locks import OutputBusy, output_lock, writing_lock

HOLD_AND_FORK = """
import multiprocessing, os, sys, time
from vsbench.io.locks import output_lock, reading_lock
lock = {"output": output_lock, "reading": reading_lock}[sys.argv[2]]

def work(started):
    started.set()  # past the fork (and its hooks): the child is what it will be
    time.sleep(60)

context = multiprocessing.get_context("fork")
started = context.Event()
with lock(sys.argv[1]):
    if sys.argv[3] == "fork":
        pid = os.fork()
        if pid == 0:
            work(started)
            os._exit(0)
    else:  # a multiprocessing worker, as torch's DataLoader forks them
        worker = context.Process(target=work, args=(started,), daemon=True)
        worker.start()
        pid = worker.pid
    started.wait(30)
    print(pid, flush=True)
    time.sleep(60)
"""


def _line(proc: subprocess.Popen[str], timeout: float = 30) -> str:
    """The next line ``proc`` prints, or a failure after ``timeout`` seconds (never a hang)."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"no answer from the holder in {timeout:g} s (a forked child blocked on its parent's lock?)"
    return proc.stdout.readline().strip()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.parametrize("how", ["fork", "multiprocessing"])
@pytest.mark.parametrize("kind", ["output", "reading"])
def test_a_killed_run_frees_its_folder_at_once_though_its_workers_live(tmp_path: Path, kind: str, how: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    parent = subprocess.Popen([sys.executable, "-c", HOLD_AND_FORK, str(out), kind, how], stdout=subprocess.PIPE,
                              text=True)
    child = int(_line(parent) or 0)
    assert child, "the holder did not start"
    try:
        # held: refused while the run lives
        with pytest.raises(OutputBusy), (output_lock(out, wait_s=0) if kind == "output" else writing_lock(out, wait_s=0)):
            pass
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        os.kill(child, 0)  # the worker outlives the run
        # free at once (no wait): the worker closed its copy of the lock when it was forked
        with output_lock(out, wait_s=0) if kind == "output" else writing_lock(out, wait_s=0):
            pass
    finally:
        _kill(parent.pid)
        _kill(child)
        parent.wait()


CHILD_UNWINDS = """
import json, os, sys
from vsbench.io.locks import output_lock, reading_lock

def work(folder):
    with output_lock(folder), reading_lock(folder + "/data"):
        pid = os.fork()
        if pid == 0:
            # Its copies were closed at the fork: their numbers are reused (here by the parent's
            # lock record itself), and leaving the blocks must touch none of them.
            reused = [os.open(folder + "/.vsbench-lock", os.O_RDWR) for _ in range(8)]
            return "child"  # the child leaves both blocks, as the parent will
        os.waitpid(pid, 0)
        record = json.loads(open(folder + "/.vsbench-lock").read())
        readers = open(folder + "/data/.vsbench-lock.readers").read()
        print(json.dumps({"released": "released" in record, "pid": record["pid"] == os.getpid(),
                          "readers": len(readers.splitlines())}), flush=True)
        sys.stdin.readline()  # held until the test has tried the locks
    return "parent"

if work(sys.argv[1]) == "child":
    os._exit(0)
"""


def test_a_forked_child_leaving_the_block_leaves_its_parents_locks_alone(tmp_path: Path) -> None:
    """The child's copies are closed at the fork: leaving the ``with`` blocks in the child neither
    marks the parent's record released nor drops the parent's reader line or locks, though the
    child has opened files under the same descriptor numbers meanwhile."""
    out = tmp_path / "out"
    (out / "data").mkdir(parents=True)
    parent = subprocess.Popen([sys.executable, "-c", CHILD_UNWINDS, str(out)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None and parent.stdin is not None
    try:
        said = json.loads(_line(parent) or "null")
        assert said == {"released": False, "pid": True, "readers": 1}
        with pytest.raises(OutputBusy), output_lock(out, wait_s=0):
            pass
        with pytest.raises(OutputBusy), writing_lock(out / "data", wait_s=0):
            pass
        parent.stdin.write("\n")
        parent.stdin.flush()
        assert parent.wait(30) == 0
    finally:
        _kill(parent.pid)
        parent.wait()


def test_a_holder_that_has_ended_is_not_named_as_the_holder(tmp_path: Path) -> None:
    """A process forked outside Python (no fork hook) may still hold a dead run's lock: the refusal
    says the named pid has ended, rather than naming it as a live holder."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    out = tmp_path / "out"
    with held_elsewhere(output_lock(out)):
        record = json.loads((out / locks.LOCK_FILE).read_text())
        (out / locks.LOCK_FILE).write_text(json.dumps({**record, "pid": ended.pid, "command": "vsbench x\nnext"}))
        with pytest.raises(OutputBusy) as caught, output_lock(out, wait_s=0):
            pass
    line = str(caught.value)
    assert f"pid {ended.pid} on host" in line and "(which has ended: a process it started still holds the lock" in line
    assert "\n" not in line and "vsbench x?next" in line
