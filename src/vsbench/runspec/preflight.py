"""Everything a similarity run can check before its work starts, in one pass: one line per problem.

Why: a bad codec string was refused after all embedding (58 s on DISC's sample), search
parameters that do not apply to a codec after all indexing (237 s), an unknown benchmark option or
``--device cuda`` without a GPU as an unexpected error with a traceback file, and each mistake only
after the one before it was fixed. :func:`similarity_problems` checks the run's options, its data
folder and its output folder without reading an image or building a model, and returns every
problem it finds, each a line that names the option (or file) and the fix; the benchmark it
loaded on the way (its native files: lists and ground truth, no image) is returned too, so the
run does not read them twice. The checks that need torch (the model, a CUDA device) or pandas (the
benchmark's files) wait for the others to pass: a refused run answers in under 2 s (issue 48).

What is checked: the run spec's own fields (:class:`~vsbench.runspec.run.SimilarityRun`), the
benchmark's options against its loader, the data folder and the benchmark's native files, the
model's name and options against the registry (no weights read; a built-in model's option names and
values first, against :mod:`vsbench.models.choices`, without torch), the device, every codec string
and the search parameters against each codec (:func:`vsbench.index.codec.check_codec`), the score
normalization, the output folder (a folder, writable), the batch size, and the environment
variables the steps read (pixel cap, lock wait, the embedding cache's secret). A step that runs elsewhere (``--runner
subprocess`` or ``container``) reads the model's files from another working folder, so a relative
path there is a problem too.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vsbench.runspec.run import BenchmarkRun, SimilarityRun

if TYPE_CHECKING:
    from vsbench.benchmarks.base import Benchmark


def problem_line(exc: BaseException) -> str:
    """The one line an expected failure of a check is reported as: a file error names its file."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return " ".join(str(exc).split()) or type(exc).__name__


def _collect(problems: list[str], check: Callable[[], Any], prefix: str = "") -> Any:
    """Run one check; an expected failure (a ValueError, a file that cannot be read) becomes a line."""
    try:
        return check()
    except (ValueError, OSError, ImportError) as exc:
        problems.append(prefix + problem_line(exc))
        return None


