"""The picture of an ABID failure sheet in docs/failures.md, made from a real score (issue 57: the docs
showed none). A generated ABID (the demo's generator, photos resized as the pipeline does) is
prepared into its task files, answered with known wrong answers, and scored by the ``abid-score``
step under a pipeline run whose training steps recorded their architectures, into an MLflow store;
the counting sheet's PNG is read back from that step's run, as MLflow's Artifacts tab shows it.
Every label on it is checked against the data it names: each bin id against its metadata file
(its true count) and its photo, the title against the runs (model, task set, run id).
``VSBENCH_UPDATE_SCREENSHOT=1`` (``make screenshots``) copies it to docs/img/abid-failures.png.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.abid_data import track_to_sqlite

PICTURE = Path(__file__).resolve().parents[2] / "docs" / "img" / "abid-failures.png"
MLFLOW_SHOWN_WIDTH = 880  # about what MLflow's Artifacts tab gives a PNG, unscaled (docs/failures.md)


def test_abid_failure_pages_label_each_bin_by_its_metadata_and_title_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    from vsbench.abid.prepare import prepare_abid
    from vsbench.abid.resize import resize_abid
    from vsbench.abid.synth import generate_abid
    from vsbench.steps.abid import abid_score_step
    from vsbench.tracking.runs import child_run, open_parent_run

    uri = track_to_sqlite(monkeypatch, tmp_path / "mlflow.db")

    root = tmp_path / "abid"
    generate_abid(root / "raw", 60, seed=0, progress=False)
    resize_abid(root / "raw", root / "bin-images-resize", size=128, workers=1, progress=False)
    prepare_abid(root / "raw", root / "tasks", seed=0, val_fraction=0.5, progress=False)
    counting = json.loads((root / "tasks" / "counting_val.json").read_text())
    verification = json.loads((root / "tasks" / "obj_verification_val.json").read_text())
    quantity = json.loads((root / "tasks" / "obj_num_verification_val.json").read_text())
    rng = np.random.default_rng(0)
    # a network that is off by 1 to 3 on every third bin, and says the opposite on every fourth question
    said_count = [count + (int(rng.integers(1, 4)) if i % 3 == 0 else 0) for i, (_, count) in enumerate(counting)]
    (root / "counting.txt").write_text("".join(f"{n}\n" for n in said_count))
    for name, questions in (("verification.txt", verification), ("quantity.txt", quantity)):
        (root / name).write_text("".join(f"{1 - q[2] if i % 4 == 0 else q[2]}\n" for i, q in enumerate(questions)))

    parent = open_parent_run("abid-demo", "kfp-abid-demo", "vsbench-abid", {})
    with child_run(parent, "abid-train-counting", {"architecture": "resnet34"}):
        pass
    with child_run(parent, "abid-train-siamese", {"architecture": "siamese-resnet34"}):
        pass
    abid_score_step(str(root / "tasks"), str(root / "counting.txt"), str(root / "verification.txt"),
                    str(root / "quantity.txt"), units_dir=str(tmp_path / "score"), parent_run_id=parent,
                    resamples=0)
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_run(parent).info.experiment_id])
    [step] = [run for run in runs if run.info.run_name == "abid-score"]
    folder = Path(client.download_artifacts(step.info.run_id, "failures", str(tmp_path / "down")))
    page = (folder / "abid_counting_units.html").read_text()

    # the title: the benchmark, the network its training run recorded, the task set, the run
    variant = step.data.params["task_set"]
    [heading] = re.findall(r"<h1>(.*?)</h1>", page)
    assert heading == f"abid · resnet34 counting network · {variant}: the bins counted wrong", heading
    assert f'<p class="run">MLflow run {step.info.run_id} (abid-score)</p>' in page
    # each row's bin: its metadata holds the true count shown, its photo is the one shown
    rows = re.findall(r"<h2>(.*?)</h2>", page)
    wrong = sum(said != count for said, (_, count) in zip(said_count, counting))
    assert len(rows) == min(wrong, 24) >= 5, rows
    photos = re.findall(r'src="data:image/jpeg;base64,[^"]+"', page)
    assert len(photos) == len(rows)
    for row in rows:
        stem, true, said = re.fullmatch(r"bin (\d{5}): true count (\d+), predicted (\d+) \(off by \d+\)", row).groups()
        # ABID names a bin's files both ways (00523.json, 523.json): every file of that id holds the count
        files = [path for name in (f"{stem}.json", f"{int(stem)}.json")
                 for path in [root / "raw" / "metadata" / name] if path.is_file()]
        assert files, row
        for path in files:
            assert json.loads(path.read_text())["EXPECTED_QUANTITY"] == int(true), (row, path)
        assert (root / "bin-images-resize" / f"{stem}.jpg").is_file(), row
        assert [int(stem) - 1, int(true)] in counting  # the task file's 0-based index of that bin
    # the PNG MLflow shows inline: drawn unscaled in its Artifacts tab, not blank
    with Image.open(folder / "abid_counting_units.png") as picture:
        picture.load()
        assert picture.width <= MLFLOW_SHOWN_WIDTH and picture.height > 200, picture.size
        colors = picture.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 200, "the sheet is nearly uniform: no photo was drawn"
    if os.environ.get("VSBENCH_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(folder / "abid_counting_units.png", PICTURE)
    print(f"sheet: {folder}")
