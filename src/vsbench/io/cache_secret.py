"""The embedding cache's signing secret: who may write descriptors that later runs believe.

Why: the cache (:mod:`vsbench.models.cache`) is shared by every run that points at its folder, and
a plain content digest only catches damage. Anyone who can write the folder can also recompute a
sha256: a chunk rewritten through ``write_chunk`` with each copy query's row replaced by its
reference's gave uap 1.000 on the next run (issue 54). So every chunk carries an HMAC-SHA256 under
a secret key, and a chunk whose HMAC does not verify is recomputed, never believed. Only holders
of the key can write rows that are served.

Where the key comes from, first found wins:

* ``VSBENCH_CACHE_SECRET`` (at least :data:`MIN_CHARS` characters): on a cluster, the
  ``vsbench-cache`` Kubernetes Secret mounted as this variable into every step's pod; for a team
  sharing a cache on one volume, the same value in each member's environment;
* otherwise a per-user file, ``$XDG_CONFIG_HOME/vsbench/cache-secret`` (``~/.config`` without
  ``XDG_CONFIG_HOME``), made on first use with 32 random bytes, mode 0600 in a 0700 folder. A
  file or folder others can read or write, a link, or a file of another owner is refused: the
  key would no longer be the user's alone.

The cache folder is split per signer (``<root>/<signer id>/<key digest>/``): without a shared key
each user reads and writes only their own entries. The signer id is an HMAC of a fixed label
under the key, so it names the key without revealing it. Nothing here is ever logged with the
key's value in it (:class:`CacheSecret`'s repr holds only the signer id and where the key came from).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

SECRET_ENV = "VSBENCH_CACHE_SECRET"
MIN_CHARS = 32  # 32 characters of hex or base64 hold at least 128 bits: a key nobody guesses
FILE_NAME = "cache-secret"
SIGNER_LABEL = b"vsbench embedding cache signer id v1"
MAC_LABEL = b"vsbench embedding cache chunk mac v1"
FIX_ENV = f"set {SECRET_ENV} to at least {MIN_CHARS} random characters (e.g. `openssl rand -hex 32`)"


class CacheSecretError(ValueError):
    """The secret cannot be used as it is; the message names the variable or file and the fix."""

    one_line = True  # an expected failure: the CLI prints it as one `error:` line
    exit_code = 2


@dataclass(frozen=True)
class CacheSecret:
    """The keys derived from one secret: ``signer`` (16 hex digits, a folder name) and the key
    chunks are signed with. ``source`` says where the secret came from (the variable or the file)."""

    signer: str
    source: str
    mac_key: bytes = field(repr=False)

    @classmethod
    def from_secret(cls, secret: bytes, source: str) -> CacheSecret:
        signer = hmac.new(secret, SIGNER_LABEL, hashlib.sha256).hexdigest()[:16]
        return cls(signer=signer, source=source, mac_key=hmac.new(secret, MAC_LABEL, hashlib.sha256).digest())

    def mac(self) -> hmac.HMAC:
        """A fresh HMAC-SHA256 under this key, for the caller to feed a chunk's content."""
        return hmac.new(self.mac_key, digestmod=hashlib.sha256)


