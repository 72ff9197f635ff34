"""Integrity of everything a re-run reuses, as a property: damage any one reused file of a finished
`similarity run` (flip a byte, truncate it, replace it with random bytes, or swap it with a file
of the same kind) and run the same command again; the run must either report the very numbers of
the undamaged run or stop with a one-line error that names the damaged file. A silently different
number is the one outcome that fails.

Reused files: the embedding cache (key.json and chunks), the embed step's shards and their
manifests (read in place by the later steps: there is no merged copy), the index's trained codec
(train.json, trained.faiss), its shards and their records, training index and index.json, and the
search results. The run is small (a tiny TorchScript model, 32 images) so that each example takes about a
second; hypothesis draws the file and the damage, derandomized so that CI sees the same cases.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.integration.tiny_model import scripted_model
from vsbench.benchmarks.disc.synth import generate_disc
from vsbench.cli.app import app

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:`torch.jit.*` is deprecated:FutureWarning")]

OUTPUTS = ("metrics.json", "disc_metrics.csv", ".png", ".parquet", ".html")  # what a run writes for the user (the
# per-query units under out/units/ and the failure sheets under out/failures/ included: written by every
# score, never read back), never reads back
LOCKS = ".vsbench-lock"  # one-writer locks: their content only names the holder in a message
DAMAGES = ("flip", "truncate", "random", "swap", "empty", "foreign")
STAGES = ("cache", "features", "index", "search")  # each made from the one before


def _run(root: Path, out: Path, model: Path) -> tuple[int, str, list[str]]:
    """(exit code, output, the table's rows)."""
    result = CliRunner().invoke(app, [
        "similarity", "run", "--benchmark", "disc", "--root", str(root), "--out", str(out),
        "--model", "torchscript", "--model-options", f'{{"path": "{model}"}}', "--codecs", "Flat",
        "--batch-size", "8", "--reference-shards", "2", "--search-shards", "2", "--no-track", "--device", "cpu"])
    rows = [line for line in result.output.splitlines() if line.startswith("Flat,")]
    return result.exit_code, result.output, rows


def _finish(work: Path, model: Path) -> list[str]:
    """Run once in ``work`` (its own out/ and cache/); the table's rows."""
    before = os.environ.get("VSBENCH_EMBED_CACHE")
    os.environ["VSBENCH_EMBED_CACHE"] = str(work / "cache")
    try:
        code, output, rows = _run(work.parent / "disc", work / "out", model)
    finally:
        if before is None:
            os.environ.pop("VSBENCH_EMBED_CACHE", None)
        else:
            os.environ["VSBENCH_EMBED_CACHE"] = before
    assert code == 0 and len(rows) == 2, output[-3000:]
    return rows


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str], list[str]]:
    """A finished run: (its folder holding out/ and cache/, the model, the table, the reused files).
    Beside it, in ``<parent>/other``, the same run with another model: the donor of files that are
    well formed and wrong."""
    parent = tmp_path_factory.mktemp("finished")
    generate_disc(parent / "disc", references=12, queries=8, train=12, seed=3)
    work, other = parent / "run", parent / "other"
    work.mkdir()
    other.mkdir()
    model = scripted_model(parent / "tiny.torchscript.pt", 0)
    rows = _finish(work, model)
    assert _finish(other, scripted_model(parent / "other.torchscript.pt", 1)) != rows
    reused = sorted(str(path.relative_to(work)) for folder in ("out", "cache") for path in (work / folder).rglob("*")
                    if path.is_file() and not path.name.endswith(OUTPUTS) and not path.name.startswith(LOCKS))
    assert any(name.endswith(".faiss") for name in reused) and any("chunk-" in name for name in reused)
    return work, model, rows, reused


def _kind(relative: str) -> str:
    """A reused file's kind: its path with shard numbers, digests and chunk names taken out."""
    parts = Path(relative).parts
    if parts[0] == "cache":
        return "cache/" + re.sub(r"chunk-\w+", "chunk-*", parts[-1])
    return re.sub(r"\d+-of-\d+", "N-of-M", "/".join(parts[1:]))


def _donor(work: Path, relative: str) -> Path:
    """The same kind of file from the other run (a cache folder there has another name: its key)."""
    other = work.parent / "other"
    if relative.startswith("cache"):
        name = Path(relative).name
        pattern = "chunk-*.npz" if name.startswith("chunk-") else name
        return sorted((other / "cache").rglob(pattern))[0]
    return other / relative


