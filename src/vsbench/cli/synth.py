"""``vsbench synth``: small datasets in the benchmarks' native layouts (ABID, and every registered
benchmark's generator)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from vsbench.benchmarks.registry import generate
from vsbench.cli.common import (
    EndpointOpt,
    user_errors,
)
from vsbench.cli.helpfmt import App

synth_app = App(no_args_is_help=True, help="Generate small datasets in the benchmarks' native layouts.")


@synth_app.command("abid")
def synth_abid(
    out: Annotated[str, typer.Option(help="Folder, or s3://bucket/prefix (with --endpoint-url).")],
    bins: Annotated[int, typer.Option(min=1, help="Number of bin ids to generate.")] = 500,
    seed: Annotated[int, typer.Option(help="Seed: same seed, byte-identical files.")] = 0,
    workers: Annotated[int, typer.Option(min=1, help="Processes.")] = 1,
    endpoint_url: EndpointOpt = None,
) -> None:
    """Generated bin photos and metadata in the exact ABID layout."""
    import tempfile

    from vsbench.abid.synth import generate_abid
    from vsbench.io.storage import has_aws_credentials, is_s3_uri, local_path, s3_client, upload_tree

    if is_s3_uri(out):
        with tempfile.TemporaryDirectory(prefix="vsbench-synth-") as tmp:
            summary = generate_abid(Path(tmp), bins, seed, workers=workers)
            # a dead or non-S3 endpoint, no bucket, denied: one line naming it (S3AccessError), no traceback
            uploaded = upload_tree(Path(tmp), out, s3_client(endpoint_url), endpoint_url=endpoint_url,
                                   anonymous=not has_aws_credentials())
        typer.echo(f"uploaded {uploaded} objects to {out}")
    else:
        summary = generate_abid(local_path(out), bins, seed, workers=workers)
    typer.echo(json.dumps(summary.as_dict(), indent=2))


@synth_app.command("similarity")
def synth_similarity(
    benchmark: Annotated[str, typer.Argument(help="A benchmark (any spelling) or another dataset of its layout, e.g. disc, skimage-copydetect, patch-pairs (vsbench benchmarks lists them).")],
    out: Annotated[Path, typer.Option(help="Folder for the dataset (in the benchmark's native layout).")],
    seed: Annotated[int, typer.Option(help="Seed: same seed, byte-identical files.")] = 0,
) -> None:
    """A small dataset in a similarity benchmark's native layout (for tests and the demo)."""

    with user_errors():  # an unknown name, or a broken benchmark plugin: one line, no traceback
        summary = generate(benchmark, out, seed=seed)
    typer.echo(json.dumps(summary, indent=2, default=str))
