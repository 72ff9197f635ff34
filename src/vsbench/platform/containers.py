"""Run kfp.local steps inside the vsbench image, as a pod in k8s/ would run them.

``kfp.local.DockerRunner`` starts one container per step through a Docker API. Each step here
gets what the cluster gives a pod: UID/GID 10001, a read-only root filesystem with a tmpfs on
/tmp, the data paths mounted at the same paths (a PVC on the cluster), host networking standing
in for the cluster's service network, and every setting (MLflow, S3, credentials) from the
environment only, never from the image or the command line.

Where no Docker daemon answers, vsbench starts ``podman system service`` on a socket of its own
and stops it when the run ends. Containers carry a label with the owning process id, so none is
left behind: a run removes its own containers when it ends (success, failure, Ctrl-C or
SIGTERM), and the next run removes those of a run that was killed outright.
"""

from __future__ import annotations

import contextlib
import grp
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUNTIME_UID = 10001  # the images' user (images/Dockerfile.*), and runAsUser in k8s/
OWNER_LABEL = "io.vsbench.owner-pid"
RUN_LABEL = "io.vsbench.run"
ENGINE_PACKAGES = "podman uidmap runc"
# What a pod gets from the vsbench-config ConfigMap and the vsbench-s3 / MLflow Secrets (k8s/),
# plus proxies. Host paths (AWS_CONFIG_FILE, ...) are not passed: they do not exist in the image.
PASSED_PREFIXES = ("MLFLOW_", "AWS_", "VSBENCH_")
PASSED_NAMES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "TZ")
HOST_ONLY = ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_PROFILE", "VSBENCH_IMAGE", "VSBENCH_IMAGE_ID",
             "VSBENCH_RUNNER")
CA_BUNDLE_VARIABLES = ("AWS_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")
CONTAINERS_CONF = Path(__file__).resolve().parents[3] / "images" / "podman" / "containers.conf"


class ContainerRunError(RuntimeError):
    """The container runner cannot start; the message says what to install or build."""

    one_line = True  # an expected failure: its message says all (the CLI prints no traceback)


@dataclass(frozen=True)
class ImageIdentity:
    name: str
    image_id: str
    digests: tuple[str, ...]

    def as_environment(self) -> dict[str, str]:
        return {"VSBENCH_IMAGE": self.name, "VSBENCH_IMAGE_ID": self.image_id}


# ---- the engine -----------------------------------------------------------------------------

