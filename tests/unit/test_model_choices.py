"""The built-in models' declared options (vsbench.models.choices, no torch) against the builders, and a
run refused for a model option before torch is imported (issue 57: 8-24 s of waiting for torch's
import on a loaded machine). Nothing is timed: the refused run lists the packages it loaded."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from tests.unit.test_cli_imports import _loaded
from vsbench.models.choices import MODELS, declared, network_note, option_problems


@pytest.mark.parametrize(("model", "options", "named"), [
    ("efficientnet_lite0", '{"weights": "nosuch"}', "weights 'nosuch'"),
    ("resnet34", '{"weights": "IMAGENET1K_V2"}', "weights 'IMAGENET1K_V2'"),
    ("dino_vits16", '{"weights": "pretrained", "nosuch": 1}', "no option 'nosuch'"),
    ("timm:resnet50", '{"weights": "no-such-file.safetensors"}', "weights 'no-such-file.safetensors'"),
    ("efficientnet_lite", "{}", "unknown model 'efficientnet_lite'; close names: ['efficientnet_lite0']"),
], ids=["weights-value", "torchvision-name", "option-name", "family-weights", "model-name"])
def test_a_refused_model_option_loads_no_torch(tmp_path: Path, model: str, options: str, named: str) -> None:
    """Every other input is fine (an existing data folder, a new output folder): only the model's
    option is wrong, and it is refused in one line naming the option, before torch or pandas."""
    (tmp_path / "root").mkdir()
    argv = ["similarity", "run", "--benchmark", "disc", "--root", str(tmp_path / "root"), "--out",
            str(tmp_path / "out"), "--no-track", "--model", model, "--model-options", options]
    codes, loaded, stderr = _loaded(argv, cwd=tmp_path)
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert codes == [2] and len(errors) == 1 and "Traceback" not in stderr, stderr[-2000:]
    option = "--model-options" if options != "{}" else "--model"
    assert errors[0].startswith(f"error: {option}: ") and named in errors[0] and model in errors[0], errors
    assert not loaded & {"torch", "pandas", "faiss"}, sorted(loaded & {"torch", "pandas", "faiss"})
    assert not (tmp_path / "out").exists()


def _builders() -> dict[str, tuple[object, bool]]:
    from vsbench.models import registry

    registry.available_models()  # loads the built-ins
    found: dict[str, tuple[object, bool]] = {}
    for name, entry in MODELS.items():
        builder = registry.family(name).builder if entry.family else registry.registered(name)
        assert builder is not None and registry.source_of(builder) == "vsbench", name
        found[name] = (builder, entry.family)
    return found


def test_every_declared_model_matches_its_builder() -> None:
    """The table names every option the builder takes and no other, and requires exactly the
    options without a default: a builder changed without this table fails here."""
    from vsbench.models import registry

    registry.available_models()
    builtin = {n for n, b in registry._REGISTRY.items() if registry.source_of(b) == "vsbench"}
    builtin |= {p for p, f in registry._FAMILIES.items() if registry.source_of(f.builder) == "vsbench"}
    assert builtin == set(MODELS)
    for name, (builder, family) in _builders().items():
        parameters = list(inspect.signature(builder).parameters.values())[1 if family else 0:]
        assert sorted(p.name for p in parameters) == sorted(MODELS[name].options), name
        required = {p.name for p in parameters if p.default is inspect.Parameter.empty}
        assert required == set(MODELS[name].required), name


@pytest.mark.parametrize("depth", [34, 50])
def test_the_torchvision_weights_declared_are_torchvision_s(depth: int) -> None:
    """resnet34/50's declared weights are vsbench's two words plus torchvision's own names."""
    from torchvision import models

    names = set(getattr(models, f"ResNet{depth}_Weights").__members__)
    assert set(MODELS[f"resnet{depth}"].options["weights"].choices) == {"imagenet", "random"} | names


def test_the_dino_note_names_the_commit_the_builder_loads() -> None:
    from vsbench.models import backbones

    assert backbones.DINO_HUB_COMMIT[:8] in network_note("dino_vits16")
    assert "github.com" in network_note("dino_vits16")


