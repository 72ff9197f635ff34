"""Bounded reading of user files: the one place that decides how much of a file vsbench will hold.

Why: a reader that reads a line or a file whole holds whatever the file holds. ``vsbench score
copy-detection`` on a 2 GB file with no newline once read it as one 2 GB "header" line (12.7 GB of
memory) and echoed it back in the error. Every reader of a user file (predictions, ground truth,
pair lists, task and metadata JSONs, feature arrays, configs) goes through this module instead:

* text is read line by line with a cap on the line length (:data:`MAX_LINE_CHARS`), so memory
  stays bounded whatever the file holds, and the first overlong line stops the read with its
  number, after reading at most the cap;
* a file read whole (JSON, YAML) or kept whole in memory (line lists) must first pass a size check
  (:data:`MAX_TEXT_BYTES`, :data:`MAX_JSON_BYTES`); the check uses ``stat`` only;
* ``.npy``/``.npz`` arrays are checked from their headers before any data is read: the declared
  size must fit :data:`MAX_ARRAY_BYTES` and the bytes actually present, so a 1 kB file declaring a
  10^12-element array is refused instead of allocated;
* error messages quote at most :data:`QUOTE_CHARS` characters of input (:func:`quote`).

Every problem is an :class:`InputError` (a ValueError): vsbench's one "your input is wrong" error,
which the CLI turns into one line and exit code 2. The caps are module constants with defaults
for the largest real inputs (DISC's 500k-query predictions are ~50 MB, ABID's task JSONs a few
hundred MB at most), overridable by environment variable; the message names the variable.
"""

from __future__ import annotations

import codecs
import functools
import io
import json
import os
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # numpy is imported by the array readers only: vsbench --help never loads it
    import numpy as np

QUOTE_CHARS = 100
T = TypeVar("T")


def _env_int(name: str, default: int) -> int:
    """A positive integer from the environment (``1_000_000`` and ``1e6`` forms accepted), or the default."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(float(raw.replace("_", "")))
    except ValueError:
        raise ValueError(f"{name}={raw[:QUOTE_CHARS]!r} is not a number of bytes/characters") from None
    if value < 1:
        raise ValueError(f"{name}={raw!r} must be at least 1")
    return value


def max_line_chars() -> int:
    """Longest line (characters, newline excluded) any line reader accepts: ``VSBENCH_MAX_LINE_CHARS``."""
    return _env_int("VSBENCH_MAX_LINE_CHARS", MAX_LINE_CHARS)


def max_text_bytes() -> int:
    """Largest line-oriented text file (CSV, result lists, JSONL): ``VSBENCH_MAX_TEXT_BYTES``."""
    return _env_int("VSBENCH_MAX_TEXT_BYTES", MAX_TEXT_BYTES)


def max_json_bytes() -> int:
    """Largest JSON or YAML file, parsed whole (~10x its size in memory): ``VSBENCH_MAX_JSON_BYTES``."""
    return _env_int("VSBENCH_MAX_JSON_BYTES", MAX_JSON_BYTES)


def max_array_bytes() -> int:
    """Largest array data one ``.npy``/``.npz`` file may declare: ``VSBENCH_MAX_ARRAY_BYTES``."""
    return _env_int("VSBENCH_MAX_ARRAY_BYTES", MAX_ARRAY_BYTES)


MAX_LINE_CHARS = 1 << 20  # 1,048,576 characters: no real id, path or JSONL query comes near
MAX_TEXT_BYTES = 1 << 30  # 1 GiB
MAX_JSON_BYTES = 1 << 30  # 1 GiB
MAX_ARRAY_BYTES = 32 << 30  # 32 GiB: 4M x 2048 float32 descriptors


class InputError(ValueError):
    """A user file (or value) that does not match its expected format; the message names the file
    and, where there is one, the line (``preds.csv:12: ...``) or entry. vsbench's own input error:
    the CLI prints it as one line with exit code 2, and the fuzz tests allow nothing else."""

    def __init__(self, path: str | Path, message: str, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")


class WordedInputError(InputError):
    """An InputError raised with its whole message already worded (it names the file or value
    itself), for error types older than :class:`InputError`: ``FeatureError``, ``UnsafePathError``."""

    def __init__(self, message: str) -> None:
        ValueError.__init__(self, message)


def quote(text: Any, limit: int = QUOTE_CHARS) -> str:
    """``repr`` of at most ``limit`` characters of ``text``, saying how long the whole was."""
    text = f"{text}"  # a plain str, also from numpy strings (whose repr names their type)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text):,} characters)"


def human_bytes(count: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} bytes"


def _os_error(path: Path, exc: OSError) -> InputError:
    if isinstance(exc, FileNotFoundError):
        return InputError(path, "file not found")
    if isinstance(exc, IsADirectoryError):
        return InputError(path, "is a folder, not a file")
    return InputError(path, f"cannot read: {exc.strerror or exc}")


def out_of_memory(path: str | Path) -> InputError:
    """The one line for a file too big for this machine's memory (a MemoryError while reading it)."""
    try:
        size = f"{human_bytes(Path(path).stat().st_size)} "
    except OSError:
        size = ""
    return InputError(path, f"this {size}file does not fit in this machine's free memory: free memory, run on a "
                            "machine with more, or split the file (see docs/reliability.md, 'Limits')")


