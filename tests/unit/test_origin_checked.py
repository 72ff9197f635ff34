"""Which shards a step spares re-checking against ``--root`` (issue 56, retrieval/origin.py).

``check_images(..., checked=)`` skips a shard only when ``checked`` holds the very digest the
shard's manifest records. Planted by hand, ``checked.get(stem) == recorded`` -> ``stem in checked``
passed every fast test (only tests/integration/test_step_inputs.py saw it): a shard re-embedded from
other images after it was checked would be spared, and scored against a root it was not embedded
from. Seen failing with that bug planted.
"""

from __future__ import annotations

import pytest
import torch

from tests.unit.test_embed_changes import World, _change
from vsbench.io.features import FeatureError
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
    with pytest.raises(FeatureError, match=rf"^{out / STEM}\.npz was embedded from other images than those --root {root}"):
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
