"""Every pipeline compiles to YAML with the images from the one tag source and the cluster settings."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from vsbench.platform.cluster import ClusterSettings
from vsbench.platform.compile import PIPELINES, compile_all
from vsbench.runtime.images import CPU_IMAGE, GPU_IMAGE

GPU_STEPS = {"abid": {"abid-train-counting", "abid-train-siamese"},
             "similarity": {"embed-shard", "index", "index-fill", "search", "score"},
             "nightly": {"embed-shard", "index", "index-fill", "search", "score"}}


def _step(executor_name: str) -> str:
    """``exec-embed-shard-3`` -> ``embed-shard``: KFP numbers the repeats of one component."""
    name = executor_name.removeprefix("exec-")
    head, _, tail = name.rpartition("-")
    return head if tail.isdigit() else name


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, dict]]:
    out = tmp_path_factory.mktemp("compiled")
    written = compile_all(out)
    assert sorted(p.stem for p in written) == sorted(PIPELINES)
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
    result = {}
    for path in written:
        spec, platform = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        result[path.stem] = (spec, platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"])
    return result


def _tasks(spec: dict) -> dict[str, dict]:
    """Every task of every (nested) DAG, by name."""
    tasks = dict(spec["root"]["dag"]["tasks"])
    for component in spec["components"].values():
        tasks.update(component.get("dag", {}).get("tasks", {}))
    return tasks


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_images_come_from_the_one_tag_source(compiled, name):
    spec, _ = compiled[name]
    for executor_name, executor in spec["deploymentSpec"]["executors"].items():
        image = executor["container"]["image"]
        step = _step(executor_name)
        assert image == (GPU_IMAGE if step in GPU_STEPS[name] else CPU_IMAGE), executor_name
        assert "pip install" not in " ".join(executor["container"].get("command", []))  # kfp is in the image


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_gpu_steps_get_gpus_tolerations_and_node_pool(compiled, name):
    spec, platform = compiled[name]
    settings = ClusterSettings()
    for executor_name, executor in spec["deploymentSpec"]["executors"].items():
        step = _step(executor_name)
        resources = executor["container"]["resources"]
        assert resources["resourceCpuRequest"] and resources["resourceMemoryLimit"]
        if step in GPU_STEPS[name]:
            assert resources["accelerator"]["resourceType"] == "nvidia.com/gpu"
            assert resources["accelerator"]["resourceCount"] == "1"
            assert platform[executor_name]["tolerations"] == [
                {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}]
            assert platform[executor_name]["nodeSelector"]["labels"] == settings.gpu_node_selector
        else:
            assert "accelerator" not in resources
            assert "tolerations" not in platform[executor_name]


def test_fill_tasks_get_their_own_resources(tmp_path: Path):
    """Fill tasks hold one reference shard: they get the cluster settings' "fill" resources, a GPU
    only while fill_gpu is on, and a cluster config written before the role existed still compiles."""
    settings = ClusterSettings()
    for fill_gpu in (True, False):
        out = tmp_path / str(fill_gpu)
        (out / "c.yaml").parent.mkdir(parents=True)
        (out / "c.yaml").write_text(yaml.safe_dump({
            "fill_gpu": fill_gpu, "resources": {role: settings.resources[role].model_dump()
                                                for role in ("gpu", "cpu", "light")}}))
        from kfp import compiler

        from vsbench.platform.compile import load_pipeline

        compiler.Compiler().compile(load_pipeline("similarity", ClusterSettings.load(out / "c.yaml")),
                                    package_path=str(out / "similarity.yaml"))  # the one pipeline with fill tasks
        spec = next(doc for doc in yaml.safe_load_all((out / "similarity.yaml").read_text()) if doc)
        resources = spec["deploymentSpec"]["executors"]["exec-index-fill"]["container"]["resources"]
        assert resources["resourceMemoryLimit"] == settings.resources["fill"].memory_limit
        assert resources["resourceCpuRequest"] == settings.resources["fill"].cpu_request
        assert ("accelerator" in resources) == fill_gpu


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_every_step_gets_secrets_config_and_the_data_volume(compiled, name):
    _, platform = compiled[name]
    for executor_name, config in platform.items():
        assert config["pvcMount"][0]["constant"] == "vsbench-data" and config["pvcMount"][0]["mountPath"] == "/data"
        assert {m["mountPath"] for m in config["emptyDirMounts"]} == {"/tmp"}
        secrets = {secret["secretName"]: secret for secret in config["secretAsEnv"]}
        assert set(secrets) == {"vsbench-s3", "vsbench-cache"}, executor_name
        assert {e["envVar"] for e in secrets["vsbench-s3"]["keyToEnv"]} == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
        # the embedding cache's signing key (issue 54): every pod that shares the cache signs with it
        assert secrets["vsbench-cache"]["keyToEnv"] == [{"secretKey": "VSBENCH_CACHE_SECRET",
                                                         "envVar": "VSBENCH_CACHE_SECRET"}], executor_name
        assert secrets["vsbench-cache"]["optional"] is True
        (config_map,) = config["configMapAsEnv"]
        assert {e["envVar"] for e in config_map["keyToEnv"]} >= {"MLFLOW_TRACKING_URI"}, executor_name


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_every_step_runs_as_the_images_non_root_user(compiled, name):
    """kfp-kubernetes sets the identity part of each step's securityContext; no privilege escalation
    and dropped capabilities come from the KFP backend and the namespace's Pod Security level."""
    spec, platform = compiled[name]
    assert set(platform) == set(spec["deploymentSpec"]["executors"]), "every step has platform settings"
    for executor_name, config in platform.items():
        context = config["securityContext"]
        # int64 fields are strings in protobuf's JSON form, as the KFP backend reads them
        assert context == {"runAsNonRoot": True, "runAsUser": "10001", "runAsGroup": "10001"}, executor_name


