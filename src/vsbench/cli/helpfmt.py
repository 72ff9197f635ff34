"""How every command's ``--help`` reads: plain text that fits 80 columns, one line per option where it
fits, a short first level and the rest behind ``--help-all``.

Typer's Rich layout boxes the help into three columns (at 80 columns the text column is 20 characters
wide) and labels every option with its Python type (``<bool>`` even on flags, ``<int range> [x>=1]``).
Here click's plain two-column layout is used instead, with a value placeholder only on options that
take a value (TEXT, INT, PATH, ...), the default and a range only where they tell something, and the
options marked ``rich_help_panel=MORE`` listed by ``--help-all`` alone. Every command gets this
through :class:`App`, which the command groups are made with."""

from __future__ import annotations

import textwrap
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

MORE = "More options"
"""Mark an option that most runs leave at its default: ``typer.Option(..., rich_help_panel=MORE)``.
``--help`` names it in one line; ``--help-all`` describes it. Any other panel name works the same
way and becomes the title of its own section in ``--help-all``."""

HELP_ALL = "--help-all"
_HELP_ALL_KEY = "vsbench.help_all"  # ctx.meta: the help being written is the long one

_PLACEHOLDERS = {"str": "TEXT", "int": "INT", "float": "FLOAT", "bool": "BOOL", "path": "PATH", "file": "FILE",
                 "dir": "DIR"}
_UNBOUNDED = 2**31  # a bound at or past this (a seed's 2**63-1) is a storage limit, not advice: not shown


def placeholder(param: Any, ctx: typer.Context) -> str:
    """What stands for an option's value in help: its own metavar if it has one, else TEXT, INT, PATH...
    from the type Typer inferred (``<int range>`` -> INT, ``<list[str]>`` -> TEXT, a choice -> a|b)."""
    if param.metavar:
        return str(param.metavar)
    label = param.display_type(ctx).strip("<>").removesuffix(" range")
    while label.startswith("list[") and label.endswith("]"):
        label = label[5:-1]
    return label if "|" in label else _PLACEHOLDERS.get(label, label.upper())


def range_text(low: float | None, high: float | None) -> str | None:
    """A range as click writes it (``x>=1``, ``0<=x<=1``), without bounds no one would come near."""
    low = None if low is not None and abs(low) >= _UNBOUNDED else low
    high = None if high is not None and abs(high) >= _UNBOUNDED else high
    if low is None and high is None:
        return None
    if high is None:
        return f"x>={low}"
    return f"x<={high}" if low is None else f"{low}<=x<={high}"


def _default_text(param: Any, ctx: typer.Context) -> str:
    """The default as the user would type it; empty when there is none worth showing (None, '', an
    off flag). A ``--x/--no-x`` flag shows the spelling that is in force."""
    if isinstance(param.show_default, str):
        return f"({param.show_default})"
    if param.show_default is False and param.param_type_name == "option":
        return ""
    resilient, ctx.resilient_parsing = ctx.resilient_parsing, True
    try:
        value = param.get_default(ctx, call=False)
    finally:
        ctx.resilient_parsing = resilient
    if callable(value):
        return "(dynamic)"
    if getattr(param, "is_bool_flag", False):
        if param.secondary_opts:
            return (param.opts if value else param.secondary_opts)[0].lstrip("-")
        return ""
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return "" if value is None else str(getattr(value, "value", value))


def help_record(param: Any, ctx: typer.Context) -> tuple[str, str] | None:
    """One row of the options table: ``--name PLACEHOLDER`` and the help with what is in force when the
    option is left out (default, range, required)."""
    if param.hidden:
        return None
    if param.param_type_name == "argument":
        name = (param.metavar or param.name).upper()
    else:
        takes_value = not (param.is_flag or param.count)
        spellings = [", ".join(sorted(opts, key=len)) for opts in (param.opts, param.secondary_opts) if opts]
        name = " / ".join(spellings) + (f" {placeholder(param, ctx)}" if takes_value else "")
    extra = [f"default: {text}" for text in [_default_text(param, ctx)] if text]
    if span := range_text(getattr(param, "min", None), getattr(param, "max", None)):
        extra.append(span)
    if param.required:
        extra.append("required")
    text = (param.help or "").strip()
    return name, f"{text}  [{'; '.join(extra)}]".strip() if extra else text


