"""Whether runs are tracked at all, and where the environment says to put them: the switches every
other tracking module reads (kept apart so that each can read them without importing the others)."""

from __future__ import annotations

import os

NO_TRACK_ENV = "VSBENCH_NO_TRACK"
ARTIFACT_LOCATION_ENV = "VSBENCH_MLFLOW_ARTIFACT_LOCATION"
DEFAULT_EXPERIMENT = "vsbench"
DEFAULT_STORE_ENV = "VSBENCH_DEFAULT_STORE"  # "off": no MLFLOW_TRACKING_URI means no tracking (tests, CI)


def tracking_disabled() -> bool:
    """``--no-track`` (or ``VSBENCH_NO_TRACK=1``): nothing goes to MLflow, pipeline steps included.
    Also off when no store is named and ``VSBENCH_DEFAULT_STORE=off`` forbids the local default."""
    if os.environ.get(NO_TRACK_ENV, "").strip().lower() in ("1", "true", "yes"):
        return True
    return (not os.environ.get("MLFLOW_TRACKING_URI", "").strip()
            and os.environ.get(DEFAULT_STORE_ENV, "").strip().lower() == "off")


def disable_tracking() -> None:
    """Turn tracking off for this process and the pipeline steps it starts (they inherit the variable)."""
    os.environ[NO_TRACK_ENV] = "1"