def test_security_context_follows_the_cluster_config(tmp_path: Path):
    config = tmp_path / "cluster.yaml"
    config.write_text("run_as_user: null\nrun_as_group: null\n")  # the platform assigns them (OpenShift)
    (path,) = compile_all(tmp_path / "out", ClusterSettings.load(config), names=["similarity"])
    _, platform = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    for config_of_step in platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"].values():
        assert config_of_step["securityContext"] == {"runAsNonRoot": True}
    config.write_text("run_as_user: 0\n")
    with pytest.raises(ValueError, match="run_as_user"):
        ClusterSettings.load(config)


def test_abid_structure_retries_and_parameters(compiled):
    spec, _ = compiled["abid"]
    tasks = _tasks(spec)
    assert {"abid-download", "abid-resize", "abid-prepare", "abid-train-counting", "abid-train-siamese",
            "abid-quantity", "abid-score", "open-tracking", "close-tracking", "shard-list"} <= set(tasks)
    assert tasks["close-tracking"]["triggerPolicy"]["strategy"] == "ALL_UPSTREAM_TASKS_COMPLETED"
    assert tasks["abid-download"]["retryPolicy"]["maxRetryCount"] == 3
    assert tasks["abid-train-counting"]["retryPolicy"]["maxRetryCount"] == 2
    assert "retryPolicy" not in tasks["abid-prepare"]
    assert all(task["cachingOptions"].get("enableCache") is not True for task in tasks.values()
               if "cachingOptions" in task)
    loops = [t for t in tasks.values() if "parameterIterator" in t]
    assert len(loops) == 2  # download and resize fan out over shards
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    for name in ["data_root", "source", "endpoint_url", "limit", "num_shards", "seed", "size", "train_profile",
                 "experiment"]:
        assert name in parameters
    assert parameters["source"]["defaultValue"] == "s3://aft-vbi-pds"


