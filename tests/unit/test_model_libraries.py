"""timm:, open_clip: and hf: models, offline: tiny randomly initialized configurations, weights
files saved and read back, each adapter's preprocessing against its library's own transform."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vsbench.models.registry import Embedder, available_models, build_model, describe_model
from vsbench.models.weights import WeightsError, state_digest
from vsbench.retrieval.embed import load_image, normalizer

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
timm = pytest.importorskip("timm")
open_clip = pytest.importorskip("open_clip")
transformers = pytest.importorskip("transformers")

# Odd margins on purpose: torchvision rounds a centre crop's offset half to even, Hugging Face
# floors it, and one pixel of shift is a different input.
SIZES = [(83, 61), (61, 97), (64, 64), (201, 150), (37, 52)]
TINY_OPEN_CLIP = {"embed_dim": 16,
                  "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 8, "head_width": 16},
                  "text_cfg": {"context_length": 8, "vocab_size": 64, "width": 16, "heads": 2, "layers": 1}}


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No hub access, and an empty Hugging Face cache: any download attempt is an error."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf-home")))
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(1)
    paths = []
    for n, (w, h) in enumerate(SIZES):
        # smooth images: resampling differences show up as they would on photographs
        base = rng.integers(0, 256, (h // 8 + 2, w // 8 + 2, 3), dtype=np.uint8)
        image = Image.fromarray(base).resize((w, h), Image.Resampling.BICUBIC)
        paths.append(folder / f"photo{n}.png")
        image.save(paths[-1])
    return paths


@pytest.fixture(scope="module")
def open_clip_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("open_clip") / "tiny-vit.json"
    path.write_text(json.dumps(TINY_OPEN_CLIP))
    return path


def hf_folder(root: Path, kind: str) -> Path:
    """A local Hugging Face model folder: config, image-processor config and (random) weights."""
    from transformers import (
        BitImageProcessor,
        CLIPConfig,
        CLIPImageProcessor,
        CLIPModel,
        Dinov2Config,
        Dinov2Model,
        ViTConfig,
        ViTImageProcessor,
        ViTModel,
    )

    folder = root / kind
    torch.manual_seed(3)
    if kind == "vit":
        model = ViTModel(ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=24,
                                   image_size=32, patch_size=8), add_pooling_layer=False)
        processor = ViTImageProcessor(size={"height": 32, "width": 32})
    elif kind == "dinov2":
        model = Dinov2Model(Dinov2Config(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, mlp_ratio=2,
                                         image_size=28, patch_size=14))
        processor = BitImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 28, "width": 28},
                                      image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
    else:
        config = CLIPConfig(text_config={"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                                         "intermediate_size": 24, "vocab_size": 64, "max_position_embeddings": 8},
                            vision_config={"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                                           "intermediate_size": 24, "image_size": 32, "patch_size": 8},
                            projection_dim=12)
        model = CLIPModel(config)
        processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def hf_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf")
    return {kind: hf_folder(root, kind) for kind in ("vit", "dinov2", "clip")}


def vsbench_input(path: Path, model: Embedder) -> torch.Tensor:
    """What the embed loop feeds the network for one image (decode, resize, crop, normalize)."""
    array = torch.from_numpy(load_image(path, model.preprocessing)).permute(2, 0, 1)[None].float()
    scale, shift = normalizer(model.preprocessing, torch.device("cpu"))
    return array * scale + shift


# --- names --------------------------------------------------------------------------------------

def test_the_three_families_are_listed() -> None:
    names = available_models()
    assert {"timm:<name>", "open_clip:<arch>/<pretrained>", "hf:<repo-or-path>"} <= set(names)


def test_unknown_names_list_the_close_names(open_clip_config: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown timm model 'resnet_18'.*'timm:resnet18'"):
        build_model("timm:resnet_18", weights="random")
    with pytest.raises(ValueError, match=r"unknown open_clip architecture 'ViT-B-23'.*'open_clip:ViT-B-32"):
        build_model("open_clip:ViT-B-23/openai")
    with pytest.raises(ValueError, match=r"unknown model 'efficientnet_lite'.*close names: \['efficientnet_lite0'"):
        build_model("efficientnet_lite")
    with pytest.raises(ValueError, match="no pretrained tag 'nope'"):
        build_model("open_clip:ViT-B-32/nope")
    with pytest.raises(ValueError, match=r"its options are \['weights'\]"):
        build_model("timm:test_vit", weigths="random")


# --- preprocessing equals the library's own --------------------------------------------------------

@pytest.mark.parametrize("name", ["test_vit", "test_resnet", "test_convnext"])
def test_timm_preprocessing_equals_timms_transform(name: str, photos: list[Path]) -> None:
    from timm.data import create_transform, resolve_model_data_config

    model = build_model(f"timm:{name}", weights="random")
    transform = create_transform(**resolve_model_data_config(model.network))
    for path in photos:
        expected = transform(Image.open(path).convert("RGB"))[None]
        torch.testing.assert_close(vsbench_input(path, model), expected, atol=1e-5, rtol=0)


def test_open_clip_preprocessing_equals_open_clips_transform(photos: list[Path], open_clip_config: Path) -> None:
    model = build_model("open_clip:tiny-vit", weights="random", config=str(open_clip_config))
    _, _, transform = open_clip.create_model_and_transforms("tiny-vit", pretrained=None)
    for path in photos:
        expected = transform(Image.open(path))[None]
        torch.testing.assert_close(vsbench_input(path, model), expected, atol=1e-5, rtol=0)


def test_open_clip_pretrained_tag_brings_its_preprocessing() -> None:
    """SigLIP weights were trained on squashed images with mean/std 0.5: the tag's config wins."""
    from vsbench.models.libraries import open_clip_preprocessing

    model = open_clip.create_model("ViT-B-16-SigLIP", pretrained=None, device="meta")
    p = open_clip_preprocessing(model, "ViT-B-16-SigLIP", "webli")
    assert (p.input_size, p.resize_mode, p.mean, p.std) == (224, "square", (0.5,) * 3, (0.5,) * 3)


