"""An image replaced *while* the embed step reads it (issue 46): the bytes hashed are the bytes used.

The step hashes every image for the shard's key, and DataLoader workers read the files again to
decode them. Before issue 46 a file replaced in between (an rsync updating the dataset during a run,
by ``mv`` or in place) was embedded from its new bytes but recorded under its old digest: in the
shard (complete under a key naming the old bytes) and in the shared embedding cache, so every later
run meeting the old bytes, even a fresh one into a new ``--out``, got the other picture's features,
and putting the original bytes back kept the poisoned shard.

Here the file is changed from inside the loader (``workers=0``: deterministic) at seeded moments,
and every run after it, re-run or fresh, cache on or off, must equal a fresh run on the bytes it
says it used; each cached row must be the descriptor of the bytes its digest names.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from tests.integration.tiny_model import scripted_model
from vsbench.io.digests import combine
from vsbench.io.features import FeatureSet, ImageSet, load_features, save_features
from vsbench.retrieval import embed

pytestmark = [pytest.mark.filterwarnings("ignore:`torch.jit.*` is deprecated:FutureWarning"),
              pytest.mark.usefixtures("settled", "one_thread")]  # the memo remembers every file: the stat shortcut is on
COUNT = 6
DECODES = ("cpu", "gpu")  # "gpu" on the CPU: the batched tensor path (EncodedFiles), with libjpeg-turbo



def _photo(seed: int, inverted: bool) -> bytes:
    """A flat colour with noise: a tiny mean-pooling network tells the two variants apart by far."""
    rng = np.random.default_rng(seed)
    colour = rng.integers(0, 256, 3)
    pixels = np.clip(colour + rng.integers(-20, 21, (40, 48, 3)), 0, 255).astype(np.uint8)
    if inverted:
        pixels = 255 - pixels
    buffer = __import__("io").BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


class World:
    """Two versions of each of :data:`COUNT` images (``A``: the dataset, ``B``: what a sync writes
    over it), their digests and each version's descriptor from a fresh, uncached run per decoder."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.ids = [f"im{n}" for n in range(COUNT)]
        self.bytes = {v: {i: _photo(n, v == "B") for n, i in enumerate(self.ids)} for v in "AB"}
        self.digest = {v: {i: hashlib.sha256(d).hexdigest() for i, d in self.bytes[v].items()} for v in "AB"}
        self.model = scripted_model(base / "model.pt", 0)
        self.options = {"path": str(self.model), "input_size": 32, "resize_size": 32, "preserve_aspect_ratio": False}
        self.reference: dict[tuple[str, str], dict[str, np.ndarray]] = {}
        before = os.environ.get("VSBENCH_EMBED_CACHE")
        os.environ["VSBENCH_EMBED_CACHE"] = "off"  # fresh, uncached (the conftest's per-test fixture is not up yet)
        try:
            for decode in DECODES:
                for v in "AB":
                    root = self.root(base / f"ref-{v}", v)
                    features = load_features(self.embed(root, base / f"ref-{v}-{decode}", decode))
                    self.reference[decode, v] = dict(zip(features.ids.tolist(), features.features))
        finally:
            if before is None:
                os.environ.pop("VSBENCH_EMBED_CACHE", None)
            else:
                os.environ["VSBENCH_EMBED_CACHE"] = before

    def root(self, folder: Path, version: str = "A") -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        for i in self.ids:
            (folder / f"{i}.jpg").write_bytes(self.bytes[version][i])
        return folder

    def images(self, root: Path) -> ImageSet:
        return ImageSet(np.asarray(self.ids), [root / f"{i}.jpg" for i in self.ids])

    def embed(self, root: Path, out: Path, decode: str, batch_size: int = 2) -> Path:
        return embed.embed_image_set("torchscript", self.images(root), out, set_name="s", workers=0, progress=False,
                                     device="cpu", model_options=self.options, batch_size=batch_size, decode=decode)

    def variant(self, decode: str, image_id: str, row: np.ndarray) -> str:
        """Which version's descriptor ``row`` is (asserting it is one of them)."""
        distance = {v: float(np.abs(row - self.reference[decode, v][image_id]).max()) for v in "AB"}
        best = min(distance, key=distance.__getitem__)
        assert distance[best] < 1e-4 and max(distance.values()) > 1e-3, (image_id, distance)
        return best

    def check_shard(self, features_path: Path, decode: str) -> dict[str, str]:
        """A complete shard holds, for each image, the descriptor of the bytes its key names."""
        manifest = json.loads(features_path.with_suffix(".json").read_text())
        assert manifest["complete"] is True
        features = load_features(features_path)
        assert features.ids.tolist() == self.ids
        used = {i: self.variant(decode, i, row) for i, row in zip(self.ids, features.features)}
        assert manifest["key"]["inputs"]["images_sha256"] == combine((i, self.digest[used[i]][i]) for i in self.ids), \
            f"the shard holds the descriptors of {used} but its key names other bytes"
        return used

    def check_cache(self, cache: Path, *, filled: bool = False) -> None:
        """Every cached row is the descriptor of the bytes its digest names; ``filled``: after a cached
        run, so there must be rows to check."""
        owner = {self.digest[v][i]: (v, i) for v in "AB" for i in self.ids}
        chunks = sorted(cache.glob("*/*/chunk-*.npz"))  # <signer id>/<key digest>/ (issue 54)
        assert chunks or not filled, f"no cached chunk under {cache}: the check would pass on nothing"
        for chunk in chunks:
            decode = "gpu" if "device-decode" in (chunk.parent / "key.json").read_text() else "cpu"
            with np.load(chunk) as data:
                for digest, row in zip(data["digests"].tolist(), data["features"]):
                    assert digest in owner, "a row cached under a digest of no version"
                    v, i = owner[digest]
                    assert self.variant(decode, i, row) == v, f"{i}: the descriptor of other bytes cached under {v}'s digest"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("changes"))


