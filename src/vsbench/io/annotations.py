"""A plugin's annotations read as text, for the plugin checks of benchmarks and models alike.

Here, at the bottom, because both :mod:`vsbench.benchmarks.check` and :mod:`vsbench.models.check` read
a plugin's return annotations, and the models must not import the benchmarks' package (issue 58:
models import nothing above them). Pure ``typing``; nothing is imported from the plugin.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any


def annotation_text(annotation: Any) -> str:
    """An annotation as a reader writes it, without module paths: ``dict[str, ImageSet]``,
    ``EvalResult``; a string annotation (``from __future__ import annotations`` that could not be
    evaluated) as written. Compared as text, so a plugin may import the types from wherever it likes."""
    if isinstance(annotation, str):
        return "".join(part.rsplit(".", 1)[-1] for part in _tokens(annotation)).replace(" ", "").replace(",", ", ")
    origin = typing.get_origin(annotation)
    if origin is not None:
        args = ", ".join(annotation_text(arg) for arg in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return getattr(annotation, "__name__", str(annotation))


def _tokens(text: str) -> list[str]:
    """``typing.Dict[str, x.ImageSet]`` -> names and the punctuation between them, kept in order."""
    out, word = [], ""
    for char in text:
        if char in "[], |":
            out += [word, char] if word else [char]
            word = ""
        else:
            word += char
    return out + ([word] if word else [])


def return_annotation(function: Callable[..., Any]) -> tuple[bool, str]:
    """(annotated, the return annotation's text) of ``function``, resolved where its module can."""
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # a name only imported under TYPE_CHECKING: read it as written
        hints = dict(getattr(function, "__annotations__", {}))
    if "return" not in hints:
        return False, ""
    return True, annotation_text(hints["return"])
