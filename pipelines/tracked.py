"""The frame every pipeline runs in: an MLflow parent run opened first and closed by an exit handler,
and the run's lease on the folders it writes, claimed by the same opening step and released by the
same exit handler (one run, one holder on a cluster, where no process lives for the whole run)."""

from collections.abc import Iterator
from contextlib import contextmanager

from kfp import dsl
from vsbench.components.abid import close_tracking, open_tracking

from vsbench.platform.cluster import ClusterSettings, apply


@contextmanager
def tracked_run(experiment, pipeline_name: str, params_json, cluster: ClusterSettings | None,
                folders="") -> Iterator:
    """``with tracked_run(...) as opened:`` pipeline steps go inside; ``opened.output`` is the parent
    run id. The exit handler marks the parent FINISHED or FAILED whatever happens inside. ``folders``
    (one folder, a pipeline parameter, or a JSON list) are leased to the run from the opening step
    to the exit handler; each step writing them checks the lease (``vsbench.io.locks``)."""
    closing = close_tracking(experiment=experiment, kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, folders=folders)
    closing.set_caching_options(False)
    apply(closing, "light", cluster)
    with dsl.ExitHandler(closing):
        opened = open_tracking(experiment=experiment, kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                               pipeline=pipeline_name, params_json=params_json, folders=folders)
        opened.set_caching_options(False)
        apply(opened, "light", cluster)
        yield opened
