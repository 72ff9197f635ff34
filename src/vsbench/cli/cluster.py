"""``vsbench compile``, ``submit`` and ``schedule``: the pipelines on a Kubeflow cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vsbench.cli.common import (
    user_errors,
)


def compile_pipelines(
    out: Annotated[Path, typer.Option(help="Folder for the compiled pipeline YAML files.")],
    cluster_config: Annotated[Path | None, typer.Option(help="YAML of vsbench.platform.cluster.ClusterSettings "
                                                             "fields (default: the built-in settings).")] = None,
    suite: Annotated[Path | None, typer.Option(help="Nightly suite YAML (default: the one shipped).")] = None,
) -> None:
    """Compile every pipeline to YAML for upload to a Kubeflow cluster."""
    from vsbench.platform.cluster import ClusterSettings
    from vsbench.platform.compile import compile_all

    for path in compile_all(out, ClusterSettings.load(cluster_config), suite):
        typer.echo(str(path))


HostOpt = Annotated[str, typer.Option(help="Kubeflow Pipelines API URL (token from $KFP_TOKEN).")]
ArgOpt = Annotated[list[str] | None, typer.Option("--arg", "-a", metavar="NAME=VALUE",
                                                  help="A pipeline parameter (repeatable; default: the pipeline's "
                                                       "own values).")]


def _refuse_bad_arguments(pipeline: str, arguments: dict) -> None:
    """What this machine can tell of a run's ``arguments`` before the cluster runs it, one ``error:``
    line each, exit 2: ``submit`` and ``schedule`` alike (a recurring run refused at 02:00 every night
    helps nobody). A similarity run's model option values are checked against their declared choices
    before torch is imported (issue 57: a refusal in under 2 s)."""
    problems: list[str] = []
    if pipeline == "similarity":
        from vsbench.runspec.preflight import submitted_problems

        problems = submitted_problems(arguments)
    elif pipeline == "abid":
        from vsbench.abid.launch import pipeline_problems

        problems = pipeline_problems(arguments, lambda name: f"--arg {name}")
    for problem in problems:
        typer.echo(f"error: {problem}", err=True)
    if problems:
        raise typer.Exit(2)


def submit(
    host: HostOpt,
    pipeline: Annotated[str, typer.Option(help="abid, similarity or nightly.")] = "abid",
    arg: ArgOpt = None,
    experiment: Annotated[str, typer.Option(help="KFP experiment.")] = "vsbench",
    run_name: Annotated[str | None, typer.Option(help="Run name (default: pipeline and UTC time).")] = None,
    cluster_config: Annotated[Path | None, typer.Option(help="YAML of ClusterSettings fields (default: the "
                                                             "built-in settings).")] = None,
    namespace: Annotated[str | None, typer.Option(help="Kubeflow profile namespace (multi-user clusters; "
                                                        "default: none).")] = None,
) -> None:
    """Compile a pipeline with the cluster settings and start one run of it."""
    from vsbench.platform.cluster import ClusterSettings
    from vsbench.platform.kfp_client import parse_arguments
    from vsbench.platform.kfp_client import submit as submit_run

    with user_errors():
        arguments = parse_arguments(arg or [], pipeline=pipeline)
    _refuse_bad_arguments(pipeline, arguments)
    with user_errors():
        run_id = submit_run(host, pipeline, arguments=arguments,
                            experiment=experiment, run_name=run_name, cluster=ClusterSettings.load(cluster_config),
                            namespace=namespace)
    typer.echo(f"run {run_id}")


def schedule(
    host: HostOpt,
    cron: Annotated[str, typer.Option(help="KFP cron: six fields, seconds first, UTC (02:00 nightly: '0 0 2 * * *').")],
    pipeline: Annotated[str, typer.Option(help="abid, similarity or nightly.")] = "nightly",
    arg: ArgOpt = None,
    experiment: Annotated[str, typer.Option(help="KFP experiment.")] = "vsbench-nightly",
    job_name: Annotated[str, typer.Option(help="Name of the recurring run.")] = "vsbench-nightly",
    replace: Annotated[bool, typer.Option(help="Replace a recurring run of the same name.")] = False,
    cluster_config: Annotated[Path | None, typer.Option(help="YAML of ClusterSettings fields (default: the "
                                                             "built-in settings).")] = None,
    namespace: Annotated[str | None, typer.Option(help="Kubeflow profile namespace (multi-user clusters; "
                                                        "default: none).")] = None,
) -> None:
    """Upload a pipeline (a new version if it exists) and create its recurring run (its arguments checked
    first, as submit checks them)."""
    from vsbench.platform.cluster import ClusterSettings
    from vsbench.platform.kfp_client import parse_arguments
    from vsbench.platform.kfp_client import schedule as schedule_run

    with user_errors():
        arguments = parse_arguments(arg or [], pipeline=pipeline)
    _refuse_bad_arguments(pipeline, arguments)
    with user_errors():
        job_id = schedule_run(host, pipeline, cron=cron, arguments=arguments,
                              experiment=experiment, job_name=job_name, cluster=ClusterSettings.load(cluster_config),
                              namespace=namespace, replace=replace)
    typer.echo(f"recurring run {job_id} ({cron}, UTC)")
