"""A file changed *between* the one read of an image and its decoding (issue 56): the race inside a worker.

test_embed_changes.py changes a file before the worker reads it (both of the worker's uses then see
the same new bytes). Here the file is changed at the one moment that tells a worker that reads once
from one that reads twice: right after its read, through ``embed.after_read`` (a test seam, called
between the read and the hashing; deterministic: no sleeps, ``workers=0``). On both decode paths:
the Pillow workers (``ImageFiles``) and the batched tensor decode run on the CPU (``EncodedFiles``,
``decode="gpu"``). Each test was seen failing with one of these bugs planted: the decode re-reading
the path, the digest taken from a second ``read_bytes()``, the device path's bytes re-read, and
``h != u`` weakened to ``u is not None and h != u`` (a file deleted mid-run then passes).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.unit.test_embed_changes import World, _change
from vsbench.imaging.preprocessing import Preprocessing
from vsbench.retrieval import embed

pytestmark = [pytest.mark.filterwarnings("ignore:`torch.jit.*` is deprecated:FutureWarning"),
              pytest.mark.usefixtures("settled", "one_thread")]
DECODES = ("cpu", "gpu")  # "gpu" on the CPU: the batched tensor path (EncodedFiles), with libjpeg-turbo
HOW = ("in place", "rename")



@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("race"))


def _after_reading(monkeypatch: pytest.MonkeyPatch, actions: dict[Path, Callable[[], None]]) -> list[Path]:
    """Install the seam: each action runs once, right after its path's bytes were read; returns the
    paths whose action ran (a test asserts the moment it relies on was reached)."""
    ran: list[Path] = []

    def hook(path: Path) -> None:
        if path in actions and path not in ran:
            ran.append(path)
            actions[path]()

    monkeypatch.setattr(embed, "after_read", hook)
    return ran


@pytest.mark.parametrize("how", HOW)
def test_a_pillow_worker_hashes_and_decodes_the_one_read(world: World, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """The file replaced right after the worker read it: the digest and the pixels are both of the
    bytes read (A), not of the bytes now on disk (B)."""
    path = world.root(tmp_path / "root") / "im2.jpg"
    preprocessing = Preprocessing(32, 32, (0.5,) * 3, (0.25,) * 3)
    ran = _after_reading(monkeypatch, {path: lambda: _change(path, world.bytes["B"]["im2"], how)})
    index, pixels, reason, digest = embed.ImageFiles([path], preprocessing)[0]
    assert ran == [path] and path.read_bytes() == world.bytes["B"]["im2"]
    assert (index, reason, digest) == (0, "", world.digest["A"]["im2"])
    expected = embed.load_image_bytes(world.bytes["A"]["im2"], preprocessing)
    assert not np.array_equal(expected, embed.load_image_bytes(world.bytes["B"]["im2"], preprocessing))
    np.testing.assert_array_equal(pixels, expected)


@pytest.mark.parametrize("how", HOW)
def test_a_device_decode_worker_hashes_and_hands_over_the_one_read(world: World, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """The batched path's worker: the bytes handed to the device decoder are the bytes hashed."""
    path = world.root(tmp_path / "root") / "im2.jpg"
    ran = _after_reading(monkeypatch, {path: lambda: _change(path, world.bytes["B"]["im2"], how)})
    index, encoded, reason, digest = embed.EncodedFiles([path])[0]
    assert ran == [path] and (index, reason, digest) == (0, "", world.digest["A"]["im2"])
    assert encoded is not None and encoded.decodable == (True,)
    assert encoded.data[0].tobytes() == world.bytes["A"]["im2"]


def test_an_image_read_then_unreadable_is_a_change_not_a_pass() -> None:
    """Hashed by the key, then no bytes at all when the worker read it (deleted, unmounted)."""
    path = Path("photos/im1.jpg")
    changed = embed.changed_while_read([Path("im0.jpg"), path], ["a" * 64, "b" * 64], ["a" * 64, None], "embed s")
    assert isinstance(changed, embed.InputsChanged) and changed.paths == [path]
    assert str(changed).startswith(f"{path}: changed while embed s read it (hashed as sha256 bbbbbbbbbbbb, "
                                   "then read as unreadable);")
    assert embed.changed_while_read([path], [None], [None], "embed s") is None  # unreadable both times: a failure, listed
    assert embed.changed_while_read([path], ["a" * 64], ["a" * 64], "embed s") is None
    two = embed.changed_while_read([path, Path("b"), Path("c")], ["a" * 64] * 3, [None, "a" * 64, "c" * 64], "embed s")
    assert two is not None and two.paths == [path, Path("c")]
    assert str(two).startswith(f"{path}: changed while embed s read it (hashed as sha256 aaaaaaaaaaaa, then read as "
                               "unreadable) (and 1 more files, listed under 'changed' in the manifest); stopped:")