def _damage(path: Path, damage: str, draw: np.random.Generator, reused: list[str], work: Path) -> str:
    """Damage ``path`` in place; returns what was done (for the failure message)."""
    data = path.read_bytes()
    if damage == "flip" and data:
        at = int(draw.integers(0, len(data)))
        path.write_bytes(data[:at] + bytes([data[at] ^ (1 << int(draw.integers(0, 8)))]) + data[at + 1:])
        return f"flipped a bit of byte {at} of {len(data)}"
    if damage == "invert" and data:
        at = len(data) // 2
        path.write_bytes(data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:])
        return f"inverted byte {at} of {len(data)}"
    if damage == "truncate" and data:
        keep = int(draw.integers(0, len(data)))
        path.write_bytes(data[:keep])
        return f"truncated to {keep} of {len(data)} bytes"
    if damage == "random":
        path.write_bytes(draw.bytes(max(len(data), 1)))
        return "replaced by random bytes"
    if damage == "swap":
        relative = str(path.relative_to(work))
        kind = [p for p in reused if p != relative and Path(p).suffix == path.suffix and (work / p).read_bytes() != data]
        if kind:
            other = work / kind[int(draw.integers(0, len(kind)))]
            swapped = other.read_bytes()
            other.write_bytes(data)
            path.write_bytes(swapped)
            return f"swapped with {other.relative_to(work)}"
    if damage == "foreign":
        path.write_bytes(_donor(work, str(path.relative_to(work))).read_bytes())
        return "replaced by the same kind of file from a run with another model"
    path.write_bytes(b"")
    return "emptied"


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(min_value=0, max_value=10_000), damage=st.sampled_from(DAMAGES),
       seed=st.integers(min_value=0, max_value=2**32 - 1), downstream=st.booleans())
def test_damaging_any_reused_file_gives_the_same_numbers_or_one_line_naming_it(
        finished, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, which: int, damage: str,
        seed: int, downstream: bool) -> None:
    """With ``downstream``, what later steps made from the damaged file is deleted too, so that the
    re-run has to read it (otherwise a kept search result can hide a damaged index shard)."""
    work, model, rows, reused = finished
    _damage_and_rerun(work, model, rows, reused, reused[which % len(reused)], damage, seed, downstream,
                      tmp_path_factory.mktemp("damaged"), monkeypatch)