@pytest.mark.parametrize("kind", ["vit", "dinov2", "clip"])
def test_hf_preprocessing_equals_the_image_processor(kind: str, photos: list[Path],
                                                     hf_folders: dict[str, Path]) -> None:
    from transformers import AutoImageProcessor

    model = build_model(f"hf:{hf_folders[kind]}")
    processor = AutoImageProcessor.from_pretrained(hf_folders[kind], backend="pil")
    assert model.preprocessing.crop_offset == "floor"
    for path in photos:
        expected = processor(Image.open(path).convert("RGB"), return_tensors="pt")["pixel_values"]
        torch.testing.assert_close(vsbench_input(path, model), expected, atol=1e-5, rtol=0)


# --- the layer users embed with -------------------------------------------------------------------

def test_hf_models_embed_the_layer_users_expect(photos: list[Path], hf_folders: dict[str, Path]) -> None:
    from transformers import AutoModel

    for kind, check in (("vit", lambda m, x: m(pixel_values=x).last_hidden_state[:, 0]),
                        ("dinov2", lambda m, x: m(pixel_values=x).pooler_output),
                        ("clip", lambda m, x: m.get_image_features(pixel_values=x))):
        model = build_model(f"hf:{hf_folders[kind]}")
        reference = AutoModel.from_pretrained(hf_folders[kind]).eval()
        x = vsbench_input(photos[0], model)
        with torch.inference_mode():
            expected = check(reference, x)
            expected = expected if isinstance(expected, torch.Tensor) else expected.pooler_output
            torch.testing.assert_close(model(x), expected)
        assert model.dim == expected.shape[1]
    assert build_model(f"hf:{hf_folders['clip']}").dim == 12  # the projection, not the 16-d tower


