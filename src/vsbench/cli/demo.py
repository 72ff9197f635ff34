"""``vsbench demo``: the ABID pipeline end to end on generated data from a local S3 endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vsbench.cli.common import (
    ImageOpt,
    RunnerOpt,
    TrackOpt,
    VerboseOpt,
    check_runner,
    user_errors,
)
from vsbench.platform.demo import DEFAULT_BINS, run_demo


def demo(
    out: Annotated[Path, typer.Option(help="Folder for everything the demo writes.")] = Path("demo-output"),
    bins: Annotated[int, typer.Option(min=20, help="Generated bins (scale the demo up with this).")] = DEFAULT_BINS,
    seed: Annotated[int, typer.Option(help="Seed of the generated bins, the split and the training.")] = 0,
    profile: Annotated[str, typer.Option(help="Training profile: 'demo' (CPU minutes) or 'full' (the challenge's).")] = "demo",
    runner: RunnerOpt = "subprocess",
    image: ImageOpt = None,
    track: TrackOpt = True,
    verbose: VerboseOpt = False,
) -> None:
    """The ABID pipeline end to end on generated data served from a local S3 endpoint.

    Generates BINS bins of photos and metadata, serves them from moto's S3 server on 127.0.0.1 and
    runs the whole pipeline on them with kfp.local: download, prepare, resize, the two trainings,
    quantity, score. Prints one line per step, then the three ABID scores with their 95% intervals
    and the command that opens MLflow on the run. 4 to 8 minutes on 2 CPU cores at the default
    2000 bins (the two trainings are most of it); nothing is downloaded.

    Writes everything under OUT: the generated bins (synth/), what the pipeline downloaded and made
    (data/), kfp.local's run folders and executor log (kfp/), the S3 server's log (moto.log) and an
    MLflow store of its own (mlflow.db, mlartifacts/). A second run into the same OUT reuses what
    is unchanged."""

    check_runner(runner)
    with user_errors():  # another demo holding OUT: one line naming it
        code = run_demo(out.resolve(), bins=bins, seed=seed, profile=profile, runner=runner, image=image,
                        track=track, verbose=verbose)
    raise typer.Exit(code)