def _answers(base_url: str) -> bool:
    import docker

    try:
        client = docker.DockerClient(base_url=base_url, timeout=5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - any failure means "not this one"
        return False


def existing_docker_api() -> str | None:
    """A Docker API that already answers: $DOCKER_HOST, the Docker daemon, or podman's own socket."""
    candidates = [os.environ.get("DOCKER_HOST", "")]
    candidates += ["unix:///var/run/docker.sock", "unix:///run/podman/podman.sock",
                   f"unix:///run/user/{os.getuid()}/podman/podman.sock"]
    for url in filter(None, candidates):
        if url.startswith("unix://") and not Path(url[len("unix://"):]).exists():
            continue
        if _answers(url):
            return url
    return None


def podman_environment() -> dict[str, str]:
    """podman's environment: vsbench's containers.conf unless the user named one."""
    env = dict(os.environ)
    if "CONTAINERS_CONF" not in env and CONTAINERS_CONF.exists():
        env["CONTAINERS_CONF"] = str(CONTAINERS_CONF)
    return env


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: the service ends if vsbench is killed outright


@contextlib.contextmanager
def podman_service(timeout: float = 60.0) -> Iterator[str]:
    """``podman system service`` on a private socket for the duration of the block."""
    podman = shutil.which("podman")
    if podman is None:
        raise ContainerRunError(
            "no container engine: no Docker daemon answers and podman is not installed. Install podman "
            f"(Debian/Ubuntu: sudo apt-get install {ENGINE_PACKAGES}) or start Docker, then run again.")
    folder = Path(tempfile.mkdtemp(prefix="vsbench-podman-"))
    socket = folder / "podman.sock"
    url = f"unix://{socket}"
    log = (folder / "service.log").open("wb")
    process = subprocess.Popen([podman, "system", "service", "--time=0", url], stdout=log, stderr=subprocess.STDOUT,
                               env=podman_environment(), preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    try:
        deadline = time.monotonic() + timeout
        while not (socket.exists() and _answers(url)):
            if process.poll() is not None or time.monotonic() > deadline:
                log.flush()
                tail = (folder / "service.log").read_text(errors="replace")[-600:]
                raise ContainerRunError(f"podman system service did not start ({url}): {tail.strip() or 'no output'}"
                                        + ("" if os.getuid() == 0 else "; rootless podman needs uidmap and "
                                           "/etc/subuid entries for your user"))
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def docker_api() -> Iterator[str]:
    """A Docker API URL, exported as DOCKER_HOST for kfp's ``docker.from_env()`` in the block."""
    url = existing_docker_api()
    with contextlib.ExitStack() as stack:
        if url is None:
            url = stack.enter_context(podman_service())
        previous = os.environ.get("DOCKER_HOST")
        os.environ["DOCKER_HOST"] = url
        try:
            yield url
        finally:
            if previous is None:
                os.environ.pop("DOCKER_HOST", None)
            else:
                os.environ["DOCKER_HOST"] = previous


# ---- what each step gets ----------------------------------------------------------------------

def image_identity(client: Any, image: str) -> ImageIdentity:
    import docker

    try:
        found = client.images.get(image)
    except docker.errors.ImageNotFound:
        raise ContainerRunError(
            f"image {image} is not on this machine: build it with `make images` "
            "(or `images/build.sh --only cpu` for the CPU image alone)") from None
    return ImageIdentity(image, found.id, tuple(found.attrs.get("RepoDigests") or ()))


def step_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The settings a step gets: MLflow, S3 and vsbench variables, proxies; nothing else of the host."""
    environ = dict(os.environ if environ is None else environ)
    return {key: value for key, value in environ.items()
            if (key.startswith(PASSED_PREFIXES) or key in PASSED_NAMES) and key not in HOST_ONLY}


def ca_bundles(environ: dict[str, str]) -> list[Path]:
    """CA bundle files the settings name (TLS-inspecting networks): mounted read-only, same path."""
    return sorted({Path(environ[key]) for key in CA_BUNDLE_VARIABLES
                   if environ.get(key) and Path(environ[key]).is_file()})


def covering(paths: Iterable[Path]) -> list[Path]:
    """The fewest folders that cover ``paths``: a folder inside another is mounted with it."""
    kept: list[Path] = []
    for path in sorted({p.resolve() for p in paths}, key=lambda p: len(p.parts)):
        if not any(path == k or k in path.parents for k in kept):
            kept.append(path)
    return sorted(kept)


def _wanted_access(path: Path, gid: int) -> tuple[int, int] | None:
    """(group, mode) ``path`` needs for the steps' group, or None when it has them (or is a link)."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        return None
    wanted = info.st_mode | stat.S_IRGRP | stat.S_IWGRP
    if stat.S_ISDIR(info.st_mode):
        wanted |= stat.S_IXGRP | stat.S_ISGID  # new files inherit the group, as on an fsGroup volume
    if info.st_gid == gid and stat.S_IMODE(info.st_mode) == stat.S_IMODE(wanted):
        return None
    return gid, stat.S_IMODE(wanted)


def _access_paths(folders: Iterable[Path], files: Iterable[Path]) -> Iterator[Path]:
    """Every path :func:`grant_step_access` looks at: the folders (created) and all under them; a
    single file's folder, the file and its sqlite side files."""
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        for current, _dirs, names in os.walk(folder):
            yield Path(current)
            yield from (Path(current) / name for name in names)
    for file in files:
        yield file.parent
        for sibling in (file, file.with_name(file.name + "-journal"), file.with_name(file.name + "-wal"),
                        file.with_name(file.name + "-shm")):
            if sibling.exists():
                yield sibling


def step_access_changes(folders: Iterable[Path], files: Iterable[Path] = (), gid: int = RUNTIME_UID) -> list[Path]:
    """The host paths :func:`grant_step_access` would change (their group or mode), to say so first."""
    return [path for path in _access_paths(folders, files) if _wanted_access(path, gid) is not None]


def access_note(changes: list[Path], roots: Iterable[Path], gid: int = RUNTIME_UID) -> str:
    """One line saying, before it happens, what giving the steps' group access changes on the host."""
    touched = [root for root in roots if any(path == root or root in path.parents for path in changes)]
    shown = ", ".join(str(root) for root in touched[:3]) + (f" and {len(touched) - 3} more" if len(touched) > 3 else "")
    name = group_name(gid)
    who = f"{gid} ({name})" if name != str(gid) else str(gid)
    return (f"note: the steps run as user and group {who}, as in a pod: {len(changes):,} file(s) and folder(s) under {shown or 'the mounted folders'} get group {gid}, group read-write and "
            "set-gid folders (what Kubernetes' fsGroup does to a volume); owners and other permissions stay; "
            "`--runner subprocess` changes nothing")


def grant_step_access(folders: Iterable[Path], files: Iterable[Path] = (), gid: int = RUNTIME_UID,
                      changes: list[Path] | None = None) -> list[Path]:
    """What Kubernetes does to a volume for ``fsGroup: 10001``: group 10001, group-writable,
    set-gid folders, so the step's user can write what the host created and the host keeps
    reading what the step writes. ``files`` are single files (an MLflow sqlite store) whose folder
    is made writable without walking it. ``changes``: :func:`step_access_changes` of the same
    folders, already walked (to say them first). Returns the paths it changed."""
    if changes is None:
        changes = step_access_changes(folders, files, gid)
    changed = []
    try:
        for path in changes:
            access = _wanted_access(path, gid)
            if access is None:
                continue
            if path.lstat().st_gid != gid:
                os.chown(path, -1, gid)
            if stat.S_IMODE(path.lstat().st_mode) != access[1]:
                os.chmod(path, access[1])
            changed.append(path)
    except PermissionError as exc:
        raise ContainerRunError(
            f"cannot give the steps' user (GID {gid}) write access to {exc.filename}: run as root or as the "
            f"owner of that folder, or `chgrp -R {gid} PATH && chmod -R g+rwX PATH` it yourself") from None
    return changed


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


# ---- containers: label, clean up ------------------------------------------------------------

def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_containers(client: Any, *, run: str | None = None, stale_only: bool = False) -> int:
    """Force-remove vsbench step containers: those of ``run``, or those whose owner died."""
    removed = 0
    for container in client.containers.list(all=True, filters={"label": OWNER_LABEL}):
        labels = container.labels or {}
        if run is not None and labels.get(RUN_LABEL) != run:
            continue
        if stale_only:
            owner = labels.get(OWNER_LABEL, "")
            if owner.isdigit() and _pid_alive(int(owner)):
                continue
        with contextlib.suppress(Exception):
            container.remove(force=True)
            removed += 1
    return removed


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, a CI timeout) unwinds like Ctrl-C, so clean-up runs."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_step_container(client: Any, image: str, command: list[str], volumes: dict[str, Any],
                       **run_args: Any) -> int:
    """One step's container: logs streamed, its exit status returned, the container removed.

    kfp 2.17's own ``run_docker_container`` starts containers with ``auto_remove=True`` and reads
    a container that is already gone as a success, so a step that fails quickly would pass; here
    the container is removed only after its status is read.
    """
    container = client.containers.run(image=image, command=command, detach=True, stdout=True, stderr=True,
                                      volumes=volumes, **run_args)
    try:
        for line in container.logs(stream=True, follow=True):
            print(line.decode(errors="replace"), end="")
        return int(container.wait()["StatusCode"])
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)


