"""`make mutate MODULES=...` / `CHANGED=1`: the guards a change can weaken, chosen from git (issue 56)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from bench import mutate
from bench.mutate import GUARDS, changed_files, changed_guards

ROOT = Path(__file__).resolve().parents[2]


def test_every_guard_names_a_module_and_tests_that_exist() -> None:
    for guard in GUARDS:
        assert (ROOT / guard.source).is_file(), guard.source
        for test in guard.tests:
            assert (ROOT / test).is_file(), f"{guard.name}: {test}"
    assert len({guard.name for guard in GUARDS}) == len(GUARDS)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=repo, check=True,
                   capture_output=True)


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    guard = GUARDS[0]
    for name in (guard.source, *guard.tests, "README.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    _git(tmp_path, "init", "-q", "-b", "main")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "base")
    _git(tmp_path, "checkout", "-qb", "work")
    return tmp_path


def test_a_branch_selects_the_guards_whose_module_or_tests_it_changed(repo: Path) -> None:
    guard = GUARDS[0]
    assert changed_guards(changed_files(repo)[1]) == []
    (repo / "README.md").write_text("other\n")
    assert changed_guards(changed_files(repo)[1]) == []  # no guard's file
    (repo / guard.tests[0]).write_text("x = 2\n")  # a weakened test weakens the guard: uncommitted
    assert changed_guards(changed_files(repo)[1]) == [guard]
    _git(repo, "commit", "-qam", "test changed")  # committed on the branch: still since main
    against, files = changed_files(repo)
    assert against.startswith("main (") and changed_guards(files) == [guard]
    assert changed_guards(changed_files(repo, "HEAD")[1]) == []  # nothing since the branch's own tip


def test_a_new_untracked_module_counts_and_an_unknown_ref_is_one_line(repo: Path) -> None:
    guard = GUARDS[1]
    (repo / guard.source).parent.mkdir(parents=True, exist_ok=True)
    (repo / guard.source).write_text("y = 1\n")
    assert guard in changed_guards(changed_files(repo)[1])
    with pytest.raises(SystemExit, match="'nosuch' is not a commit git knows here"):
        changed_files(repo, "nosuch")


def test_changed_with_nothing_changed_mutates_nothing(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(mutate, "ROOT", repo)
    monkeypatch.setattr(mutate, "mutate_one", lambda *a, **k: pytest.fail("nothing should be mutated"))
    assert mutate.main(["--changed"]) == 0
    assert "no guard module" in capsys.readouterr().out
