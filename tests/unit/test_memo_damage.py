"""A damaged digest memo (``features/.inputs/<stem>.json``) is a cache that lied, not a dataset
that changed.

Found by test_reuse_integrity.py's property when a bit flip turned a digest's ``d`` into ``D``:
the memo answered the image by its (unchanged) stat record with the flipped digest, the shard's
key changed, the shard was embedded again, and the race check then saw the decoded bytes disagree
with the "hashed" digest and stopped the run with "changed while embed read it ... a sync still
writing the dataset?", blaming the photo. Now a digest that is not 64 lowercase hex digits is no
entry (its file is hashed), and a well-formed wrong one (a flip from one hex digit to another) is
found when the decode disagrees: the file's record unchanged and its bytes the decoded ones, so the
memo is deleted with a warning naming it and the shard hashed again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import pytest

from tests.unit.test_embed_changes import World
from vsbench.io.digests import DigestMemo
from vsbench.retrieval.origin import inputs_path

pytestmark = [pytest.mark.filterwarnings("ignore:`torch.jit.*` is deprecated:FutureWarning"),
              pytest.mark.usefixtures("settled", "one_thread")]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("memo"))


def _other_hex(digest: str, at: int = 7) -> str:
    """``digest`` with one hex digit changed into another (what a bit flip from ``e`` to ``a`` does)."""
    flipped = "0123456789abcdef"[("0123456789abcdef".index(digest[at]) + 5) % 16]
    return digest[:at] + flipped + digest[at + 1:]


def _rewrite_digest(memo: Path, file: Path, new: str) -> str:
    data = json.loads(memo.read_text())
    at = data["names"].index(os.path.abspath(file))
    old = data["digests"][at]
    data["digests"][at] = new
    memo.write_text(json.dumps(data))
    return old


@pytest.mark.parametrize("decode", ("cpu", "gpu"))
@pytest.mark.parametrize("cached", [True, False], ids=["cache", "no-cache"])
def test_a_memo_remembering_another_well_formed_digest_is_deleted_and_the_shard_hashed_again(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        decode: str, cached: bool) -> None:
    monkeypatch.setenv("VSBENCH_EMBED_CACHE", str(tmp_path / "cache") if cached else "off")
    root = world.root(tmp_path / "root")
    shard = world.embed(root, tmp_path / "out", decode)
    memo = inputs_path(shard)
    image = root / "im3.jpg"
    true = _rewrite_digest(memo, image, _other_hex(world.digest["A"]["im3"]))
    assert true == world.digest["A"]["im3"]
    with caplog.at_level(logging.WARNING, logger="vsbench.retrieval.embed"):
        again = world.embed(root, tmp_path / "out", decode)
    assert world.check_shard(again, decode) == dict.fromkeys(world.ids, "A")
    damaged = [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()]
    assert damaged == [f"embed s.shard-0-of-1: {memo} is damaged: it remembers sha256 {_other_hex(true)[:12]} for "
                       f"{image}, whose bytes, unchanged since, are sha256 {true[:12]}; deleted, and the shard's "
                       "inputs hashed again"]
    kept = json.loads(memo.read_text())
    model = hashlib.sha256(world.model.read_bytes()).hexdigest()
    assert dict(zip(kept["names"], kept["digests"])) == {
        **{str(root / f"{i}.jpg"): world.digest["A"][i] for i in world.ids}, str(world.model): model}
    manifest = json.loads(again.with_suffix(".json").read_text())
    assert manifest["inputs_hashed"] == len(world.ids) + 1, "the retry hashes every input, whatever the memo said"


def test_a_memo_remembering_another_digest_for_the_model_file_is_deleted_too(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The memo also keeps the digest of the file a model option names: the TorchScript loader hashes
    the bytes it loads, so a wrong remembered digest is seen there (it blamed the model file)."""
    monkeypatch.setenv("VSBENCH_EMBED_CACHE", str(tmp_path / "cache"))
    root = world.root(tmp_path / "root")
    shard = world.embed(root, tmp_path / "out", "cpu")
    memo = inputs_path(shard)
    key = json.loads(shard.with_suffix(".json").read_text())["key"]
    true = _rewrite_digest(memo, world.model, _other_hex(hashlib.sha256(world.model.read_bytes()).hexdigest()))
    with caplog.at_level(logging.WARNING, logger="vsbench.retrieval.embed"):
        again = world.embed(root, tmp_path / "out", "cpu")
    assert world.check_shard(again, "cpu") == dict.fromkeys(world.ids, "A")
    assert [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()] == [
        f"embed s.shard-0-of-1: {memo} is damaged: it remembers sha256 {_other_hex(true)[:12]} for {world.model}, "
        f"whose bytes, unchanged since, are sha256 {true[:12]}; deleted, and the shard's inputs hashed again"]
    kept = json.loads(memo.read_text())
    assert dict(zip(kept["names"], kept["digests"]))[str(world.model)] == true
    assert json.loads(again.with_suffix(".json").read_text())["key"] == key, "the key the undamaged memo gave"