def _show_all(ctx: typer.Context, _param: Any, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        ctx.meta[_HELP_ALL_KEY] = True
        typer.echo(ctx.get_help(), color=ctx.color)
        ctx.exit()


def _wrap(text: str, width: int) -> list[str]:
    """Lines of at most ``width``, never broken inside a hyphenated word (--search-params, demo-output)."""
    return textwrap.wrap(text, max(width, 10), break_on_hyphens=False) or [""]


def _write_rows(formatter: Any, rows: list[tuple[str, str]], first: int, spacing: int = 2) -> None:
    """click's two-column table, the text starting at column ``first`` (a longer name gets a line of
    its own), wrapped as :func:`_wrap` does, so that no line is wider than the formatter."""
    indent = " " * formatter.current_indent
    for name, text in rows:
        lines = _wrap(text, formatter.width - formatter.current_indent - first)
        if len(name) > first - spacing:
            formatter.write(f"{indent}{name}\n")
            name = ""
        formatter.write(f"{indent}{name:<{first}}{lines[0]}".rstrip() + "\n")
        for line in lines[1:]:
            formatter.write(f"{indent}{'':<{first}}{line}\n")


def _write_options(command: Any, ctx: typer.Context, formatter: Any) -> None:
    """Arguments, then the options of the short help, then the marked ones: described under their
    panel's title with --help-all, named in one paragraph otherwise."""
    arguments: list[tuple[str, str]] = []
    options: list[tuple[str, str]] = []
    panels: dict[str, list[tuple[str, str]]] = {}
    names: list[str] = []
    for param in command.get_params(ctx):
        row = help_record(param, ctx)
        if row is None:
            continue
        panel = getattr(param, "rich_help_panel", None)
        if param.param_type_name == "argument":
            arguments.append(row)
        elif panel:
            panels.setdefault(panel, []).append(row)
            names.append(param.opts[0])
        else:
            options.append(row)
    sections = [("Arguments", arguments), ("Options", options)]
    sections += list(panels.items()) if ctx.meta.get(_HELP_ALL_KEY) else []
    names_width = max((len(name) for _, rows in sections for name, _ in rows), default=0)
    for title, rows in sections:
        if rows:
            with formatter.section(title):
                _write_rows(formatter, rows, first=min(names_width, 30) + 2)
    if names and not ctx.meta.get(_HELP_ALL_KEY):
        formatter.write_paragraph()
        with formatter.indentation():
            text = f"{len(names)} more options ({HELP_ALL} describes them): {', '.join(names)}."
            formatter.write("".join(f"{' ' * formatter.current_indent}{line}\n"
                                    for line in _wrap(text, formatter.width - formatter.current_indent)))


class HelpCommand(TyperCommand):
    """A command whose help is the compact plain layout, with ``--help-all`` when some of its options
    are marked for the second level."""

    _help_all_option: TyperOption | None = None

    def get_params(self, ctx: typer.Context) -> list[Any]:
        params = super().get_params(ctx)
        help_option = self.get_help_option(ctx)
        if help_option is None or not any(getattr(p, "rich_help_panel", None) and not p.hidden for p in params):
            return params
        if self._help_all_option is None:  # one object: click orders eager callbacks by identity
            # typer 0.29's options carry a type_descriptor; older ones (0.27, on the CUDA image) have none
            extra = {"type_descriptor": help_option.type_descriptor} if hasattr(help_option, "type_descriptor") else {}
            self._help_all_option = TyperOption(
                param_decls=[HELP_ALL], is_flag=True, expose_value=False, is_eager=True, callback=_show_all,
                help="Show all options and exit.", **extra)
        return [*params, self._help_all_option]

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
        """The usage line names arguments as the table and the docstrings do (TASK, [NAME])."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = (param.metavar or param.name).upper()
                pieces.append(name if param.required else f"[{name}]")
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces

    def format_options(self, ctx: typer.Context, formatter: Any) -> None:
        _write_options(self, ctx, formatter)


class HelpGroup(TyperGroup):
    """A command group with the same options table, then its commands."""

    def format_options(self, ctx: typer.Context, formatter: Any) -> None:
        _write_options(self, ctx, formatter)
        self.format_commands(ctx, formatter)


class App(typer.Typer):
    """``typer.Typer`` whose groups and commands write the compact help (Rich's layout off): make every
    command group with it, so a command added later gets the same help without asking."""

    def __init__(self, *, cls: type[TyperGroup] | None = HelpGroup, **kwargs: Any) -> None:
        kwargs.setdefault("rich_markup_mode", None)
        super().__init__(cls=cls, **kwargs)

    def command(self, name: str | None = None, *, cls: type[TyperCommand] | None = None,
                **kwargs: Any) -> Any:
        return super().command(name, cls=cls or HelpCommand, **kwargs)
