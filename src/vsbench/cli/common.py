"""What every command shares: the options several groups take, and the one way a user's mistake ends
(one line on stderr, exit code 2, no traceback)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from vsbench.cli import pipes
from vsbench.cli.helpfmt import MORE, HelpGroup
from vsbench.imaging.modes import DECODE_HELP, DECODE_MODES

BAD_INPUT_EXIT = 2

EndpointOpt = Annotated[str | None, typer.Option(help="S3 endpoint URL (for a local or non-AWS S3; default: AWS).")]
RunnerOpt = Annotated[str, typer.Option(
    help="'subprocess': each step a process of this environment; 'container': each step in the vsbench image "
         "as a pod runs it (UID 10001, read-only root, tmpfs /tmp; docker or podman, started as needed).")]
ImageOpt = Annotated[str | None, typer.Option(
    rich_help_panel=MORE,
    help="Image every step runs in with --runner container (default: the CPU image that `make images` builds).")]
TrackOpt = Annotated[bool, typer.Option(
    "--track/--no-track", help="Record an MLflow run (MLFLOW_TRACKING_URI, else a local store it prints); "
                               "a store down or hanging costs at most VSBENCH_TRACKING_TIMEOUT s (30).")]
DecodeOpt = Annotated[str, typer.Option(rich_help_panel=MORE, help=DECODE_HELP)]
VerboseOpt = Annotated[bool, typer.Option(
    "--verbose", rich_help_panel=MORE,
    help="Stream kfp.local's executor logs (otherwise one line per step; the logs go to a file).")]



def _set_verify_inputs(value: str) -> str:
    """``--verify-inputs``' callback: checked before the command runs, then set for this process and
    every step it starts (``VSBENCH_VERIFY_INPUTS``: subprocess steps inherit it, container steps get
    it through ``platform.containers.step_environment``), where :class:`~vsbench.io.digests.DigestMemo`
    and the other stat shortcuts read it."""
    import os

    from vsbench.io.storage import VERIFY_INPUTS_ENV, VERIFY_MODES

    if value not in VERIFY_MODES:
        raise typer.BadParameter(f"must be one of {', '.join(VERIFY_MODES)}, not {value!r} "
                                 f"(the option, or {VERIFY_INPUTS_ENV} when the option is not given)")
    os.environ[VERIFY_INPUTS_ENV] = value
    return value


VerifyInputsOpt = Annotated[str, typer.Option(
    envvar="VSBENCH_VERIFY_INPUTS", show_envvar=False, callback=_set_verify_inputs, rich_help_panel=MORE,
    help="'stat' (default): an input whose (device, inode, size, mtime, ctime) is the one remembered is not read "
         "again; 'full': every input is hashed again, whatever its stat (a filesystem edited offline or restored "
         "block by block, a network filesystem that caches attributes; docs/reliability.md). "
         "Default: VSBENCH_VERIFY_INPUTS, else stat.")]


def kept_bundle(folder: Path, experiment: str, pipeline: str, params: dict, metrics: dict, *, tags: dict,
                 artifacts: dict[str, str], **run: Any) -> None:
    """A pipeline that ran untracked because the store was down: its run kept for `vsbench track upload`."""
    from vsbench.tracking.command import BUNDLE_NAME, keep_for_later

    keep_for_later(folder / BUNDLE_NAME, typer.echo, experiment=experiment, pipeline=pipeline, params=params,
                   metrics=metrics, tags=tags, artifacts=artifacts, **run)


def check_runner(runner: str, choices: tuple[str, ...] = ("subprocess", "container")) -> None:
    if runner not in choices:
        raise typer.BadParameter(f"must be one of {', '.join(choices)}, not {runner!r}", param_hint="--runner")


def check_decode(decode: str) -> None:
    """--decode must name a mode; the device decides later whether ``auto`` means the GPU."""
    if decode not in DECODE_MODES:
        raise typer.BadParameter(f"must be one of {', '.join(DECODE_MODES)}, not {decode!r}", param_hint="--decode")


def print_summary(title: str, data: dict, keys: list[str]) -> None:
    typer.echo(title)
    width = max(len(k) for k in keys)
    for key in keys:
        if key in data:
            typer.echo(f"  {key:<{width}}  {data[key]}")


def fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(BAD_INPUT_EXIT)


@contextmanager
def user_errors(*kinds: type[Exception]) -> Iterator[None]:
    """Turn a user's mistake (ValueError, plus ``kinds``) into one line on stderr and exit code 2,
    with no traceback. Shared by every command that checks its inputs. A file that cannot be opened
    (missing, a folder, not readable) is such a mistake too: the line names it."""
    try:
        yield
    except (ValueError, *kinds) as exc:  # InputError included
        fail(user_message(exc) or str(exc).strip().replace("\n", "; "))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
        fail(f"{exc.filename}: {exc.strerror or exc}" if exc.filename is not None else str(exc))
    except OSError as exc:
        if exc.filename is None:  # a socket or a device, not a path the user gave: unexpected
            raise
        fail(f"{exc.filename}: {exc.strerror or exc}")


def refuse_busy(folder: Path, what: str = "", *, shared: bool = False) -> None:
    """Stop in one line when another run holds ``folder`` (or wait, with VSBENCH_LOCK_WAIT_S), before
    the command imports or checks anything heavy: a busy folder is refused in well under 2 s instead
    of after its checks (issue 46). A courtesy check, released at once: the step takes the lock
    itself when it writes. A folder that does not exist yet is held by nobody, and is not made here
    (a command refused by its checks leaves nothing behind). ``shared``: a pipeline step's check,
    which a run holding the folder exclusively refuses, and the run's other steps do not."""
    from vsbench.io.locks import lock_path, output_lock

    # No lock file: nobody holds the folder (a holder makes it first), and none is made here: a
    # command that then fails (a download that fetched nothing) must leave the folder as it found it.
    if Path(folder).is_dir() and lock_path(Path(folder)).exists():
        with user_errors(), output_lock(folder, what=what or str(folder), shared=shared):
            pass


