"""bench/planted.py's list of issue 56's bugs still fits today's code (no pytest run, no copy).

Why: the script plants each bug by replacing one exact text; when the code moves, that text is gone
(or found twice) and the script stops. This fails first, in ``make test``, naming the bug, so the
list is updated with the change that moved the code rather than found stale months later.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bench import planted
from bench.planted import PLANTED, Bug, Stale

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("bug", PLANTED, ids=lambda bug: bug.name)
def test_each_bug_can_be_planted_once_and_names_tests_that_exist(bug: Bug) -> None:
    assert planted.stale(bug, ROOT) is None
    assert (ROOT / bug.file).read_text(encoding="utf-8").count(bug.old) == 1, bug.name
    assert bug.new != bug.old
    assert bug.tests and bug.description
    for test in bug.test_files():
        assert test.startswith("tests/unit/") and (ROOT / test).is_file(), f"{bug.name}: {test}"
    assert bug.module.startswith("vsbench.") and bug.module.replace(".", "/") in bug.file


def test_the_list_is_issue_56s_fifteen_each_named_once() -> None:
    assert len(PLANTED) == 15 and len({bug.name for bug in PLANTED}) == 15
    assert len({(bug.file, bug.old) for bug in PLANTED}) == 15


def test_a_moved_text_stops_the_script_naming_the_bug_and_the_file(tmp_path: Path) -> None:
    bug = Bug("moved", "src/x.py", "a == b", "a != b", ("tests/unit/test_x.py",), "moved")
    (tmp_path / "src").mkdir()
    for text, found in (("", "0 times"), ("a == b\na == b\n", "2 times")):
        (tmp_path / "src/x.py").write_text(text)
        with pytest.raises(Stale, match=rf"^planted.py: bug 'moved': src/x.py: .*{found}.*update PLANTED$"):
            planted.plant(bug, tmp_path)
        assert (tmp_path / "src/x.py").read_text() == text  # nothing written
    (tmp_path / "src/x.py").write_text("if a == b:\n")
    planted.plant(bug, tmp_path)
    assert (tmp_path / "src/x.py").read_text() == "if a != b:\n"
    assert "no such file" in str(planted.stale(Bug("gone", "src/y.py", "a", "b", (), ""), tmp_path))


def test_only_a_failing_test_run_kills_a_bug() -> None:
    assert [planted.verdict(code) for code in (0, 1, 2, 3, 4, 5, -1)] == [
        "SURVIVED", "killed", "broken", "broken", "broken", "broken", "broken"]
