"""Embedding on tiny generated images: shards merge to the unsharded result, finished shards are
kept, unreadable images are reported by id, precomputed features go through the same path."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from vsbench.io.features import FeatureError, FeatureSet, ImageSet, load_features, save_features
from vsbench.models.registry import IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from vsbench.retrieval import embed
from vsbench.retrieval.embed import embed_image_set, load_image
from vsbench.retrieval.shards import merge_shards, shard_of

pytestmark = [pytest.mark.filterwarnings("ignore:`torch.jit.*` is deprecated:FutureWarning"),
              pytest.mark.usefixtures("one_thread")]
SIZES = [(40, 30), (30, 44), (36, 36), (50, 28), (28, 40), (64, 48), (33, 35)]



class TinyDescriptor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, stride=2)
        self.fc = nn.Linear(6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))


@pytest.fixture(autouse=True)
def accept_the_bad_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """The image set holds 2 bad files in 9 on purpose: over the 1% default failure rate."""
    monkeypatch.setenv("VSBENCH_MAX_FAILURE_RATE", "1")


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("model") / "tiny.torchscript.pt"
    torch.jit.script(TinyDescriptor().eval()).save(str(path))
    return path


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> ImageSet:
    """Seven small JPEGs of different shapes, one corrupt file and one missing file."""
    folder = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    ids, paths = [], []
    for n, (w, h) in enumerate(SIZES):
        path = folder / f"img{n}.jpg"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path, quality=90)
        ids.append(f"img{n}")
        paths.append(path)
    (folder / "bad.jpg").write_bytes(b"\xff\xd8 this is not a jpeg")
    ids.insert(3, "bad")
    paths.insert(3, folder / "bad.jpg")
    ids.append("gone")
    paths.append(folder / "gone.jpg")
    return ImageSet(tuple(ids), tuple(paths))


def _options(scripted: Path, **extra) -> dict:
    return {"path": str(scripted), "input_size": 24, "resize_size": 28, "preserve_aspect_ratio": False,
            **extra}


def test_shard_of_is_contiguous_balanced_and_complete() -> None:
    for count in (0, 1, 5, 10, 11):
        for num_shards in (1, 2, 3, 7):
            slices = [shard_of(range(count), i, num_shards) for i in range(num_shards)]
            covered = [x for s in slices for x in range(count)[s]]
            assert covered == list(range(count))
            sizes = [len(range(count)[s]) for s in slices]
            assert max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError, match="shard 2 of 2"):
        shard_of([1, 2], 2, 2)


def test_load_image_matches_torchvision_resize_and_center_crop(tmp_path: Path) -> None:
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as F

    rng = np.random.default_rng(1)
    path = tmp_path / "photo.png"  # PNG: no JPEG draft scaling, so the pixels must match exactly
    Image.fromarray(rng.integers(0, 256, (61, 90, 3), dtype=np.uint8)).save(path)
    reference_image = Image.open(path).convert("RGB")
    crop = Preprocessing(32, 37, IMAGENET_MEAN, IMAGENET_STD, "bicubic")
    expected = F.center_crop(F.resize(reference_image, 37, InterpolationMode.BICUBIC), 32)
    np.testing.assert_array_equal(load_image(path, crop), np.asarray(expected))
    keep = Preprocessing(40, 40, IMAGENET_MEAN, IMAGENET_STD, preserve_aspect_ratio=True)
    np.testing.assert_array_equal(load_image(path, keep), np.asarray(F.resize(reference_image, 40)))
    square = Preprocessing(24, 24, IMAGENET_MEAN, IMAGENET_STD)
    assert load_image(path, square).shape == (24, 24, 3)


def test_shards_merge_to_the_unsharded_features(images: ImageSet, scripted: Path, tmp_path: Path) -> None:
    options = _options(scripted)
    whole = embed_image_set("torchscript", images, tmp_path / "whole", set_name="query", batch_size=3,
                            workers=0, model_options=options, progress=False)
    for shard in (0, 1):
        embed_image_set("torchscript", images, tmp_path / "sharded", set_name="query", shard=shard,
                        num_shards=2, batch_size=2, workers=shard, model_options=options, progress=False)
    merged = merge_shards(tmp_path / "sharded", "query")
    unsharded = load_features(whole)
    assert merged.ids.tolist() == unsharded.ids.tolist() == [f"img{n}" for n in range(len(SIZES))]
    np.testing.assert_allclose(merged.features, unsharded.features, rtol=1e-5, atol=1e-6)
    on_disk = load_features(tmp_path / "sharded" / "query.npz")
    np.testing.assert_array_equal(on_disk.features, merged.features)
    summary = json.loads((tmp_path / "sharded" / "query.json").read_text())
    assert summary["num_shards"] == 2 and summary["count"] == len(SIZES) and summary["dim"] == 5


def test_unreadable_images_are_reported_by_id(images: ImageSet, scripted: Path, tmp_path: Path) -> None:
    path = embed_image_set("torchscript", images, tmp_path, set_name="refs", batch_size=4, workers=0,
                           model_options=_options(scripted), progress=False)
    manifest = json.loads(path.with_suffix(".json").read_text())
    failed = {f["id"]: f["reason"] for f in manifest["failed"]}
    assert set(failed) == {"bad", "gone"}
    assert failed["bad"].startswith("UnidentifiedImageError")
    assert failed["gone"].startswith("FileNotFoundError")
    assert manifest["complete"] and manifest["count"] == len(SIZES)
    assert manifest["requested"] == len(SIZES) + 2
    assert manifest["preprocessing"]["input_size"] == 24 and manifest["device"] == "cpu"
    assert manifest["images_per_second"] > 0 and manifest["amp_dtype"] is None
    assert "bad" not in load_features(path).ids.tolist()


def test_a_complete_shard_is_kept(images: ImageSet, scripted: Path, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    options = _options(scripted)
    first = embed_image_set("torchscript", images, tmp_path, set_name="q", shard=1, num_shards=2, workers=0,
                            model_options=options, progress=False)
    written = first.read_bytes()

    def no_model(*args, **kwargs):
        raise AssertionError("the model was built again")

    monkeypatch.setattr(embed, "build_model", no_model)
    again = embed_image_set("torchscript", images, tmp_path, set_name="q", shard=1, num_shards=2, workers=0,
                            model_options=options, progress=False)
    assert again == first and again.read_bytes() == written
    # Different options, or a different shard of the ids, are different work.
    with pytest.raises(AssertionError, match="built again"):
        embed_image_set("torchscript", images, tmp_path, set_name="q", shard=1, num_shards=2, workers=0,
                        model_options=_options(scripted, interpolation="bicubic"), progress=False)
    with pytest.raises(AssertionError, match="built again"):
        embed_image_set("torchscript", images, tmp_path, set_name="q", shard=0, num_shards=2, workers=0,
                        model_options=options, progress=False)


def test_aspect_preserving_batches_by_shape_in_input_order(images: ImageSet, scripted: Path,
                                                           tmp_path: Path) -> None:
    options = {"path": str(scripted), "input_size": 20, "resize_size": 20}  # SSCD-style: no crop
    batched = load_features(embed_image_set("torchscript", images, tmp_path / "b", set_name="s", batch_size=8,
                                            workers=0, model_options=options, progress=False))
    single = load_features(embed_image_set("torchscript", images, tmp_path / "s", set_name="s", batch_size=1,
                                           workers=0, model_options=options, progress=False))
    assert batched.ids.tolist() == single.ids.tolist() == [f"img{n}" for n in range(len(SIZES))]
    np.testing.assert_allclose(batched.features, single.features, rtol=1e-5, atol=1e-6)


def test_precomputed_features_are_selected_by_id(images: ImageSet, tmp_path: Path) -> None:
    ids = [i for i in images.ids if i not in ("bad", "gone")]
    table = FeatureSet(np.asarray(ids[::-1]), np.arange(len(ids) * 4, dtype=np.float32).reshape(-1, 4))
    save_features(tmp_path / "submitted.npz", table)
    subset = ImageSet(tuple(ids), tuple(images.paths[images.ids.index(i)] for i in ids))
    out = embed_image_set("precomputed", subset, tmp_path / "out", set_name="gallery",
                          model_options={"path": str(tmp_path / "submitted.npz")}, progress=False)
    assert load_features(out).ids.tolist() == ids
    np.testing.assert_array_equal(load_features(out).features, table.features[::-1])
    with pytest.raises(FeatureError, match="'gone'"):
        embed_image_set("precomputed", ImageSet(("img0", "gone"), images.paths[:2]), tmp_path / "out2",
                        set_name="gallery", model_options={"path": str(tmp_path / "submitted.npz")},
                        progress=False)


def test_merge_refuses_missing_or_mixed_shards(images: ImageSet, tmp_path: Path) -> None:
    ids = ("img0", "img1", "img2")
    save_features(tmp_path / "table.npz", FeatureSet(np.asarray(ids), np.ones((3, 2), np.float32)))
    subset = ImageSet(ids, images.paths[:3])
    options = {"path": str(tmp_path / "table.npz")}
    embed_image_set("precomputed", subset, tmp_path, set_name="x", shard=0, num_shards=3,
                    model_options=options, progress=False)
    with pytest.raises(FeatureError, match=r"missing shards \[1, 2\] of 3"):
        merge_shards(tmp_path, "x")
    embed_image_set("precomputed", subset, tmp_path, set_name="x", shard=0, num_shards=1,
                    model_options=options, progress=False)
    with pytest.raises(FeatureError, match=r"different shard counts \[1, 3\]"):
        merge_shards(tmp_path, "x")
    with pytest.raises(FeatureError, match="no shards of 'y'"):
        merge_shards(tmp_path, "y")
    with pytest.raises(ValueError, match="set_name"):
        embed_image_set("precomputed", subset, tmp_path, set_name="../up", model_options=options,
                        progress=False)


def test_too_many_unreadable_images_fail_the_shard_after_listing_them(images: ImageSet, scripted: Path,
                                                                       tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from vsbench.imaging.limits import TooManyFailures

    monkeypatch.setenv("VSBENCH_MAX_FAILURE_RATE", "0.1")  # 2 of 9 unreadable: 22%
    with pytest.raises(TooManyFailures, match=r"2 of 9 images \(22\.2%\).*maximum failure rate of 10\.0%"):
        embed_image_set("torchscript", images, tmp_path, set_name="refs", batch_size=4, workers=0,
                        model_options=_options(scripted), progress=False)
    manifest = json.loads((tmp_path / "refs.shard-0-of-1.json").read_text())
    assert manifest["complete"] is False and {f["id"] for f in manifest["failed"]} == {"bad", "gone"}
    assert "maximum failure rate" in manifest["stopped"]


def test_a_pixel_bomb_is_a_listed_failure_not_a_crash(tmp_path: Path, scripted: Path) -> None:
    from tests.unit.test_resize import bomb_jpeg

    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.new("RGB", (40, 30), "blue").save(folder / "ok.jpg")
    (folder / "bomb.jpg").write_bytes(bomb_jpeg(30000, 30000))
    images = ImageSet(("ok", "bomb"), (folder / "ok.jpg", folder / "bomb.jpg"))
    path = embed_image_set("torchscript", images, tmp_path / "out", set_name="s", batch_size=2, workers=0,
                           model_options=_options(scripted), progress=False)
    failed = {f["id"]: f["reason"] for f in json.loads(path.with_suffix(".json").read_text())["failed"]}
    assert list(failed) == ["bomb"] and "900,000,000 pixels" in failed["bomb"] and "VSBENCH_MAX_IMAGE_PIXELS" in failed["bomb"]
    assert load_features(path).ids.tolist() == ["ok"]


# --- issue 26: what a re-run keeps is verified against its inputs --------------------------------

def _tamper(kind: str, features_path: Path, manifest_path: Path) -> str:
    """Change a finished shard the way a bad disk, a hand edit or an older vsbench leaves it; returns
    the reason the log line must give."""
    manifest = json.loads(manifest_path.read_text())
    kept = load_features(features_path)
    rows = kept.features.copy()
    if kind == "same size, other values":  # kept on size alone before
        rows[0] = 0
        save_features(features_path, FeatureSet(kept.ids, rows))
        return "sha256 differs"
    if kind == "no features_sha256":
        del manifest["features_sha256"]
        manifest_path.write_text(json.dumps(manifest))
        return "no features_sha256"
    if kind == "NaN row":
        rows[1, 0] = np.nan
        replaced, reason = FeatureSet(kept.ids, rows), "NaN or infinite"
    elif kind == "a row missing":
        replaced, reason = FeatureSet(kept.ids[1:], rows[1:]), "not the 9 images asked for"
    elif kind == "out of order":
        replaced, reason = FeatureSet(kept.ids[::-1], rows[::-1]), "not in input order"
    else:  # "other width"
        replaced, reason = FeatureSet(kept.ids, np.zeros((len(rows), 3), np.float32)), "3-d float32, the manifest says"
    save_features(features_path, replaced)  # and the manifest re-signed: only the content checks can tell
    manifest.update(features_bytes=features_path.stat().st_size,
                    features_sha256=hashlib.sha256(features_path.read_bytes()).hexdigest())
    manifest_path.write_text(json.dumps(manifest))
    return reason


@pytest.mark.parametrize("kind", ["same size, other values", "no features_sha256", "NaN row", "a row missing",
                                  "out of order", "other width"])
def test_a_finished_shard_is_kept_only_when_it_answers_its_inputs(
        images: ImageSet, scripted: Path, tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    options = _options(scripted)
    first = embed_image_set("torchscript", images, tmp_path, set_name="q", workers=0, model_options=options,
                            progress=False)
    manifest_path = first.with_suffix(".json")
    expected = first.read_bytes()
    reason = _tamper(kind, first, manifest_path)
    caplog.clear()
    again = embed_image_set("torchscript", images, tmp_path, set_name="q", workers=0, model_options=options,
                            progress=False)
    lines = [r.getMessage() for r in caplog.records if "not kept" in r.getMessage()]
    assert len(lines) == 1 and str(first) in lines[0] and reason in lines[0], lines
    redone = load_features(again)
    assert redone.ids.tolist() == [i for i in images.ids if i not in ("bad", "gone")]
    np.testing.assert_array_equal(redone.features, np.load(io.BytesIO(expected))["features"])
    assert json.loads(manifest_path.read_text())["features_sha256"] == hashlib.sha256(again.read_bytes()).hexdigest()


def test_shards_drawn_with_two_seeds_are_not_merged(images: ImageSet, tmp_path: Path) -> None:
    """A random network re-run with another --seed on one shard only is two models, not one set."""
    ids = ("img0", "img1", "img2", "img4")
    save_features(tmp_path / "table.npz", FeatureSet(np.asarray(ids), np.ones((4, 2), np.float32)))
    subset = ImageSet(ids, images.paths[:4])
    options = {"path": str(tmp_path / "table.npz")}
    for shard, seed in ((0, 0), (1, 5)):
        embed_image_set("precomputed", subset, tmp_path, set_name="x", shard=shard, num_shards=2,
                        model_options=options, progress=False, seed=seed)
    with pytest.raises(FeatureError, match=r"come from different models .*seed.*, 0\].*, 5\]"):
        merge_shards(tmp_path, "x")
    embed_image_set("precomputed", subset, tmp_path, set_name="x", shard=1, num_shards=2, model_options=options,
                    progress=False, seed=0)
    assert len(merge_shards(tmp_path, "x")) == 4
    assert json.loads((tmp_path / "x.json").read_text())["seed"] == 0


# --- issue 49: the shard's key holds the images' content, tested without the slow pipeline -------

def _same_size_other_jpeg(path: Path, seed: int) -> bytes:
    """A JPEG of other pixels, padded after its end marker to ``path``'s exact size (decoders stop
    at the marker), so neither the name nor the size nor the mtime can tell it from the old one."""
    size = path.stat().st_size
    with Image.open(path) as old:
        shape = (old.height, old.width, 3)
    pixels = np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)
    for quality in range(90, 4, -5):
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG", quality=quality)
        if buffer.tell() <= size:
            return buffer.getvalue() + b"\0" * (size - buffer.tell())
    raise AssertionError(f"no JPEG of {shape} fits in {size} bytes")


def test_a_shard_whose_image_changed_under_the_same_size_and_mtime_is_redone(
        images: ImageSet, scripted: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    paths = []
    for path in images.paths:
        if path.exists():
            (folder / path.name).write_bytes(path.read_bytes())
        paths.append(folder / path.name)
    copied = ImageSet(images.ids, tuple(paths))
    options = _options(scripted)
    out = tmp_path / "out"
    first = load_features(embed_image_set("torchscript", copied, out, set_name="q", workers=0, model_options=options,
                                          progress=False))
    target = folder / "img2.jpg"
    stat = target.stat()
    target.write_bytes(_same_size_other_jpeg(target, seed=7))
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (target.stat().st_size, target.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    caplog.clear()
    again = load_features(embed_image_set("torchscript", copied, out, set_name="q", workers=0, model_options=options,
                                          progress=False))
    lines = [r.getMessage() for r in caplog.records if "not kept" in r.getMessage()]
    assert len(lines) == 1 and "the images' bytes changed" in lines[0], lines
    assert again.ids.tolist() == first.ids.tolist()
    row = first.ids.tolist().index("img2")
    assert not np.allclose(again.features[row], first.features[row]), "the changed image's row was not recomputed"
    others = [n for n in range(len(first.ids)) if n != row]
    np.testing.assert_allclose(again.features[others], first.features[others], rtol=1e-5, atol=1e-6)