def _change(path: Path, data: bytes, how: str) -> None:
    """Replace ``path``'s bytes: ``in place`` (truncate and write) or by ``rename`` (a sync's way)."""
    if how == "in place":
        with open(path, "r+b") as handle:
            handle.truncate(0)
            handle.write(data)
    else:
        temporary = path.with_name(f".{path.name}.partial")
        temporary.write_bytes(data)
        os.replace(temporary, path)


def _during_read(monkeypatch: pytest.MonkeyPatch, at: int, change: Callable[[], None]) -> None:
    """Run ``change`` once, just before the loader reads its ``at``-th item (either dataset)."""
    done: list[bool] = []
    for dataset in (embed.ImageFiles, embed.EncodedFiles):
        real = dataset.__getitem__

        def getitem(self, index, real=real):
            if index == at and not done:
                done.append(True)
                change()
            return real(self, index)

        monkeypatch.setattr(dataset, "__getitem__", getitem)


def _cache(monkeypatch: pytest.MonkeyPatch, folder: Path | None) -> None:
    monkeypatch.setenv("VSBENCH_EMBED_CACHE", str(folder) if folder else "off")


def test_a_file_changed_during_the_embed_is_used_consistently_or_named(world: World, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The property, on seeded examples: whatever moment an image is replaced at, in place or by
    rename, with the cache on or off, the run either completes with the descriptors of the bytes
    its key names or stops naming the file; the cache never holds a row under a digest of other
    bytes; and every later run, re-run or fresh, cache on or off, equals a fresh run on the bytes
    now on disk."""
    rng = random.Random(46)
    outcomes: list[str] = []
    for example in range(10):
        work = tmp_path / f"example-{example}"
        root, cache = world.root(work / "root"), work / "cache"
        target, at = rng.randrange(COUNT), rng.randrange(COUNT)
        how, decode, cached = rng.choice(["in place", "rename"]), rng.choice(DECODES), rng.random() < 0.75
        path = root / f"{world.ids[target]}.jpg"
        case = f"example {example}: {world.ids[target]} replaced {how} before item {at} is read ({decode}, cache {cached})"
        _cache(monkeypatch, cache if cached else None)
        with monkeypatch.context() as patch:
            _during_read(patch, at, lambda path=path, data=world.bytes["B"][world.ids[target]], how=how:
                         _change(path, data, how))
            try:
                features_path = world.embed(root, work / "out", decode, batch_size=rng.choice([1, 2, 4]))
            except embed.InputsChanged as exc:
                outcomes.append("stopped")
                assert str(path) in str(exc) and "\n" not in str(exc), case
                manifest = json.loads((work / "out" / "s.shard-0-of-1.json").read_text())
                assert manifest["complete"] is False, case
                memo = json.loads(embed.inputs_path(work / "out" / "s.shard-0-of-1.npz").read_text())
                assert str(path) not in memo["names"], f"{case}: the memo still remembers the stale record"
            else:
                outcomes.append("complete")
                world.check_shard(features_path, decode)
        world.check_cache(cache)
        now = {i: "B" if i == world.ids[target] else "A" for i in world.ids}
        for name, out, where in (("re-run", work / "out", cache), ("fresh, cached", work / "fresh", cache),
                                 ("fresh, uncached", work / "bare", None)):
            _cache(monkeypatch, where)
            assert world.check_shard(world.embed(root, out, decode), decode) == now, f"{case}: {name}"
        world.check_cache(cache, filled=True)
    assert {"stopped", "complete"} <= set(outcomes), outcomes  # both kinds of moment were drawn


def _poisoning_run(world: World, root: Path, out: Path, how: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An embed during which im3 is replaced after the key hashed it and before it is decoded;
    returns im3's path. Stops (issue 46) or, before it, completed poisoned."""
    path = root / "im3.jpg"
    with monkeypatch.context() as patch:
        _during_read(patch, 0, lambda: _change(path, world.bytes["B"]["im3"], how))
        try:
            world.embed(root, out, "cpu")
        except embed.InputsChanged as exc:
            assert str(exc).startswith(f"{path}: changed while embed s.shard-0-of-1 read it"), exc
    return path


@pytest.mark.parametrize("how", ["in place", "rename"])
def test_a_fresh_run_after_the_change_is_not_served_the_other_pictures_features(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """The poisoned-cache scenario of the issue: a fresh run into a new ``--out`` over a copy of
    the dataset with the original bytes, sharing the cache, gets the original's features."""
    cache = tmp_path / "cache"
    _cache(monkeypatch, cache)
    _poisoning_run(world, world.root(tmp_path / "synced"), tmp_path / "out", how, monkeypatch)
    mirror = world.root(tmp_path / "mirror")  # the original bytes, elsewhere
    assert world.check_shard(world.embed(mirror, tmp_path / "new-out", "cpu"), "cpu") == dict.fromkeys(world.ids, "A")
    world.check_cache(cache, filled=True)


def test_putting_the_original_bytes_back_does_not_keep_a_poisoned_shard(world: World, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _cache(monkeypatch, None)  # the shard alone: no cache to answer from
    root = world.root(tmp_path / "root")
    path = _poisoning_run(world, root, tmp_path / "out", "in place", monkeypatch)
    _change(path, world.bytes["A"]["im3"], "in place")
    assert world.check_shard(world.embed(root, tmp_path / "out", "cpu"), "cpu") == dict.fromkeys(world.ids, "A")


def _model_file(world: World, model: str, path: Path, version: int) -> Path:
    """Version 0 or 1 of the file the ``path`` option names: a TorchScript file or a feature file."""
    if model == "torchscript":
        return scripted_model(path, version)
    rows = np.stack([world.reference["cpu", "AB"[version]][i] for i in world.ids])
    save_features(path, FeatureSet(np.asarray(world.ids), rows))
    return path


@pytest.mark.parametrize("model", ["torchscript", "precomputed"])
def test_a_model_file_changed_while_loading_is_refused_in_one_line(world: World, tmp_path: Path, model: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The file a model option names (a TorchScript file, loaded from the bytes its loader hashes;
    a ``precomputed`` .npz, re-checked after loading), replaced by rename after the key hashed it and
    before the model was loaded: the run stops naming it, nothing is recorded, the next run is right."""
    suffix = ".pt" if model == "torchscript" else ".npz"
    path = _model_file(world, model, tmp_path / f"model{suffix}", 0)
    options = {**world.options, "path": str(path)} if model == "torchscript" else {"path": str(path)}
    root = world.root(tmp_path / "root")
    real = embed.input_key

    def then_replace(*args, **kwargs):
        found = real(*args, **kwargs)
        os.replace(_model_file(world, model, tmp_path / f"other{suffix}", 1), path)
        return found

    monkeypatch.setattr(embed, "input_key", then_replace)
    run = dict(set_name="s", workers=0, progress=False, device="cpu", model_options=options)
    with pytest.raises(ValueError, match=f"^{path}: the file model option 'path' names changed"):
        embed.embed_image_set(model, world.images(root), tmp_path / "out", **run)
    assert json.loads((tmp_path / "out" / "s.shard-0-of-1.json").read_text())["complete"] is False
    monkeypatch.setattr(embed, "input_key", real)
    again = load_features(embed.embed_image_set(model, world.images(root), tmp_path / "out", **run))
    other = {**options, "path": str(_model_file(world, model, tmp_path / f"fresh{suffix}", 1))}  # the bytes now there
    fresh = load_features(embed.embed_image_set(model, world.images(root), tmp_path / "fresh",
                                                **{**run, "model_options": other}))
    np.testing.assert_allclose(again.features, fresh.features, atol=1e-5)


def test_the_cli_stops_with_exit_2_and_one_line(world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through `similarity run`: one line naming the file, exit code 2; run again, the table is a
    fresh run's on the new bytes."""
    from vsbench.benchmarks.disc.synth import generate_disc
    from vsbench.cli.app import app

    root = tmp_path / "disc"
    generate_disc(root, references=8, queries=6, train=8, seed=3)
    victim = sorted((root / "val_ref").glob("*.jpg"))[2]
    replacement = Image.open(victim).convert("RGB").transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    real = embed.input_key
    changed: list[Path] = []

    def then_replace(paths, *args, **kwargs):
        found = real(paths, *args, **kwargs)
        if victim in paths and not changed:
            changed.append(victim)
            replacement.save(tmp_path / "new.jpg")
            os.replace(tmp_path / "new.jpg", victim)
        return found

    def run(out: Path) -> tuple[int, str]:
        result = CliRunner().invoke(app, [
            "similarity", "run", "--benchmark", "disc", "--root", str(root), "--out", str(out), "--model",
            "torchscript", "--model-options", json.dumps(world.options), "--codecs", "Flat", "--batch-size", "4",
            "--no-track", "--device", "cpu"], env={"VSBENCH_MAX_FAILURE_RATE": "0.5"})
        return result.exit_code, result.output

    with monkeypatch.context() as patch:
        patch.setattr(embed, "input_key", then_replace)
        code, output = run(tmp_path / "out")
    assert code == 2, output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {victim}: changed while embed"), output
    code, again = run(tmp_path / "out")
    assert code == 0, again
    code, fresh = run(tmp_path / "fresh")
    table = [line for line in again.splitlines() if line.startswith("Flat,")]
    assert table and table == [line for line in fresh.splitlines() if line.startswith("Flat,")]
