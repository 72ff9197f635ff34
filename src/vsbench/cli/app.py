"""The ``vsbench`` command: the root and its groups, one module each in this package."""

from __future__ import annotations

from typing import Annotated

import typer

from vsbench.cli import abid, benchmarks, cluster, demo, export, report, score, similarity, synth, track
from vsbench.cli.common import SafeGroup
from vsbench.cli.helpfmt import App

app = App(cls=SafeGroup, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
          help="Visual-similarity benchmarks as Kubeflow pipelines.")


@app.callback()
def root(debug: Annotated[bool, typer.Option(
        "--debug", help="Print the traceback of an unexpected error (otherwise one line and a file holding it).")] = False,
         ) -> None:
    """Visual-similarity benchmarks as Kubeflow pipelines."""


app.command("benchmarks")(benchmarks.list_benchmarks)
app.command("compile")(cluster.compile_pipelines)
app.command("submit")(cluster.submit)
app.command("schedule")(cluster.schedule)
app.command("compare")(report.compare)
app.command("demo")(demo.demo)
app.add_typer(synth.synth_app, name="synth")
app.add_typer(abid.abid_app, name="abid")
app.add_typer(similarity.similarity_app, name="similarity")
app.add_typer(score.score_app, name="score", help="Score result files exactly as the original benchmarks do.")
app.add_typer(track.track_app, name="track")
app.add_typer(export.export_app, name="export")


def main() -> None:
    app()
