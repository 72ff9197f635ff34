"""A similarity score's records as MLflow evaluation runs (:mod:`vsbench.tracking.evaluations`), from a
pipeline's score step or a command: the glue that needs the benchmark registry and the run spec,
which the tracking package sits below.

The embedder is read from the embed step's manifests under ``<out>/features`` (a pipeline's score
step is told only the model's name); the data's digest comes from the caller (a command digests its
root once for all its tags) or from the parent run's ``vsbench.data.digest`` tag: never by reading
the images again here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vsbench.benchmarks.registry import get as benchmark_spec
from vsbench.reporting.record_sheets import failure_files
from vsbench.retrieval.engine import FEATURES_DIR
from vsbench.runspec.run import BenchmarkRun
from vsbench.tracking.config import tracking_disabled
from vsbench.tracking.evaluations import Embedder, Evaluation, evaluations_of, log_evaluations
from vsbench.tracking.provenance import DATA_DIGEST_TAG, DATA_ROOT_TAG, code_tags

RANDOM_FEATURES = "random-features"


def evaluations_for(run: BenchmarkRun, model: str, records: Sequence[Mapping[str, Any]], out: Path, *,
                    model_options: Mapping[str, Any] | None = None, seed: int = 0,
                    data: Mapping[str, str] | None = None,
                    units: Sequence[Mapping[str, Any] | None] | None = None) -> list[Evaluation]:
    """One :class:`~vsbench.tracking.evaluations.Evaluation` per record of ``run`` scored with ``model``
    from the features under ``out``; ``data``: the provenance tags of the data (its digest and root);
    ``units``: per record, the unit file entry the score wrote (``metrics.json``'s ``units``; read from
    there when not given); each record's failure sheet (its ``failures`` entry) is logged with it."""
    embedder = Embedder.from_features(Path(out) / FEATURES_DIR, model, model_options, seed)
    data = data or {}
    run_params = {"codecs": run.codecs, "k": run.k, "score_norm": run.score_norm or "none",
                  "search_params": run.search_params, "global_cap": run.global_cap,
                  "benchmark_options": json.dumps(run.benchmark_options, sort_keys=True)}
    baseline = RANDOM_FEATURES if str(embedder.options.get("weights", "")) == "random" else ""
    entries = list(units) if units is not None else unit_entries(Path(out), records)
    spec = benchmark_spec(run.benchmark)
    return evaluations_of(run.benchmark, records, embedder, run_params=run_params,
                          data_digest=data.get(DATA_DIGEST_TAG, ""),
                          data_root=data.get(DATA_ROOT_TAG) or str(run.root),
                          declared_lower=spec.lower_is_better, baseline=baseline,
                          units=[None if entry is None else {**entry, "path": str(Path(out) / entry["file"])}
                                 for entry in entries],
                          failures=[failure_files(record, Path(out)) for record in records],
                          split_field=spec.split_field, headline_split=spec.headline_split)


def unit_entries(out: Path, records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any] | None]:
    """The unit file entries ``metrics.json`` holds for ``records`` (one per record), or none when it
    holds none or holds them for other records (a score written before issue 45)."""
    try:
        written = json.loads((Path(out) / "metrics.json").read_text())
    except (OSError, ValueError):
        return []
    entries = written.get("units") if isinstance(written, dict) else None
    if not isinstance(entries, list) or written.get("records") != list(records) or len(entries) != len(records):
        return []
    return entries


def log_step_evaluations(parent_run_id: str, run: BenchmarkRun, model: str, records: Sequence[Mapping[str, Any]],
                         out: Path, units: Sequence[Mapping[str, Any] | None] | None = None,
                         started_ms: int | None = None) -> list[str]:
    """The score step's records as evaluation runs under the pipeline's parent run, started when the
    score began (``started_ms``) and ended now; never raises (a tracking failure is said once on
    stderr, as every step's tracking says it). Returns the run ids."""
    if not parent_run_id or tracking_disabled():
        return []
    from vsbench.io.store import store_client
    from vsbench.tracking.runs import Tracker, _image_tags

    try:
        client = store_client()  # each call bounded by VSBENCH_TRACKING_TIMEOUT (issue 54)
        parent_tags = client.get_run(parent_run_id).data.tags
        data = {k: parent_tags[k] for k in (DATA_DIGEST_TAG, DATA_ROOT_TAG) if k in parent_tags}
        evaluations = evaluations_for(run, model, records, Path(out), data=data, units=units)
        return log_evaluations(client, parent_run_id, evaluations, tags={**code_tags(), **_image_tags(), **data},
                               started_ms=started_ms)
    except Exception as exc:  # noqa: BLE001 - tracking never fails a step
        Tracker(None, None)._go_offline(f"evaluation runs: {type(exc).__name__}: {exc}")
        return []
