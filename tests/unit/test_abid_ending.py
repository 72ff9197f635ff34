"""How an ABID run on this machine ends (``vsbench demo``, ``abid run-local``): the store it names
never shows a password, even in a URI that cannot be parsed apart (issue 49, found by the bundles'
mutation run: ``redact_uri`` answers "" for those, and the ending printed the raw URI instead)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vsbench.platform.local_run import LocalRunReport, abid_ending


def _report(tmp_path: Path) -> LocalRunReport:
    return LocalRunReport(succeeded=True, seconds=1.0, run_dir=None, data_root=tmp_path, parent_run_id="p")


@pytest.mark.parametrize("uri", ["http://alice:s3cret@mlflow.example:99999/", "http://alice:s3cret@[::1/"])
def test_a_store_uri_with_a_password_that_cannot_be_parsed_is_not_printed(tmp_path: Path, uri: str) -> None:
    ending = abid_ending(_report(tmp_path), uri, "demo")
    assert "s3cret" not in ending and "alice" not in ending
    assert ending.splitlines()[-1] == ("  MLflow store:         MLFLOW_TRACKING_URI (experiment demo; not shown: it "
                                       "holds a password in a form that cannot be taken out)")


def test_a_store_uri_with_a_password_is_printed_without_it(tmp_path: Path) -> None:
    ending = abid_ending(_report(tmp_path), "https://alice:s3cret@mlflow.example:8443/", "demo")
    assert "s3cret" not in ending and "  MLflow store:         https://mlflow.example:8443/ (experiment demo)" in ending
    assert ending.splitlines()[-1] == "Open the MLflow UI at: https://mlflow.example:8443/"