def test_cluster_config_file_overrides_and_rejects_typos(tmp_path: Path):
    config = tmp_path / "cluster.yaml"
    config.write_text("gpu_node_selector: {cloud.google.com/gke-accelerator: nvidia-h100-80gb}\ngpus_per_step: 2\n")
    settings = ClusterSettings.load(config)
    (path,) = compile_all(tmp_path / "out", settings, names=["abid"])
    spec, platform = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert executors["exec-abid-train-counting"]["nodeSelector"]["labels"] == {
        "cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    assert spec["deploymentSpec"]["executors"]["exec-abid-train-counting"]["container"]["resources"][
        "accelerator"]["resourceCount"] == "2"
    config.write_text("gpu_node_selektor: {}\n")
    with pytest.raises(ValueError, match="gpu_node_selektor"):
        ClusterSettings.load(config)


def test_nightly_compiles_the_suite_with_regression_and_report(compiled):
    from vsbench.runspec.suite import Suite

    spec, _ = compiled["nightly"]
    suite = Suite.load()
    tasks = _tasks(spec)
    scores = [name for name in tasks if _step(name) == "score"]
    assert len(scores) == len(suite.entries)
    assert len([name for name in tasks if _step(name) == "index"]) == len(suite.entries)
    assert set(tasks["regression-check"]["dependentTasks"]) >= set(scores)
    assert tasks["comparison-report"]["triggerPolicy"]["strategy"] == "ALL_UPSTREAM_TASKS_COMPLETED"
    rule = tasks["regression-check"]["inputs"]["parameters"]  # the suite's measured spreads reach the check
    assert json.loads(rule["spread_json"]["runtimeValue"]["constant"]) == suite.regression.spread != {}
    roots = {tasks[name]["inputs"]["parameters"]["root"]["runtimeValue"]["constant"] for name in scores}
    assert roots == {entry.root for entry in suite.entries}


def test_similarity_tasks_are_embed_index_search_score(compiled):
    """The mission's steps by name: the index trained once, filled over the reference shards
    (a ParallelFor after training), finished; search fanned out over query x reference shards after it."""
    spec, _ = compiled["similarity"]
    tasks = _tasks(spec)
    assert {"embed-shard", "index", "index-fill", "index-finish", "search-tasks", "search", "score"} <= set(tasks)
    assert tasks["index"]["inputs"]["parameters"]["stage"]["runtimeValue"]["constant"] == "train"
    assert tasks["index-fill"]["inputs"]["parameters"]["shard"]["componentInputParameter"].startswith("pipelinechannel")
    fill_loop = next(name for name, task in tasks.items()
                     if "index-fill" in task.get("componentRef", {}).get("name", "") or
                     task.get("parameterIterator", {}).get("items", {}).get("inputParameter", "").endswith(
                         "shard-list-2-Output"))
    assert "shard-list-2" in tasks[fill_loop]["dependentTasks"] and "index" in tasks["shard-list-2"]["dependentTasks"]
    assert fill_loop in tasks["index-finish"]["dependentTasks"]
    assert "index-finish" in tasks["search-tasks"]["dependentTasks"]
    loop = next(name for name, task in tasks.items()
                if task.get("parameterIterator", {}).get("items", {}).get("inputParameter", "").endswith("search-tasks-Output"))
    assert loop in tasks["score"]["dependentTasks"]
    inputs = spec["root"]["inputDefinitions"]["parameters"]
    assert inputs["search_shards"]["defaultValue"] == 1 and inputs["reference_shards"]["defaultValue"] == 1


