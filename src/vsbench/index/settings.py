"""The grammar of a search's settings, below everything else in ``vsbench.index``: FAISS codec
lists (``"Flat;PCAW512,L2norm,Flat"``), SSCD's score normalization ``beta[first,last]`` and the
error every bad input or setting raises."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass


class SearchError(ValueError):
    """Inputs, codecs or settings that cannot be searched, with what is wrong and where."""


NO_NORM_LABEL = "none"


@dataclass(frozen=True)
class ScoreNorm:
    """SSCD's ``beta[first,last]``: subtract ``beta`` x the mean similarity of each query to its
    training-set neighbours ``first..last`` (0-based, inclusive ranks).

    As in SSCD, the ranks averaged are the Python slice ``D[:, first:last + 1]`` of the ``last + 1``
    nearest training similarities, so a negative ``first`` counts from the end: ``[-1,2]`` averages
    rank 2 only (:attr:`note` says so). A slice that selects nothing (``[2,0]``) is refused: SSCD
    would average an empty slice and score every pair NaN.
    """

    beta: float
    first: int
    last: int

    def __post_init__(self) -> None:
        if not math.isfinite(self.beta):
            raise SearchError(f"score normalization beta must be finite, got {self.beta}")
        if self.last < 0:
            raise SearchError(f"score normalization needs last >= 0 (it searches last + 1 training neighbours), "
                              f"got [{self.first},{self.last}]")
        if not self.ranks:
            raise SearchError(f"score normalization [{self.first},{self.last}] selects no neighbour rank "
                              f"(SSCD averages the empty slice D[:, {self.first}:{self.last + 1}] and scores every "
                              f"pair NaN); did you mean [{min(self.first, self.last)},{max(self.first, self.last)}]?")

    @property
    def ranks(self) -> range:
        """The neighbour ranks averaged: SSCD's slice ``first:last + 1`` of ``range(last + 1)``."""
        return range(self.last + 1)[self.first : self.last + 1]

    @property
    def note(self) -> str | None:
        """A one-line warning when SSCD's slice reads other ranks than ``first..last`` say."""
        if self.ranks == range(self.first, self.last + 1):
            return None
        return (f"score normalization {self}: SSCD's slice D[:, {self.first}:{self.last + 1}] averages neighbour "
                f"rank(s) {self.ranks.start}..{self.ranks.stop - 1} only (a negative first counts from the end); "
                f"that is what is computed; did you mean [0,{self.last}]? write "
                f"{self.beta:.2f}[{self.ranks.start},{self.ranks.stop - 1}] to say it plainly")

    def __str__(self) -> str:
        """SSCD's label, ``f"{weight:.2f}[{start},{end}]"`` (``1.00[0,2]``, as in its disc_metrics.csv)."""
        return f"{self.beta:.2f}[{self.first},{self.last}]"


def parse_score_norm(text: str) -> ScoreNorm | None:
    """One ``beta[first,last]`` as SSCD's ``ScoreNormalization.parse`` reads it; ``""``/``"none"`` -> None.

    SSCD: ``weight, spec = spec.split("[", 1)``, the rest must end with ``]``, ``first,last`` or a
    single ``i`` (meaning ``i,i``), ``float(weight)``, ``int(first)``, ``int(last)``. So ``[2,0]``
    and ``[-1,2]`` parse there; see :class:`ScoreNorm` for what they mean and which one is refused.
    Surrounding spaces are allowed here (SSCD fails on a space after ``]``).
    """
    stripped = text.strip()
    if stripped == "" or stripped.lower() == NO_NORM_LABEL:
        return None
    expected = "expected beta[first,last], e.g. '1.00[0,2]', or '' / 'none'"
    weight, bracket, spec = stripped.partition("[")
    if not bracket or not spec.endswith("]"):
        raise SearchError(f"score normalization {text!r}: {expected}")
    first, _, last = spec[:-1].partition(",")
    try:
        return ScoreNorm(float(weight), int(first), int(last if last else first))
    except ValueError as exc:
        if isinstance(exc, SearchError):
            raise SearchError(f"score normalization {text!r}: {exc}") from None
        raise SearchError(f"score normalization {text!r}: {expected}") from None


def parse_score_norms(text: str) -> list[ScoreNorm]:
    """SSCD's ``--score_norm``: several ``beta[first,last]`` separated by ``;``, each its own rows.

    ``""`` or ``"none"`` give no normalization. Two specs with the same label (``1.234[0,2]`` and
    ``1.231[0,2]`` are both ``1.23[0,2]``) are refused: SSCD would write two rows nobody can tell apart.
    """
    if text.strip() == "" or text.strip().lower() == NO_NORM_LABEL:
        return []
    norms = [parse_score_norm(part) for part in text.split(";")]
    if any(norm is None for norm in norms):
        raise SearchError(f"score normalization {text!r}: an empty or 'none' entry in a ';' list")
    labels = [str(norm) for norm in norms]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise SearchError(f"score normalization {text!r}: {repeated} would label two rows alike; "
                          "give betas that differ at two decimals")
    return [norm for norm in norms if norm is not None]


def parse_codecs(text: str) -> list[str]:
    """``"Flat;PCAW512,L2norm,Flat"`` -> ``["Flat", "PCAW512,L2norm,Flat"]``.

    Only the list is checked here (no empty or repeated entry: results are keyed by codec); each
    string is validated by ``faiss.index_factory`` when :func:`search` builds it, since that needs
    the descriptors' dimension.
    """
    codecs = [part.strip() for part in text.split(";")]
    if any(not codec for codec in codecs):
        raise SearchError(f"codecs {text!r}: expected FAISS index_factory strings separated by ';', "
                          "e.g. 'Flat;PCAW512,L2norm,Flat', with no empty entry")
    repeated = sorted({codec for codec in codecs if codecs.count(codec) > 1})
    if repeated:
        raise SearchError(f"codecs {text!r}: {repeated} listed more than once")
    return codecs


def env_count(name: str, default: int, unit: str) -> int:
    """A whole number >= 0 from the environment variable ``name`` (``default`` when unset); any
    other value is a SearchError naming the variable and what it expects."""
    raw = os.environ.get(name, str(default))
    try:
        value = int(raw)
    except ValueError:
        raise SearchError(f"{name}={raw!r}: expected a whole number of {unit}") from None
    if value < 0:
        raise SearchError(f"{name}={raw!r}: expected 0 or more {unit}")
    return value
