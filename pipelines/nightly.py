"""The nightly pipeline: every (benchmark, model) of the suite, then the regression check against the
previous night and the comparison report, all under one MLflow parent run.

The suite (``pipelines/suites/nightly.yaml`` or ``vsbench compile --suite FILE``) is compiled into
the pipeline: KFP graphs are static, so each entry becomes its own embed (fanned out over shards),
index, search (fanned out over query x reference shards) and score tasks. The report runs even when the regression check fails, so a bad night still
shows what dropped.
"""

import json

from kfp import dsl
from vsbench.components.nightly import comparison_report, regression_check
from vsbench.components.similarity import embed_shard, shard_list
from vsbench.pipelines.form import describe, params_json_text
from vsbench.pipelines.similarity import search_and_score
from vsbench.pipelines.tracked import tracked_run

from vsbench.platform.cluster import RETRIES, ClusterSettings, apply
from vsbench.runspec.suite import Suite

PIPELINE_NAME = "vsbench-nightly"
# The nightly's default check of its inputs (the verify_inputs parameter): stat. A full check reads
# every image of the suite again (hundreds of GB for the DISC entries), many times an unchanged
# night's run: bench/README.md (`input_keys.py`) has the figures and the rule; docs/pipelines.md
# schedules a weekly full night beside it.
NIGHTLY_VERIFY_INPUTS = "stat"


def build_nightly_pipeline(cluster: ClusterSettings | None = None, suite: Suite | None = None):
    suite = suite or Suite.load()

    def nightly_pipeline(
        experiment: str = suite.experiment,
        device: str = "auto",
        batch_size: int = 64,
        report_last: int = 30,
        verify_inputs: str = NIGHTLY_VERIFY_INPUTS,
        params_json: str = json.dumps({"suite": [entry.name for entry in suite.entries]}),
    ):
        # Every suite entry is compiled in; the form's texts: pipelines/form.py.
        outs = json.dumps([f"{suite.out_root}/{entry.name}" for entry in suite.entries])  # leased to the run
        with tracked_run(experiment, PIPELINE_NAME, params_json, cluster, folders=outs) as opened:
            parent = opened.output
            light = []
            scored_tasks = []
            for entry in suite.entries:
                benchmark_options, model_options = entry.options_json()
                out = f"{suite.out_root}/{entry.name}"
                shards = shard_list(num_shards=entry.num_shards).set_display_name(f"shards {entry.name}")
                light.append(shards)
                with dsl.ParallelFor(shards.output) as shard:
                    embedded = embed_shard(benchmark=entry.benchmark, root=entry.root, out=out, model=entry.model,
                                           shard=shard, num_shards=entry.num_shards,
                                           benchmark_options=benchmark_options, model_options=model_options,
                                           batch_size=batch_size, device=device, experiment=experiment,
                                           kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, seed=entry.seed,
                                           verify_inputs=verify_inputs).after(opened)
                    embedded.set_display_name(f"embed {entry.name}").set_caching_options(False)
                    apply(embedded, "gpu", cluster, RETRIES["embed"])
                scored = search_and_score(
                    benchmark=entry.benchmark, root=entry.root, out=out, model=entry.model, codecs=entry.codecs,
                    k=entry.k, global_cap=entry.global_cap, score_norm=entry.score_norm,
                    search_params=entry.search_params,
                    search_shards=entry.search_shards, reference_shards=entry.reference_shards,
                    benchmark_options=benchmark_options, experiment=experiment, parent_run_id=parent, after=embedded,
                    cluster=cluster, label=entry.name, verify_inputs=verify_inputs, model_options=model_options,
                    seed=entry.seed)
                scored_tasks.append(scored)
            check = regression_check(experiment=experiment, parent_run_id=parent, threshold=suite.regression.threshold,
                                     relative=suite.regression.relative,
                                     metrics_json=json.dumps(suite.regression.metrics or []),
                                     spread_json=json.dumps(suite.regression.spread),
                                     pipeline=PIPELINE_NAME).after(*scored_tasks)
            report = comparison_report(experiment=experiment, parent_run_id=parent, last=report_last).after(check)
            report.ignore_upstream_failure()
            for task in (*light, check, report):
                task.set_caching_options(False)
                apply(task, "light", cluster)

    description = (f"Nightly suite of {len(suite.entries)} (benchmark, model) entries compiled in "
                   f"({', '.join(entry.name for entry in suite.entries)}), then the regression check against the "
                   "previous night and the comparison report, under one MLflow parent run.")
    describe(description, nightly_pipeline, {
        "params_json": params_json_text(json.dumps({"suite": [entry.name for entry in suite.entries[:2]]})),
        "experiment": f"MLflow experiment the nightly runs are logged and compared in. Example: {suite.experiment}.",
    })
    return dsl.pipeline(name=PIPELINE_NAME, description=description[:1000])(nightly_pipeline)