DEBUG_ENV = "VSBENCH_DEBUG"  # 1: every unexpected error prints its traceback (as --debug)
ERROR_DIR_ENV = "VSBENCH_ERROR_DIR"  # where tracebacks of unexpected errors are written (default: the temp dir)
UNEXPECTED_EXIT = 1


def _is_validation_error(exc: BaseException) -> bool:
    try:
        from pydantic import ValidationError
    except ImportError:  # pragma: no cover - pydantic is a dependency
        return False
    return isinstance(exc, ValidationError)


def validation_line(exc: Any) -> str:
    """A pydantic ``ValidationError`` as one line: what was checked, then each field, what is wrong
    and the value given (``TrainProfile: batch_size: Input should be greater than or equal to 1
    (got -1); nosuch: Extra inputs are not permitted``)."""
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error.get("loc", ())) or "value"
        given = "" if error.get("type") in ("extra_forbidden", "missing") else f" (got {str(error.get('input'))[:60]!s})"
        parts.append(f"{where}: {error.get('msg', 'invalid')}{given}")
    return f"{exc.title}: " + "; ".join(parts)


def user_message(exc: BaseException) -> str | None:
    """The one line a user's mistake ends with, or None when ``exc`` is not one (a bug, or a failure
    no input explains). The same rule as :func:`user_errors`, for errors that reach the top."""
    if _is_validation_error(exc):  # pydantic's several lines, and a link per field: one line
        return validation_line(exc)
    if isinstance(exc, ValueError):  # InputError, WeightsError, SearchError...
        text = str(exc).strip()
        return text.splitlines()[0] if text.count("\n") and len(text) > 500 else text.replace("\n", "; ")
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    if isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)):
        return str(exc)
    return None


def traceback_file(exc: BaseException) -> Path | None:
    """The full traceback of an unexpected error, written where the user can send it; None when the
    folder cannot be written (the message then says to re-run with --debug)."""
    import os
    import tempfile
    import time
    import traceback

    folder = Path(os.environ.get(ERROR_DIR_ENV) or Path(tempfile.gettempdir()) / "vsbench-errors")
    path = folder / f"vsbench-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.txt"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(traceback.format_exception(exc)))
    except OSError:
        return None
    return path