def test_open_clip_embeds_encode_image(photos: list[Path], open_clip_config: Path) -> None:
    model = build_model("open_clip:tiny-vit", weights="random", config=str(open_clip_config))
    with torch.random.fork_rng():
        torch.manual_seed(0)
        reference = open_clip.create_model("tiny-vit", pretrained=None).eval()
    x = vsbench_input(photos[1], model)
    with torch.inference_mode():
        torch.testing.assert_close(model(x), reference.encode_image(x, normalize=False))
    assert model.dim == 16


def test_timm_embeds_pooled_features() -> None:
    model = build_model("timm:test_vit", weights="random")
    assert model.dim == model.network.num_features and model.network.num_classes == 0


# --- weights --------------------------------------------------------------------------------------

def test_random_weights_are_the_same_every_time() -> None:
    first, second = build_model("timm:test_resnet", weights="random"), build_model("timm:test_resnet", weights="random")
    assert state_digest(first) == state_digest(second)


@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
def test_a_timm_weights_file_saved_and_read_back(tmp_path: Path, suffix: str, photos: list[Path]) -> None:
    from safetensors.torch import save_file

    torch.manual_seed(11)
    trained = timm.create_model("test_vit", num_classes=10).eval()  # with a head: it is dropped on load
    path = tmp_path / f"weights{suffix}"
    if suffix == ".safetensors":
        save_file({k: v.contiguous() for k, v in trained.state_dict().items()}, str(path))
    else:
        torch.save(trained.state_dict(), path)
    model = build_model("timm:test_vit", weights=str(path))
    assert state_digest(model) != state_digest(build_model("timm:test_vit", weights="random"))
    x = vsbench_input(photos[2], model)
    with torch.inference_mode():
        torch.testing.assert_close(model(x), trained.forward_head(trained.forward_features(x), pre_logits=True))


