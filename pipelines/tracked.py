"""The frame every pipeline runs in: an MLflow parent run opened first and closed by an exit handler."""

from collections.abc import Iterator
from contextlib import contextmanager

from kfp import dsl
from vsbench.components.abid import close_tracking, open_tracking

from vsbench.platform.cluster import ClusterSettings, apply


@contextmanager
def tracked_run(experiment, pipeline_name: str, params_json, cluster: ClusterSettings | None) -> Iterator:
    """``with tracked_run(...) as opened:`` pipeline steps go inside; ``opened.output`` is the parent
    run id. The exit handler marks the parent FINISHED or FAILED whatever happens inside."""
    closing = close_tracking(experiment=experiment, kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER)
    closing.set_caching_options(False)
    apply(closing, "light", cluster)
    with dsl.ExitHandler(closing):
        opened = open_tracking(experiment=experiment, kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                               pipeline=pipeline_name, params_json=params_json)
        opened.set_caching_options(False)
        apply(opened, "light", cluster)
        yield opened