def _cli_flow() -> tuple[type[BaseException], ...]:
    """What the command-line machinery raises on purpose (usage errors, --help, exit codes): passed on.
    Typer may carry its own copy of click, so both are named."""
    import click

    kinds: list[type[BaseException]] = [typer.Exit, typer.Abort, click.exceptions.ClickException,
                                        click.exceptions.Exit, click.exceptions.Abort]
    kinds += [kind for kind in (getattr(typer, "BadParameter", None), getattr(typer, "exceptions", None) and
                                getattr(typer.exceptions, "TyperException", None)) if isinstance(kind, type)]
    return tuple(kinds)


_CLI_FLOW = _cli_flow()


def _usage_errors() -> tuple[type[Exception], ...]:
    """A wrong option or value, as typer (its own copy of click, ``typer._click``) and click raise it."""
    import click

    kinds: list[type[Exception]] = [click.UsageError]
    try:
        from typer._click.exceptions import UsageError
    except ImportError:  # a typer that uses click itself
        pass
    else:
        kinds.append(UsageError)
    return tuple(kinds)


_USAGE_ERRORS = _usage_errors()


class SafeGroup(HelpGroup):
    """The root command: an exception no command turned into a message ends as one line, never a
    traceback. A user's mistake (a ValueError, a file that cannot be opened) exits 2 naming it; any
    other error exits 1 and says where its traceback was written. ``--debug`` (or VSBENCH_DEBUG=1)
    lets the traceback through instead."""

    def main(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            return super().main(*args, **kwargs)
        finally:  # what print() left buffered, while a closed pipe can still end quietly
            pipes.flush_or_end_quietly()

    def make_context(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        try:  # `vsbench --help | head`: the root's own help is written here
            return super().make_context(*args, **kwargs)
        except BrokenPipeError as exc:
            if pipes.reader_gone(exc):
                pipes.end_quietly()
            raise

    def invoke(self, ctx):  # type: ignore[no-untyped-def]
        import os

        try:
            return super().invoke(ctx)
        except _USAGE_ERRORS as exc:  # a wrong option or value: one line, and where the options are listed
            where = (exc.ctx or ctx).command_path
            typer.echo(f"error: {exc.format_message()} (see `{where} --help`)", err=True)
            raise typer.Exit(BAD_INPUT_EXIT) from None
        except (*_CLI_FLOW, SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:
            if pipes.reader_gone(exc):  # `vsbench ... | head`: the reader has what it wanted, no error
                pipes.end_quietly()
            if ctx.params.get("debug") or os.environ.get(DEBUG_ENV, "").strip() in ("1", "true", "yes"):
                raise
            if getattr(exc, "one_line", False):  # an expected failure (a download incomplete, a denied bucket)
                typer.echo(f"error: {exc}", err=True)
                code = getattr(exc, "exit_code", UNEXPECTED_EXIT)  # 2 where the user typed it wrong (S3AccessError)
                raise typer.Exit(code if isinstance(code, int) else UNEXPECTED_EXIT) from None
            message = user_message(exc)
            if message is not None:
                typer.echo(f"error: {message}", err=True)
                raise typer.Exit(BAD_INPUT_EXIT) from None
            if isinstance(exc, MemoryError):  # its traceback may need memory to format: one line, no file
                typer.echo("error: out of memory: the inputs do not fit in this machine's free memory; free memory, "
                           "run on a machine with more, or give smaller inputs (docs/reliability.md, 'Limits')", err=True)
                raise typer.Exit(UNEXPECTED_EXIT) from None
            written = traceback_file(exc)
            where = f"the traceback is in {written}" if written else "re-run with --debug for the traceback"
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            typer.echo(f"error: unexpected {type(exc).__name__}: {first} ({where}; --debug prints it)", err=True)
            raise typer.Exit(UNEXPECTED_EXIT) from None
