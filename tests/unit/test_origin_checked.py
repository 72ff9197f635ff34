"""Which shards a step spares re-checking against ``--root`` (issue 56, retrieval/origin.py).

``check_images(..., checked=)`` skips a shard only when ``checked`` holds the very digest the
shard's manifest records. Planted by hand, ``checked.get(stem) == recorded`` -> ``stem in checked``
passed every fast test (only tests/integration/test_step_inputs.py saw it): a shard re-embedded from
other images after it was checked would be spared, and scored against a root it was not embedded
from. Seen failing with that bug planted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.unit.test_embed_changes import World, _change
from vsbench.io.features import FeatureError, ImageSet
from vsbench.retrieval import embed
from vsbench.retrieval.origin import check_images, recorded_images
from vsbench.retrieval.shards import read_manifest

pytestmark = [pytest.mark.filterwarnings("ignore:`torch.jit.*` is deprecated:FutureWarning"),
              pytest.mark.usefixtures("settled")]
STEM = "s.shard-0-of-1"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return World(tmp_path_factory.mktemp("origin"))
    finally:
        torch.set_num_threads(before)


def test_a_shard_is_spared_only_under_the_digest_it_was_checked_with(world, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VSBENCH_EMBED_CACHE", "off")
    root, out = world.root(tmp_path / "a"), tmp_path / "out"
    world.embed(root, out, "cpu")
    checked: dict[str, str] = {}
    assert check_images(out, {"s": world.images(root)}, root, checked=checked) == 1
    recorded = recorded_images(read_manifest(out / f"{STEM}.json") or {})
    assert recorded is not None and checked == {STEM: recorded}
    assert check_images(out, {"s": world.images(root)}, root, checked=dict(checked)) == 0  # the same digest: spared
    assert check_images(out, {"s": world.images(root)}, root, checked={STEM: "0" * 64}) == 1  # another: read again

    # The shard re-embedded from another root (im2 replaced) after ``checked`` was filled: it must be
    # read again, and refused against the first root, not spared because its stem is known.
    other = world.root(tmp_path / "b")
    _change(other / "im2.jpg", world.bytes["B"]["im2"], "rename")
    world.embed(other, out, "cpu")
    with pytest.raises(FeatureError, match=rf"^{out / STEM}\.npz was embedded from other images than those --root {root} "
                                           r"has for its 6 ids \(the image digests its manifest records are not theirs\): re-run"):
        check_images(out, {"s": world.images(root)}, root, checked=checked)
    assert checked == {STEM: recorded}  # nothing added for a shard that failed


@pytest.mark.parametrize("manifest", [{}, {"key": None}, {"key": ["inputs"]}, {"key": {}}, {"key": {"inputs": None}},
                                      {"key": {"inputs": ["images_sha256"]}}, {"key": {"inputs": {}}},
                                      {"key": {"inputs": {"images_sha256": 5}}}, {"key": {"inputs": {"images_sha256": None}}}])
def test_a_manifest_without_a_readable_image_digest_records_none(manifest: dict) -> None:
    """An older vsbench's manifest, or one written by hand: no digest (the step then refuses the
    shard naming it), never a crash on a ``None``/list ``.get`` nor a number taken for a digest."""
    assert recorded_images(manifest) is None
    assert recorded_images({"key": {"inputs": {"images_sha256": "ab" * 32}}}) == "ab" * 32


def _two_sets(world: World, root: Path, out: Path) -> dict[str, ImageSet]:
    """Sets ``s`` (all six images, two shards of three) and ``t`` (the first two, one shard), under ``out``."""
    whole = world.images(root)
    sets = {"s": whole, "t": ImageSet(whole.ids[:2], tuple(whole.paths[:2]))}
    for name, images, shards in (("s", whole, 2), ("t", sets["t"], 1)):
        for shard in range(shards):
            embed.embed_image_set("torchscript", images, out, set_name=name, shard=shard, num_shards=shards,
                                  workers=0, progress=False, device="cpu", model_options=world.options)
    return sets


def test_a_spared_shard_does_not_end_the_check_and_the_smallest_is_read_first(world, tmp_path, monkeypatch) -> None:
    """``checked`` spares ``s``'s first shard, and its second and ``t`` are still checked; against a
    root with other bytes for every image, the smallest shard (``t``, listed last and named after
    ``s``) is the one refused."""
    monkeypatch.setenv("VSBENCH_EMBED_CACHE", "off")
    root, out = world.root(tmp_path / "a"), tmp_path / "out"
    sets = _two_sets(world, root, out)
    spared = {"s.shard-0-of-2": recorded_images(read_manifest(out / "s.shard-0-of-2.json") or {})}
    assert check_images(out, sets, root, checked=spared) == 2
    assert set(spared) == {"s.shard-0-of-2", "s.shard-1-of-2", "t.shard-0-of-1"}
    other = world.root(tmp_path / "b", "B")
    moved = {name: ImageSet(s.ids, tuple(other / p.name for p in s.paths)) for name, s in sets.items()}
    with pytest.raises(FeatureError, match=rf"^{out}/t\.shard-0-of-1\.npz was embedded from other images"):
        check_images(out, moved, other)


def test_shards_are_read_by_size_not_by_where_they_start(world, tmp_path, monkeypatch) -> None:
    """The order is each shard's *size*: ``s`` in three shards of two images (the second starting at
    image 2) and ``t`` one shard of three. With the first ``s`` shard spared and every image's bytes
    changed, the two-image ``s.shard-1-of-3`` is refused, not the three-image ``t`` (which a sort by
    ``start + stop``, 6 against 3, would read first: make mutate's survivor, seen failing planted)."""
    monkeypatch.setenv("VSBENCH_EMBED_CACHE", "off")
    root, out = world.root(tmp_path / "a"), tmp_path / "out"
    whole = world.images(root)
    sets = {"s": whole, "t": ImageSet(whole.ids[:3], tuple(whole.paths[:3]))}
    for name, images, shards in (("s", whole, 3), ("t", sets["t"], 1)):
        for shard in range(shards):
            embed.embed_image_set("torchscript", images, out, set_name=name, shard=shard, num_shards=shards,
                                  workers=0, progress=False, device="cpu", model_options=world.options)
    spared = {"s.shard-0-of-3": recorded_images(read_manifest(out / "s.shard-0-of-3.json") or {})}
    other = world.root(tmp_path / "b", "B")
    moved = {name: ImageSet(s.ids, tuple(other / p.name for p in s.paths)) for name, s in sets.items()}
    with pytest.raises(FeatureError, match=rf"^{out}/s\.shard-1-of-3\.npz was embedded from other images"):
        check_images(out, moved, other, checked=spared)


def test_a_manifest_recording_no_digest_is_refused_naming_the_shard(world, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VSBENCH_EMBED_CACHE", "off")
    root, out = world.root(tmp_path / "a"), tmp_path / "out"
    world.embed(root, out, "cpu")
    manifest = json.loads((out / f"{STEM}.json").read_text())
    del manifest["key"]["inputs"]
    (out / f"{STEM}.json").write_text(json.dumps(manifest))
    with pytest.raises(FeatureError) as refused:
        check_images(out, {"s": world.images(root)}, root)
    assert str(refused.value) == (f"{out / STEM}.npz: its manifest records no digest of the images it was embedded "
                                  "from (an older vsbench): re-run the embed step for this root into this --out")


def test_a_root_missing_images_is_refused_naming_one(world, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VSBENCH_EMBED_CACHE", "off")
    root, out = world.root(tmp_path / "a"), tmp_path / "out"
    world.embed(root, out, "cpu")
    (root / "im4.jpg").unlink()
    (root / "im5.jpg").unlink()
    with pytest.raises(FeatureError, match=rf"the image digests its manifest records are not theirs; 2 of them cannot "
                                           rf"be read, e.g. {root}/im4\.jpg\): re-run the embed step for this root"):
        check_images(out, {"s": world.images(root)}, root)


def test_a_shard_of_other_ids_is_refused_naming_the_root_and_the_fix(world, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VSBENCH_EMBED_CACHE", "off")
    root, out = world.root(tmp_path / "a"), tmp_path / "out"
    world.embed(root, out, "cpu")
    images = world.images(root)
    renamed = ImageSet(images.ids[::-1], tuple(images.paths[::-1]))  # the same files, listed in another order
    with pytest.raises(FeatureError) as refused:
        check_images(out, {"s": renamed}, root)
    assert str(refused.value) == (
        f"{out / STEM}.npz holds the features of other ids than --root {root} lists for it (another dataset, other "
        "--benchmark-options, or images added or removed since the embed step): re-run the embed step for this root "
        f"and options (vsbench similarity run --root {root} --out {out.parent}), or use the --out of the run that "
        "embedded them")
