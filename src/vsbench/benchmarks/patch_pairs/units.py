"""Per-pair outcomes of a patch-pair evaluation, resampled by sequence (docs: intervals).

Units are pairs: each keeps its distance, label, line (1-based position in its file: the imbalanced
protocol takes the first 20% of the positives in file order, and ties keep file order) and set (the
grid name of its file), which is all :mod:`vsbench.stats.curves` needs to recompute ROC AUC, PR AP
and the mean PR AP from any resample, exactly as :mod:`vsbench.benchmarks.patch_pairs.metrics`
scores the expanded files.

Pairs of one sequence share its texture, lighting and viewpoint, so their outcomes correlate; they
are resampled together, by the sequence of the pair's *first* patch. HPatches (and the generator)
build every pair from its first patch: a positive is that patch with a view of itself, a
different-sequence negative is that patch with a patch drawn from some other sequence. The first
patch is the one the pair was sampled for, and taking its sequence puts every pair in exactly one
cluster (a bootstrap needs a partition); the second sequence of a different-sequence negative is a
random partner, whose correlation across clusters this leaves out (a two-way clustered bootstrap
would be needed for it, and would widen intervals only slightly when partners are spread over many
sequences).

A pair's sequence comes from its first patch id: the first path component when the id has a ``/``
(``i_ajuntament/ref_0001``), else the text before ``_p<digits>_`` (the generator's
``seq01_p003_ref``), else the patch id itself (the pairs that share a first patch, e.g. its easy and
hard positives and its negatives, then form one cluster). The adapter's ``sequence_pattern``
option replaces this rule with a regular expression (its first non-empty group, or the whole
match, is the sequence; no match: the patch id).

The file scorer (``vsbench score pairs``) reads ``.results`` files, which hold no patch ids: its
units are unclustered unless the caller names each pair's cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

from vsbench.stats.outcomes import Outcomes, number
from vsbench.stats.units import Units

NAME = "patch_pairs"
_DEFAULT_SEQUENCE = re.compile(r"^([^/]+)/|^(.+?)_p\d+_")


def sequence_of(patch_id: str, pattern: str | re.Pattern[str] | None = None) -> str:
    """The sequence a patch belongs to (see the module docstring for the rule)."""
    regex = _DEFAULT_SEQUENCE if pattern is None else re.compile(pattern)
    match = regex.search(patch_id)
    if match is None:
        return patch_id
    return next((g for g in match.groups() if g), match.group(0)) or patch_id


def pair_sequences(first_patches: Sequence[str], pattern: str | None = None) -> list[str]:
    """Each pair's cluster: the sequence of its first patch."""
    regex = _DEFAULT_SEQUENCE if pattern is None else re.compile(pattern)
    cache: dict[str, str] = {}
    for patch in first_patches:
        if patch not in cache:
            cache[patch] = sequence_of(patch, regex)
    return [cache[patch] for patch in first_patches]


def _pool(files: Mapping[str, tuple[np.ndarray, int]], clusters: Mapping[str, Sequence[str]] | None,
          ids: Mapping[str, Sequence[str]] | None) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray | None]:
    unit_ids, distance, label, line, sets, cluster = [], [], [], [], [], []
    for name, (values, lab) in files.items():
        n = values.size
        unit_ids.append(np.asarray(ids[name], dtype=str) if ids is not None else
                        np.char.add(f"{name}:", np.arange(1, n + 1).astype(str)))
        distance.append(values)
        label.append(np.full(n, lab, dtype=np.int8))
        line.append(np.arange(1, n + 1, dtype=np.int64))
        sets.append(np.full(n, name, dtype=object))
        if clusters is not None:
            cluster.append(np.asarray(clusters[name], dtype=str))
            if cluster[-1].size != n:
                raise ValueError(f"{name}: {cluster[-1].size} cluster labels for {n} pairs")
        if unit_ids[-1].size != n:
            raise ValueError(f"{name}: {unit_ids[-1].size} ids for {n} pairs")
    columns = {"distance": np.concatenate(distance), "label": np.concatenate(label), "line": np.concatenate(line),
               "set": np.concatenate(sets).astype(str)}
    return np.concatenate(unit_ids), columns, np.concatenate(cluster) if clusters is not None else None


