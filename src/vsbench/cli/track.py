"""``vsbench track``: runs kept locally while MLflow was down, uploaded when it is back."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vsbench.cli.common import (
    user_errors,
)
from vsbench.cli.helpfmt import App

track_app = App(no_args_is_help=True, help="MLflow runs kept locally: upload them when the store is back.")


@track_app.command("upload")
def track_upload(
    location: Annotated[Path, typer.Argument(help="A run bundle (mlflow-run.json) or a folder holding bundles.")],
    tracking_uri: Annotated[str | None, typer.Option(help="Store to upload to (default: MLFLOW_TRACKING_URI, "
                                                          "else the local default store; never the URI a "
                                                          "bundle names).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Upload bundles already uploaded too.")] = False,
) -> None:
    """Upload runs a command kept locally because MLflow was down (idempotent: a run is found by its key).

    A bundle is data: it is checked whole before the store is contacted (types, sizes, artifacts only
    from its own folder, its digest), and may only complete the run it made itself."""
    import os

    from vsbench.tracking.command import BundleRefused, find_bundles, read_bundle, resolve_store, upload_bundle
    from vsbench.tracking.config import DEFAULT_STORE_ENV

    with user_errors(FileNotFoundError):
        bundles = find_bundles(location)
    if not bundles:
        typer.echo(f"error: no run bundles (mlflow-run.json) at {location}", err=True)
        raise typer.Exit(1)
    if not tracking_uri and not os.environ.get("MLFLOW_TRACKING_URI", "").strip():
        if os.environ.get(DEFAULT_STORE_ENV, "").strip().lower() == "off":
            typer.echo(f"error: no store to upload to: MLFLOW_TRACKING_URI is not set and {DEFAULT_STORE_ENV}=off "
                       "forbids the local default; set MLFLOW_TRACKING_URI or pass --tracking-uri", err=True)
            raise typer.Exit(2)
        tracking_uri = resolve_store(typer.echo)
    failed = 0
    for bundle in bundles:
        try:
            data = read_bundle(bundle)
            if data["uploaded"] and not force:
                typer.echo(f"{bundle}: already uploaded as run {data['uploaded']['run_id']} "
                           f"({data['uploaded']['tracking_uri']})")
                continue
            run_id = upload_bundle(bundle, tracking_uri)
        except (ValueError, BundleRefused) as exc:  # InputError included: the bundle's own problem, one line
            failed += 1
            typer.echo(f"error: not uploaded: {exc}", err=True)
            continue
        except Exception as exc:  # noqa: BLE001 - one line per bundle, the others still go
            failed += 1
            typer.echo(f"error: {bundle}: not uploaded: {type(exc).__name__}: {str(exc)[:300]}", err=True)
            continue
        typer.echo(f"{bundle}: MLflow run {run_id}")
    if failed:
        raise typer.Exit(1)