def test_suite_validation(tmp_path: Path):
    from vsbench.runspec.suite import Suite

    path = tmp_path / "suite.yaml"
    path.write_text("entries:\n  - {benchmark: disc, root: /d, model: m}\n  - {benchmark: disc, root: /e, model: m}\n")
    with pytest.raises(ValueError, match="repeat the same benchmark and model"):
        Suite.load(path)
    path.write_text("entries:\n  - {benchmark: disc, root: /d, model: m, codec: Flat}\n")
    with pytest.raises(ValueError, match="codec"):
        Suite.load(path)
    path.write_text("entries: []\n")
    with pytest.raises(ValueError, match="at least one entry"):
        Suite.load(path)


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_the_ui_form_describes_every_parameter(compiled, name):
    """The Kubeflow UI shows each parameter's description under its field: none may be missing, each
    gives an example, and a JSON parameter names every key that what parses it accepts."""
    from vsbench.pipelines.form import MODEL_OPTION_KEYS, PARAMS_JSON_KEYS, benchmark_option_keys

    from vsbench.abid.profiles import TrainProfile

    spec, _ = compiled[name]
    assert len(spec["pipelineInfo"]["description"]) > 60
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    for parameter, definition in parameters.items():
        text = definition.get("description", "")
        assert len(text) > 20 and "Example: " in text, (parameter, text)
        assert ".." not in text.replace("...", ""), (parameter, text)
    described = {parameter: definition["description"] for parameter, definition in parameters.items()}
    json_keys = {"train_overrides": list(TrainProfile.model_fields), "params_json": list(PARAMS_JSON_KEYS),
                 "model_options": [key for keys in MODEL_OPTION_KEYS.values() for key in keys],
                 "benchmark_options": [key for keys in benchmark_option_keys().values() for key in keys]}
    for parameter, keys in json_keys.items():
        if parameter in described:
            missing = [key for key in keys if f"`{key}`" not in described[parameter]]
            assert not missing, (parameter, missing)
    if "benchmark_options" in described:
        assert all(f"{benchmark}: `" in described["benchmark_options"] for benchmark in benchmark_option_keys())


def test_the_form_texts_differ_where_the_pipelines_differ(compiled):
    """A name shared by two pipelines gets the text of the pipeline it is in where its meaning differs."""
    abid = compiled["abid"][0]["root"]["inputDefinitions"]["parameters"]
    similarity = compiled["similarity"][0]["root"]["inputDefinitions"]["parameters"]
    assert "download" in abid["num_shards"]["description"] and "embedding" in similarity["num_shards"]["description"]
    assert "Example: vsbench-abid." in abid["experiment"]["description"]
    assert "Example: vsbench-similarity." in similarity["experiment"]["description"]
    assert "split" in abid["seed"]["description"] and "split" not in similarity["seed"]["description"]


def test_params_json_keys_are_the_ones_tracking_reads():
    """params_json has no model: the keys the form lists are checked against the code that reads them
    (``params.get("...")`` and ``params["..."]`` in vsbench.tracking.runs), so a new one cannot go unlisted."""
    import ast
    import inspect

    from vsbench.pipelines.form import PARAMS_JSON_KEYS

    from vsbench.tracking import runs

    read = set()
    for node in ast.walk(ast.parse(inspect.getsource(runs))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "params"
                and node.args and isinstance(node.args[0], ast.Constant)):
            read.add(node.args[0].value)
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "params"
                and isinstance(node.slice, ast.Constant)):
            read.add(node.slice.value)
    assert read and read == set(PARAMS_JSON_KEYS)


def test_model_option_keys_are_the_builders_arguments():
    """The form's model options (written out: reading the registry imports torch, compiling must not)
    are each built-in model's and family's builder arguments, no more and no fewer."""
    import inspect

    from vsbench.pipelines.form import MODEL_OPTION_KEYS

    from vsbench.models.registry import available_models, families, model_source, resolve

    listed = {name.strip(): set(keys) for names, keys in MODEL_OPTION_KEYS.items() for name in names.split(",")}
    actual = {}
    for name in sorted(set(available_models()) - {family.pattern for family in families()}):
        if model_source(name) == "vsbench":  # a plugin's model is "its builder's arguments"
            actual[name] = set(inspect.signature(resolve(name)[0]).parameters)
    for family in families():
        if model_source(f"{family.prefix}:x") == "vsbench":
            actual[f"{family.prefix}:..."] = set(inspect.signature(family.builder).parameters) - {"spec"}
    assert listed == actual


