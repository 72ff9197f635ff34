"""``vsbench benchmarks``: every registered benchmark, built-in or from a plugin, with its spellings."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from vsbench.benchmarks.registry import specs
from vsbench.cli.common import user_errors


def list_benchmarks(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per benchmark instead of a table.")] = False,
) -> None:
    """Every registered benchmark: its name, the other spellings commands accept, tasks and metrics."""

    with user_errors():
        found = specs()
    if as_json:
        for spec in found.values():
            typer.echo(json.dumps({"name": spec.name, "aliases": list(spec.aliases), "title": spec.title,
                                   "tasks": list(spec.tasks), "metrics": list(spec.metrics),
                                   "lower_is_better": list(spec.lower_is_better),
                                   "score_command": spec.score_command, "datasets": sorted(spec.datasets),
                                   "generator": bool(spec.generator), "source": spec.source}))
        return
    for spec in found.values():
        typer.echo(f"{spec.name}" + (f"  (also: {', '.join(spec.aliases)})" if spec.aliases else "")
                   + ("" if spec.source == "vsbench" else f"  [plugin: {spec.source}]"))
        typer.echo(f"  {spec.title}")
        if spec.tasks:
            typer.echo(f"  tasks: {'; '.join(spec.tasks)}")
        if spec.metrics:
            typer.echo(f"  metrics: {', '.join(spec.metrics)}")
        extras = [f"vsbench score {spec.score_command}"] if spec.score_command else []
        if spec.generator or spec.datasets:
            extras.append("vsbench synth similarity " + " | ".join(([spec.name] if spec.generator else [])
                                                                   + sorted(spec.datasets)))
        if extras:
            typer.echo(f"  commands: {'; '.join(extras)}")