def names_memory_errors(reader: Callable[..., T]) -> Callable[..., T]:
    """``reader(path, ...)`` whose MemoryError ends as :func:`out_of_memory`'s one line naming the
    file, not a traceback (the readers are bounded, but a machine can still have less free)."""

    @functools.wraps(reader)
    def read(path: str | Path, *args: Any, **kwargs: Any) -> T:
        try:
            return reader(path, *args, **kwargs)
        except MemoryError:
            raise out_of_memory(path) from None

    return read


def file_size(path: str | Path) -> int:
    """Bytes of ``path``, or InputError (not found, a folder, unreadable)."""
    path = Path(path)
    try:
        info = path.stat()
    except OSError as exc:
        raise _os_error(path, exc) from None
    if path.is_dir():
        raise InputError(path, "is a folder, not a file")
    return info.st_size


def check_size(path: str | Path, limit: int, variable: str) -> int:
    """The file's size, or InputError when it is over ``limit`` (stated, with the variable that raises it)."""
    size = file_size(path)
    if size > limit:
        raise InputError(path, f"file is {human_bytes(size)}, over the {human_bytes(limit)} limit for this kind "
                               f"of file (set {variable} to raise it)")
    return size


def iter_lines(path: str | Path, *, encoding: str = "utf-8", max_chars: int | None = None,
               max_bytes: int | None = None) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its line break), read as text mode reads them (``\\n``,
    ``\\r`` and ``\\r\\n`` all end a line) but never more than ``max_chars`` characters a line.

    The file must first pass the size check (``max_bytes``, default :func:`max_text_bytes`), since
    the callers keep what they read. A line over the cap, a non-UTF-8 byte or an unreadable file is
    an InputError naming the file and line.
    """
    path = Path(path)
    cap = max_chars if max_chars is not None else max_line_chars()
    check_size(path, max_bytes if max_bytes is not None else max_text_bytes(), "VSBENCH_MAX_TEXT_BYTES")
    number = 0
    try:
        with path.open("r", encoding=encoding, newline=None) as handle:
            while True:
                line = handle.readline(cap + 1)
                if not line:
                    return
                number += 1
                if line.endswith("\n"):
                    line = line[:-1]
                elif len(line) > cap:
                    raise InputError(path, f"line is longer than {cap:,} characters (starts {quote(line[:40])}); "
                                           "is this the right file? (set VSBENCH_MAX_LINE_CHARS to raise the limit)",
                                     number)
                yield number, line
    except UnicodeDecodeError as exc:
        # Text mode decodes ahead in 8 KiB chunks, so the error surfaces lines before or after the
        # byte's own line: find that line from the bytes themselves.
        line_of_byte, offset = _first_undecodable(path, encoding)
        raise InputError(path, f"not UTF-8 text ({exc.reason} at byte {offset:,})", line_of_byte or number + 1) from None
    except OSError as exc:
        raise _os_error(path, exc) from None


def _line_breaks(data: bytes, after_cr: bool) -> int:
    """Line ends in ``data`` as text mode counts them (``\\n``, ``\\r``, ``\\r\\n``); ``after_cr``: the
    bytes before ``data`` ended with ``\\r`` (so a leading ``\\n`` closes a line already counted)."""
    count = data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")
    return count - 1 if after_cr and data.startswith(b"\n") else count


def _first_undecodable(path: Path, encoding: str) -> tuple[int | None, int]:
    """(1-based line, byte offset) of the first byte that does not decode, read in 1 MiB chunks;
    (None, 0) if none is found (the file changed under us)."""
    decoder = codecs.getincrementaldecoder(encoding)()
    line, offset, after_cr = 1, 0, False
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                start = max(exc.start - (len(exc.object) - len(chunk)), 0)  # the decoder prepends held-back bytes
                return line + _line_breaks(chunk[:start], after_cr), offset + start
            line += _line_breaks(chunk, after_cr)
            offset += len(chunk)
            after_cr = chunk.endswith(b"\r")
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:  # a character cut off by the end of the file
        return line, offset - len(exc.object) + exc.start
    return None, 0


def read_lines(path: str | Path, **options: Any) -> list[str]:
    """Every line of :func:`iter_lines`, as a list (the size check bounds its memory)."""
    return [line for _, line in iter_lines(path, **options)]


def check_text(path: str | Path, *, encoding: str = "utf-8") -> None:
    """Run the size, line-length and encoding checks over a file that another parser (pandas) reads."""
    for _ in iter_lines(path, encoding=encoding):
        pass


def read_text(path: str | Path, *, max_bytes: int | None = None, variable: str = "VSBENCH_MAX_JSON_BYTES",
              encoding: str = "utf-8") -> str:
    """A whole text file after the size check (default :func:`max_json_bytes`)."""
    path = Path(path)
    check_size(path, max_bytes if max_bytes is not None else max_json_bytes(), variable)
    try:
        with path.open("rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise _os_error(path, exc) from None
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start:,})",
                         _line_breaks(data[: exc.start], False) + 1) from None


def parse_json(path: str | Path, text: str | bytes, line: int | None = None) -> Any:
    """``json.loads`` whose every failure (bad syntax, nesting too deep, a number with thousands of
    digits) is an InputError naming the file (and line, for JSONL)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}" if line is None else f"column {exc.colno}"
        raise InputError(path, f"not valid JSON ({exc.msg} at {where})", line) from None
    except RecursionError:
        raise InputError(path, "JSON nested too deeply", line) from None
    except ValueError as exc:  # int() digit limit, surrogates
        if "integer string conversion" in str(exc):
            detail = f"an integer of more than {sys.get_int_max_str_digits():,} digits, Python's limit"
        else:
            detail = str(exc)[:QUOTE_CHARS]
        raise InputError(path, f"not valid JSON ({detail})", line) from None