def test_benchmark_option_keys_come_from_the_loaders(tmp_path: Path):
    from vsbench.pipelines.form import benchmark_option_keys, loader_option_keys

    from vsbench.benchmarks.registry import builtin_specs

    keys = benchmark_option_keys()
    assert keys["copydays"] == ["distractors", "codec_train", "k"]  # the loader's own keywords
    assert keys["patch_pairs"] == ["split", "patches", "patch_ext", "distance", "descriptor", "results_dir",
                                    "sequence_pattern"]  # its class's
    for spec in builtin_specs():  # the form's "a loader refuses keys it does not take"
        with pytest.raises(TypeError, match="no_such_option"):
            spec.load(tmp_path, no_such_option=1)
    with pytest.raises(TypeError, match="annotate its return type"):
        loader_option_keys("tests.pipelines.test_compile:_loader_without_a_class")


def _loader_without_a_class(root, **options):  # noqa: ANN001, ANN202 - what the form refuses
    return options


def test_a_parameter_without_a_text_is_refused_when_the_pipeline_is_built():
    from vsbench.pipelines.form import describe

    def pipeline(seed: int = 0, brand_new: str = "") -> None: ...

    with pytest.raises(KeyError, match="brand_new"):
        describe("summary", pipeline)


@pytest.mark.parametrize(("text", "message"), [("{profile: full}", "is not valid JSON"),
                                               ('["full"]', "must be a JSON object, got list")])
def test_a_form_json_parameter_that_is_no_object_is_one_line_naming_it(text: str, message: str, tmp_path: Path):
    """What a person types into the run form's JSON fields fails the step with a line naming the field
    (before any tracking or training starts), not a bare JSONDecodeError."""
    from vsbench.components.abid import abid_train_counting, abid_train_siamese, open_tracking

    with pytest.raises(ValueError, match=f"^params_json {message}"):
        open_tracking.python_func(experiment="e", kfp_run_id="r", pipeline="p", params_json=text)
    for component in (abid_train_counting, abid_train_siamese):
        with pytest.raises(ValueError, match=f"^train_overrides {message}"):
            component.python_func(data_root=str(tmp_path), profile="demo", overrides_json=text, seed=0, device="cpu",
                                  parent_run_id="", manifest=SimpleNamespace(path=str(tmp_path / "manifest")),
                                  metrics=None)


@pytest.mark.parametrize("umask", [0o027])  # neither a temporary file's 0600 nor the usual 0644
def test_the_compiled_yaml_gets_the_umask_mode_not_a_temporary_files(tmp_path: Path, umask: int):
    """Issue 39: ``vsbench compile`` wrote its YAML mode 0600 (a temporary file renamed): whoever uploads
    it (another user, a CI job) could not read it. Now it is what a plain ``open()`` would make."""
    import os
    import stat

    from typer.testing import CliRunner

    from vsbench.cli.app import app

    previous = os.umask(umask)
    try:
        result = CliRunner().invoke(app, ["compile", "--out", str(tmp_path / "out")])
    finally:
        os.umask(previous)
    assert result.exit_code == 0, result.output
    files = sorted((tmp_path / "out").iterdir())
    assert [p.name for p in files] == sorted(f"{name}.yaml" for name in PIPELINES)  # nothing temporary left
    assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o666 & ~umask}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_every_step_that_writes_the_runs_folder_checks_its_lease(compiled, name):
    """One run, one holder on a cluster (issue 46): the opening step leases the run's folders and the
    exit handler releases them; every step writing them is given the KFP run id to check the lease."""
    spec, _ = compiled[name]
    tasks = _tasks(spec)
    writers = {task_name: task for task_name, task in tasks.items()
               if {"out", "data_root"} & set(task.get("inputs", {}).get("parameters", {}))}
    assert writers, name
    for task_name, task in writers.items():
        run_id = task["inputs"]["parameters"].get("kfp_run_id", {})
        assert run_id.get("runtimeValue", {}).get("constant") == "{{$.pipeline_job_uuid}}", (name, task_name)
    for step in ("open-tracking", "close-tracking"):
        folders = tasks[step]["inputs"]["parameters"]["folders"]
        assert folders.get("componentInputParameter") or json.loads(folders["runtimeValue"]["constant"]), (name, step)
