"""MLflow: a parent run per pipeline run and a child run per step (runs), command runs kept while the
store is down (command, bundles), the tags every run carries (provenance), registered models (models),
metric names (names) and the switches (config)."""

import os as _os

# MLflow prints "View run <name> at: ..." and "View experiment at: ..." when a run ends against a
# server; those open its GenAI view. vsbench prints its own links (tracking.views) instead. Set for
# this process and the processes it starts (pipeline steps import this package too); a user's own
# setting wins.
_os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
