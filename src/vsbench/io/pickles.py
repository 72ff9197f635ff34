"""A restricted unpickler for feature files in the upstream pickle format: it can only rebuild plain
numeric numpy arrays and refuses every other global *before* anything is called, so a hostile file
cannot run code, nor make more bytes than it holds (no codec but latin-1, no array but one filled
with exactly its own bytes)."""

from __future__ import annotations

import math
import pickle
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from vsbench.io.inputs import (
    InputError,
    bytes_reader,
    max_array_bytes,
    quote,
)

_PLAIN_KINDS = "biufc"  # bool, integers, floats, complex: arrays of plain numbers
_LATIN1 = frozenset({"latin1", "latin-1", "iso-8859-1", "iso8859-1", "l1"})


def _refuse(what: str) -> NoReturn:
    raise pickle.UnpicklingError(f"refusing {what}: only plain numeric numpy arrays are allowed")


def _plain_dtype(dtype: Any) -> np.dtype:
    """A dtype of plain numbers (no objects, fields or sub-arrays), checked where it is used: a
    pickle may change a dtype after making it (BUILD), and numpy trusts an object dtype's data as
    pointers (an object array given a short list in its state crashes the interpreter)."""
    if (not isinstance(dtype, np.dtype) or dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None
            or dtype.kind not in _PLAIN_KINDS):
        _refuse(f"dtype {quote(dtype, 40)}")
    return dtype


def _new_dtype(*args: Any) -> np.dtype:
    return _plain_dtype(np.dtype(*args))


class _PickledArray(np.ndarray):
    """The array a pickle builds, whose state is checked before numpy takes it: a plain dtype and
    exactly the bytes its shape needs (no list of objects). Viewed as a plain ndarray once loaded."""

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            _refuse("an array state that is not (version, shape, dtype, fortran, data)")
        shape, dtype, _, data = state[-4:]
        _plain_dtype(dtype)
        if not isinstance(shape, tuple) or not all(isinstance(side, int) and side >= 0 for side in shape):
            _refuse(f"array shape {quote(shape, 40)}")
        if isinstance(data, str):  # Python 2 pickles read with encoding="latin1": one character a byte
            data = _latin1_encode(data, "latin1")
            state = (*state[:-1], data)
        if not isinstance(data, bytes | bytearray) or len(data) != math.prod(shape) * dtype.itemsize:
            _refuse("array data that is not exactly the bytes of its shape")
        super().__setstate__(state)


class _NdarrayName:
    """What ``numpy.ndarray`` resolves to: only an argument of ``_reconstruct``, never callable
    (``ndarray((10**12,), "b")`` would allocate a terabyte)."""

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse("a call of numpy.ndarray")


def _reconstruct(subtype: Any, shape: Any, typecode: Any) -> np.ndarray:
    """numpy's ``_reconstruct(ndarray, (0,), b"b")``, the empty array its pickles fill; nothing else."""
    if not isinstance(subtype, _NdarrayName) or shape != (0,) or typecode not in (b"b", "b"):
        _refuse("_reconstruct other than of an empty ndarray")
    return np.ndarray.__new__(_PickledArray, (0,), np.int8)


def _scalar(dtype: Any, data: Any = None) -> Any:
    _plain_dtype(dtype)
    if isinstance(data, str):  # Python 2 pickles, as for arrays
        data = _latin1_encode(data, "latin1")
    if not isinstance(data, bytes) or len(data) != dtype.itemsize:
        _refuse("a numpy scalar whose data is not its dtype's bytes")
    return np.frombuffer(data, dtype)[0]


def _frombuffer(buffer: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    """Protocol 5 arrays; the buffer is the pickle's own bytes, so the array is no larger."""
    _plain_dtype(dtype)
    if not isinstance(buffer, bytes | bytearray | pickle.PickleBuffer):
        _refuse("an array buffer that is not bytes")
    return np.frombuffer(buffer, dtype).reshape(shape, order=order)


def _latin1_encode(text: Any, encoding: Any = "utf-8", errors: Any = "strict") -> bytes:
    """``_codecs.encode(text, "latin1")``: how protocols 0-2 write bytes (one byte per character).
    Any other codec is refused: ``hex`` doubles its input, and 22 chained calls took 6.45 GB."""
    if not isinstance(text, str) or str(encoding).lower().replace("_", "-") not in _LATIN1 or errors != "strict":
        _refuse(f"_codecs.encode with {quote(encoding, 20)}")
    return text.encode("latin-1")


_NDARRAY = _NdarrayName()
_ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _new_dtype,
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy.core.multiarray", "scalar"): _scalar,
    ("numpy._core.multiarray", "scalar"): _scalar,
    ("numpy.core.numeric", "_frombuffer"): _frombuffer,  # protocol 5 arrays
    ("numpy._core.numeric", "_frombuffer"): _frombuffer,
    ("_codecs", "encode"): _latin1_encode,  # bytes in protocol 0-2 pickles
}


class ArrayOnlyUnpickler(pickle.Unpickler):
    """Unpickles dicts, lists, tuples, numbers, strings and plain numeric numpy arrays, and nothing else.

    Pickle runs code only through the globals it looks up; every lookup goes through
    ``find_class``, which here returns vsbench's own checked stand-ins for numpy's array
    reconstruction helpers and refuses anything else, so a hostile file fails before any of its
    callables can be reached. No stand-in can make more bytes than the pickle holds: arrays are
    built empty and filled with their exact bytes, and only latin-1 text becomes bytes.
    """

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: only numpy arrays are allowed")
        return _ALLOWED_GLOBALS[module, name]


def _plain(value: Any) -> Any:
    return value.view(np.ndarray) if isinstance(value, _PickledArray) else value


def load_array_pickle(path: str | Path) -> Any:
    """A restricted pickle, read from memory after the size check (VSBENCH_MAX_ARRAY_BYTES); the
    arrays at its top level (or in its top-level dict) come back as plain ndarrays."""
    path = Path(path)
    handle = bytes_reader(path, max_bytes=max_array_bytes(), variable="VSBENCH_MAX_ARRAY_BYTES")
    try:
        data = ArrayOnlyUnpickler(handle, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, KeyError, IndexError,
            ImportError, UnicodeDecodeError, OverflowError, RecursionError) as exc:
        raise InputError(path, f"unreadable or refused pickle: {str(exc)[:100]}") from None
    except MemoryError:
        raise InputError(path, "unreadable pickle: it asks for more memory than there is") from None
    return {key: _plain(value) for key, value in data.items()} if isinstance(data, dict) else _plain(data)