def read_json(path: str | Path) -> Any:
    """A JSON file, after the size check, or InputError naming the file and where the JSON breaks."""
    path = Path(path)
    return parse_json(path, read_text(path))


MAX_YAML_DEPTH = 100


def _flow_depth(text: str) -> int:
    """Deepest nesting of ``[``/``{`` in ``text`` (quotes ignored: an upper bound, cheap and linear)."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}" and depth:
            depth -= 1
    return deepest


def read_yaml(path: str | Path) -> Any:
    """A YAML file (``safe_load``), after the size check; a syntax error is an InputError."""
    import yaml

    path = Path(path)
    text = read_text(path)
    if _flow_depth(text) > MAX_YAML_DEPTH:  # PyYAML's scanner is quadratic in flow nesting ("[" * 5000: minutes)
        raise InputError(path, f"YAML nested too deeply (more than {MAX_YAML_DEPTH} levels of [ or {{)")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(path, f"not valid YAML ({str(exc).splitlines()[0][:QUOTE_CHARS]})") from None
    except RecursionError:
        raise InputError(path, "YAML nested too deeply") from None
    except (ValueError, TypeError, OverflowError) as exc:  # a 5000-digit integer, an unhashable key
        raise InputError(path, f"not valid YAML ({str(exc)[:QUOTE_CHARS]})") from None


def read_bytes(path: str | Path, *, max_bytes: int, variable: str) -> bytes:
    """A whole binary file after the size check."""
    path = Path(path)
    check_size(path, max_bytes, variable)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise _os_error(path, exc) from None


# ------------------------------------------------------------------------------------ arrays


def _npy_header(handle: Any) -> tuple[tuple[int, ...], np.dtype]:
    import numpy as np

    version = np.lib.format.read_magic(handle)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(handle, max_header_size=10_000)
    elif version in ((2, 0), (3, 0)):
        shape, _, dtype = np.lib.format.read_array_header_2_0(handle, max_header_size=10_000)
    else:
        raise ValueError(f"unsupported .npy version {version}")
    return shape, dtype


def _declared_bytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    count = 1
    for side in shape:
        count *= int(side)
    return count * dtype.itemsize


NPY_MAGIC = b"\x93NUMPY"


def is_npy(path: str | Path) -> bool:
    """Whether the file starts as a ``.npy`` does (whatever follows)."""
    try:
        with Path(path).open("rb") as handle:
            return handle.read(len(NPY_MAGIC)) == NPY_MAGIC
    except OSError:
        return False


def _member_key(filename: str) -> str:
    """The key ``np.load`` gives an ``.npz`` member: its name without ``.npy``."""
    return filename[: -len(".npy")] if filename.endswith(".npy") else filename


def check_array_file(path: str | Path, names: tuple[str, ...] | list[str] | None = None) -> None:
    """Check a ``.npy`` or ``.npz`` file from its headers, reading no array data: every member (or
    only the members ``names``, by ``np.load`` key, when given: the others are never opened) a plain
    ``.npy`` whose declared bytes fit :func:`max_array_bytes` in all and the bytes present."""
    path = Path(path)
    size = file_size(path)
    limit = max_array_bytes()
    zipped = zipfile.is_zipfile(path)
    kind = ".npz" if zipped else ".npy"
    members: list[tuple[str, int, int, tuple[int, ...], np.dtype]] = []
    where = path.name
    try:
        if zipped:
            try:
                archive = zipfile.ZipFile(path)
            except (zipfile.BadZipFile, ValueError, OSError, EOFError, NotImplementedError) as exc:
                raise InputError(path, f"not a valid .npz (zip): {str(exc)[:QUOTE_CHARS]}") from None
            with archive:
                for info in archive.infolist():
                    if names is not None and _member_key(info.filename) not in names:
                        continue
                    where = f".npz member {info.filename!r}"
                    with archive.open(info) as member:
                        shape, dtype = _npy_header(member)
                    members.append((info.filename, info.file_size, info.header_offset, shape, dtype))
        else:
            with path.open("rb") as handle:
                shape, dtype = _npy_header(handle)
                members.append((path.name, size, handle.tell(), shape, dtype))
    except InputError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, SyntaxError, KeyError, TypeError,
            NotImplementedError, RuntimeError) as exc:
        if isinstance(exc, FileNotFoundError | IsADirectoryError | PermissionError):
            raise _os_error(path, exc) from None
        what = f"{where} is not a valid .npy" if zipped else "not a valid .npy (nor a .npz)"
        raise InputError(path, f"{what} ({str(exc)[:QUOTE_CHARS]})") from None
    total = 0
    for name, available, offset, shape, dtype in members:
        declared = _declared_bytes(shape, dtype)
        if dtype.hasobject:
            raise InputError(path, f"unreadable {kind}: {name} is an object array, which "
                                   "needs pickle, and vsbench never loads pickled arrays")
        room = available - (0 if zipped else offset)
        if declared > room:
            raise InputError(path, f"{name}: header declares {shape} {dtype} ({human_bytes(declared)}) but the "
                                   f"file holds {human_bytes(max(room, 0))}: truncated or forged {kind}")
        total += declared
    if total > limit:
        raise InputError(path, f"arrays of {human_bytes(total)}, over the {human_bytes(limit)} limit "
                               "(set VSBENCH_MAX_ARRAY_BYTES to raise it)")


def load_arrays(path: str | Path, names: tuple[str, ...] | list[str] | None = None) -> dict[str, np.ndarray]:
    """Every array of a ``.npz`` (or the one array of a ``.npy``, as ``{"arr_0": ...}``), after
    :func:`check_array_file`, loaded without pickle; any failure is an InputError. With ``names``,
    only those members of an ``.npz`` are checked and read (the ones it lacks are left out of the
    result for the caller to name): an unused 3 GiB member costs nothing."""
    path = Path(path)
    import numpy as np

    check_array_file(path, names)
    try:
        data = np.load(path, allow_pickle=False)
        if isinstance(data, np.ndarray):
            return {"arr_0": data}
        with data:
            return {key: data[key] for key in data.files if names is None or key in names}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError, NotImplementedError, RuntimeError) as exc:
        raise InputError(path, f"unreadable array file ({str(exc)[:QUOTE_CHARS]})") from None
    except MemoryError:
        raise InputError(path, "not enough memory to load its arrays") from None


def bytes_reader(path: str | Path, *, max_bytes: int, variable: str) -> io.BytesIO:
    """The whole file in memory after the size check: a parser reading from it can never ask the
    OS for more than the file holds (a pickle may declare a 1 TB string in 9 bytes)."""
    return io.BytesIO(read_bytes(path, max_bytes=max_bytes, variable=variable))


def read_index_list(path: str | Path) -> list[int]:
    """0-based indices of a whitespace-separated list of 1-based bin indices (``random_train.txt``)."""
    path = Path(path)
    indices = []
    for number, line in iter_lines(path):
        for word in line.split():
            try:
                value = int(word)
            except ValueError:
                raise InputError(path, f"{quote(word)} is not a bin index", number) from None
            if value < 1:
                raise InputError(path, f"bin index {value} is below 1 (indices are 1-based)", number)
            indices.append(value - 1)
    return indices
