"""Run bundles (``mlflow-run.json``) as data: their format, their digest, and their checks when read.

A bundle is what a command writes when it finishes (see :mod:`vsbench.tracking.command`), and what
``vsbench track upload`` later turns into an MLflow run. The file can sit on disk for days and
anyone who can write to the folder can edit it, so the upload treats it as untrusted input, not as
instructions:

* **Validated whole before MLflow is contacted.** A strict pydantic model (``frozen``,
  ``extra="forbid"``, no type coercion: ``"uploaded": "yes"`` is refused, not a ``TypeError``
  later); MLflow's own length limits on names and values; caps on the file's size (checked with
  ``stat`` before any byte is read) and on the number of params, metrics, tags and artifacts; every
  problem one :class:`~vsbench.io.inputs.InputError` line naming the file, the field and the fix.
* **Artifacts only from the bundle's own folder.** ``artifacts[].path`` is resolved (symlinks
  followed) and must land in the folder that holds the bundle, on a regular file under the size cap;
  ``artifacts[].folder`` (where it goes in the run) must be a plain relative path.
* **Keyed and verified by a digest.** When vsbench writes a bundle it records the sha256 of its
  content (:func:`content_digest`: everything but ``uploaded``, ``digest`` and the informational
  ``tracking_uri``: metrics, params, tags and every artifact's path, folder, size and sha256
  included). Reading recomputes it: a bundle or an artifact changed since it was written is
  refused. The digest and each artifact's sha256 are required (issue 37): blanking one (``""``,
  ``null``, the key deleted) used to switch its check off, so a hand-edited metric uploaded as if
  vsbench had written it. A bundle without them (written before issue 26, or edited) is refused in
  one line saying to re-run the command that wrote it. The run created from a bundle
  carries the digest as the tag :data:`DIGEST_TAG`; an upload whose run key names an existing run
  only goes on when that tag equals the bundle's digest (the same bundle uploaded again), so a
  forged bundle cannot add to, or overwrite the latest value of, someone else's run.
* **Never a tracking URI.** The bundle's ``tracking_uri`` says where the run was meant to go (with
  any user:password removed when written) and is never contacted: the store comes from the
  environment or the default only.

The caps have defaults far above real bundles (a similarity run has ~10 params and ~100 metrics)
and, like :mod:`vsbench.io.inputs`' caps, an environment variable each, named in the message.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from vsbench.io.inputs import InputError, _env_int, human_bytes, parse_json, quote, read_text
from vsbench.io.storage import SHA256_HEX
from vsbench.tracking.evaluations import Evaluation
from vsbench.tracking.names import NOTE_TAG
from vsbench.tracking.provenance import MLFLOW_GIT_COMMIT_TAG

DIGEST_TAG = "vsbench.bundle.digest"  # on the MLflow run made from a bundle: the bundle's content digest

MAX_BUNDLE_BYTES = 16 << 20  # 16 MiB: a real bundle is a few kB; parsing costs ~10x the size in memory
MAX_PARAMS = 1_000
MAX_METRICS = 10_000
MAX_TAGS = 1_000
MAX_ARTIFACTS = 1_000
MAX_EVALUATIONS = 1_000
MAX_ARTIFACT_BYTES = 1 << 30  # 1 GiB a file: metrics, CSVs, plots, step manifests
MAX_ARTIFACTS_TOTAL_BYTES = 4 << 30  # 4 GiB for all of a bundle's artifacts together

# MLflow's own limits (mlflow.utils.validation): checked here so that a long value is one line
# before the run exists, not an error half-way through the upload.
_KEY_CHARS = 250
_PARAM_CHARS = 6000
_TAG_CHARS = 8000
RUN_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$"  # cli-<time>-<hex> or a KFP run id (a UUID)
_HASH_CHUNK = 1 << 20
_FIX = "it is not a bundle as vsbench writes it; re-run the command that wrote it, or remove the file"

Key = Annotated[str, StringConstraints(min_length=1, max_length=_KEY_CHARS)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=_KEY_CHARS)]
Digest = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


def max_bundle_bytes() -> int:
    """Largest bundle file read: ``VSBENCH_MAX_BUNDLE_BYTES`` (default 16 MiB)."""
    return _env_int("VSBENCH_MAX_BUNDLE_BYTES", MAX_BUNDLE_BYTES)


def max_artifact_bytes() -> int:
    """Largest artifact file a bundle may name: ``VSBENCH_MAX_ARTIFACT_BYTES`` (default 1 GiB)."""
    return _env_int("VSBENCH_MAX_ARTIFACT_BYTES", MAX_ARTIFACT_BYTES)


def _counts() -> dict[str, tuple[int, str]]:
    """Field -> (cap, variable) for the entries of a bundle."""
    return {name: (_env_int(variable, default), variable) for name, default, variable in (
        ("params", MAX_PARAMS, "VSBENCH_MAX_BUNDLE_PARAMS"), ("metrics", MAX_METRICS, "VSBENCH_MAX_BUNDLE_METRICS"),
        ("tags", MAX_TAGS, "VSBENCH_MAX_BUNDLE_TAGS"), ("artifacts", MAX_ARTIFACTS, "VSBENCH_MAX_BUNDLE_ARTIFACTS"),
        ("evaluations", MAX_EVALUATIONS, "VSBENCH_MAX_BUNDLE_EVALUATIONS"))}


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class BundleArtifact(_Strict):
    """A file of the run: ``path`` relative to the bundle's folder (an absolute one must still lie in
    that folder), ``folder`` its place in the run, and its size and sha256 when the bundle was written."""

    path: Annotated[str, StringConstraints(min_length=1, max_length=4096)]
    folder: Annotated[str, StringConstraints(max_length=_KEY_CHARS)] = ""
    size: int = Field(ge=0)
    sha256: Digest


class Uploaded(_Strict):
    """Where a bundle went: written back into the bundle after an upload."""

    run_id: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    tracking_uri: Annotated[str, StringConstraints(max_length=4096)]
    at: Annotated[str, StringConstraints(max_length=64)]


class Bundle(_Strict):
    """A run bundle as vsbench writes it (format 1; ``digest`` and artifact hashes since issue 26)."""

    format: Literal[1]
    experiment: Name
    pipeline: Name
    run_key: Annotated[str, StringConstraints(pattern=RUN_KEY_PATTERN)]
    run_name: Name
    start_ms: int = Field(ge=0)
    end_ms: int = Field(ge=0)
    tracking_uri: Annotated[str, StringConstraints(max_length=4096)] = ""
    params: dict[Key, Annotated[str, StringConstraints(max_length=_PARAM_CHARS)]]
    metrics: dict[Key, Annotated[float, Field(allow_inf_nan=False)]]
    tags: dict[Key, Annotated[str, StringConstraints(max_length=_TAG_CHARS)]]
    artifacts: list[BundleArtifact]
    uploaded: Uploaded | None = None
    digest: Digest  # required: a bundle without one vouches for nothing (see the module doc)
    # Since issue 38: the command's evaluations, each an MLflow run of its own under this one (absent
    # in bundles written before, which therefore keep their digest).
    evaluations: list[Evaluation] = Field(default_factory=list)

    @field_validator("tags")
    @classmethod
    def _own_tags(cls, tags: dict[str, str]) -> dict[str, str]:
        """Only the tags vsbench writes (``vsbench.*``, an interval's ``interval_note.<metric>`` and the git
        commit): a bundle may not set MLflow's system tags (``mlflow.parentRunId`` would hang a run under
        someone's pipeline run)."""
        for key in tags:
            if not key.startswith(("vsbench.", NOTE_TAG)) and key != MLFLOW_GIT_COMMIT_TAG:
                raise ValueError(f"tag {quote(key)} is not one vsbench writes (vsbench.*, {NOTE_TAG}<metric> or "
                                 f"{MLFLOW_GIT_COMMIT_TAG})")
        return tags

    def _left_out(self) -> dict[str, Any]:
        """Fields written only when set: ``evaluations`` (issue 38) and their ``interval_notes`` (issue
        55), so a bundle without them is written, and digested, as before (and a reader from before
        reads it)."""
        if not self.evaluations:
            return {"evaluations": True}
        if not any(e.interval_notes for e in self.evaluations):
            return {"evaluations": {"__all__": {"interval_notes"}}}
        return {}

    def as_file(self) -> dict[str, Any]:
        """What the file holds (:meth:`_left_out`)."""
        return self.model_dump(exclude=self._left_out())

    def content(self) -> dict[str, Any]:
        """What the digest covers: all that decides the run's content."""
        return self.model_dump(exclude={"uploaded": True, "digest": True, "tracking_uri": True, **self._left_out()})


