"""MLflow: a parent run per pipeline run and a child run per step (runs), command runs kept while the
store is down (command, bundles), the tags every run carries (provenance), registered models (models),
metric names (names) and the switches (config)."""
