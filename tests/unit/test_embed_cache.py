"""The embedding cache: a second run over the same images embeds nothing; changing any part of
the key (model, options, weights, output layer, preprocessing, precision, library versions, image
bytes) misses; NaN outputs name the image and are never cached."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vsbench import embed
from vsbench.benchmarks.base import ImageSet
from vsbench.embed import embed_image_set
from vsbench.features import FeatureError, load_features
from vsbench.models import cache as cache_module
from vsbench.models.registry import Embedder

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
pytest.importorskip("timm")
MODEL = "timm:test_resnet"


@pytest.fixture(autouse=True)
def setup(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)


@pytest.fixture
def images(tmp_path: Path) -> ImageSet:
    rng = np.random.default_rng(4)
    ids, paths = [], []
    for n in range(5):
        path = tmp_path / "images" / f"i{n}.png"
        path.parent.mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (40 + n, 48, 3), dtype=np.uint8)).save(path)
        ids.append(f"i{n}")
        paths.append(path)
    return ImageSet(np.asarray(ids), paths)


def run(images: ImageSet, out: Path, *, model: str = MODEL, options: dict | None = None, amp: bool = True,
        set_name: str = "s") -> dict:
    path = embed_image_set(model, images, out, set_name=set_name, workers=0, progress=False, device="cpu",
                           amp=amp, model_options={"weights": "random", **(options or {})})
    return json.loads(path.with_suffix(".json").read_text())


def test_a_second_benchmark_over_the_same_images_embeds_nothing(tmp_path: Path, images: ImageSet,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    first = run(images, tmp_path / "bench-a")
    assert first["cache"]["hits"] == 0 and first["cache"]["embedded"] == 5
    assert first["cache"]["key"]["model"] == MODEL and len(first["cache"]["key_sha256"]) == 64

    def refuse(*args, **kwargs):
        raise AssertionError("embedded again")

    monkeypatch.setattr(embed, "run_embedder", refuse)
    second = run(images, tmp_path / "bench-b", set_name="other")  # another benchmark's out dir and set
    assert second["cache"]["hits"] == 5 and second["cache"]["embedded"] == 0
    assert second["cache"]["key_sha256"] == first["cache"]["key_sha256"]
    a, b = load_features(tmp_path / "bench-a" / "s.shard-0-of-1.npz"), load_features(tmp_path / "bench-b" / "other.shard-0-of-1.npz")
    assert a.ids.tolist() == b.ids.tolist() and np.array_equal(a.features, b.features)


def test_a_partly_cached_set_embeds_only_the_new_images(tmp_path: Path, images: ImageSet) -> None:
    run(ImageSet(images.ids[:3], images.paths[:3]), tmp_path / "a")
    both = run(images, tmp_path / "b")
    assert (both["cache"]["hits"], both["cache"]["embedded"]) == (3, 2)
    uncached = tmp_path / "nocache"
    cached = load_features(tmp_path / "b" / "s.shard-0-of-1.npz")
    import os

    os.environ["VSBENCH_EMBED_CACHE"] = "off"  # restored by the conftest fixture's monkeypatch
    fresh = run(images, uncached)
    assert fresh["cache"] == {"enabled": False, "hits": 0, "embedded": 5}
    np.testing.assert_allclose(load_features(uncached / "s.shard-0-of-1.npz").features, cached.features, atol=1e-6)


def _miss(images: ImageSet, out: Path, field: str = "", **kwargs) -> dict:
    manifest = run(images, out, **kwargs)
    assert manifest["cache"]["hits"] == 0, f"{kwargs or field} was served from the cache: {manifest['cache']['key']}"
    return manifest


def test_every_part_of_the_key_misses(tmp_path: Path, images: ImageSet, monkeypatch: pytest.MonkeyPatch) -> None:
    import timm
    from safetensors.torch import save_file

    base = run(images, tmp_path / "base")
    keys = {base["cache"]["key_sha256"]}

    # the model name
    keys.add(_miss(images, tmp_path / "name", model="timm:test_efficientnet")["cache"]["key_sha256"])
    # the weights: a file with other values for the same architecture
    torch.manual_seed(7)
    other = timm.create_model("test_resnet", num_classes=0).state_dict()
    save_file({k: v.contiguous() for k, v in other.items()}, str(tmp_path / "w.safetensors"))
    keys.add(_miss(images, tmp_path / "weights", options={"weights": str(tmp_path / "w.safetensors")})["cache"]["key_sha256"])
    # precision: strict float32 against the default (on the CPU both are float32: same key, a hit)
    assert run(images, tmp_path / "amp", amp=False)["cache"]["hits"] == 5
    real_precision, real_versions = embed._precision, cache_module.library_versions
    monkeypatch.setattr(embed, "_precision", lambda setup, use_amp: "cuda:bfloat16")
    keys.add(_miss(images, tmp_path / "precision")["cache"]["key_sha256"])
    monkeypatch.setattr(embed, "_precision", real_precision)
    # library versions
    monkeypatch.setattr(cache_module, "library_versions", lambda: {**real_versions(), "timm": "0.0.1"})
    keys.add(_miss(images, tmp_path / "versions")["cache"]["key_sha256"])
    monkeypatch.setattr(cache_module, "library_versions", real_versions)

    # preprocessing and output layer: the same network, described differently
    real_build = embed.build_model

    def altered(field: str):
        def build(name, **options):
            model = real_build(name, **options)
            if field == "output":
                model.output = "another layer"
            else:
                model.preprocessing = dataclasses.replace(model.preprocessing, **{field: {
                    "resize_size": model.preprocessing.resize_size + 8, "interpolation": "nearest",
                    "crop_offset": "floor", "mean": (0.4, 0.4, 0.4), "resize_mode": "square"}[field]})
            return model
        return build

    for field in ("resize_size", "interpolation", "crop_offset", "mean", "resize_mode", "output"):
        monkeypatch.setattr(embed, "build_model", altered(field))
        keys.add(_miss(images, tmp_path / f"pre-{field}", field=field)["cache"]["key_sha256"])
    assert len(keys) == 11

    # the image bytes: one changed image misses alone
    monkeypatch.setattr(embed, "build_model", real_build)
    Image.open(images.paths[0]).rotate(90).save(images.paths[0])
    changed = run(images, tmp_path / "image")
    assert (changed["cache"]["hits"], changed["cache"]["embedded"]) == (4, 1)


def test_key_options_exclude_where_the_weights_came_from_but_keep_architecture_options() -> None:
    net = Embedder("m", torch.nn.Flatten(), 3, embed.Preprocessing(8, 8, (0, 0, 0), (1, 1, 1)))
    a = cache_module.model_key("m", {"weights": "/a/w.safetensors", "size": 1}, net, "cpu:float32")
    b = cache_module.model_key("m", {"weights": "/b/copy.safetensors", "size": 1}, net, "cpu:float32")
    c = cache_module.model_key("m", {"weights": "/a/w.safetensors", "size": 2}, net, "cpu:float32")
    assert cache_module.key_digest(a) == cache_module.key_digest(b) != cache_module.key_digest(c)


class NaNOnBrightImages(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=(1, 2, 3))
        out = torch.stack([mean, mean], 1)
        return torch.where((mean > 0.02)[:, None], torch.full_like(out, float("nan")), out)


def test_a_model_that_outputs_nan_names_the_image_and_caches_nothing(tmp_path: Path, images: ImageSet,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    Image.new("RGB", (40, 40), (255, 255, 255)).save(images.paths[3])
    model = Embedder("nan-model", NaNOnBrightImages(), 2, embed.Preprocessing(16, 16, (0.5,) * 3, (0.5,) * 3))
    monkeypatch.setattr(embed, "build_model", lambda name, **options: model)
    with pytest.raises(FeatureError, match=r"nan-model output NaN or infinite values for image 'i3' \(.*i3.png\)"):
        run(images, tmp_path / "nan")
    root = Path(cache_module.cache_root())
    assert not list(root.glob("*/chunk-*.npz"))


def test_an_unwritable_cache_warns_and_keeps_the_embeddings(tmp_path: Path, images: ImageSet,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """A cache is a shortcut: one that cannot be written (here its parent is a file, which stops root
    too; in a container, a host path not mounted) costs a warning, never the step."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv(cache_module.CACHE_ENV, str(blocker / "cache"))
    manifest = run(images, tmp_path / "out")
    assert manifest["cache"]["embedded"] == 5 and manifest["complete"] is True
    assert "cannot be written" in caplog.text and cache_module.CACHE_ENV in caplog.text
    assert load_features(tmp_path / "out" / manifest["features"]).features.shape[0] == 5
