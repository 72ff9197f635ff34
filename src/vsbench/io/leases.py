"""A cluster run's lease file, ``.vsbench-lease.json``, read back as data by a strict schema.

Why (issue 54): the lease file lies in a shared output folder, where anyone with write access can
write it by hand. Read as a loose dict, ``"expires": NaN``, ``"tomorrow"`` or ``1e18`` ended a run in
a 22-line traceback naming no file, ``inf`` or a list crashed ``claim_lease``, ``taken_over: "my-run"``
was read letter by letter, and malformed JSON was silently claimed over (another run's lease,
half-edited, lost). Here every value is checked for what it is and what it may be: the run and
host are one-line strings, the expiry a finite number of seconds no further ahead than a lease can
last (:data:`MAX_LEASE_S`), ``taken_over`` a list of run ids, and nothing else in the file. Anything
else is a :class:`LeaseError`: one line naming the file and the fix (remove it, or wait until the
run it names ends), which the command line turns into exit 2. The file is parsed, never imported,
evaluated or unpickled.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, ValidationInfo, model_validator

from vsbench.io.inputs import WordedInputError

LEASE_FILE = ".vsbench-lease.json"  # a cluster run's lease on its folder (locks.claim_lease)
MAX_LEASE_S = 7 * 86400.0  # the longest a lease may last unrenewed (VSBENCH_LEASE_TTL_S is capped at it)
CLOCK_SKEW_S = 300.0  # pods' clocks disagree by seconds; a lease written on one is read on another
MAX_LEASE_BYTES = 65536  # a lease vsbench writes is under 2 KB
MAX_TAKEN_OVER = 1000  # a lease keeps the last 20; a longer list was not written by vsbench

# One line, printable: a run id or a host goes into one-line messages.
Word = Annotated[str, StringConstraints(min_length=1, max_length=300, pattern=r"^[^\x00-\x1f\x7f]+$")]
Stamp = Annotated[str, StringConstraints(max_length=64, pattern=r"^[^\x00-\x1f\x7f]*$")]


class LeaseError(WordedInputError):
    """A lease file that vsbench cannot believe (malformed, impossible values): one line naming the
    file and the fix, exit 2 (an InputError, so the CLI's ``user_errors`` words it)."""


class Lease(BaseModel):
    """The lease file as :func:`vsbench.io.locks.claim_lease` writes it; ``released`` once the run's
    exit handler has let go. Validated with ``context={"now": seconds}``: an expiry further ahead of
    ``now`` than a lease can last (plus clock skew) is impossible, whoever wrote it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    run: Word
    expires: float = Field(ge=0, allow_inf_nan=False)
    renewed: Stamp = ""
    since: Stamp = ""
    host: Stamp = ""
    taken_over: list[Word] = Field(default_factory=list, max_length=MAX_TAKEN_OVER)
    released: Stamp = ""

    @model_validator(mode="after")
    def _expiry_is_possible(self, info: ValidationInfo) -> Lease:
        now = (info.context or {}).get("now")
        if now is not None and self.expires > now + MAX_LEASE_S + CLOCK_SKEW_S:
            raise ValueError(f"expires: {self.expires:.6g} is {(self.expires - now) / 86400:.3g} days ahead, and a "
                             f"lease lasts at most {MAX_LEASE_S / 86400:g} days")
        return self


def lease_path(folder: str | os.PathLike[str]) -> Path:
    return Path(folder) / LEASE_FILE


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are each given once (``{"run": "a", "run": "b"}`` is ambiguous)."""
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ValueError(f"key {repeated[0]!r} given twice")
    return dict(pairs)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _problem(error: ValidationError) -> str:
    """pydantic's errors as one short clause: ``expires: Input should be a finite number (got nan)``."""
    parts = []
    for item in error.errors(include_url=False)[:3]:
        where = ".".join(str(part) for part in item.get("loc", ()))
        message = str(item.get("msg", "invalid")).removeprefix("Value error, ")
        if not where:  # the whole lease (its expiry against the clock): the message says the value
            parts.append(message)
            continue
        given = "" if item.get("type") in ("extra_forbidden", "missing") else f" (got {_shown(item.get('input'))})"
        parts.append(f"{where}: {message}{given}")
    return "; ".join(parts)


def _shown(value: Any) -> str:
    text = repr(value) if not isinstance(value, dict) else "an object"
    return text if len(text) <= 60 else text[:57] + "..."


def _named_run(data: Any) -> str:
    """The run a malformed lease names, when it names one plainly (for the 'wait until it ends' fix)."""
    run = data.get("run") if isinstance(data, dict) else None
    ok = isinstance(run, str) and 0 < len(run) <= 300 and run.isprintable()
    return run if ok else ""


def read_lease(folder: str | os.PathLike[str], now: float) -> Lease | None:
    """The lease of ``folder``: None when there is no lease file, else the file parsed and checked
    (:class:`Lease`, expiry against ``now``); :class:`LeaseError` for anything else."""
    path = lease_path(folder)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_LEASE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _refused(path, f"cannot be read ({exc.strerror or exc})", "") from None
    if len(raw) > MAX_LEASE_BYTES:
        raise _refused(path, f"is over {MAX_LEASE_BYTES // 1024} KB, not a lease vsbench wrote", "")
    try:
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise _refused(path, "is not UTF-8 text", "") from None
    except ValueError as exc:  # json.JSONDecodeError included
        raise _refused(path, f"is not valid JSON ({str(exc).splitlines()[0][:120]})", "") from None
    except RecursionError:
        raise _refused(path, "is not valid JSON (nested too deep)", "") from None
    if not isinstance(data, dict):
        raise _refused(path, f"holds {type(data).__name__ if data is not None else 'null'}, not a JSON object", "")
    try:
        return Lease.model_validate(data, context={"now": float(now)})
    except ValidationError as exc:
        raise _refused(path, f"is not a lease vsbench wrote: {_problem(exc)}", _named_run(data)) from None


def _refused(path: Path, what: str, run: str) -> LeaseError:
    wait = f" (or wait until pipeline run {run!r}, which it names, ends)" if run else ""
    return LeaseError(f"{path} {what}: remove it if no pipeline run uses this folder{wait}, then run again")


def lease_live(lease: Lease | None, now: float) -> bool:
    """Whether ``lease`` still holds its folder: named, not released, not expired at ``now``."""
    return lease is not None and not lease.released and lease.expires > now
