"""Lines a person reads in a terminal, kept within :data:`WIDTH` columns (issue 57).

Why: a terminal (or a pod's log viewer) 100 columns wide wrapped vsbench's link lines (120-184
characters), its start-up lines (108-112) and ``compare --runs`` (up to 120) at arbitrary points,
splitting a URL or a number from its label. Text is wrapped here at word boundaries, never inside a
word: a URL or a path cannot be wrapped without breaking it (a terminal makes only an unbroken URL
clickable), so it goes on a line of its own after a short label (:func:`labelled`). Such a line may
be longer than :data:`WIDTH`, and :func:`too_wide` (what the tests check) allows exactly that: a
line that is one unbreakable token, indented.
"""

from __future__ import annotations

import shlex
import textwrap

WIDTH = 100  # the columns every line vsbench prints for a person fits in


def wrap(text: str, indent: str = "", subsequent: str | None = None, width: int = WIDTH) -> list[str]:
    """``text`` as lines within ``width`` columns, the first starting with ``indent``, the others with
    ``subsequent`` (default: ``indent``). Words (URLs, paths, numbers with their brackets) are never
    split: one longer than a line stands alone on its line."""
    return textwrap.wrap(text, width=width, initial_indent=indent,
                         subsequent_indent=indent if subsequent is None else subsequent,
                         break_long_words=False, break_on_hyphens=False) or [indent.rstrip()]


def wrap_lines(text: str, width: int = WIDTH) -> str:
    """Every line of ``text`` within ``width``: a longer one wrapped under its own indentation plus
    two spaces (a continuation reads as part of the line above), the others kept as they are."""
    out: list[str] = []
    for line in text.splitlines():
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[:len(line) - len(line.lstrip())]
        out += wrap(line.strip(), indent, indent + "  ", width)
    return "\n".join(out)


def labelled(label: str, value: str, indent: str = "  ") -> list[str]:
    """``label`` then ``value`` (a URL, a path): on one line when it fits, else the value alone on the
    next line, indented two more, so that it is never split and stays clickable."""
    line = f"{indent}{label} {value}"
    return [line] if len(line) <= WIDTH else [f"{indent}{label.rstrip()}", f"{indent}  {value}"]


def command(args: list[str], indent: str = "    ", width: int = WIDTH) -> list[str]:
    """A shell command to copy: one line when it fits, else continued with ``\\`` at word boundaries
    (what a shell reads back as the one command); an argument (a path) longer than a line stands
    alone on its line. Each argument is quoted for the shell where it needs it."""
    words = [shlex.quote(str(arg)) for arg in args]
    line = indent + " ".join(words)
    if len(line) <= width:
        return [line]
    lines: list[str] = []
    current = indent + words[0]
    for word in words[1:]:
        if len(current) + 1 + len(word) + 2 <= width:  # room for the word and a trailing " \\"
            current += " " + word
        else:
            lines.append(current + " \\")
            current = indent + "  " + word
    return [*lines, current]


def too_wide(lines: str | list[str], width: int = WIDTH) -> list[str]:
    """The lines wider than ``width`` that are not a single unbreakable token (a URL, a path) alone
    on its line, or one continued by ``\\`` (:func:`command`): what a test asserts is empty."""
    found = lines.splitlines() if isinstance(lines, str) else lines
    return [line for line in found if len(line) > width and len(line.removesuffix(" \\").split()) > 1]
