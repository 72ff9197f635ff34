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

from vsbench.io.cache_secret import CacheSecret, load_secret
from vsbench.io.features import FeatureError, ImageSet, load_features
from vsbench.models import cache as cache_module
from vsbench.models.registry import Embedder
from vsbench.retrieval import embed
from vsbench.retrieval.embed import embed_image_set

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
        set_name: str = "s", compile: str = "auto") -> dict:
    path = embed_image_set(model, images, out, set_name=set_name, workers=0, progress=False, device="cpu",
                           amp=amp, model_options={"weights": "random", **(options or {})}, compile=compile)
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
    # a compiled network (Inductor sums in other orders); not compiled for real here, only keyed
    real_network_for = embed.network_for
    monkeypatch.setattr(embed, "network_for", lambda network, mode, device: network)
    keys.add(_miss(images, tmp_path / "compiled", compile="on")["cache"]["key_sha256"])
    monkeypatch.setattr(embed, "network_for", real_network_for)

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
    assert len(keys) == 12

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
    assert not list(root.glob("*/*/chunk-*.npz"))


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


def test_a_cache_the_step_cannot_reach_warns_and_embeds(tmp_path: Path, images: ImageSet,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """As a step container's user found a root user's cache, mounted under /root (not passable in
    the image before): looking in the cache is refused; that is a warning and a miss, not a failed step."""
    monkeypatch.setenv(cache_module.CACHE_ENV, str(tmp_path / "cache"))
    real_is_dir = Path.is_dir

    def refused(path: Path) -> bool:
        if path.parent.parent == tmp_path / "cache":  # <root>/<signer id>/<key digest>
            raise PermissionError(13, "Permission denied", str(path))
        return real_is_dir(path)

    monkeypatch.setattr(Path, "is_dir", refused)
    manifest = run(images, tmp_path / "out")
    assert manifest["complete"] is True and manifest["cache"]["hits"] == 0 and manifest["cache"]["embedded"] == 5
    assert "not used: cannot reach it (Permission denied); the images are embedded" in caplog.text


# --- issue 26: the key holds the model's code, configuration and seed ----------------------------

class Pooled(torch.nn.Module):
    """A conv and a pooling: ``mean`` and ``amax`` differ only in forward, not in the state dict."""

    def __init__(self, pooling: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 6, 3)
        self.pooling = pooling

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return y.amax(dim=(2, 3)) if self.pooling == "amax" else y.mean(dim=(2, 3))


def scripted(folder: Path, pooling: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.torchscript.pt"
    torch.jit.script(Pooled(pooling)).save(str(path))
    return path


def run_model(images: ImageSet, out: Path, model: str, options: dict, **kwargs) -> tuple[dict, np.ndarray]:
    path = embed_image_set(model, images, out, set_name="s", workers=0, progress=False, device="cpu",
                           model_options=options, **kwargs)
    return json.loads(path.with_suffix(".json").read_text()), load_features(path).features


def cold(images: ImageSet, out: Path, model: str, options: dict, monkeypatch: pytest.MonkeyPatch,
         **kwargs) -> np.ndarray:
    """The features with no cache at all: what every cached run must equal."""
    with monkeypatch.context() as patched:
        patched.setenv(cache_module.CACHE_ENV, "off")
        return run_model(images, out, model, options, **kwargs)[1]


TS_OPTIONS = {"input_size": 16, "resize_size": 16, "preserve_aspect_ratio": False}


def test_two_torchscript_files_with_the_same_parameters_and_another_pooling_are_two_models(
        tmp_path: Path, images: ImageSet, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second model's run once embedded nothing and reported the first model's numbers."""
    mean, amax = scripted(tmp_path / "mean", "mean"), scripted(tmp_path / "amax", "amax")
    assert torch.equal(torch.jit.load(str(mean)).conv.weight, torch.jit.load(str(amax)).conv.weight)
    first, mean_rows = run_model(images, tmp_path / "a", "torchscript", {"path": str(mean), **TS_OPTIONS})
    second, amax_rows = run_model(images, tmp_path / "b", "torchscript", {"path": str(amax), **TS_OPTIONS})
    assert first["cache"]["key_sha256"] != second["cache"]["key_sha256"]
    assert second["cache"]["hits"] == 0 and second["cache"]["embedded"] == 5
    assert not np.allclose(mean_rows, amax_rows)
    np.testing.assert_array_equal(amax_rows, cold(images, tmp_path / "c", "torchscript",
                                                  {"path": str(amax), **TS_OPTIONS}, monkeypatch))
    # the same file at another path is the same model: a hit
    copy = tmp_path / "copy" / "renamed.pt"
    copy.parent.mkdir()
    copy.write_bytes(amax.read_bytes())
    again, rows = run_model(images, tmp_path / "d", "torchscript", {"path": str(copy), **TS_OPTIONS})
    assert again["cache"]["hits"] == 5 and np.array_equal(rows, amax_rows)


def test_an_hf_config_edited_in_place_is_another_model(tmp_path: Path, images: ImageSet,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers")
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    folder = tmp_path / "vit"
    torch.manual_seed(3)
    ViTModel(ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=24,
                       image_size=32, patch_size=8, hidden_act="gelu"), add_pooling_layer=False).save_pretrained(folder)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    model = f"hf:{folder}"
    first, gelu = run_model(images, tmp_path / "a", model, {})
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    second, relu = run_model(images, tmp_path / "b", model, {})
    assert second["cache"]["hits"] == 0 and second["cache"]["key_sha256"] != first["cache"]["key_sha256"]
    assert not np.allclose(gelu, relu)
    np.testing.assert_array_equal(relu, cold(images, tmp_path / "c", model, {}, monkeypatch))


def test_a_weights_file_replaced_in_place_misses(tmp_path: Path, images: ImageSet) -> None:
    import timm
    from safetensors.torch import save_file

    path = tmp_path / "w.safetensors"
    for seed in (1, 2):
        torch.manual_seed(seed)
        state = timm.create_model("test_resnet", num_classes=0).state_dict()
        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
        manifest = run(images, tmp_path / f"out{seed}", options={"weights": str(path)})
        assert manifest["cache"]["hits"] == 0 and manifest["cache"]["key"]["files"]["weights"] == \
            cache_module.file_digest(path)


def test_random_weights_key_on_their_seed(tmp_path: Path, images: ImageSet, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same seed: one network, one cache entry (a second identical run embeds nothing); another
    seed: another network, and the kept shard of the first seed is not reused for it."""
    first = run(images, tmp_path / "out")
    assert first["seed"] == 0 and first["cache"]["key"]["seed"] == 0
    assert run(images, tmp_path / "again")["cache"]["hits"] == 5
    out = tmp_path / "out"
    path = embed_image_set(MODEL, images, out, set_name="s", workers=0, progress=False, device="cpu",
                           model_options={"weights": "random"}, seed=3)
    third = json.loads(path.with_suffix(".json").read_text())
    assert third["seed"] == 3 and third["cache"]["hits"] == 0 and third["weights_source"].endswith("(seed 3)")
    assert third["cache"]["key_sha256"] != first["cache"]["key_sha256"]
    assert not np.allclose(load_features(path).features,
                           load_features(tmp_path / "again" / "s.shard-0-of-1.npz").features)
    with pytest.raises(ValueError, match="seed.*not a model option"):
        run(images, tmp_path / "bad", options={"seed": 3})


# --- issue 26: cached rows are checked when read -------------------------------------------------

def only_chunk(root: Path) -> Path:
    (chunk,) = root.glob("*/*/chunk-*.npz")  # <signer id>/<key digest>/
    return chunk


def bad_chunks(key: str, names: np.ndarray, rows: np.ndarray) -> dict[str, tuple[dict, str]]:
    """What a chunk in place of the real one (in the folder of model key ``key``) may hold, and the
    reason the log line must give."""
    nan, inf = rows.copy(), rows.copy()
    nan[2, 0] = np.nan
    inf[1, 3] = np.inf
    good = np.asarray(cache_module.chunk_digest(key, names, rows))
    changed = rows.copy()
    changed[0] = rows[1]  # one image's row replaced by another's (the issue's copy query given its reference's row)
    signed_good = signed(key, names, rows)
    return {
        "100-d rows": ({"digests": names, "features": rng_rows(len(names), 100)}, "rows of 100 dimensions"),
        "NaN rows": (signed(key, names, nan), "1 of 5 rows hold NaN or infinite values"),
        "inf rows": (signed(key, names, inf), "1 of 5 rows hold NaN or infinite values"),
        "zeros written over": ({"digests": names, "features": np.zeros_like(rows), "content_sha256": good,
                                "content_hmac": signed_good["content_hmac"]}, "content digest mismatch"),
        "rows changed, sha256 recomputed": (
            {"digests": names, "features": changed, "content_sha256": np.asarray(cache_module.chunk_digest(key, names, changed)),
             "content_hmac": signed_good["content_hmac"]}, "content_hmac does not verify"),
        "signed with another secret": (signed(key, names, changed, ANOTHER_SECRET), "content_hmac does not verify"),
        "no content hmac": ({k: v for k, v in signed(key, names, changed).items() if k != "content_hmac"},
                            "no content_hmac"),
        "no content digest": ({"digests": names, "features": rows}, "no content digest"),
        "another key's chunk": (signed("0" * 64, names, rows), "written for another model key"),
        "float64": (signed(key, names, rows.astype(np.float64)), "not 2-d float32"),
        "3-d": (signed(key, names, rows[:, None, :]), "not 2-d float32"),
        "digests for fewer rows": (signed(key, names[:3], rows), "digests for 5 rows"),
    }


def rng_rows(count: int, dim: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((count, dim)).astype(np.float32)


ANOTHER_SECRET = CacheSecret.from_secret(b"another user's secret, not this suite's " * 2, "another")


def signed(key: str, names: np.ndarray, rows: np.ndarray, secret: CacheSecret | None = None) -> dict:
    """A chunk whose content digest is right for what it holds, signed with ``secret`` (the suite's
    by default: tests/conftest.py): each check is tested on its own."""
    digest = cache_module.chunk_digest(key, names, rows.reshape(len(rows), -1) if rows.ndim == 3 else rows)
    return {"digests": names, "features": rows, "content_sha256": np.asarray(digest),
            "content_hmac": np.asarray(cache_module.chunk_hmac(secret or load_secret(), digest))}


@pytest.mark.parametrize("kind", ["100-d rows", "NaN rows", "inf rows", "zeros written over", "no content digest",
                                  "another key's chunk", "float64", "3-d", "digests for fewer rows",
                                  "rows changed, sha256 recomputed", "signed with another secret", "no content hmac"])
def test_a_bad_chunk_is_set_aside_with_one_line_and_its_images_embedded_again(
        tmp_path: Path, images: ImageSet, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    """A 100-d chunk was once served to another model (exit 0, features (5, 100)); NaN and inf
    chunks crashed every later run with a traceback naming no file."""
    run(images, tmp_path / "first")
    reference = load_features(tmp_path / "first" / "s.shard-0-of-1.npz").features
    root = Path(cache_module.cache_root())
    chunk = only_chunk(root)
    with np.load(chunk) as data:
        names, rows = data["digests"], data["features"]
    arrays, reason = bad_chunks(chunk.parent.name, names, rows)[kind]
    with open(chunk, "wb") as handle:
        np.savez(handle, **arrays)
    caplog.clear()
    manifest = run(images, tmp_path / "second")
    assert (manifest["cache"]["hits"], manifest["cache"]["embedded"]) == (0, 5)
    lines = [r.getMessage() for r in caplog.records if "embedding cache" in r.getMessage()]
    assert len(lines) == 1 and str(chunk) in lines[0] and reason in lines[0], lines
    assert "moved to rejected-chunk-" in lines[0]
    features = load_features(tmp_path / "second" / "s.shard-0-of-1.npz").features
    assert features.shape == reference.shape and np.array_equal(features, reference)
    assert not chunk.exists() and len(list(chunk.parent.glob("rejected-chunk-*"))) == 1
    assert run(images, tmp_path / "third")["cache"]["hits"] == 5  # the re-embedded rows were cached anew


def test_a_damaged_chunk_file_is_set_aside(tmp_path: Path, images: ImageSet, caplog: pytest.LogCaptureFixture) -> None:
    run(images, tmp_path / "first")
    chunk = only_chunk(Path(cache_module.cache_root()))
    chunk.write_bytes(chunk.read_bytes()[:200])
    manifest = run(images, tmp_path / "second")
    assert manifest["cache"]["hits"] == 0
    assert any(str(chunk) in r.getMessage() and "not used" in r.getMessage() for r in caplog.records)


class ZeroOnDarkImages(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=(1, 2, 3))
        return torch.relu(torch.stack([mean, -mean, mean * 2], 1) - 10 * (mean < 0)[:, None])


def test_all_zero_rows_a_model_outputs_are_cached_and_served(tmp_path: Path, images: ImageSet,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """An all-zero descriptor is suspicious but real (ReLU features of a dark image): the key and the
    content digest say it is this model's, so it is served, not rejected, and nothing crashes."""
    Image.new("RGB", (40, 40), (0, 0, 0)).save(images.paths[1])
    model = Embedder("zero-model", ZeroOnDarkImages(), 3, embed.Preprocessing(16, 16, (0.5,) * 3, (0.5,) * 3))
    monkeypatch.setattr(embed, "build_model", lambda name, **options: model)
    first = run(images, tmp_path / "a")
    rows = load_features(tmp_path / "a" / "s.shard-0-of-1.npz").features
    assert not rows[1].any() and first["cache"]["embedded"] == 5
    second = run(images, tmp_path / "b")
    assert second["cache"]["hits"] == 5
    np.testing.assert_array_equal(load_features(tmp_path / "b" / "s.shard-0-of-1.npz").features, rows)


def test_a_folder_whose_key_json_is_another_key_is_not_used(tmp_path: Path, images: ImageSet,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    first = run(images, tmp_path / "first")
    folder = only_chunk(Path(cache_module.cache_root())).parent
    key = json.loads((folder / "key.json").read_text())
    (folder / "key.json").write_text(json.dumps({**key, "model": "timm:another"}))
    caplog.clear()
    second = run(images, tmp_path / "second")
    assert second["cache"]["hits"] == 0 and second["cache"]["key_sha256"] == first["cache"]["key_sha256"]
    lines = [r.getMessage() for r in caplog.records if "embedding cache" in r.getMessage()]
    assert len(lines) == 1 and str(folder) in lines[0] and "key.json is another key" in lines[0]
    assert json.loads((folder / "key.json").read_text()) == first["cache"]["key"]  # a fresh folder
    assert run(images, tmp_path / "third")["cache"]["hits"] == 5


@pytest.mark.parametrize("kind", ["100-d", "NaN", "inf", "zeros"])
def test_chunks_written_by_hand_as_in_the_issue_are_never_served(tmp_path: Path, images: ImageSet, kind: str,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """The issue's reproduction: a chunk holding the images' digests and 100-d, NaN, inf or all-zero
    rows, written with plain np.savez beside the real one removed."""
    run(images, tmp_path / "first")
    reference = load_features(tmp_path / "first" / "s.shard-0-of-1.npz").features
    chunk = only_chunk(Path(cache_module.cache_root()))
    with np.load(chunk) as data:
        names, rows = data["digests"], data["features"].copy()
    rows = {"100-d": rng_rows(len(names), 100), "NaN": np.full_like(rows, np.nan),
            "inf": np.full_like(rows, np.inf), "zeros": np.zeros_like(rows)}[kind]
    chunk.unlink()
    np.savez(chunk.parent / "chunk-by-hand.npz", digests=names, features=rows)
    caplog.clear()
    manifest = run(images, tmp_path / "second")
    assert manifest["cache"]["hits"] == 0 and manifest["dim"] == reference.shape[1]
    np.testing.assert_array_equal(load_features(tmp_path / "second" / "s.shard-0-of-1.npz").features, reference)
    lines = [r.getMessage() for r in caplog.records if "embedding cache" in r.getMessage()]
    assert len(lines) == 1 and str(chunk.parent / "chunk-by-hand.npz") in lines[0], lines


def test_a_foreign_folder_that_cannot_be_moved_is_neither_used_nor_added_to(
        tmp_path: Path, images: ImageSet, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    run(images, tmp_path / "first")
    reference = load_features(tmp_path / "first" / "s.shard-0-of-1.npz").features
    folder = only_chunk(Path(cache_module.cache_root())).parent
    key = json.loads((folder / "key.json").read_text())
    (folder / "key.json").write_text(json.dumps({**key, "output": "another layer"}))
    real_replace = cache_module.os.replace

    def read_only(source, target):
        if Path(source) == folder:
            raise PermissionError(13, "Permission denied")
        return real_replace(source, target)

    monkeypatch.setattr(cache_module.os, "replace", read_only)
    caplog.clear()
    second = run(images, tmp_path / "second")
    assert second["cache"]["hits"] == 0
    lines = [r.getMessage() for r in caplog.records if "embedding cache" in r.getMessage()]
    assert len(lines) == 1 and "left in place (Permission denied)" in lines[0]
    assert len(list(folder.glob("chunk-*.npz"))) == 1  # nothing added beside another key's chunks
    np.testing.assert_array_equal(load_features(tmp_path / "second" / "s.shard-0-of-1.npz").features, reference)
