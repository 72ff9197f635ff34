"""The pages say what the code does (issue 48, item 6): every ``vsbench`` command line the README and
docs/ show (fenced blocks and inline code) names commands that exist and options those commands
take, and every relative link and ``#anchor`` between the pages leads somewhere. A renamed option or
a page moved without its links fails here, naming the page and the line."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

from vsbench.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "bench" / "README.md",
                ROOT / "images" / "README.md", ROOT / "k8s" / "README.md",
                *(ROOT / "examples").glob("*/README.md")])
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
INLINE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# a token after which `vsbench` is a command, not a word (pip install vsbench, a path, prose)
BOUNDARY = {None, "&&", "||", ";", "|", "time", "sudo", "-m", "exec", "$"}


def _page(path: Path) -> str:
    return str(path.relative_to(ROOT))


def command_lines(text: str) -> list[tuple[int, str, bool]]:
    """(line number, shell text, fenced) of every place a page shows a command: each line of a
    fenced shell block (continuations joined), and each inline code span."""
    found: list[tuple[int, str, bool]] = []
    for block in FENCE.finditer(text):
        if block.group(1) not in ("", "bash", "sh", "shell", "console"):
            continue
        first = text.count("\n", 0, block.start(2)) + 1
        pending, start = "", first
        for offset, line in enumerate(block.group(2).splitlines()):
            if not pending:
                start = first + offset
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            found.append((start, pending + line, True))
            pending = ""
    outside = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for span in INLINE.finditer(outside):
        found.append((outside.count("\n", 0, span.start()) + 1, span.group(1), False))
    return found


def invocations(line: str) -> list[list[str]]:
    """The arguments of each ``vsbench`` invocation in one shell line (comments dropped)."""
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote in prose: split on spaces
        tokens = line.split("#", 1)[0].split()
    out: list[list[str]] = []
    for i, token in enumerate(tokens):
        before = tokens[i - 1] if i else None
        assignment = before is not None and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", before)
        if (token == "vsbench" or token.endswith("/vsbench")) and (before in BOUNDARY or assignment):
            rest = []
            for arg in tokens[i + 1:]:
                if arg in ("&&", "||", ";", "|"):
                    break
                rest.append(arg)
            out.append(rest)
    return out


def _is_group(command: Any) -> bool:
    """A click group (typer may bring click's classes from a copy of its own: duck-typed)."""
    return hasattr(command, "list_commands")


def problems_of(args: list[str], root: Any, *, strict: bool = True) -> list[str]:
    """What a shown invocation gets wrong: a command that does not exist, an option it does not take.
    Not ``strict`` (inline code in prose, where `vsbench requires faiss-cpu` is pip's sentence): an
    unknown first word is not a command, but a known command's options are still checked."""
    command = root
    ctx = root.context_class(root, info_name="vsbench")
    names: list[str] = []
    options = {o for p in root.params for o in getattr(p, "opts", [])} | {"--help"}
    rest = list(args)
    while rest and _is_group(command):
        word = rest[0]
        if word.startswith("-"):
            if word.split("=")[0] not in options:
                return [f"vsbench {' '.join(names)}: no option {word}"]
            rest.pop(0)
            continue
        if word in ("...", "…") or not re.fullmatch(r"[a-z][a-z0-9-]*", word):
            return []  # "vsbench ... " or a placeholder (COMMAND): nothing more to check
        sub = command.get_command(ctx, word)
        if sub is None:
            if not strict and not names:
                return []
            return [f"vsbench {' '.join(names)}: no command {word!r}"]
        names.append(word)
        command, rest = sub, rest[1:]
        ctx = command.context_class(command, parent=ctx, info_name=word)
        options = {o for p in command.params for o in getattr(p, "opts", []) + getattr(p, "secondary_opts", [])}
        options |= {"--help", "--help-all"} if _is_group(command) else {"--help"}
    if _is_group(command):
        return []  # a group named alone (`vsbench abid`): its help
    wrong = [word.split("=")[0] for word in rest
             if word.startswith("--") and word != "--" and word.split("=")[0] not in options]
    return [f"vsbench {' '.join(names)}: no option {word}" for word in wrong]


@pytest.fixture(scope="module")
def root_command() -> Any:
    command = typer.main.get_command(app)
    assert _is_group(command)
    return command


def test_every_shown_vsbench_command_and_option_exists(root_command: Any) -> None:
    wrong, checked = [], 0
    for page in PAGES:
        for number, line, fenced in command_lines(page.read_text()):
            for args in invocations(line):
                checked += 1
                wrong += [f"{_page(page)}:{number}: {problem}"
                          for problem in problems_of(args, root_command, strict=fenced)]
    assert checked > 100, f"only {checked} vsbench lines found: the parser lost them"
    assert wrong == [], "\n".join(wrong)


def test_the_checker_catches_a_wrong_command_and_a_wrong_option(root_command: Any) -> None:
    """The check can fail: a renamed option and an unknown command are each named."""
    assert problems_of(["similarity", "run", "--benchmark", "disc", "--modle", "x"], root_command) == [
        "vsbench similarity run: no option --modle"]
    assert problems_of(["abid", "run-locale"], root_command) == ["vsbench abid: no command 'run-locale'"]
    assert problems_of(["similarity", "run", "...", "--runner", "subprocess"], root_command) == []
    assert invocations("MLFLOW_TRACKING_URI=x vsbench compare --last 3  # a comment --nope") == [
        ["compare", "--last", "3"]]
    assert invocations("pip install vsbench") == []


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_every_relative_link_and_anchor_leads_somewhere() -> None:
    wrong = []
    for page in PAGES:
        text = FENCE.sub("", page.read_text())
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                wrong.append(f"{_page(page)}: link to {target}: no such file")
            elif anchor and file.suffix == ".md":
                anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", FENCE.sub("", file.read_text()), re.MULTILINE)}
                if anchor not in anchors:
                    wrong.append(f"{_page(page)}: link to {target}: no heading with that anchor")
    assert wrong == [], "\n".join(wrong)


def test_the_trust_table_names_tests_that_exist() -> None:
    """docs/reliability.md's "What vsbench reads back, and what it believes" (issue 54): every test
    file and test it names exists, so the table cannot promise a check nobody runs."""
    text = (ROOT / "docs" / "reliability.md").read_text()
    start = text.index("## What vsbench reads back, and what it believes")
    section = text[start:text.index("\n## ", start + 1)]
    files = set(re.findall(r"(tests/[\w/]+\.py)", section))
    names = set(re.findall(r"`(?:tests/[\w/]+\.py::)?(test_\w+)`", section)) | set(re.findall(r"::(test_\w+)", section))
    assert files and names
    assert sorted(f for f in files if not (ROOT / f).is_file()) == []
    tests = "\n".join(path.read_text() for path in (ROOT / "tests").rglob("test_*.py"))
    assert sorted(n for n in names if f"def {n}(" not in tests) == []
