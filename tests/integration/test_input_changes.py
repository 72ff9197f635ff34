"""A re-run after any *input* changed prints a fresh run's numbers (issue 37), as a property.

A finished `similarity run` is copied; one input it read is changed: an image (other bytes of the
same size with the mtime restored, truncated, two images swapped), the ground truth, the file a
model option names (a TorchScript file, a ``precomputed`` ``.npz``, other bytes with the mtime
restored), ``--root`` itself (another dataset with the same ids), or an option's value. The same
command then runs again into the same ``--out`` (and the same embedding cache), and its table must
equal, to the last digit printed, that of a fresh run on the changed inputs in a new folder with no
cache. On main before issue 37 the embed shards were kept on the names of their inputs, and the
re-run printed the old data's numbers with exit code 0.

Also here: two runs into one ``--out`` at once never print a mixed table (the second stops with one
line naming the folder and the holder), and a folder holding features of two models is refused by
the later steps.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image, ImageOps
from typer.testing import CliRunner

from tests.integration.tiny_model import scripted_model
from vsbench.benchmarks.disc.synth import generate_disc
from vsbench.cli.app import app
from vsbench.io import digests
from vsbench.io.features import concatenate, load_features, save_features

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:`torch.jit.*` is deprecated:FutureWarning")]


def _run(root: Path, out: Path, model: str, options: str, cache: Path | None) -> tuple[int, str, list[str]]:
    """(exit code, output, the table's rows) of one `similarity run`; ``cache`` None: no cache."""
    env = {"VSBENCH_EMBED_CACHE": str(cache) if cache else "off", "VSBENCH_MAX_FAILURE_RATE": "0.5"}
    result = CliRunner().invoke(app, [
        "similarity", "run", "--benchmark", "disc", "--root", str(root), "--out", str(out), "--model", model,
        "--model-options", options, "--codecs", "Flat", "--batch-size", "8", "--reference-shards", "2",
        "--no-track", "--device", "cpu"], env=env)
    rows = [line for line in result.output.splitlines() if line.startswith("Flat,")]
    return result.exit_code, result.output, rows


def same_size_jpeg(original: bytes, image: Image.Image) -> bytes:
    """``image`` as a JPEG of exactly ``len(original)`` bytes: encoded small enough, then padded with
    a comment segment after SOI (decoders skip it). Other bytes, same size: the case a name, size
    and mtime key cannot tell apart."""
    for quality in range(95, 5, -5):
        buffer = __import__("io").BytesIO()
        image.save(buffer, "JPEG", quality=quality)
        data = buffer.getvalue()
        pad = len(original) - len(data)
        if 4 <= pad:
            segments = b""
            while pad:
                chunk = min(pad, 65535 + 2)
                if pad - chunk in (1, 2, 3):  # leave at least 4 bytes for the last segment
                    chunk -= 4
                segments += b"\xff\xfe" + (chunk - 2).to_bytes(2, "big") + b"x" * (chunk - 4)
                pad -= chunk
            return data[:2] + segments + data[2:]
    raise AssertionError("could not encode the image small enough")


def _replace_keep_times(path: Path, data: bytes) -> None:
    """Write ``data`` over ``path`` and restore its access and modification times (``touch -r``)."""
    stat = path.stat()
    path.write_bytes(data)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two datasets with the same ids, two TorchScript models and a precomputed feature file of each."""
    base = tmp_path_factory.mktemp("inputs")
    generate_disc(base / "disc", references=12, queries=8, train=12, seed=3)
    generate_disc(base / "disc-other", references=12, queries=8, train=12, seed=11)
    scripted_model(base / "model.pt", 0)
    scripted_model(base / "model-other.pt", 1)
    for name, model in (("features.npz", "model.pt"), ("features-other.npz", "model-other.pt")):
        out = base / f"embedded-{name}"
        code, output, _ = _run(base / "disc", out, "torchscript", f'{{"path": "{base / model}"}}', None)
        assert code == 0, output[-2000:]
        save_features(base / name, concatenate([load_features(p) for p in sorted((out / "features").glob("*.npz"))]))
    return base


def _image(root: Path, folder: str, n: int = 0) -> Path:
    return sorted((root / folder).glob("*.jpg"))[n]


def _change(case: str, work: Path) -> tuple[Path, str, str]:
    """Change one input in ``work``; returns the (root, model, options) the re-run uses."""
    root, model_file, npz = work / "disc", work / "model.pt", work / "features.npz"
    torchscript = ("torchscript", f'{{"path": "{model_file}"}}')
    if case.startswith("precomputed"):
        torchscript = ("precomputed", f'{{"path": "{npz}"}}')
    if case in ("query-same-size", "reference-same-size", "training-same-size"):
        folder = {"query": "val_query", "reference": "val_ref", "training": "training"}[case.split("-")[0]]
        # one query or reference moves the table; the training set (score normalization) only as a whole
        for path in sorted((root / folder).glob("*.jpg"))[: None if folder == "training" else 1]:
            original = path.read_bytes()
            _replace_keep_times(path, same_size_jpeg(original, ImageOps.invert(Image.open(path).convert("RGB"))))
            assert path.stat().st_size == len(original)
    elif case == "reference-truncated":
        path = _image(root, "val_ref", 3)
        _replace_keep_times(path, path.read_bytes()[: path.stat().st_size // 2])
    elif case == "references-swapped":
        first, second = _image(root, "val_ref", 1), _image(root, "val_ref", 2)
        first.rename(first.with_suffix(".tmp"))
        second.rename(first)
        first.with_suffix(".tmp").rename(second)
    elif case == "ground-truth":
        truth = root / "val_groundtruth_matches.csv"
        lines = truth.read_text().splitlines()
        lines[2] = lines[2].split(",")[0] + ","  # a matched query becomes a distractor
        truth.write_text("\n".join(lines) + "\n")
    elif case == "model-file-same-name":
        _replace_keep_times(model_file, (work / "model-other.pt").read_bytes())
    elif case == "precomputed-npz-replaced":
        _replace_keep_times(npz, (work / "features-other.npz").read_bytes())
    elif case == "other-root-same-ids":
        root = work / "disc-other"
    elif case == "option-value":
        torchscript = ("torchscript", f'{{"path": "{model_file}", "input_size": 64, "resize_size": 64}}')
    else:
        raise AssertionError(case)
    return root, *torchscript


CASES = ("query-same-size", "reference-same-size", "training-same-size", "reference-truncated",
         "references-swapped", "ground-truth", "model-file-same-name", "precomputed-npz-replaced",
         "other-root-same-ids", "option-value")


@pytest.mark.parametrize("case", CASES)
def test_a_rerun_after_an_input_changed_prints_a_fresh_runs_table(world: Path, tmp_path: Path, case: str) -> None:
    work = tmp_path / "work"
    shutil.copytree(world, work, symlinks=True, ignore=shutil.ignore_patterns("embedded-*"))
    first_model = ("precomputed", f'{{"path": "{work / "features.npz"}"}}') if case.startswith("precomputed") else \
        ("torchscript", f'{{"path": "{work / "model.pt"}"}}')
    code, output, before = _run(work / "disc", work / "out", *first_model, work / "cache")
    assert code == 0 and len(before) == 2, output[-2000:]
    time.sleep(0.01)
    root, model, options = _change(case, work)
    code, output, rerun = _run(root, work / "out", model, options, work / "cache")
    fresh_code, fresh_output, fresh = _run(root, tmp_path / "fresh", model, options, None)
    assert (code, rerun) == (fresh_code, fresh), f"{case}: re-run {rerun} (exit {code}), fresh {fresh} " \
                                                 f"(exit {fresh_code})\n{output[-1500:]}\n{fresh_output[-1500:]}"
    if case != "ground-truth":  # the ground truth decides no descriptor: the same table is right
        assert fresh != before, f"{case}: the change must matter for the test to mean anything"
    assert "Traceback" not in output


def test_an_unchanged_rerun_keeps_every_shard_and_hashes_no_image(world: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The memo answers every image from its stat record: the re-run reads no image again."""
    options = f'{{"path": "{world / "model.pt"}"}}'
    code, output, before = _run(world / "disc", tmp_path / "out", "torchscript", options, None)
    assert code == 0, output[-2000:]
    manifests = list((tmp_path / "out" / "features").glob("*.shard-*.json"))
    assert len(manifests) == 3
    hashed: list[str] = []
    real = digests.file_sha256
    monkeypatch.setattr(digests, "file_sha256", lambda path: hashed.append(str(path)) or real(path))
    code, output, after = _run(world / "disc", tmp_path / "out", "torchscript", options, None)
    assert code == 0 and after == before
    assert output.count("already complete, kept") == len(manifests)
    assert not [path for path in hashed if path.endswith(".jpg")]


HOLD = """
import sys, time
from vsbench.io.locks import output_lock
with output_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_second_run_into_a_held_folder_stops_with_one_line_naming_the_holder(world: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        code, output, rows = _run(world / "disc", out, "torchscript", f'{{"path": "{world / "model.pt"}"}}', None)
        assert code == 2 and not rows
        errors = [line for line in output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and str(out) in errors[0] and f"pid {holder.pid}" in errors[0], output
        assert not (out / "features").exists()  # nothing was written beside the holder's work
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # A holder killed with -9 leaves its record but no lock: the next run takes it over.
    code, output, rows = _run(world / "disc", out, "torchscript", f'{{"path": "{world / "model.pt"}"}}', None)
    assert code == 0 and len(rows) == 2, output[-2000:]


def test_two_runs_at_once_into_one_folder_never_print_a_mixed_table(world: Path, tmp_path: Path) -> None:
    """Two `similarity run`s with different models started together into one --out: each either
    prints its own fresh table or stops in one line; never a table of both models' features."""
    out = tmp_path / "out"
    fresh = {}
    for name in ("model.pt", "model-other.pt"):
        code, output, rows = _run(world / "disc", tmp_path / f"fresh-{name}", "torchscript",
                                  f'{{"path": "{world / name}"}}', None)
        assert code == 0, output[-2000:]
        fresh[name] = rows
    env = dict(os.environ, VSBENCH_EMBED_CACHE="off")
    procs = {name: subprocess.Popen(
        [sys.executable, "-m", "vsbench", "similarity", "run", "--benchmark", "disc", "--root", str(world / "disc"),
         "--out", str(out), "--model", "torchscript", "--model-options", f'{{"path": "{world / name}"}}',
         "--codecs", "Flat", "--batch-size", "8", "--reference-shards", "2", "--no-track", "--device", "cpu"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) for name in fresh}
    outcomes = {name: (proc.wait(timeout=300), proc.stdout.read() if proc.stdout else "") for name, proc in procs.items()}
    succeeded = 0
    for name, (code, output) in outcomes.items():
        rows = [line for line in output.splitlines() if line.startswith("Flat,")]
        if code == 0:
            assert rows == fresh[name], output[-2000:]
            succeeded += 1
        else:
            assert code == 2 and not rows and "is being written by another vsbench run" in output, output[-2000:]
    assert succeeded >= 1


def _index_step_errors(root: Path, out: Path) -> list[str]:
    """The `error:` lines of `similarity index` over ``out``, which must refuse with exactly one."""
    result = CliRunner().invoke(app, ["similarity", "index", "--benchmark", "disc", "--root", str(root),
                                      "--out", str(out), "--codecs", "Flat", "--reference-shards", "2"])
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1, result.output[-2000:]
    return errors


def test_features_of_two_models_in_one_folder_are_refused_by_the_later_steps(world: Path, tmp_path: Path) -> None:
    """What two pipeline runs into one folder could leave: queries of one model, references of the
    other. The index, search and score steps refuse it in one line instead of scoring it."""
    runs = {}
    for name in ("model.pt", "model-other.pt"):
        runs[name] = tmp_path / name
        code, output, _ = _run(world / "disc", runs[name], "torchscript", f'{{"path": "{world / name}"}}', None)
        assert code == 0, output[-2000:]
    mixed = runs["model.pt"]
    for path in (runs["model-other.pt"] / "features").glob("reference.shard-*"):
        shutil.copy2(path, mixed / "features" / path.name)
    shutil.rmtree(mixed / "index")
    errors = _index_step_errors(world / "disc", mixed)
    assert "come from different embeddings" in errors[0] and "reference" in errors[0]
    assert not (mixed / "index" / "manifest.json").exists()


def test_shards_decoded_two_ways_are_refused_with_the_decode_to_use(world: Path, tmp_path: Path) -> None:
    """One run whose embed tasks landed on a GPU node and a CPU node with ``--decode auto``: the
    references' pixels came from the batched device decode, the queries' from Pillow
    (docs/fidelity.md). The index step refuses the mix in one line saying how to embed them one way."""
    out = tmp_path / "out"
    code, output, _ = _run(world / "disc", out, "torchscript", f'{{"path": "{world / "model.pt"}"}}', None)
    assert code == 0, output[-2000:]
    manifest_path = out / "features" / "reference.shard-0-of-1.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["key"]["decode"] = "device"  # what a shard embedded with the device decode records
    manifest_path.write_text(json.dumps(manifest))
    shutil.rmtree(out / "index")
    errors = _index_step_errors(world / "disc", out)
    assert "reference shard 0 was decoded on the device (batched) and " in errors[0] and " by Pillow, " in errors[0]
    assert "--decode cpu" in errors[0]


def test_a_step_naming_another_model_than_the_features_is_refused(world: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, output, _ = _run(world / "disc", out, "torchscript", f'{{"path": "{world / "model.pt"}"}}', None)
    assert code == 0, output[-2000:]
    result = CliRunner().invoke(app, ["similarity", "score", "--benchmark", "disc", "--root", str(world / "disc"),
                                      "--out", str(out), "--codecs", "Flat", "--model", "resnet50"])
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and "resnet50" in errors[0], result.output[-2000:]
