"""The keys of embedding shards, one function at a time (issue 49: the guards mutation testing runs
against): what a finished shard must match to be kept, and the words that say why it is redone.

No model is built and no image decoded: each test calls one key function on a few bytes in
``tmp_path``, so a mutant of these functions is judged in a fraction of a second."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from vsbench.io.digests import DigestMemo, combine
from vsbench.io.features import FeatureSet, save_features
from vsbench.models.cache import library_versions
from vsbench.models.registry import Preprocessing
from vsbench.models.weights import RANDOM_SEED
from vsbench.retrieval import embed, origin

IDS = ["a", "b", "c"]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- _ids_digest, inputs_path (in origin, which the torch-free steps import; embed uses the same) -------

def test_the_ids_digest_is_the_sha256_of_the_ids_one_a_line() -> None:
    assert origin._ids_digest(IDS) == sha256(b"a\nb\nc")
    assert origin._ids_digest([]) == sha256(b"")
    assert embed._ids_digest is origin._ids_digest  # one definition


def test_a_shards_digest_memo_lives_in_the_inputs_folder_beside_it(tmp_path: Path) -> None:
    assert origin.inputs_path(tmp_path / "gallery.shard-0-of-2.npz") == tmp_path / ".inputs" / "gallery.shard-0-of-2.json"


# --- option_file_digests, input_key ----------------------------------------------------------------

def test_option_files_are_hashed_and_folders_only_under_the_weights_options(tmp_path: Path) -> None:
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"weights")
    folder = tmp_path / "cfg"
    folder.mkdir()
    (folder / "x.json").write_bytes(b"{}")
    memo = DigestMemo(None, trust_stat=False)
    options = {"zz_plugin_file": str(weights), "weights": weights, "config": str(folder), "other": str(folder),
               "blank": "   ", "empty": "", "path": str(tmp_path / "missing.pt"), "size": 224, "flag": True,
               "none": None}
    found = embed.option_file_digests(options, memo)
    from vsbench.io.digests import path_digest

    assert found == {"config": path_digest(folder), "weights": sha256(b"weights"), "zz_plugin_file": sha256(b"weights")}
    assert list(found) == sorted(found)  # visited in sorted order
    assert memo.hashed == 3  # w.pt (twice: a memo that trusts no stat), x.json: through the memo given


def test_an_empty_weights_option_does_not_hash_the_working_folder(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "f").write_bytes(b"x")
    monkeypatch.chdir(tmp_path)  # Path("") is "."; an empty string must not mean this folder
    assert embed.option_file_digests({"weights": "", "config": " "}, DigestMemo(None, trust_stat=False)) == {}


def test_an_option_whose_path_cannot_be_looked_at_is_skipped_not_the_rest(tmp_path: Path) -> None:
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"w")
    options = {"a_too_long": "x" * 5000, "weights": str(weights)}  # stat fails with ENAMETOOLONG first
    try:
        Path(options["a_too_long"]).is_file()
    except OSError:
        pass
    else:
        pytest.skip("this Python's Path.is_file swallows ENAMETOOLONG")
    assert embed.option_file_digests(options, DigestMemo(None, trust_stat=False)) == {"weights": sha256(b"w")}


def test_the_input_key_hashes_each_image_in_order_with_its_id(tmp_path: Path) -> None:
    images = [tmp_path / "1.jpg", tmp_path / "2.jpg", tmp_path / "gone.jpg"]
    images[0].write_bytes(b"one")
    images[1].write_bytes(b"two")
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"w")
    memo = DigestMemo(None, trust_stat=False)
    key, digests = embed.input_key(images, IDS, {"weights": str(weights)}, memo)
    assert digests == [sha256(b"one"), sha256(b"two"), None]
    assert key == {"images_sha256": combine(zip(IDS, digests)), "option_files": {"weights": sha256(b"w")},
                   "libraries": library_versions()}
    assert memo.hashed == 3  # the option's file too, through the memo (remembered for the recheck after the build)
    swapped, _ = embed.input_key(images[::-1], IDS, {}, DigestMemo(None, trust_stat=False), threads=1)
    assert swapped["images_sha256"] != key["images_sha256"]


# --- _resume_key -----------------------------------------------------------------------------------

def test_the_resume_key_is_json_normalized_and_complete(tmp_path: Path) -> None:
    inputs = {"images_sha256": "d", "option_files": {}, "libraries": {"torch": "2"}}
    key = embed._resume_key("sscd", {"size": (224, 224), "path": tmp_path / "w.pt"}, IDS, True, 7, inputs)
    assert key == {"model": "sscd", "options": {"size": [224, 224], "path": str(tmp_path / "w.pt")},
                   "ids_sha256": sha256(b"a\nb\nc"), "count": 3, "amp": True, "seed": 7, "inputs": inputs}
    assert json.dumps(key) == json.dumps(key, sort_keys=True)  # written and compared in one canonical order
    assert key == json.loads(json.dumps(key))


def test_the_resume_key_defaults_and_the_device_decode(tmp_path: Path) -> None:
    key = embed._resume_key("m", {}, ["x"], False)
    assert key == {"model": "m", "options": {}, "ids_sha256": sha256(b"x"), "count": 1, "amp": False,
                   "seed": RANDOM_SEED, "inputs": {}}
    decoded = embed._resume_key("m", {}, ["x"], False, device_decode=True)
    assert decoded == {**key, "decode": "device"}


# --- _key_change -----------------------------------------------------------------------------------

def base_key(**inputs: object) -> dict:
    return embed._resume_key("m", {"size": 1}, IDS, False, 0,
                             {"images_sha256": "i", "option_files": {"w": "1"}, "libraries": {"t": "1"}, **inputs})


@pytest.mark.parametrize(("change", "words"), [
    ({"model": "n"}, "model changed"),
    ({"options": {"size": 2}}, "options changed"),
    ({"ids_sha256": "other"}, "ids changed"),
    ({"count": 4}, "count changed"),
    ({"amp": True}, "amp changed"),
    ({"seed": 1}, "seed changed"),
    ({"model": "n", "ids_sha256": "x", "seed": 2}, "model, ids, seed changed"),
    ({"decode": "device"}, "the decoder (--decode) changed"),
])
def test_the_key_change_names_the_part_that_changed(change: dict, words: str) -> None:
    new = base_key()
    assert embed._key_change({**new, **change}, new) == words
    assert embed._key_change(new, {**new, **change}) == words


@pytest.mark.parametrize(("inputs", "words"), [
    ({"images_sha256": "j"}, "the images' bytes changed"),
    ({"option_files": {"w": "2"}}, "a file a model option names changed"),
    ({"libraries": {"t": "2"}}, "library versions changed"),
    ({"images_sha256": "j", "libraries": {}}, "the images' bytes, library versions changed"),
])
def test_the_key_change_names_the_inputs_that_changed(inputs: dict, words: str) -> None:
    assert embed._key_change(base_key(**inputs), base_key()) == words


def test_the_key_change_of_a_missing_or_odd_key() -> None:
    new = base_key()
    assert embed._key_change(None, new) == "no key"
    assert embed._key_change(["m"], new) == "no key"
    assert embed._key_change(new, new) == "its key differs"
    odd = {**new, "inputs": "not a dict"}
    assert embed._key_change(odd, new) == "the images' bytes, a file a model option names, library versions changed"
    no_inputs = {name: value for name, value in new.items() if name != "inputs"}
    assert embed._key_change(no_inputs, new) == "the images' bytes, a file a model option names, library versions changed"
    assert embed._key_change({**new, "inputs": {}}, {**new, "inputs": {}}) == "its key differs"


# --- _is_complete ----------------------------------------------------------------------------------

def finished_shard(folder: Path, ids: list[str] = IDS, rows: np.ndarray | None = None, failed: object = None,
                   **manifest: object) -> tuple[Path, Path, dict]:
    """A feature file and a complete manifest for it (``manifest`` overrides its fields)."""
    rows = np.arange(len(ids) * 4, dtype=np.float32).reshape(len(ids), 4) if rows is None else rows
    features = folder / "s.npz"
    save_features(features, FeatureSet(np.asarray(ids, dtype=str), rows))
    key = embed._resume_key("m", {}, IDS, False)
    data = features.read_bytes()
    record = {"complete": True, "key": key, "features_bytes": len(data), "features_sha256": sha256(data),
              "count": len(ids), "dim": int(rows.shape[1]), "failed": failed if failed is not None else []}
    record.update(manifest)
    path = folder / "s.json"
    path.write_text(json.dumps(record))
    return features, path, key


def test_a_finished_shard_that_answers_its_inputs_is_kept(tmp_path: Path) -> None:
    features, manifest, key = finished_shard(tmp_path)
    assert embed._is_complete(features, manifest, key, IDS) is None


def test_a_shard_with_failed_images_listed_is_kept(tmp_path: Path) -> None:
    features, manifest, key = finished_shard(tmp_path, ["a", "c"], failed=[{"id": "b", "reason": "bad"}, "junk", 3])
    assert embed._is_complete(features, manifest, key, IDS) is None
    features, manifest, key = finished_shard(tmp_path, ["a", "c"], failed=None)  # no failed list
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "failed": None}))
    assert embed._is_complete(features, manifest, key, IDS) == (
        "it holds 2 rows and 0 failed images, not the 3 images asked for (manifest count 2)")


@pytest.mark.parametrize("manifest", [None, "[1, 2]", "{}", '{"complete": false}', '{"complete": 1}',
                                      '{"complete": "true"}'])
def test_a_missing_or_unfinished_manifest_is_redone_without_a_word(tmp_path: Path, manifest: str | None) -> None:
    features, path, key = finished_shard(tmp_path)
    if manifest is None:
        path.unlink()
    else:
        path.write_text(manifest)
    assert embed._is_complete(features, path, key, IDS) == ""


def test_a_manifest_for_other_work_says_what_changed(tmp_path: Path) -> None:
    features, manifest, key = finished_shard(tmp_path)
    other = embed._resume_key("m", {}, IDS, True)
    assert embed._is_complete(features, manifest, other, IDS) == "its manifest is for other work (amp changed)"
    data = json.loads(manifest.read_text())
    del data["key"]
    manifest.write_text(json.dumps(data))
    assert embed._is_complete(features, manifest, key, IDS) == "its manifest is for other work (no key)"


def test_a_missing_feature_file_is_named(tmp_path: Path) -> None:
    features, manifest, key = finished_shard(tmp_path)
    features.unlink()
    assert embed._is_complete(features, manifest, key, IDS) == "the feature file cannot be read (No such file or directory)"


def test_a_feature_file_of_another_size_or_digest_is_redone(tmp_path: Path) -> None:
    features, manifest, key = finished_shard(tmp_path)
    data = features.read_bytes()
    features.write_bytes(data + b"x")
    assert embed._is_complete(features, manifest, key, IDS) == (
        f"the feature file has {len(data) + 1} bytes, its manifest says {len(data)}")
    features.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # same size, other bytes
    assert embed._is_complete(features, manifest, key, IDS) == (
        "the feature file's sha256 differs from the one its manifest recorded")


@pytest.mark.parametrize("digest", [None, ""])
def test_a_manifest_without_a_features_digest_is_redone(tmp_path: Path, digest: str | None) -> None:
    features, manifest, key = finished_shard(tmp_path, features_sha256=digest)
    assert embed._is_complete(features, manifest, key, IDS) == (
        "its manifest records no features_sha256 (written by an older vsbench)")


def test_a_feature_file_that_does_not_load_says_why(tmp_path: Path) -> None:
    features, manifest, key = finished_shard(tmp_path)
    features.write_bytes(b"not an npz")
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "features_bytes": 10, "features_sha256": sha256(b"not an npz")}))
    reason = embed._is_complete(features, manifest, key, IDS)
    assert reason is not None and reason.startswith(f"{features}: ")


@pytest.mark.parametrize(("ids", "failed", "count", "counted"), [
    (["a", "b"], [], 2, "2 rows and 0 failed"),  # one image neither there nor failed
    (["a", "b", "c"], [], 2, "3 rows and 0 failed"),  # the manifest's count disagrees
    (["a", "b", "x"], [], 3, "3 rows and 0 failed"),  # another id
    (["a", "b"], [{"id": "x"}], 2, "2 rows and 1 failed"),  # another failed id
    (["a", "b", "c"], [{"id": "c"}], 3, "3 rows and 1 failed"),  # one too many
])
def test_a_shard_that_does_not_hold_its_images_is_redone(tmp_path: Path, ids: list[str], failed: list,
                                                          count: int, counted: str) -> None:
    features, manifest, key = finished_shard(tmp_path, ids, failed=failed, count=count)
    assert embed._is_complete(features, manifest, key, IDS) == (
        f"it holds {counted} images, not the 3 images asked for (manifest count {count})")


def test_a_shard_whose_ids_are_out_of_order_is_redone(tmp_path: Path) -> None:
    features, manifest, key = finished_shard(tmp_path, ["a", "c", "b"])
    assert embed._is_complete(features, manifest, key, IDS) == "its ids are not in input order"
    features, manifest, key = finished_shard(tmp_path, ["b", "a", "c"])
    assert embed._is_complete(features, manifest, key, IDS) == "its ids are not in input order"
    features, manifest, key = finished_shard(tmp_path, ["a", "a"])  # one id twice is not an order either
    assert embed._is_complete(features, manifest, key, ["a", "a"]) == "its ids are not in input order"


def test_a_shard_of_another_width_is_redone(tmp_path: Path) -> None:
    features, manifest, key = finished_shard(tmp_path, dim=5)
    assert embed._is_complete(features, manifest, key, IDS) == "its rows are 4-d float32, the manifest says 5-d float32"


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_shard_with_non_finite_rows_is_redone(tmp_path: Path, bad: float) -> None:
    rows = np.ones((3, 4), np.float32)
    rows[2, 3] = bad
    features, manifest, key = finished_shard(tmp_path, rows=rows)
    assert embed._is_complete(features, manifest, key, IDS) == "it holds NaN or infinite values"


# --- normalizer ------------------------------------------------------------------------------------

def test_the_normalizer_maps_uint8_to_the_standardized_input() -> None:
    preprocessing = Preprocessing(8, 8, mean=(0.25, 0.5, 0.75), std=(0.5, 0.25, 0.125))
    scale, shift = embed.normalizer(preprocessing, torch.device("cpu"))
    assert scale.shape == shift.shape == (1, 3, 1, 1)
    assert scale.dtype == shift.dtype == torch.float32
    pixels = torch.tensor([0, 51, 255], dtype=torch.uint8).view(1, 1, 3, 1).expand(1, 3, 3, 1)
    wanted = (pixels / 255.0 - torch.tensor([0.25, 0.5, 0.75]).view(1, 3, 1, 1)) / torch.tensor(
        [0.5, 0.25, 0.125]).view(1, 3, 1, 1)
    torch.testing.assert_close(pixels * scale + shift, wanted, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(scale.flatten(), torch.tensor([1 / 127.5, 1 / 63.75, 1 / 31.875]), rtol=1e-6, atol=0)
    torch.testing.assert_close(shift.flatten(), torch.tensor([-0.5, -2.0, -6.0]), rtol=1e-6, atol=0)


def test_the_normalizer_is_float32_whatever_the_default_dtype() -> None:
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        scale, shift = embed.normalizer(Preprocessing(8, 8, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)), torch.device("cpu"))
    finally:
        torch.set_default_dtype(before)
    assert scale.dtype == shift.dtype == torch.float32


def test_the_normalizer_is_on_the_device_asked_for() -> None:
    scale, shift = embed.normalizer(Preprocessing(8, 8, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)), torch.device("meta"))
    assert scale.device.type == shift.device.type == "meta"
