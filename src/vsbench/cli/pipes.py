"""A reader that stops reading (``vsbench ... --help | head``) ends the command quietly, as it ends
``cat`` or ``yes``: no message, exit status 141 (128 + SIGPIPE, what a shell reports for a process
killed by SIGPIPE). Python ignores SIGPIPE, so without this the write raises BrokenPipeError, which
reads as an unexpected error, and the interpreter's last flush adds "Exception ignored ..." lines."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

SIGPIPE_EXIT = 141


def _reader_gone(stream: object) -> bool:
    """Whether ``stream`` is a pipe (or socket) whose other end is closed: poll reports an error on
    it. False for terminals, files and streams without a descriptor (a test runner's capture)."""
    import select

    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
        poller = select.poll()
    except (AttributeError, ValueError, OSError):  # io.UnsupportedOperation is an OSError and a ValueError
        return False
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def reader_gone(exc: BaseException) -> bool:
    """True when ``exc`` is a write to stdout or stderr after its reader went away, not a broken
    connection of the command's own (a socket to a store is reported as any other error)."""
    return isinstance(exc, BrokenPipeError) and any(_reader_gone(s) for s in (sys.stdout, sys.stderr))


def end_quietly() -> NoReturn:
    """Point the closed streams at /dev/null, so that the interpreter's last flush has nowhere to
    fail, and exit with 141 (SystemExit: it passes through every layer, after the command ended too)."""
    for stream in (sys.stdout, sys.stderr):
        if _reader_gone(stream):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)
    raise SystemExit(SIGPIPE_EXIT)


def flush_or_end_quietly() -> None:
    """Flush what is still buffered (print() output) while a closed pipe can still end quietly."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError as exc:
            if not reader_gone(exc):
                raise
            end_quietly()
        except (AttributeError, ValueError):  # no stream, or one already closed
            pass
