"""Every command's --help renders (help texts are Rich markup: a stray "[/x]" breaks them)."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from vsbench.cli.app import app


def _commands(group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path; groups are whatever has sub-commands (typer vendors its own click)."""
    found = [prefix]
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            found += _commands(command, (*prefix, name))
        else:
            found.append((*prefix, name))
    return found


COMMANDS = _commands(typer.main.get_command(app))


def test_every_command_is_listed():
    assert {("abid", "download"), ("abid", "prepare"), ("abid", "resize"), ("demo",), ("compile",), ("submit",),
            ("schedule",), ("compare",), ("similarity", "run"), ("score", "copy-detection")} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "vsbench")
def test_help_renders(command):
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output