def test_a_weights_file_of_another_architecture_names_the_first_tensor(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    other = timm.create_model("test_resnet", num_classes=0)
    save_file({k: v.contiguous() for k, v in other.state_dict().items()}, str(tmp_path / "resnet.safetensors"))
    with pytest.raises(WeightsError, match=r"resnet.safetensors does not fit VisionTransformer: tensor 'cls_token'"):
        build_model("timm:test_vit", weights=str(tmp_path / "resnet.safetensors"))
    # same names, one shape off
    vit = timm.create_model("test_vit", num_classes=0).state_dict()
    vit["pos_embed"] = vit["pos_embed"][:, :-1]
    save_file({k: v.contiguous() for k, v in vit.items()}, str(tmp_path / "vit.safetensors"))
    with pytest.raises(WeightsError, match=r"tensor 'pos_embed' has shape \(1, 100, 64\), the architecture expects"):
        build_model("timm:test_vit", weights=str(tmp_path / "vit.safetensors"))


def test_a_pickle_that_is_more_than_weights_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    torch.save({"weights": torch.zeros(1), "code": Path("x")}, path)
    with pytest.raises(WeightsError, match="refused to load.*weights_only=True"):
        build_model("timm:test_vit", weights=str(path))


def test_an_open_clip_weights_file_saved_and_read_back(tmp_path: Path, open_clip_config: Path,
                                                      photos: list[Path]) -> None:
    from safetensors.torch import save_file

    torch.manual_seed(5)
    trained = open_clip.create_model("tiny-vit", pretrained=None).eval()
    save_file({k: v.contiguous() for k, v in trained.state_dict().items()}, str(tmp_path / "clip.safetensors"))
    model = build_model("open_clip:tiny-vit", weights=str(tmp_path / "clip.safetensors"), config=str(open_clip_config))
    x = vsbench_input(photos[0], model)
    with torch.inference_mode():
        torch.testing.assert_close(model(x), trained.encode_image(x))


def test_an_hf_weights_file_or_folder_replaces_the_folders_weights(tmp_path: Path, hf_folders: dict[str, Path]) -> None:
    from safetensors.torch import save_file
    from transformers import AutoModel

    spec = f"hf:{hf_folders['dinov2']}"
    torch.manual_seed(9)
    other = AutoModel.from_pretrained(hf_folders["dinov2"])
    for p in other.parameters():
        torch.nn.init.normal_(p)
    other.save_pretrained(tmp_path / "other")
    save_file({k: v.contiguous() for k, v in other.state_dict().items()}, str(tmp_path / "other.safetensors"))
    from_folder = build_model(spec, weights=str(tmp_path / "other"))
    from_file = build_model(spec, weights=str(tmp_path / "other.safetensors"))
    assert state_digest(from_folder.network.model) == state_digest(from_file.network.model) == state_digest(other)
    assert state_digest(build_model(spec)) != state_digest(from_file)


def test_an_hf_folder_whose_weights_lack_a_tensor_names_it(tmp_path: Path, hf_folders: dict[str, Path]) -> None:
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "broken"
    folder.mkdir()
    for item in hf_folders["dinov2"].iterdir():
        (folder / item.name).write_bytes(item.read_bytes())
    state = load_file(str(folder / "model.safetensors"))
    dropped = sorted(state)[0]
    del state[dropped]
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(WeightsError, match=f"do not fit Dinov2Model: tensor '{dropped}' is missing"):
        build_model(f"hf:{folder}")


def test_offline_without_cached_weights_names_the_weights_option() -> None:
    with pytest.raises(WeightsError, match=r'timm:test_vit pretrained weights.*offline.*\{"weights": "PATH"\}'):
        build_model("timm:test_vit")
    with pytest.raises(WeightsError, match=r'open_clip:ViT-B-32/laion2b_s34b_b79k.*\{"weights": "PATH"\}'):
        build_model("open_clip:ViT-B-32/laion2b_s34b_b79k")
    with pytest.raises(WeightsError, match=r'hf:facebook/dinov2-small config.*offline.*\{"weights": "PATH"\}'):
        build_model("hf:facebook/dinov2-small")


def test_an_hf_folder_without_an_image_processor_is_a_clear_error(tmp_path: Path, hf_folders: dict[str, Path]) -> None:
    (tmp_path / "config.json").write_bytes((hf_folders["vit"] / "config.json").read_bytes())
    with pytest.raises(ValueError, match="cannot read the image processor from this folder"):
        build_model(f"hf:{tmp_path}")


# --- describe -------------------------------------------------------------------------------------

def test_describe_says_dim_preprocessing_and_where_weights_would_come_from(hf_folders: dict[str, Path]) -> None:
    info = describe_model("timm:test_vit")
    assert info.dim == 64 and info.preprocessing.input_size == 160 and info.preprocessing.resize_size == 168
    assert "timm/test_vit" in info.weights and "not cached" in info.weights
    info = describe_model(f"hf:{hf_folders['clip']}")
    assert info.dim == 12 and info.weights == f"local folder {hf_folders['clip']}"
    assert info.output.startswith("image embedding")


def test_the_models_command_lists_and_describes(hf_folders: dict[str, Path]) -> None:
    from typer.testing import CliRunner

    from vsbench.cli.app import app

    listed = CliRunner().invoke(app, ["similarity", "models"])
    assert listed.exit_code == 0 and "timm:<name>" in listed.output and "efficientnet_lite0" in listed.output
    described = CliRunner().invoke(app, ["similarity", "models", f"hf:{hf_folders['dinov2']}"])
    assert described.exit_code == 0, described.output
    assert "dim: 16" in described.output and f"weights: local folder {hf_folders['dinov2']}" in described.output
    assert '"input_size": 28, "resize_size": 32' in described.output and '"crop_offset": "floor"' in described.output
    unknown = CliRunner().invoke(app, ["similarity", "models", "timm:tset_vit"])
    assert unknown.exit_code == 2 and "timm:test_vit" in unknown.output