def patch_pair_units(positives: Mapping[str, ArrayLike], negatives: Mapping[str, ArrayLike], *,
                     clusters: Mapping[str, Sequence[str]] | None = None,
                     ids: Mapping[str, Sequence[str]] | None = None) -> dict[str, Units]:
    """Units for every record :func:`~vsbench.benchmarks.patch_pairs.metrics.patch_pair_grid` and
    :func:`~vsbench.benchmarks.patch_pairs.metrics.mean_pr_ap` make from the same distances.

    ``positives`` / ``negatives``: file name in the grid (``easy``, ``diffseq``...) -> distances in
    file order. ``clusters``: per file, each pair's cluster (its sequence); None: every pair its own.
    ``ids``: per file, each pair's unit id; default ``<name>:<line>``. Returns
    ``{"<positive>_<negative>": Units (roc_auc, pr_ap), ..., "mean": Units (mean_pr_ap)}``, the keys
    of the grid followed by ``mean``, which pools all the files' pairs.
    """
    overlap = set(positives) & set(negatives)
    if overlap:
        raise ValueError(f"positive and negative files share the names {sorted(overlap)}")
    files = {**{n: (np.asarray(d, dtype=np.float64).ravel(), 1) for n, d in positives.items()},
             **{n: (np.asarray(d, dtype=np.float64).ravel(), 0) for n, d in negatives.items()}}
    out: dict[str, Units] = {}
    for p in positives:
        for n in negatives:
            variant = f"{p}_{n}"
            unit_ids, columns, cluster = _pool({p: files[p], n: files[n]}, clusters, ids)
            metrics = {"roc_auc": {"statistic": "pair_roc_auc", "positive": p, "negative": n},
                       "pr_ap": {"statistic": "pair_pr_ap", "positive": p, "negative": n}}
            out[variant] = Units("pair", NAME, unit_ids, columns, metrics, cluster, variant)
    unit_ids, columns, cluster = _pool(files, clusters, ids)
    metrics = {"mean_pr_ap": {"statistic": "pair_mean_pr_ap", "positives": list(positives),
                              "negatives": list(negatives)}}
    out["mean"] = Units("pair", NAME, unit_ids, columns, metrics, cluster, "mean")
    return out


def operating_threshold(distance: np.ndarray, label: np.ndarray) -> float:
    """The pooled operating point a pair is judged at: the ``P``-th smallest distance of the unit
    file's pairs, ``P`` its number of positives (the break-even point, where as many pairs are called
    "same" as there are: precision equals recall). Each run gets its own, from its own distances
    (two descriptors' distances are not on one scale); a threshold that needs no tuning set."""
    positives = int(np.count_nonzero(label == 1))
    if positives == 0:
        return -np.inf
    return float(np.sort(distance, kind="stable")[positives - 1])


def patch_pair_outcomes(units: Units) -> Outcomes:
    """Each pair right or wrong (issue 47's compare sheet): a pair is called "same" when its distance
    is at most the run's :func:`operating_threshold` over the unit file's pairs, and is right when
    that call matches its label. Severity: how far past the threshold a wrong pair lies."""
    distance = units.values("distance")
    label = units.values("label", np.int64)
    threshold = operating_threshold(distance, label)
    called_same = distance <= threshold
    right = called_same == (label == 1)
    severity = np.where(right, 0.0, np.abs(distance - threshold))
    sets = units.columns.get("set")

    def answer(row: int) -> str:
        call = "same" if called_same[row] else "different"
        truth = "same" if label[row] == 1 else "different"
        where = f" ({sets[row]})" if sets is not None else ""
        return f"distance {number(distance[row])} vs threshold {number(threshold)}: called {call}, is {truth}{where}"

    return Outcomes(units, right, np.ones(len(units), dtype=bool), severity,
                    "right: distance <= the run's break-even threshold exactly for the positive pairs", answer)