@contextlib.contextmanager
def every_step_in(image: str) -> Iterator[None]:
    """Run every step in ``image`` whatever its component names (the CUDA image's steps run in
    the CPU image on a machine without a GPU), with :func:`run_step_container`. kfp.local looks
    its Docker task handler up at each task, so a subclass in its place is enough."""
    import docker
    from kfp.local import docker_task_handler, status

    original = docker_task_handler.DockerTaskHandler

    class OneImageTaskHandler(original):  # type: ignore[misc, valid-type]
        def __init__(self, image: str, **kwargs: Any) -> None:
            super().__init__(image=image_override, **kwargs)

        def run(self) -> Any:
            client = docker.from_env()
            try:
                run_args = dict(self.runner.container_run_args)
                if self.env_vars:
                    run_args["environment"] = self.env_vars
                code = run_step_container(client, self.image, self.full_command, self.get_volumes_to_mount(client),
                                          **run_args)
            finally:
                client.close()
            return status.Status.SUCCESS if code == 0 else status.Status.FAILURE

    image_override = image
    docker_task_handler.DockerTaskHandler = OneImageTaskHandler
    try:
        yield
    finally:
        docker_task_handler.DockerTaskHandler = original


@dataclass(frozen=True)
class ContainerPlan:
    """Everything one container run of a pipeline needs, decided before anything starts."""
    image: str
    folders: tuple[Path, ...]  # mounted read-write at the same path; made writable for UID 10001
    files: tuple[Path, ...] = ()  # single files to write (sqlite), their folder mounted
    read_only: tuple[Path, ...] = ()  # inputs, mounted read-only and left as they are
    environment: tuple[tuple[str, str], ...] = ()

    def mounts(self) -> list[Path]:
        return covering([*self.folders, *(f.parent for f in self.files)])

    def read_only_mounts(self) -> list[Path]:
        writable = self.mounts()
        return [p for p in covering(self.read_only) if not any(p == w or w in p.parents for w in writable)]