def secret_file() -> Path:
    """The per-user secret file (used when ``VSBENCH_CACHE_SECRET`` is not set)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "vsbench" / FILE_NAME


def _checked_environment(value: str) -> bytes:
    if len(value.strip()) < MIN_CHARS:
        raise CacheSecretError(f"{SECRET_ENV} holds {len(value.strip())} characters, fewer than {MIN_CHARS}: a "
                               f"short key can be guessed and every cached descriptor forged; {FIX_ENV}, or unset "
                               f"it to use the per-user file {secret_file()}")
    return value.strip().encode("utf-8")


def _loose(mode: int, wanted: int) -> bool:
    return bool(stat.S_IMODE(mode) & ~wanted & 0o777)


def _check_folder(folder: Path) -> None:
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise CacheSecretError(f"{folder}: not a folder (the embedding cache's secret lives in it); remove it, or "
                               f"{FIX_ENV}")
    if info.st_uid != os.getuid() or _loose(info.st_mode, 0o700):
        raise CacheSecretError(f"{folder}: mode {stat.S_IMODE(info.st_mode):04o}, owner uid {info.st_uid}: others "
                               f"could read or replace the embedding cache's secret; run `chmod 700 {folder}` as its "
                               f"owner, or {FIX_ENV}")


def _read_raw(path: Path) -> bytes:
    """The secret in ``path``, opened without following a link and checked on the open file."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
            raise FileNotFoundError(exc.errno, exc.strerror, str(path)) from None  # made by _create_file
        raise CacheSecretError(f"{path}: cannot be read ({exc.strerror or exc}): a link or an unreadable file is not "
                               f"the embedding cache's secret; remove it (a new one is made), or {FIX_ENV}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or _loose(info.st_mode, 0o600):
            raise CacheSecretError(f"{path}: mode {stat.S_IMODE(info.st_mode):04o}, owner uid {info.st_uid}: others "
                                   f"could read the embedding cache's secret and forge cached descriptors; run "
                                   f"`chmod 600 {path}` as its owner (or remove it: a new one is made), or {FIX_ENV}")
        value = handle.read(4096).strip()
    if len(value) < MIN_CHARS:
        raise CacheSecretError(f"{path}: holds {len(value)} characters, fewer than {MIN_CHARS}; remove it (a new one "
                               f"is made), or {FIX_ENV}")
    return value


def _create_file(path: Path) -> None:
    """32 random bytes (hex) in a new 0600 file of a 0700 folder; a file made meanwhile by another
    process is kept (``O_EXCL``), so two first runs agree on one key."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        _check_folder(path.parent)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            return
    except OSError as exc:
        raise CacheSecretError(f"{path}: the embedding cache's secret cannot be made ({exc.strerror or exc}); make "
                               f"XDG_CONFIG_HOME a writable folder of yours, or {FIX_ENV}") from None
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(secrets.token_hex(32) + "\n")


def _raw_secret(create: bool) -> tuple[bytes, str]:
    """(the secret's bytes, where they came from): the variable, else the per-user file."""
    value = os.environ.get(SECRET_ENV)
    if value is not None and value.strip():
        return _checked_environment(value), SECRET_ENV
    path = secret_file()
    if path.parent.exists() or path.parent.is_symlink():
        _check_folder(path.parent)
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not _warned:
        _warned.append(True)
        logger.warning("no %s in this pod: the shared embedding cache is signed with a key of this pod's own (%s), "
                       "so no other pod's entries are believed and none of this pod's are reused; create the "
                       "vsbench-cache Secret (k8s/README.md)", SECRET_ENV, path)
    try:
        return _read_raw(path), str(path)
    except FileNotFoundError:
        if not create:
            raise
    _create_file(path)
    return _read_raw(path), str(path)


_warned: list[bool] = []  # the pod's line is said once per process


def load_secret(*, create: bool = True) -> CacheSecret:
    """The secret to sign and verify cache chunks with (see the module docstring); the file is made
    when missing and ``create``. Raises :class:`CacheSecretError` (one line) when it is unusable."""
    return CacheSecret.from_secret(*_raw_secret(create))


def secret_for_steps() -> str:
    """The secret's value, to hand to steps that run in a container (``--runner container``): they
    cannot read the user's file, and a key of their own would make them miss (and never trust) the
    user's cache entries. Passed in the container's environment only, never on a command line."""
    return _raw_secret(True)[0].decode("utf-8")


def secret_problem() -> str | None:
    """Why the secret would be refused, or None (preflight: a missing file is fine, it is made on
    first use; nothing is created here)."""
    try:
        load_secret(create=False)
    except FileNotFoundError:
        return None
    except CacheSecretError as exc:
        return str(exc)
    return None