def test_declared_values_accept_the_choices_and_existing_files(tmp_path: Path) -> None:
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"")
    assert option_problems("dino_vits16", {"weights": "random", "weights_sha256": None}) == []
    assert option_problems("timm:resnet50", {"weights": str(weights)}) == []
    assert option_problems("efficientnet_lite0", {"weights": str(weights)}) != []  # no file for it
    assert option_problems("dino_vits16", {"weights_sha256": "a" * 64}) == []
    assert option_problems("dino_vits16", {"weights_sha256": "A" * 64}) != []
    assert option_problems("torchscript", {}) == ["model 'torchscript' needs the option 'path'"]
    assert option_problems("a_plugin_model", {"anything": 1}) == []  # the registry checks it, after torch
    assert declared("timm:x") is MODELS["timm"] and declared("timm") is None


def test_the_models_list_says_which_need_the_network() -> None:
    """`vsbench similarity models`: one note per built-in model, under 100 columns; dino_vits16 names
    github.com and its pinned commit, efficientnet_lite0 says offline, torchvision's say the network."""
    from typer.testing import CliRunner

    from vsbench.cli.app import app
    from vsbench.io.terminal import too_wide

    listed = CliRunner().invoke(app, ["similarity", "models"])
    assert listed.exit_code == 0, listed.output
    notes: dict[str, str] = {}
    name = ""
    for line in listed.output.splitlines():
        if line and not line.startswith(" "):
            name, _, rest = line.partition("  ")
            notes[name] = rest.strip()
        elif name and not line.startswith("  e.g."):
            notes[name] = (notes[name] + " " + line.strip()).strip()
    assert notes["efficientnet_lite0"].startswith("offline:")
    assert notes["dino_vits16"].startswith("network at first use: github.com") and "@7c446df5" in notes["dino_vits16"]
    assert "download.pytorch.org" in notes["resnet34"] and "download.pytorch.org" in notes["resnet50"]
    assert all(notes[f].startswith("network at first use: huggingface.co") for f in
               ("timm:<name>", "open_clip:<arch>/<pretrained>", "hf:<repo-or-path>"))
    assert set(notes) >= {"abid_trunk", "precomputed", "torchscript"} and all(notes.values())
    assert too_wide(listed.output) == []
    described = CliRunner().invoke(app, ["similarity", "models", "resnet34", "--model-options", '{"weights": "random"}'])
    assert described.exit_code == 0 and "network: network at first use: download.pytorch.org" in described.output


def test_the_name_check_without_torch_says_what_the_registry_says() -> None:
    """The registry's line for an unknown name with no plugin installed; a family's spec, and a
    model registered in this process, left to the registry."""
    import subprocess
    import sys

    from vsbench.models import registry

    with pytest.raises(ValueError) as raised:
        registry.resolve("resnet5")
    code = ("import json, sys; from vsbench.models.choices import name_problem; "
            "print(json.dumps([name_problem('resnet5'), name_problem('timm:nosuch'), 'torch' in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    light, family, torch_loaded = json.loads(done.stdout)
    assert (family, torch_loaded) == (None, False)
    # The registry's line but for its close names from timm's list (which needs torch): built-ins only.
    deep = str(raised.value)
    assert light.split("; choose from ")[1] == deep.split("; choose from ")[1]
    assert light.startswith("unknown model 'resnet5'; close names: ['resnet50', 'resnet34']; choose from [")
    assert "['resnet50', 'resnet34'" in deep
    from vsbench.models.choices import name_problem

    assert name_problem("resnet5") == light  # the same whether the registry is loaded or not
    registry.register_model("resnet5_here")(lambda: None)  # registered in this process: the registry's
    try:
        assert name_problem("resnet5_here") is None
    finally:
        del registry._REGISTRY["resnet5_here"]


def test_a_step_that_never_opens_the_model_takes_any_path_and_leaves_required_options_out(tmp_path):
    """The steps after embed (index, search, score) compare --model-options with the features' own and
    never open the model: a path that does not exist here, or a required option left out, is not theirs
    to refuse (the comparison names the difference); a value outside the declared choices still is."""
    from vsbench.models.choices import option_problems

    elsewhere = str(tmp_path / "elsewhere.pt")
    assert option_problems("torchscript", {"path": elsewhere}, loads=False) == []
    assert option_problems("torchscript", {}, loads=False) == []
    assert option_problems("torchscript", {"path": elsewhere}) and option_problems("torchscript", {})
    assert option_problems("torchscript", {"interpolation": "nosuch"}, loads=False)