@contextlib.contextmanager
def container_runner(plan: ContainerPlan, pipeline_root: Path,
                     note: Callable[[str], None] = print) -> Iterator[tuple[Any, ImageIdentity]]:
    """A ``kfp.local.DockerRunner`` for ``plan``, with the engine, clean-up and image swap around it.
    ``note`` gets one line, before any host folder's group or mode changes, saying what changes."""
    import docker
    from docker.types import Mount
    from kfp import local

    environment = dict(plan.environment)
    bundles = ca_bundles(environment)
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(docker_api())
        client = docker.DockerClient(base_url=url)
        stack.callback(client.close)
        identity = image_identity(client, plan.image)
        remove_containers(client, stale_only=True)
        writable = [*plan.folders, pipeline_root]
        if changes := step_access_changes(writable, plan.files):
            note(access_note(changes, [*writable, *(file.parent for file in plan.files)]))
            grant_step_access(writable, plan.files, changes=changes)  # (the folders walked once)
        # Folders and files this process creates from now on (kfp.local's task folders, say) stay
        # writable for the steps' group, as the set-gid folders give them that group.
        previous_umask = os.umask(0o002)
        stack.callback(os.umask, previous_umask)
        run = f"{os.getpid()}-{time.time_ns()}"
        stack.callback(remove_containers, client, run=run)
        mounts = [Mount(target=str(p), source=str(p), type="bind") for p in plan.mounts() if p != pipeline_root]
        mounts += [Mount(target=str(p), source=str(p), type="bind", read_only=True)
                   for p in [*plan.read_only_mounts(), *bundles]]
        runner = local.DockerRunner(
            user=f"{RUNTIME_UID}:{RUNTIME_UID}", read_only=True, tmpfs={"/tmp": "rw,mode=1777"},
            mounts=mounts, network_mode="host", environment={**environment, **identity.as_environment(),
                                                             "VSBENCH_RUNNER": "container"},
            labels={OWNER_LABEL: str(os.getpid()), RUN_LABEL: run},
        )
        stack.enter_context(sigterm_as_interrupt())
        stack.enter_context(every_step_in(plan.image))
        yield runner, identity
