"""Holding a vsbench lock elsewhere, for tests: within one thread a lock is re-entrant (a run's
steps under its own folder lock), so a test holds it from another thread, which is excluded as
another process is (flock locks open files, not threads)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def held_elsewhere(lock: contextlib.AbstractContextManager) -> Iterator[None]:
    """Hold ``lock`` in another thread for the ``with`` block."""
    taken, done = threading.Event(), threading.Event()
    failure: list[BaseException] = []

    def hold() -> None:
        try:
            with lock:
                taken.set()
                done.wait(60)
        except BaseException as exc:  # noqa: BLE001 - reported in the test's thread
            failure.append(exc)
            taken.set()

    thread = threading.Thread(target=hold)
    thread.start()
    assert taken.wait(10)
    if failure:
        raise failure[0]
    try:
        yield
    finally:
        done.set()
        thread.join(10)
