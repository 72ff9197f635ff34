"""The step commands check the features they find against the inputs they are given (issue 46).

`similarity index`, `search` and `score` read the embed step's shards under ``--out``. On main before
issue 46 they checked only that the shards were complete and agreed with each other: ``--root`` of
another dataset with the same ids scored the old features with exit 0. Here one `similarity run`
embeds dataset A; each step given dataset B (same ids, other pictures), or another model's options or
seed, must refuse in one line naming both sides, while the same root (at any path) still scores the
run's own table. Also: `similarity score --no-track`, and a missing ``query_list`` named as that option.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.integration.tiny_model import scripted_model
from vsbench.benchmarks.disc.synth import generate_disc
from vsbench.cli.app import app

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:`torch.jit.*` is deprecated:FutureWarning")]


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["similarity", *args], env={"VSBENCH_EMBED_CACHE": "off"})
    return result.exit_code, result.output


def _table(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("Flat,")]


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path | list[str]]:
    """Dataset A embedded and scored into ``out`` by one `similarity run`; dataset B has A's ids."""
    base = tmp_path_factory.mktemp("step-inputs")
    generate_disc(base / "a", references=12, queries=8, train=12, seed=3)
    generate_disc(base / "b", references=12, queries=8, train=12, seed=11)
    scripted_model(base / "model.pt", 0)
    code, output = _invoke("run", "--benchmark", "disc", "--root", str(base / "a"), "--out", str(base / "out"),
                           "--model", "torchscript", "--model-options", f'{{"path": "{base / "model.pt"}"}}',
                           "--codecs", "Flat", "--batch-size", "8", "--no-track", "--device", "cpu")
    assert code == 0 and len(_table(output)) == 2, output[-2000:]
    return {"base": base, "out": base / "out", "table": _table(output)}


def _step(command: str, root: Path, out: Path, *extra: str) -> tuple[int, str]:
    return _invoke(command, "--benchmark", "disc", "--root", str(root), "--out", str(out), "--codecs", "Flat",
                   *extra)


def _count_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each check of the features against the root, as how many shards it checked."""
    from vsbench.retrieval import engine, origin

    checks: list[int] = []
    monkeypatch.setattr(engine, "check_images",
                        lambda *args, **kwargs: checks.append(origin.check_images(*args, **kwargs)) or checks[-1])
    return checks


def _one_error(code: int, output: str) -> str:
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in output, output[-2000:]
    return errors[0]


@pytest.mark.parametrize("command", ["index", "search", "score"])
def test_a_step_given_another_root_with_the_same_ids_is_refused_naming_both(embedded, command: str) -> None:
    base, out = embedded["base"], embedded["out"]
    before = (out / "metrics.json").read_bytes()
    error = _one_error(*_step(command, base / "b", out))
    assert str(out / "features") in error and ".shard-0-of-1.npz" in error and str(base / "b") in error, error
    assert "re-run the embed step for this root" in error
    assert (out / "metrics.json").read_bytes() == before  # nothing scored


@pytest.mark.parametrize(("extra", "differ"), [
    (("--model", "torchscript", "--model-options", '{"path": "/elsewhere/other.pt"}'), "options differs"),
    (("--model", "torchscript", "--seed", "7"), "seed differs"),
])
def test_a_step_asking_for_other_model_options_or_seed_is_refused_naming_both(embedded, extra, differ) -> None:
    error = _one_error(*_step("score", embedded["base"] / "a", embedded["out"], *extra))
    assert "embedded with torchscript" in error and str(embedded["base"] / "model.pt") in error, error
    assert "this step asks for torchscript" in error and differ in error, error


def test_the_step_commands_score_the_same_root_at_any_path_and_refuse_a_changed_image(embedded, tmp_path: Path,
                                                                                      monkeypatch) -> None:
    """Step by step on a copy of A at another path (same bytes: checked by content, each shard once
    per command), as the run printed; then one reference replaced by B's, and the score is refused."""
    root, out = tmp_path / "a", tmp_path / "out"
    shutil.copytree(embedded["base"] / "a", root)
    shutil.copytree(embedded["out"], out)
    shutil.rmtree(out / "index")
    shutil.rmtree(out / "search")
    checks = _count_checks(monkeypatch)
    for command, extra in (("index", ()), ("search", ("--task", "0")), ("score", ("--no-track",))):
        code, output = _step(command, root, out, "--model", "torchscript", *extra)
        assert code == 0, output[-2000:]
    assert _table(output) == embedded["table"]
    assert checks == [3, 3, 3]  # query, reference, train: once per command
    reference = sorted((root / "val_ref").glob("*.jpg"))[0]
    reference.write_bytes((embedded["base"] / "b" / "val_ref" / reference.name).read_bytes())
    error = _one_error(*_step("score", root, out, "--no-track"))
    assert "reference.shard-0-of-1.npz was embedded from other images than those --root" in error, error


def test_an_inline_run_checks_no_image_again_after_embedding(embedded, monkeypatch) -> None:
    """`similarity run --runner inline`: the embed step has just taken the digests from this root; the
    index, search and score steps of the same engine do not stat the images again."""
    checks = _count_checks(monkeypatch)
    base = embedded["base"]
    code, output = _invoke("run", "--benchmark", "disc", "--root", str(base / "a"), "--out", str(embedded["out"]),
                           "--model", "torchscript", "--model-options", f'{{"path": "{base / "model.pt"}"}}',
                           "--codecs", "Flat", "--batch-size", "8", "--no-track", "--device", "cpu")
    assert code == 0 and _table(output) == embedded["table"], output[-2000:]
    assert checks and not any(checks)


def test_similarity_score_no_track_records_nothing(embedded, tmp_path: Path, monkeypatch) -> None:
    store = tmp_path / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store}")
    code, output = _step("score", embedded["base"] / "a", embedded["out"], "--no-track")
    assert code == 0 and _table(output) == embedded["table"], output[-2000:]
    assert not store.exists() and not (embedded["out"] / "mlflow-run.json").exists()


def test_a_missing_query_list_is_named_as_that_option(embedded) -> None:
    for command in ("score", "run"):
        error = _one_error(*_step(command, embedded["base"] / "a", embedded["out"], "--benchmark-options",
                                  '{"query_list": "lists/nope.txt"}', *(("--no-track",) if command == "run" else ())))
        assert str(embedded["base"] / "a" / "lists" / "nope.txt") in error and "benchmark option query_list" in error


def test_a_shard_known_under_another_digest_is_checked_again(embedded) -> None:
    """``checked`` spares a shard only when it holds the very digest the shard's manifest records: a
    stem known under another digest (the shard re-embedded since) is read again (issue 56:
    ``checked.get(stem) == recorded`` -> ``stem in checked`` survived)."""
    from vsbench.benchmarks.registry import load_benchmark
    from vsbench.retrieval.origin import check_images

    root, features = embedded["base"] / "a", embedded["out"] / "features"
    sets = load_benchmark("disc", root).image_sets()
    checked: dict[str, str] = {}
    assert check_images(features, sets, root, checked=checked) == len(sets) == len(checked)
    assert check_images(features, sets, root, checked=dict(checked)) == 0
    stale = {stem: "0" * 64 for stem in checked}
    assert check_images(features, sets, root, checked=stale) == len(sets)
    assert stale == checked  # the shards that passed, under the digests they hold