def output_problem(out: Path) -> str | None:
    """Why ``out`` cannot be the run's output folder (a file, under a file, not writable), or None.

    Checked by writing (and removing) a probe file when the folder exists, so that what counts is
    what the kernel allows (root, ACLs, a read-only mount), not the mode bits; a folder still to be
    made is checked on its nearest existing parent."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        return f"--out {out}: is a file, not a folder; choose a folder path"
    if out.is_dir():
        try:
            fd, probe = tempfile.mkstemp(prefix=".vsbench-write-probe-", dir=out)
        except OSError as exc:
            return f"--out {out}: cannot write in it ({exc.strerror or exc}); choose a writable folder"
        os.close(fd)
        os.unlink(probe)
        return None
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"--out {out}: {parent} is a file, not a folder; choose a folder path"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"--out {out}: cannot create it in {parent} (not writable); choose a writable folder"
    return None


def _options_and_root(run: SimilarityRun | BenchmarkRun, problems: list[str], root_hint: str) -> None:
    """The benchmark's option names against its loader, and its data folder (``root_hint`` ends
    the line: where one comes from)."""
    from vsbench.benchmarks.registry import get

    found: list[str] = []  # an unknown option, or a plugin whose loader cannot be found (named as it is)
    _collect(found, lambda: get(run.benchmark).check_options(run.benchmark_options))
    problems += [("--benchmark-options: " if " has no option " in line else "") + line for line in found]
    root = Path(run.root)
    if not root.is_dir():
        problems.append(f"--root {root}: {'is a file, not a' if root.exists() else 'no such'} folder; give the "
                        f"benchmark's data folder{root_hint}")


def _option(field: str) -> str:
    """How ``similarity run`` names a run-spec field: ``--model-options``."""
    return "--" + field.replace("_", "-")


def _argument(field: str) -> str:
    """How ``vsbench submit`` names a pipeline parameter: ``--arg model_options``."""
    return f"--arg {field}"


def _declared_model(run: SimilarityRun, problems: list[str], label: Callable[[str], str] = _option) -> None:
    """The model's name, and its option names and values against its declared choices
    (:func:`declared_model_problems`)."""
    problems += declared_model_problems(run.model, run.model_options, label)


def declared_model_problems(model: str, options: dict[str, Any] | None,
                            label: Callable[[str], str] = _option, loads: bool = True) -> list[str]:
    """``model``'s name, and its ``options``' names and values against its declared choices
    (:mod:`vsbench.models.choices`, which imports no torch), one line each led by ``label(field)``:
    a refused ``--model nosuch`` or ``{"weights": "nosuch"}`` answers in the first round, in well under
    2 s, instead of after torch's import (issue 57). Every command that takes a model calls it first
    (``similarity run`` and its step commands, ``similarity models``, ``submit`` and ``schedule``). An
    empty ``model`` (not given) and a plugin's model pass: the registry checks those, after torch.
    ``loads`` False for the steps after embed, which compare the options with the features' own and
    never open the model (:func:`vsbench.models.choices.option_problems`)."""
    from vsbench.models.choices import name_problem, option_problems

    if not model:
        return []
    unknown = name_problem(model)
    if unknown:
        return [label("model") + ": " + unknown]
    return [label("model_options") + ": " + line for line in option_problems(model, options or {}, loads)]


def _model(run: SimilarityRun, runner: str, problems: list[str], label: Callable[[str], str] = _option) -> None:
    from vsbench.models.cache import WEIGHTS_OPTIONS
    from vsbench.models.registry import check_model

    _collect(problems, lambda: check_model(run.model, run.model_options),
             label("model_options" if run.model_options else "model") + ": ")
    for name in WEIGHTS_OPTIONS:  # a file the model reads: missing, it would stop the embed step after its start
        value = run.model_options.get(name)
        if not isinstance(value, str) or not value.strip():
            continue
        looks_like_a_path = name == "path" or os.sep in value or Path(value).suffix != ""
        if looks_like_a_path and not Path(value).exists():
            problems.append(f"{label('model_options')}: {name} {value!r}: no such file or folder; give the path of "
                            f"the {run.model} model's file")
    if runner == "inline":
        return
    for name in WEIGHTS_OPTIONS:  # read by a step process or container with its own working folder
        value = run.model_options.get(name)
        if isinstance(value, str) and value and not Path(value).is_absolute() and Path(value).exists():
            problems.append(f"--model-options: {name} {value!r} is a relative path, which the pipeline's steps "
                            f"(--runner {runner}) do not resolve from here; give {str(Path(value).resolve())!r}")


# Codecs every descriptor size and metric takes, with nothing to tune: no need to ask faiss (whose
# import alone costs ~0.5 s) when the search parameters are empty. test_preflight_imports checks
# each against check_codec.
PLAIN_CODECS = frozenset({"Flat", "L2norm,Flat"})


def _search(run: SimilarityRun | BenchmarkRun, problems: list[str], label: Callable[[str], str] = _option) -> None:
    from vsbench.index.settings import parse_codecs, parse_score_norms

    codecs = _collect(problems, lambda: parse_codecs(run.codecs), label("codecs") + ": ") or []
    for codec in codecs:
        if codec in PLAIN_CODECS and not run.search_params.strip():
            continue
        from vsbench.index.codec import check_codec

        found: list[str] = []
        _collect(found, lambda codec=codec: check_codec(codec, run.search_params))
        problems += [label("search_params" if line.startswith("search parameters") else "codecs") + ": " + line
                     for line in found]
    _collect(problems, lambda: parse_score_norms(run.score_norm), label("score_norm") + ": ")


CACHE_OFF = ("off", "none", "0", "false")  # vsbench.models.cache.DISABLED (that module imports torch)


def _environment(problems: list[str]) -> None:
    from vsbench.imaging.limits import max_image_pixels
    from vsbench.io.cache_secret import secret_problem
    from vsbench.io.locks import wait_seconds

    for check in (max_image_pixels, wait_seconds):
        _collect(problems, check)
    cache = os.environ.get("VSBENCH_EMBED_CACHE")
    if cache is None or (cache.strip() and cache.strip().lower() not in CACHE_OFF):
        problem = secret_problem()  # the embedding cache's key: a short or exposed one, before any image is read
        if problem is not None:
            problems.append(problem)


def _as_option(line: str) -> str:
    """A run-spec field's problem named as the command's option (``merge_ondisk: ...`` -> ``--merge-ondisk: ...``)."""
    field, colon, rest = line.partition(": ")
    return f"{_option(field)}: {rest}" if colon and field.isidentifier() else line


def _parsed(fields: dict[str, Any]) -> tuple[SimilarityRun | None, SimilarityRun | None, list[str]]:
    """(the run or None, a run to check the other fields on, the fields' problems): when a field is
    bad, the others are still checked, on the run with the bad ones at their defaults."""
    run, problems = SimilarityRun.parse_all(**fields)
    checked = run
    if run is None:
        bad = {line.partition(": ")[0] for line in problems}
        checked, _ = SimilarityRun.parse_all(**{k: v for k, v in fields.items() if k not in bad})
    return run, checked, problems


def similarity_problems(fields: dict[str, Any], *, out: Path, device: str, batch_size: int,
                        runner: str = "inline") -> tuple[SimilarityRun | None, Benchmark | None, list[str]]:
    """(the run, its benchmark, every problem found) for ``similarity run``'s options ``fields``
    (:class:`SimilarityRun`'s), before any image is read. The run and the benchmark are None when
    they could not be made; each problem is one line naming the option and the fix.

    Two rounds, so that a refused run answers in well under 2 s (issue 48): first every check that
    needs neither torch nor the benchmark's readers (pandas) — the fields, the benchmark's option
    names and data folder, the codecs and search parameters, the score normalization, the device's
    name, the output folder, the batch size, the environment — all reported together; only when
    they pass, the deep ones: the benchmark's native files, the model and its files (the registry
    imports torch), whether the accelerator asked for is there."""
    from vsbench.runtime.device import device_problem

    run, checked, problems = _parsed(fields)
    problems = [_as_option(line) for line in problems]
    if checked is not None:
        _options_and_root(checked, problems, f" (vsbench synth similarity {checked.benchmark} --out DIR makes one)")
        _search(checked, problems)
        _declared_model(checked, problems)
    accelerator = device.partition(":")[0] in ("cuda", "mps")  # device_problem asks torch whether it is there
    problems += [p for p in (None if accelerator else device_problem(device), output_problem(out)) if p]
    if batch_size < 1:
        problems.append(f"--batch-size {batch_size}: must be at least 1 (images per forward pass)")
    _environment(problems)
    if problems or checked is None:
        return run, None, problems
    from vsbench.benchmarks.registry import get

    bench = _collect(problems, lambda: get(checked.benchmark).load(Path(checked.root), **checked.benchmark_options))
    _model(checked, runner, problems)
    problems += [p for p in (device_problem(device) if accelerator else None,) if p]
    return run, bench, problems


def step_problems(run: BenchmarkRun, out: Path) -> list[str]:
    """What ``similarity index``, ``search`` and ``score`` (one pipeline task each) can tell before
    reading a feature or a result: the benchmark's option names, its data folder, the output folder
    the earlier steps wrote, each codec and the search parameters against it, the score
    normalization. The benchmark itself is read once, by the step."""
    problems: list[str] = []
    _options_and_root(run, problems, ", as given to the embed step")
    if not Path(out).is_dir():
        problems.append(f"--out {out}: {'is a file, not a' if Path(out).exists() else 'no such'} folder; give the "
                        "folder the embed step wrote (vsbench similarity run --out, or the pipeline's)")
    _search(run, problems)
    return problems


def submitted_problems(arguments: dict[str, Any]) -> list[str]:
    """The problems of a similarity pipeline's ``arguments`` that this machine can tell before a
    cluster runs them (``vsbench cluster submit --pipeline similarity``): the run spec's fields, the
    benchmark's option names, the model and its options, each codec and the search parameters
    against it, the score normalization. Paths, files and the device are the cluster's, not checked.
    The model's name and option values are checked against their declared choices with the others;
    the registry (which imports torch) once they pass, as in :func:`similarity_problems`."""
    fields = {name: arguments[name] for name in SimilarityRun.model_fields if name in arguments}
    fields.setdefault("benchmark", "disc")  # the pipeline's own defaults for the two it requires
    fields.setdefault("root", "/data")
    _, run, problems = _parsed(fields)
    problems = [_argument(line) for line in problems]
    if run is not None:
        from vsbench.benchmarks.registry import get

        _collect(problems, lambda: get(run.benchmark).check_options(run.benchmark_options), _argument(
            "benchmark_options: "))
        _search(run, problems, _argument)
        _declared_model(run, problems, _argument)  # the declared choices first, without torch
        if not problems:
            _model(run, "inline", problems, _argument)
    return problems
