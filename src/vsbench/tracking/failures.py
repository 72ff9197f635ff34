"""Failure sheets on MLflow runs (issue 47): found by listing the run's ``failures/`` folder.

An evaluation's score step writes its failure sheet as ``<stem>.png`` and ``<stem>.html``
(:mod:`vsbench.reporting.sheets`) and its MLflow run holds both under the artifact folder
:data:`FAILURES_DIR`. Readers (the HTML report) link to them in MLflow's artifact view, where the
PNG is drawn and the HTML page rendered. They find them by listing that one folder, not by a tag:
whatever logged the files, and a run logged before a tag existed, read the same way, at one request
per run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

FAILURES_DIR = "failures"


@dataclass(frozen=True)
class SheetFiles:
    """One failure sheet on a run: its artifact paths (``failures/<stem>.html``, ``.png``; "" when that
    file is not there)."""

    run_id: str
    stem: str
    html: str = ""
    png: str = ""

    @property
    def page(self) -> str:
        """The file a person opens first: the HTML page (every row), else the PNG."""
        return self.html or self.png


def sheets_on_run(client: Any, run_id: str) -> list[SheetFiles]:
    """The failure sheets logged on ``run_id``, by stem: its ``failures/*.html`` and ``*.png`` paired by
    file stem (one ``list_artifacts`` request; an empty list when the folder is absent). MLflow's
    errors propagate: the caller decides whether a missing sheet is worth failing for."""
    found: dict[str, dict[str, str]] = {}
    for info in client.list_artifacts(run_id, FAILURES_DIR):
        if info.is_dir:
            continue
        name = PurePosixPath(info.path)
        if name.suffix in (".html", ".png"):
            found.setdefault(name.stem, {})[name.suffix[1:]] = info.path
    return [SheetFiles(run_id, stem, files.get("html", ""), files.get("png", "")) for stem, files in sorted(found.items())]
