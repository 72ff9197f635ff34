"""The embedding cache's signing secret (vsbench.io.cache_secret, issue 54): from the environment
when set (at least 32 characters), else a per-user file made 0600 in a 0700 folder; a short value,
a file or folder others can read, a link, or a short file is one line naming the variable or file
and the fix. The signer id (the cache's folder per key) differs per secret and does not reveal it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from vsbench.io import cache_secret
from vsbench.io.cache_secret import MIN_CHARS, SECRET_ENV, CacheSecret, CacheSecretError, load_secret, secret_problem


@pytest.fixture
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No secret in the environment; the per-user file under a fresh XDG_CONFIG_HOME."""
    monkeypatch.delenv(SECRET_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config"


def test_the_suite_signs_with_its_own_fixed_secret() -> None:
    """tests/conftest.py sets it: no test reads or makes the user's file."""
    from tests.conftest import TEST_CACHE_SECRET

    assert os.environ[SECRET_ENV] == TEST_CACHE_SECRET
    assert load_secret().source == SECRET_ENV


def test_the_environment_secret_is_used_and_its_signer_id_names_it_without_revealing_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    value = "a" * MIN_CHARS
    monkeypatch.setenv(SECRET_ENV, value)
    first = load_secret()
    assert first.source == SECRET_ENV and len(first.signer) == 16 and value not in repr(first)
    assert first.signer not in value and first.mac_key != value.encode()
    assert load_secret().signer == first.signer  # the same secret: the same folder, each run
    monkeypatch.setenv(SECRET_ENV, "b" * MIN_CHARS)
    other = load_secret()
    assert other.signer != first.signer and other.mac_key != first.mac_key


def test_the_mac_depends_on_the_secret() -> None:
    one = CacheSecret.from_secret(b"x" * 40, "one")
    two = CacheSecret.from_secret(b"y" * 40, "two")
    macs = []
    for secret in (one, two, one):
        mac = secret.mac()
        mac.update(b"the same content")
        macs.append(mac.hexdigest())
    assert macs[0] == macs[2] != macs[1]


@pytest.mark.parametrize("value", ["tiny-value", "x" * (MIN_CHARS - 1), " " * 3 + "y" * (MIN_CHARS - 1) + "\n"])
def test_a_short_environment_secret_is_one_line_naming_the_variable_and_the_fix(
        monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(SECRET_ENV, value)
    with pytest.raises(CacheSecretError) as raised:
        load_secret()
    message = str(raised.value)
    assert "\n" not in message and message.startswith(SECRET_ENV) and f"fewer than {MIN_CHARS}" in message
    assert "openssl rand -hex 32" in message and value.strip() not in message  # the value itself is never printed
    assert CacheSecretError.one_line and CacheSecretError.exit_code == 2


def test_without_the_variable_a_per_user_file_is_made_0600_in_a_0700_folder(config_home: Path) -> None:
    assert secret_problem() is None and not (config_home / "vsbench").exists()  # preflight makes nothing
    first = load_secret()
    path = config_home / "vsbench" / "cache-secret"
    assert first.source == str(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert len(path.read_text().strip()) >= MIN_CHARS
    assert load_secret().signer == first.signer  # kept: later runs sign with the same key
    path.unlink()
    assert load_secret().signer != first.signer  # a new random key when removed


def test_an_existing_file_made_meanwhile_is_kept(config_home: Path) -> None:
    """Two first runs at once: the file another made between the read and the create is used."""
    folder = config_home / "vsbench"
    folder.mkdir(parents=True, mode=0o700)
    (folder / "cache-secret").write_text("z" * 40)
    (folder / "cache-secret").chmod(0o600)
    cache_secret._create_file(folder / "cache-secret")
    assert (folder / "cache-secret").read_text() == "z" * 40


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o666, 0o620])
def test_a_file_others_can_read_or_write_is_refused_naming_it_and_the_fix(config_home: Path, mode: int) -> None:
    load_secret()
    path = config_home / "vsbench" / "cache-secret"
    path.chmod(mode)
    with pytest.raises(CacheSecretError) as raised:
        load_secret()
    message = str(raised.value)
    assert message.startswith(f"{path}: mode {mode:04o}") and f"chmod 600 {path}" in message and SECRET_ENV in message
    assert secret_problem() == message


@pytest.mark.parametrize("mode", [0o755, 0o750, 0o705, 0o777])
def test_a_folder_others_can_enter_is_refused_naming_it(config_home: Path, mode: int) -> None:
    load_secret()
    folder = config_home / "vsbench"
    folder.chmod(mode)
    with pytest.raises(CacheSecretError, match=f"^{folder}: mode {mode:04o}.*chmod 700 {folder}"):
        load_secret()


def test_a_folder_made_open_before_the_first_run_is_refused_too(config_home: Path) -> None:
    (config_home / "vsbench").mkdir(parents=True, mode=0o755)
    (config_home / "vsbench").chmod(0o755)
    with pytest.raises(CacheSecretError, match="mode 0755"):
        load_secret()
    assert not (config_home / "vsbench" / "cache-secret").exists()  # no secret written where others can look


def test_a_link_in_place_of_the_file_is_refused(config_home: Path, tmp_path: Path) -> None:
    """A link could point at a file another user controls (and reads)."""
    (config_home / "vsbench").mkdir(parents=True, mode=0o700)
    target = tmp_path / "elsewhere"
    target.write_text("q" * 40)
    target.chmod(0o600)
    (config_home / "vsbench" / "cache-secret").symlink_to(target)
    with pytest.raises(CacheSecretError, match="cache-secret: cannot be read .*remove it"):
        load_secret()


def test_a_short_file_is_refused_naming_it(config_home: Path) -> None:
    folder = config_home / "vsbench"
    folder.mkdir(parents=True, mode=0o700)
    (folder / "cache-secret").write_text("short\n")
    (folder / "cache-secret").chmod(0o600)
    with pytest.raises(CacheSecretError, match=f"^{folder / 'cache-secret'}: holds 5 characters"):
        load_secret()


def test_an_unwritable_config_home_is_one_line_with_the_fix(config_home: Path) -> None:
    config_home.parent.mkdir(parents=True, exist_ok=True)
    config_home.write_text("a file, not a folder")
    with pytest.raises(CacheSecretError, match="cannot be made .*XDG_CONFIG_HOME"):
        load_secret()


def test_the_environment_wins_over_a_bad_file(config_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a cluster (or with a team's key) the file is not read at all."""
    (config_home / "vsbench").mkdir(parents=True, mode=0o777)
    (config_home / "vsbench").chmod(0o777)
    monkeypatch.setenv(SECRET_ENV, "k" * MIN_CHARS)
    assert load_secret().source == SECRET_ENV and secret_problem() is None


def test_preflight_skips_the_secret_only_when_the_cache_is_off() -> None:
    from vsbench.models.cache import DISABLED
    from vsbench.runspec.preflight import CACHE_OFF

    assert CACHE_OFF == DISABLED


# --- steps elsewhere: containers and pods --------------------------------------------------------

def _container_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The plan ``kfp_runner("container")`` hands the container runner (the runner itself faked)."""
    import contextlib

    from vsbench.platform import local_run

    captured = {}

    @contextlib.contextmanager
    def fake_runner(plan, pipeline_root, note):  # noqa: ANN001, ANN202 - the container runner's stand-in
        captured["plan"] = plan
        yield object(), type("Identity", (), {"name": "image", "image_id": "sha256:" + "0" * 64})()

    monkeypatch.setattr(local_run, "container_runner", fake_runner)
    monkeypatch.setenv("VSBENCH_EMBED_CACHE", str(tmp_path / "cache"))
    with local_run.kfp_runner("container", tmp_path / "out" / "_kfp", data=(tmp_path / "out",)):
        pass
    return captured["plan"]


def test_container_steps_get_the_users_secret_from_the_file(tmp_path: Path, config_home: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The image holds no file of the user's: without the value in its environment a step would sign
    with a key of its own and never reuse (nor trust) the user's entries."""
    mine = load_secret()
    environment = dict(_container_plan(tmp_path, monkeypatch).environment)
    assert environment[SECRET_ENV] == (config_home / "vsbench" / "cache-secret").read_text().strip()
    monkeypatch.setenv(SECRET_ENV, environment[SECRET_ENV])
    assert load_secret().signer == mine.signer  # the step's folder is the user's


def test_container_steps_get_the_variable_when_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, "t" * 40)
    assert dict(_container_plan(tmp_path, monkeypatch).environment)[SECRET_ENV] == "t" * 40


def test_a_pod_without_the_secret_says_so_once(config_home: Path, monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setattr(cache_secret, "_warned", [])
    load_secret()
    load_secret()
    lines = [r.getMessage() for r in caplog.records if SECRET_ENV in r.getMessage()]
    assert len(lines) == 1 and "vsbench-cache Secret" in lines[0]