def sealed_bundle(**fields: Any) -> Bundle:
    """A bundle from its fields (validated by the model) with its content digest recorded: how vsbench
    writes one. The draft's placeholder digest is not part of what :meth:`Bundle.content` covers."""
    draft = Bundle(**fields, digest="0" * 64)
    return draft.model_copy(update={"digest": content_digest(draft.content())})


def content_digest(content: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a bundle's content (sorted keys, no spaces, no NaN): the same
    content gives the same digest after any number of writes and reads (floats round-trip exactly)."""
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in 1 MiB chunks (memory stays bounded whatever its size)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def redact_uri(uri: str) -> str:
    """``uri`` without a ``user:password@`` part: a bundle is a plain file, never a place for secrets."""
    try:
        parts = urlsplit(uri)
        if parts.username is None and parts.password is None:
            return uri
        host, port = parts.hostname or "", parts.port  # .port: ValueError when out of range
    except ValueError:
        return ""
    host = f"[{host}]" if ":" in host else host  # an IPv6 address keeps its brackets
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit(parts._replace(netloc=netloc))


def artifact_folder_problem(folder: str) -> str:
    """"" when ``folder`` is a plain relative path in a run (``""``, ``steps/score``), else why not."""
    if not folder:
        return ""
    pure = PurePosixPath(folder)
    if "\\" in folder or pure.is_absolute() or any(part in ("..", ".") for part in pure.parts) or "\0" in folder:
        return f"{quote(folder)} is not a plain relative folder (no '..', '.', '\\' or leading '/')"
    return ""


def resolve_artifact(bundle_dir: Path, path: str) -> Path:
    """The real file an artifact path names, which must lie in ``bundle_dir`` (already resolved);
    ValueError (the reason) otherwise. Symlinks are followed, so a link pointing out is refused."""
    if "\0" in path:
        raise ValueError("the path holds a NUL character")
    candidate = Path(path) if os.path.isabs(path) else bundle_dir / path
    real = candidate.resolve()
    if not real.is_relative_to(bundle_dir):
        raise ValueError(f"{quote(path)} resolves to {real}, outside the bundle's folder {bundle_dir}; "
                         "a bundle may only name files beside it")
    if any(part.startswith(".") for part in real.relative_to(bundle_dir).parts):
        # vsbench writes no hidden files; a bundle dropped in a home folder could name .ssh/ or .aws/
        raise ValueError(f"{quote(path)} is a hidden file or lies in a hidden folder; vsbench never names one")
    return real


def _validation_line(exc: ValidationError) -> str:
    """The first problem of a ValidationError as ``field: message (got ...)`` for one line."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    field = ".".join(str(part) for part in first["loc"]) or "(top level)"
    got = first.get("input")
    shown = "" if isinstance(got, (dict, list)) or first["type"] == "missing" else f", got {quote(got)}"
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return f"field {field}: {first['msg']}{shown}{more}; {_FIX}"


_NO_DIGEST = ("re-run the command that wrote it (bundles written before vsbench recorded digests, or edited "
              "since, are not uploaded)")


def _missing_digests(raw: dict[str, Any]) -> str:
    """The first digest a bundle lacks or holds in another form than vsbench writes (a blank, a
    null, the key deleted, not 64 lowercase hex digits), worded for one line; "" when none."""
    checks = [("field digest", raw, "digest", "the bundle's content digest")]
    artifacts = raw.get("artifacts")
    if isinstance(artifacts, list):
        checks += [(f"field artifacts.{i}.sha256", entry, "sha256", "the artifact's sha256")
                   for i, entry in enumerate(artifacts) if isinstance(entry, dict)]
    for field, holder, key, what in checks:
        value = holder.get(key)
        if key not in holder or value is None or value == "":
            state = "missing" if key not in holder else "null" if value is None else "blank"
            return f"{field}: {what} is {state}, so nothing vouches for the bundle; {_NO_DIGEST}"
        if not isinstance(value, str) or not SHA256_HEX.fullmatch(value):
            return f"{field}: {quote(value)} is not a sha256 (64 lowercase hex digits); {_NO_DIGEST}"
    return ""


def parse_bundle(path: Path) -> Bundle:
    """Read and type-check a bundle: size cap before reading, counts, its digests present, strict
    model. InputError naming the file and the field otherwise. Nothing outside the file is looked at
    (see :func:`verify_bundle`)."""
    text = read_text(path, max_bytes=max_bundle_bytes(), variable="VSBENCH_MAX_BUNDLE_BYTES")
    raw = parse_json(path, text)
    del text
    if not isinstance(raw, dict) or raw.get("format") != 1 or "run_key" not in raw:
        raise InputError(path, "not a vsbench run bundle (no \"format\": 1 and \"run_key\")")
    for name, (cap, variable) in _counts().items():
        entries = raw.get(name)
        if isinstance(entries, (dict, list)) and len(entries) > cap:
            raise InputError(path, f"field {name}: {len(entries):,} entries, over the limit of {cap:,} "
                                   f"(set {variable} to raise it)")
    missing = _missing_digests(raw)
    if missing:
        raise InputError(path, missing)
    try:
        return Bundle.model_validate(raw)
    except ValidationError as exc:
        raise InputError(path, _validation_line(exc)) from None


def verify_bundle(path: Path, bundle: Bundle) -> tuple[str, list[tuple[Path, str]]]:
    """(the bundle's content digest, [(real file, run folder)] of its artifacts) after every check
    that needs the disk: each artifact inside the bundle's folder, a regular file under the size
    caps, unchanged since the bundle was written (size and sha256); the digest recomputed and equal
    to the recorded one. InputError naming the file, the field and the fix otherwise."""
    bundle_dir = path.resolve().parent
    limit, total_limit, total = max_artifact_bytes(), MAX_ARTIFACTS_TOTAL_BYTES, 0
    files: list[tuple[Path, str]] = []
    for index, artifact in enumerate(bundle.artifacts):
        field = f"field artifacts.{index}"
        problem = artifact_folder_problem(artifact.folder)
        if problem:
            raise InputError(path, f"{field}.folder: {problem}")
        try:
            real = resolve_artifact(bundle_dir, artifact.path)
            info = real.stat()
        except (ValueError, OSError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise InputError(path, f"{field}.path: {reason}; refused (the file is not uploaded)") from None
        if not stat.S_ISREG(info.st_mode):
            raise InputError(path, f"{field}.path: {quote(artifact.path)} is not a regular file; refused")
        if info.st_size > limit:
            raise InputError(path, f"{field}.path: {quote(artifact.path)} is {human_bytes(info.st_size)}, over the "
                                   f"{human_bytes(limit)} limit for an artifact (set VSBENCH_MAX_ARTIFACT_BYTES to raise it)")
        total += info.st_size
        if total > total_limit:
            raise InputError(path, f"field artifacts: over {human_bytes(total_limit)} of files together; refused")
        if artifact.size != info.st_size:
            raise InputError(path, f"{field}.path: {quote(artifact.path)} is {info.st_size:,} bytes, not the "
                                   f"{artifact.size:,} recorded when the bundle was written: the file changed since; "
                                   "re-run the command that wrote the bundle")
        if file_sha256(real) != artifact.sha256:
            raise InputError(path, f"{field}.path: {quote(artifact.path)} changed since the bundle was written "
                                   "(sha256 differs); re-run the command that wrote the bundle")
        files.append((real, artifact.folder))
    digest = content_digest(bundle.content())
    if digest != bundle.digest:
        raise InputError(path, "field digest: the content does not match the digest recorded when vsbench "
                               "wrote the bundle (it was edited); re-run the command that wrote it")
    return digest, files


def check_run_key(run_key: str) -> str:
    """``run_key`` when it is safe in an MLflow filter string (quoted), else ValueError."""
    if not re.fullmatch(RUN_KEY_PATTERN, run_key):
        raise ValueError(f"run key {quote(run_key)} is not of the form vsbench writes")
    return run_key
