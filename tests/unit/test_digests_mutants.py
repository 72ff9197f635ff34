"""The digest memo's edges that mutation testing found untested (issue 49, ``make mutate``).

Why: each test here kills mutants that survived every earlier test of :mod:`vsbench.io.digests`:
a malformed memo half believed, a memo entry lost after a save or a hit, a relative path keyed
apart from its absolute one, the garbage collector left off after a load, a file name that is not
UTF-8, and ``path_digest`` of a single file.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.digest_files import old_file
from vsbench.io import digests
from vsbench.io.digests import DigestMemo, combine, path_digest


def _memo_text(image: Path, *, digest: object = "0" * 64, names: object = None, stats: object = None,
               digests_: object = None) -> str:
    stat = image.stat()
    record = list(digests.stat_record(stat))
    return json.dumps({"version": digests.MEMO_VERSION,
                       "names": names if names is not None else [str(image)],
                       "stats": stats if stats is not None else [record],
                       "digests": digests_ if digests_ is not None else [digest]})


@pytest.mark.parametrize("malformed", ["lists of other lengths", "digests not a list", "stats not a list",
                                       "names not a list"])
def test_a_memo_whose_lists_do_not_line_up_is_no_memo(tmp_path: Path, settled: None, malformed: str) -> None:
    image = old_file(tmp_path / "a.jpg", b"a")
    real = hashlib.sha256(b"a").hexdigest()
    forged = json.loads(_memo_text(image))
    if malformed == "lists of other lengths":
        forged["names"].append(str(tmp_path / "b.jpg"))
    else:
        key = malformed.split()[0]
        forged[key] = {str(n): value for n, value in enumerate(forged[key])}
    (tmp_path / "memo.json").write_text(json.dumps(forged))
    memo = DigestMemo(tmp_path / "memo.json")
    assert memo.digests([image]) == [real] and memo.hashed == 1


@pytest.mark.parametrize("entry", ["digest not a string", "name not a string", "stat not a list",
                                   "stat of four numbers"])
def test_a_malformed_memo_entry_is_dropped_alone(tmp_path: Path, settled: None, entry: str) -> None:
    good, bad = old_file(tmp_path / "good.jpg", b"g"), old_file(tmp_path / "bad.jpg", b"b")
    forged = json.loads(_memo_text(good))
    stat = bad.stat()
    record: object = list(digests.stat_record(stat))
    name: object = str(bad)
    digest: object = "0" * 64
    if entry == "digest not a string":
        digest = 0
    elif entry == "name not a string":
        name = 7
    elif entry == "stat not a list":
        record = "1 2 3 4"
    else:
        record = record[:4]  # type: ignore[index]  # the record of issue 37: no device
    forged["names"].append(name)
    forged["stats"].append(record)
    forged["digests"].append(digest)
    (tmp_path / "memo.json").write_text(json.dumps(forged))
    memo = DigestMemo(tmp_path / "memo.json")
    assert memo.digests([good, bad]) == ["0" * 64, hashlib.sha256(b"b").hexdigest()]
    assert memo.hashed == 1


def test_loading_a_memo_leaves_the_garbage_collector_as_it_was(tmp_path: Path, settled: None) -> None:
    image = old_file(tmp_path / "a.jpg", b"a")
    (tmp_path / "memo.json").write_text(_memo_text(image))
    assert gc.isenabled()
    DigestMemo(tmp_path / "memo.json")
    assert gc.isenabled(), "the memo's load left the collector off"
    gc.disable()
    try:
        DigestMemo(tmp_path / "memo.json")
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("call", ["digest", "digests"])
def test_entries_answered_from_the_memo_are_kept_by_the_next_save(tmp_path: Path, settled: None, call: str) -> None:
    image = old_file(tmp_path / "a.jpg", b"abc")
    first = DigestMemo(tmp_path / "memo.json")
    first.digests([image])
    first.save()
    second = DigestMemo(tmp_path / "memo.json")
    answer = second.digest(image) if call == "digest" else second.digests([image])[0]
    assert answer == hashlib.sha256(b"abc").hexdigest() and second.hashed == 0
    other = old_file(tmp_path / "b.jpg", b"b")
    second.digests([other])  # something new, so the save writes
    second.save()
    third = DigestMemo(tmp_path / "memo.json")
    assert third.digests([image, other]) == [hashlib.sha256(b"abc").hexdigest(), hashlib.sha256(b"b").hexdigest()]
    assert third.hashed == 0


def test_a_memo_goes_on_answering_after_a_save(tmp_path: Path, settled: None) -> None:
    image = old_file(tmp_path / "a.jpg", b"a")
    memo = DigestMemo(tmp_path / "memo.json")
    memo.digests([image])
    memo.save()
    assert memo.digests([image]) == [hashlib.sha256(b"a").hexdigest()] and memo.hashed == 1
    assert memo.digest(image) == hashlib.sha256(b"a").hexdigest() and memo.hashed == 1
    memo.save()
    saved = json.loads((tmp_path / "memo.json").read_text())
    assert saved["algorithm"] == "sha256" and saved["names"] == [str(image)]


def test_a_relative_path_is_the_same_entry_as_its_absolute_path(tmp_path: Path, settled: None,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    image = old_file(tmp_path / "a.jpg", b"a")
    monkeypatch.chdir(tmp_path)
    memo = DigestMemo(tmp_path / "memo.json")
    assert memo.digests(["a.jpg"]) == [hashlib.sha256(b"a").hexdigest()]
    memo.save()
    assert json.loads((tmp_path / "memo.json").read_text())["names"] == [str(image)]
    again = DigestMemo(tmp_path / "memo.json")
    assert again.digests([image]) == [hashlib.sha256(b"a").hexdigest()] and again.hashed == 0


def test_combine_has_a_fixed_spelling_and_takes_names_that_are_not_utf8() -> None:
    """The combined digest is stored in manifests and checkpoints: its spelling is a format."""
    expected = hashlib.sha256(b"a\x00-\nb\x00" + b"f" * 64 + b"\n").hexdigest()
    assert combine([("a", None), ("b", "f" * 64)]) == expected
    undecodable = os.fsdecode(b"photo-\xff.jpg")  # a file name of bytes that are not UTF-8
    assert combine([(undecodable, None)]) == hashlib.sha256(b"photo-\xff.jpg\x00-\n").hexdigest()


def test_path_digest_of_a_file_is_its_sha256(tmp_path: Path) -> None:
    file = tmp_path / "weights.bin"
    file.write_bytes(b"weights")
    assert path_digest(file) == hashlib.sha256(b"weights").hexdigest()
    assert path_digest(tmp_path / "absent") is None


@pytest.mark.parametrize(("given", "environment", "believed"), [
    (False, "stat", False), (True, "full", True), (None, "stat", True), (None, "full", False)])
def test_trust_stat_given_overrides_the_environment(tmp_path: Path, settled: None, monkeypatch: pytest.MonkeyPatch,
                                                    given: bool | None, environment: str, believed: bool) -> None:
    """A forged memo entry (the file's own stat record, another digest) is believed only where stat
    records are trusted: by the argument when given (``--verify-inputs full`` reaches the memo so),
    else by VSBENCH_VERIFY_INPUTS."""
    monkeypatch.setenv("VSBENCH_VERIFY_INPUTS", environment)
    image = old_file(tmp_path / "a.jpg", b"a")
    memo_path = tmp_path / "memo.json"
    memo_path.write_text(_memo_text(image, digest="f" * 64))
    memo = DigestMemo(memo_path, trust_stat=given)
    assert memo.trust_stat is believed
    assert memo.digest(image) == ("f" * 64 if believed else hashlib.sha256(b"a").hexdigest())
    assert memo.hashed == (0 if believed else 1)


def test_forget_drops_a_files_entry_from_the_next_save(tmp_path: Path, settled: None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A file found changed while a step used it: the next run hashes it, whatever its record."""
    monkeypatch.chdir(tmp_path)
    kept, dropped = old_file(tmp_path / "kept.jpg", b"k"), old_file(tmp_path / "dropped.jpg", b"d")
    memo = DigestMemo(tmp_path / "memo.json", trust_stat=True)
    memo.digests([kept, dropped])
    memo.forget(["dropped.jpg", "never-seen.jpg"])  # relative, as a step may name it; unknown ones are no error
    memo.save()
    saved = json.loads((tmp_path / "memo.json").read_text())
    assert saved["names"] == [str(kept)]
    again = DigestMemo(tmp_path / "memo.json", trust_stat=True)
    assert again.digests([kept, dropped]) == [hashlib.sha256(b"k").hexdigest(), hashlib.sha256(b"d").hexdigest()]
    assert again.hashed == 1  # only the forgotten one


def test_remembered_answers_from_this_runs_entries_and_hashes_a_changed_file(tmp_path: Path, settled: None) -> None:
    weights = old_file(tmp_path / "w.pt", b"weights")
    memo = DigestMemo(tmp_path / "memo.json", trust_stat=True)
    first = memo.digest(weights)
    again = memo.remembered()
    assert again.path is None and again.digest(weights) == first and again.hashed == 0
    old_file(weights, b"other!!")  # same size, mtime set back: the ctime and the record differ
    assert again.digest(weights) == hashlib.sha256(b"other!!").hexdigest() and again.hashed == 1
    unused = DigestMemo(None, trust_stat=True).remembered()  # nothing used yet: nothing known
    assert unused.digest(weights) == hashlib.sha256(b"other!!").hexdigest() and unused.hashed == 1


def test_the_memo_file_is_compact_json(tmp_path: Path, settled: None) -> None:
    """100k entries a memo: the separators without spaces keep it (and its load) a fifth smaller."""
    memo = DigestMemo(tmp_path / "memo.json", trust_stat=True)
    memo.digests([old_file(tmp_path / f"{i}.jpg", bytes([i])) for i in range(3)])
    memo.save()
    text = (tmp_path / "memo.json").read_text()
    assert ", " not in text and '": ' not in text and text.endswith("]}\n")


def test_a_memo_kept_nowhere_answers_a_later_check_from_its_entries(tmp_path: Path, settled: None) -> None:
    """A training's re-check before each checkpoint (``InputRecord``) uses the memo that hashed its
    inputs: after ``save``, unchanged files cost a ``stat``, even when the memo has no file."""
    files = [old_file(tmp_path / f"{i}.jpg", bytes([i]) * 4) for i in range(3)]
    memo = DigestMemo(None, trust_stat=True)
    first = memo.digests(files)
    memo.save()
    assert memo.digests(files) == first and memo.hashed == 3
    old_file(files[1], b"\xff" * 4)
    assert memo.digests(files)[1] == hashlib.sha256(b"\xff" * 4).hexdigest() and memo.hashed == 4