def test_a_digest_that_is_not_sha256_hex_is_no_entry_and_the_memo_is_named(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, settled: None) -> None:
    files = [tmp_path / f"f{n}" for n in range(3)]
    for n, file in enumerate(files):
        file.write_bytes(bytes([n]) * 10)
    memo_path = tmp_path / "memo.json"
    memo = DigestMemo(memo_path, trust_stat=True)
    truth = memo.digests(files, threads=1)
    memo.save()
    with caplog.at_level(logging.WARNING, logger="vsbench.io.digests"):
        assert DigestMemo(memo_path, trust_stat=True).digests(files, threads=1) == truth
    assert caplog.records == [], "an undamaged memo loads without a word"
    data = json.loads(memo_path.read_text())
    data["digests"][1] = truth[1][:5] + truth[1][5].upper() + truth[1][6:] if truth[1][5].isalpha() else \
        truth[1][:5] + "g" + truth[1][6:]
    data["digests"][2] = truth[2] + "0"
    memo_path.write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING, logger="vsbench.io.digests"):
        again = DigestMemo(memo_path, trust_stat=True)
    assert [r.getMessage() for r in caplog.records] == [
        f"{memo_path}: 2 of 3 entries are not a file, its stat record and a sha256 (damaged?); their files are hashed again"]
    assert again.digests(files, threads=1) == truth and again.hashed == 2


def test_stale_names_only_remembered_entries_whose_unchanged_file_holds_the_bytes_read(tmp_path: Path,
                                                                                    settled: None) -> None:
    files = [tmp_path / f"f{n}" for n in range(6)]
    for n, file in enumerate(files):
        file.write_bytes(bytes([n]) * 10)
    truth = [hashlib.sha256(f.read_bytes()).hexdigest() for f in files]
    memo_path = tmp_path / "memo.json"
    first = DigestMemo(memo_path, trust_stat=True)
    first.digests(files[:5], threads=1)
    first.save()
    data = json.loads(memo_path.read_text())
    data["digests"] = [_other_hex(d) for d in data["digests"][:4]] + data["digests"][4:]  # four lie, one is true
    memo_path.write_text(json.dumps(data))
    memo = DigestMemo(memo_path, trust_stat=True)
    said = memo.digests(files, threads=1)
    assert said == [_other_hex(d) for d in truth[:4]] + truth[4:] and memo.hashed == 1
    files[1].write_bytes(b"changed since")  # a real change: the record moves
    files[2].unlink()  # a real change: no record
    other = hashlib.sha256(b"something else").hexdigest()
    # in order: no second read, changed, deleted, the lie, truthful, hashed this run (then changed)
    read = [None, hashlib.sha256(b"changed since").hexdigest(), truth[2], truth[3], truth[4], other]
    assert memo.stale(files, read) == [(os.path.abspath(files[3]), _other_hex(truth[3]), truth[3])]
    assert memo.stale(files, said) == []  # no disagreement
    assert memo.stale(files[4:5], truth[4:5]) == []  # a true entry, read the same: nothing to say
    os.utime(files[3], ns=(1, 1))  # its record moves, its bytes stay: the memo may have been right then
    assert memo.stale(files, read) == []
    memo.discard()
    assert not memo_path.exists() and memo.stale(files, read) == []
    memo.discard()  # twice, or a memo never saved: nothing to delete, no error
    DigestMemo(tmp_path / "never-saved.json").discard()
    untrusting = DigestMemo(tmp_path / "other.json", trust_stat=False)
    untrusting.digests(files, threads=1)
    assert untrusting.stale(files, [other] * 6) == []