@pytest.mark.parametrize("decode", DECODES)
@pytest.mark.parametrize("cached", [True, False], ids=["cache", "no-cache"])
def test_a_file_replaced_after_the_workers_read_gives_the_descriptors_of_the_bytes_read(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decode: str, cached: bool) -> None:
    """The key hashed A, the worker read A, then a sync wrote B: the run completes with A's
    descriptor under A's digest, in the shard and in the cache (B is for the next run to hash)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("VSBENCH_EMBED_CACHE", str(cache) if cached else "off")
    root = world.root(tmp_path / "root")
    path = root / "im3.jpg"
    ran = _after_reading(monkeypatch, {path: lambda: _change(path, world.bytes["B"]["im3"], "rename")})
    used = world.check_shard(world.embed(root, tmp_path / "out", decode), decode)
    assert ran == [path] and used == dict.fromkeys(world.ids, "A")
    if cached:
        world.check_cache(cache, filled=True)


@pytest.mark.parametrize("decode", DECODES)
def test_a_file_replaced_before_the_read_and_put_back_after_it_stops_the_run(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decode: str) -> None:
    """The key hashed A; B was on disk when the worker read it, and A again right after: the worker
    used B, so the run stops naming the file, with the digest of the bytes read (B), not of a second look."""
    monkeypatch.setenv("VSBENCH_EMBED_CACHE", str(tmp_path / "cache"))
    root = world.root(tmp_path / "root")
    first, path = root / "im0.jpg", root / "im4.jpg"
    ran = _after_reading(monkeypatch, {first: lambda: _change(path, world.bytes["B"]["im4"], "in place"),
                                       path: lambda: _change(path, world.bytes["A"]["im4"], "rename")})
    with pytest.raises(embed.InputsChanged) as stopped:
        world.embed(root, tmp_path / "out", decode)
    assert ran == [first, path] and stopped.value.paths == [path]
    assert str(stopped.value).startswith(
        f"{path}: changed while embed s.shard-0-of-1 read it (hashed as sha256 {world.digest['A']['im4'][:12]}, "
        f"then read as sha256 {world.digest['B']['im4'][:12]});")
    world.check_cache(tmp_path / "cache")  # B's descriptor, if cached, under B's digest


@pytest.mark.parametrize("decode", DECODES)
def test_a_file_deleted_mid_run_stops_it_naming_the_file(world: World, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch, decode: str) -> None:
    """The key hashed im5, then it was deleted while the workers read the shard (after im0): not a
    reported failure of an unreadable image but a change, and nothing is recorded complete."""
    monkeypatch.setenv("VSBENCH_EMBED_CACHE", "off")
    root = world.root(tmp_path / "root")
    first, path = root / "im0.jpg", root / "im5.jpg"
    ran = _after_reading(monkeypatch, {first: path.unlink})
    with pytest.raises(embed.InputsChanged) as stopped:
        world.embed(root, tmp_path / "out", decode)
    assert ran == [first] and stopped.value.paths == [path]
    assert f"hashed as sha256 {world.digest['A']['im5'][:12]}, then read as unreadable)" in str(stopped.value)
    assert json.loads((tmp_path / "out" / "s.shard-0-of-1.json").read_text())["complete"] is False


def test_a_batch_of_two_shapes_is_two_groups_with_the_failures_and_every_digest_passed_on() -> None:
    """``preserve_aspect_ratio`` gives images of many shapes: each shape is stacked on its own, in
    the order met; a failure is set aside with its reason; every item's digest goes on (issue 56)."""
    wide, tall = np.zeros((2, 3, 3), np.uint8), np.ones((3, 2, 3), np.uint8)
    items = [(0, wide, "", "d0"), (1, None, "OSError: gone", None), (2, tall, "", "d2"), (3, wide + 5, "", "d3"),
             (4, None, "bad JPEG", "d4")]
    groups, failures, read = embed.collate_by_shape(items)
    assert [(where.tolist(), tuple(images.shape)) for where, images in groups] == [([0, 3], (2, 2, 3, 3)),
                                                                                   ([2], (1, 3, 2, 3))]
    assert groups[0][1][1].tolist() == (wide + 5).tolist() and groups[0][0].dtype == torch.long
    assert failures == [(1, "OSError: gone"), (4, "bad JPEG")]
    assert read == [(0, "d0"), (1, None), (2, "d2"), (3, "d3"), (4, "d4")]


def test_an_unreadable_or_undecodable_file_is_a_reason_naming_its_error_and_the_digest_of_what_was_read(
        tmp_path: Path) -> None:
    """Both workers: a missing file (no bytes, no digest) and bytes that are no image (their digest:
    they were read, and changed or not is decided on it); the reason is the error's type and text."""
    bad, gone = tmp_path / "bad.jpg", tmp_path / "gone.jpg"
    bad.write_bytes(b"not an image")
    preprocessing = Preprocessing(32, 32, (0.5,) * 3, (0.25,) * 3)
    for dataset in (embed.ImageFiles([bad, gone], preprocessing), embed.EncodedFiles([bad, gone])):
        assert dataset[0][1] is None and dataset[0][2:] == (
            f"UnidentifiedImageError: cannot identify image file '{bad}'", hashlib.sha256(b"not an image").hexdigest())
        assert dataset[1][1] is None and dataset[1][2:] == (
            f"FileNotFoundError: [Errno 2] No such file or directory: '{gone}'", None)


def test_the_device_path_worker_refuses_a_truncated_jpeg_and_collates_a_batch_of_failures(tmp_path: Path) -> None:
    """The tensor decode has no Pillow to notice a scan that ends early: the worker checks it, so a
    cut JPEG is a listed failure (with the digest of the bytes read), not grey rows fed to the
    network. A batch of failures only packs nothing."""
    whole, cut = tmp_path / "whole.jpg", tmp_path / "cut.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 48, 3)).astype(np.uint8)).save(whole, "JPEG")
    cut.write_bytes(whole.read_bytes()[: len(whole.read_bytes()) * 2 // 3])
    assert embed.EncodedFiles([whole])[0][2] == ""
    index, encoded, reason, digest = embed.EncodedFiles([cut])[0]
    assert encoded is None and reason.startswith("TruncatedJpeg: truncated JPEG data: the scan ends before the last row")
    assert digest == hashlib.sha256(cut.read_bytes()).hexdigest()
    positions, packed, failures, read = embed.collate_encoded_files([(0, None, "x", None), (1, None, "y", "d")])
    assert positions.tolist() == [] and packed is None and failures == [(0, "x"), (1, "y")]
    assert read == [(0, None), (1, "d")]
