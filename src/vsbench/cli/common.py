"""What every command shares: the options several groups take, and the one way a user's mistake ends
(one line on stderr, exit code 2, no traceback)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, NoReturn

import typer

BAD_INPUT_EXIT = 2

EndpointOpt = Annotated[str | None, typer.Option(help="S3 endpoint URL (for a local or non-AWS S3).")]
RunnerOpt = Annotated[str, typer.Option(
    help="'subprocess': each step a process of this environment; 'container': each step in the vsbench image "
         "as a pod runs it (UID 10001, read-only root, tmpfs /tmp; docker or podman, started as needed).")]
ImageOpt = Annotated[str | None, typer.Option(
    help="Image every step runs in with --runner container (default: the CPU image that `make images` builds).")]
TrackOpt = Annotated[bool, typer.Option(
    "--track/--no-track", help="Record an MLflow run (MLFLOW_TRACKING_URI, else a local store it prints); "
                               "a store down or hanging costs at most VSBENCH_TRACKING_TIMEOUT s (30).")]
VerboseOpt = Annotated[bool, typer.Option(
    "--verbose", help="Stream kfp.local's executor logs (otherwise one line per step; the logs go to a file).")]


def kept_bundle(folder: Path, experiment: str, pipeline: str, params: dict, metrics: dict, *, tags: dict,
                 artifacts: dict[str, str]) -> None:
    """A pipeline that ran untracked because the store was down: its run kept for `vsbench track upload`."""
    from vsbench.tracking.command import BUNDLE_NAME, keep_for_later

    keep_for_later(folder / BUNDLE_NAME, typer.echo, experiment=experiment, pipeline=pipeline, params=params,
                   metrics=metrics, tags=tags, artifacts=artifacts)


def check_runner(runner: str, choices: tuple[str, ...] = ("subprocess", "container")) -> None:
    if runner not in choices:
        raise typer.BadParameter(f"must be one of {', '.join(choices)}, not {runner!r}", param_hint="--runner")


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
        fail(str(exc))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
        fail(f"{exc.filename}: {exc.strerror or exc}" if exc.filename is not None else str(exc))
    except OSError as exc:
        if exc.filename is None:  # a socket or a device, not a path the user gave: unexpected
            raise
        fail(f"{exc.filename}: {exc.strerror or exc}")
