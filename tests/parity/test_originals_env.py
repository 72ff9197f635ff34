"""``VSBENCH_ORIGINALS=`` (set but empty) skips the parity tests against the unlicensed originals,
as unset does, instead of running them against the current folder and failing (issue 39)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MODULE = Path(__file__).with_name("test_parity_unlicensed.py")


@pytest.mark.parametrize("value", [""])  # whitespace: test_originals_root_treats_empty_as_unset
def test_an_empty_originals_variable_skips_the_parity_tests(value: str, tmp_path: Path) -> None:
    # From an empty folder, where the tests' own checks would fail were they to run against ".".
    env = {**os.environ, "VSBENCH_ORIGINALS": value}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(MODULE)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "failed" not in done.stdout and " passed" not in done.stdout
    assert "VSBENCH_ORIGINALS names no checkout" in done.stdout and "skipped" in done.stdout


def test_originals_root_treats_empty_as_unset() -> None:
    from tests.parity.test_parity_unlicensed import originals_root

    assert originals_root(None) is None and originals_root("") is None and originals_root(" \t") is None
    assert originals_root("/src/originals") == Path("/src/originals")