def _damage_and_rerun(work: Path, model: Path, rows: list[str], reused: list[str], target: str, damage: str, seed: int,
                      downstream: bool, copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (copy / "run").mkdir()
    for folder in ("out", "cache"):
        shutil.copytree(work / folder, copy / "run" / folder)
    (copy / "other").symlink_to(work.parent / "other")
    run = copy / "run"
    done = _damage(run / target, damage, np.random.default_rng(seed), reused, run)
    if downstream:
        stage = STAGES.index(Path(target).parts[1] if target.startswith("out") else "cache")
        for later in STAGES[stage + 1:]:
            shutil.rmtree(run / "out" / later, ignore_errors=True)
    monkeypatch.setenv("VSBENCH_EMBED_CACHE", str(run / "cache"))
    code, output, again = _run(work.parent / "disc", run / "out", model)
    if code == 0:
        assert again == rows, f"{target} {done}: a different table without a word\n{output[-3000:]}"
        return
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert "Traceback" not in output, f"{target} {done}: a traceback\n{output[-3000:]}"
    assert len(errors) == 1 and Path(target).name in errors[0], f"{target} {done}: not one line naming it\n{output[-3000:]}"


@pytest.mark.parametrize("damage", ("invert", *DAMAGES[1:]))
def test_every_kind_of_reused_file_damaged_every_way(finished, tmp_path_factory: pytest.TempPathFactory,
                                                     monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    """Each kind of reused file (one of each), each damage, with what was made from it deleted so that
    the re-run has to read it. Instead of a random bit, a whole byte in the middle is inverted."""
    work, model, rows, reused = finished
    first = {}
    for relative in reused:
        first.setdefault(_kind(relative), relative)
    failures = []
    for _, relative in sorted(first.items()):
        with monkeypatch.context() as patch:
            try:
                _damage_and_rerun(work, model, rows, reused, relative, damage, 0, True,
                                  tmp_path_factory.mktemp("kind"), patch)
            except AssertionError as failure:
                failures.append(str(failure).splitlines()[0])
    assert not failures, "\n".join(failures)


def test_the_property_sees_every_kind_of_reused_file(finished) -> None:
    """The files the property draws from: if a step starts reusing a new kind of file, it is drawn too."""
    _, _, _, reused = finished
    kinds = {Path(name).parts[1] if name.startswith("out") else "cache" for name in reused}
    assert kinds == {"features", "index", "search", "cache"}


# --- issue 54: a writer of the shared cache rewrites its rows -------------------------------------

def _poisoned(run: Path, disc: Path) -> dict[Path, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each cached chunk of ``run`` with every copy query's row replaced by its reference's row (the
    rewrite that gave uap 1.000): {chunk: (digests, poisoned rows, the chunk's content_hmac)}."""
    import pandas as pd

    from vsbench.io.storage import file_sha256

    truth = pd.read_csv(disc / "val_groundtruth_matches.csv", dtype=str).dropna()
    copies = {file_sha256(disc / "val_query" / f"{q}.jpg"): file_sha256(disc / "val_ref" / f"{r}.jpg")
              for q, r in zip(truth.query_id, truth.reference_id)}
    chunks = {}
    for chunk in sorted((run / "cache").glob("*/*/chunk-*.npz")):
        with np.load(chunk) as data:
            chunks[chunk] = (data["digests"], data["features"].copy(), data["content_hmac"])
    row_of = {d: rows[i] for names, rows, _ in chunks.values() for i, d in enumerate(names.tolist())}
    changed = 0
    for names, rows, _ in chunks.values():
        for i, digest in enumerate(names.tolist()):
            if digest in copies and copies[digest] in row_of:
                rows[i] = row_of[copies[digest]]
                changed += 1
    assert changed >= 3, "the rewrite must change some copy queries' rows"
    return chunks


@pytest.mark.parametrize("writer", ["another user's secret", "content_sha256 recomputed alone"])
def test_a_cache_rewritten_by_a_writer_gives_the_fresh_numbers_not_uap_1(
        finished, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, writer: str) -> None:
    """Issue 54: each copy query's cached row replaced by its reference's, through
    ``write_chunk`` (which recomputes content_sha256), then the same run again with nothing else
    kept: the cache once served the rewrite (uap 1.000, exit 0). Written by someone without the
    run's secret, or with the digest recomputed and the old signature kept, every rewritten chunk is
    named in one line, set aside and embedded again: the table is the fresh run's."""
    from vsbench.io.cache_secret import CacheSecret
    from vsbench.models import cache as cache_module

    work, model, rows, _ = finished
    run = tmp_path / "run"
    shutil.copytree(work / "cache", run / "cache")
    chunks = _poisoned(run, work.parent / "disc")
    attacker = CacheSecret.from_secret(b"a colleague's own secret, not the run's one" * 2, "attacker")
    rewritten = []  # the chunks that must be refused: all those the attacker signed, only the changed ones
    for chunk, (names, poisoned, signature) in chunks.items():  # when the run's signature is kept
        with np.load(chunk) as data:
            changed = not np.array_equal(data["features"], poisoned)
        chunk.unlink()
        written = cache_module.write_chunk(chunk.parent, chunk.parent.name, names, poisoned, attacker)
        if changed or writer == "another user's secret":
            rewritten.append(str(written))
        if writer == "content_sha256 recomputed alone":  # the run's signature kept beside the new digest
            with np.load(written) as data:
                arrays = {name: data[name] for name in data.files}
            with open(written, "wb") as handle:
                np.savez(handle, **{**arrays, "content_hmac": signature})
    monkeypatch.setenv("VSBENCH_EMBED_CACHE", str(run / "cache"))
    code, output, again = _run(work.parent / "disc", run / "out", model)
    assert code == 0 and again == rows, f"{writer}: not the fresh numbers\n{rows}\n{again}\n{output[-3000:]}"
    lines = [r.getMessage() for r in caplog.records if "content_hmac does not verify" in r.getMessage()]
    named = sorted(line.split("embedding cache chunk ")[1].split(" not used")[0] for line in lines)
    assert named == sorted(rewritten) and rewritten, lines
