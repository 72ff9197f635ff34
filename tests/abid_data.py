"""Tiny generated ABID sets for training tests: generated, prepared and resized to 32 px."""

from __future__ import annotations

from pathlib import Path

from vsbench.abid.prepare import prepare_abid
from vsbench.abid.resize import resize_abid
from vsbench.abid.synth import generate_abid


def tiny_abid(root: Path, bins: int) -> tuple[Path, Path]:
    """(tasks folder, images folder) of ``bins`` generated bins (seed 3, split seed 1, 25% val)."""
    generate_abid(root / "raw", bins, seed=3, progress=False)
    prepare_abid(root / "raw", root / "tasks", seed=1, val_fraction=0.25, progress=False)
    resize_abid(root / "raw", root / "images", size=32, workers=1, progress=False)
    return root / "tasks", root / "images"


def images_missing_first_rows(tasks: Path, images: Path, folder: Path, rows: int = 3) -> Path:
    """``folder``: hard links to ``images`` without the images of the first ``rows`` counting training
    rows, so the training set is smaller than its rows (only the training workers can find that)."""
    import json
    import os

    from vsbench.abid.data import image_path

    folder.mkdir()
    listed = json.loads((tasks / "counting_train.json").read_text())
    gone = {image_path(folder, int(i)).name for i, _ in listed[:rows]}
    for path in images.glob("*.jpg"):
        if path.name not in gone:
            os.link(path, folder / path.name)
    return folder


def track_to_sqlite(monkeypatch, db: Path) -> str:
    """Steps tracked into a local SQLite store at ``db`` (artifacts beside it, no progress bar, the
    failure sheets' row cap at its default), as the ABID sheet tests log and read them back: the URI."""
    from vsbench.reporting.sheets import SHEET_ROWS_ENV

    uri = f"sqlite:///{db}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("VSBENCH_MLFLOW_ARTIFACT_LOCATION", str(db.parent / "artifacts"))
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    monkeypatch.delenv("VSBENCH_NO_TRACK", raising=False)
    monkeypatch.delenv(SHEET_ROWS_ENV, raising=False)
    return uri
