"""bench/resize.py runs end to end on a few images and writes the figures docs/figures.md quotes.

Not a timing test (figures from 8 images mean nothing): it keeps the bench runnable and its JSON
keys, the on-disk pass and the file-work row in place.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_resize_bench_writes_every_figure(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCH))
    sys.modules.pop("resize", None)
    import resize  # bench/resize.py

    out = tmp_path / "figures.json"
    assert resize.main(["--images", "8", "--large", "2", "--repeat", "1", "--chunks", "2", "--descriptors", "0",
                        "--workers", "2", "--workdir", str(tmp_path / "work"), "--outputs", str(tmp_path / "outputs"),
                        "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    for key in ("abid_speedup", "large_speedup", "abid_mean_abs_diff", "large_mean_abs_diff",
                "abid_speedup_in_memory", "abid_speedup_on_disk"):
        assert isinstance(figures[key], float) and figures[key] >= 0, key
    assert figures["abid_mean_abs_diff"] < 1.5
    assert set(figures["file_work_ms_per_image"]) == {"outputs", "disk"}
    assert [r["method"] for r in figures["disk"]["results"]] == [resize.CHALLENGE, resize.FAST, resize.FILES]
    files_row = next(r for r in figures["small"]["results"] if r["method"] == resize.FILES)
    assert files_row["vs_challenge_per_core"] is None and files_row["mad_vs_challenge"] is None
    printed = capsys.readouterr().out
    assert "The same on" in printed and "File work alone" in printed
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "work" / "resize-runs").exists()


def test_filesystem_names_the_mount_of_the_nearest_existing_parent(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    sys.modules.pop("resize", None)
    import resize

    assert resize.filesystem(tmp_path / "not" / "yet") == resize.filesystem(tmp_path) != ""
