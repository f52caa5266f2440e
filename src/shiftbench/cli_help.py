"""How ``shiftbench --help`` is laid out: the commands grouped into panels by what they do, and
plain metavars (``--resamples N``-style names, nothing after a flag) instead of typer's type
labels (``<int>``, ``<list[str]>``, ``<bool>``).

Both are applied in one place, to every command, by the click group class the CLI's typer apps
use (:class:`PlainHelpGroup`), so a new command in ``shiftbench.commands`` gets them without
declaring anything: its panel comes from :data:`PANELS` (unlisted commands go under "Other").
"""
from __future__ import annotations

from typing import Any

from typer.core import TyperGroup
from typer.models import DefaultPlaceholder

#: Each command's panel in ``shiftbench --help``: evaluate, analyse, studies, report, store.
PANELS: dict[str, str] = {
    **dict.fromkeys(["eval", "list"], "Evaluate"),
    **dict.fromkeys(["fit", "effective-robustness", "place", "plot", "mce", "estimate", "hypotheses",
                     "informativeness", "diagnostics", "similarity", "synthetic-vs-natural",
                     "transfer-correlation", "multilabel", "ranks"], "Analyse"),
    **dict.fromkeys(["resolution-sweep", "composite", "trajectory", "transfer", "carve", "replicate",
                     "deepaugment"],
                    "Studies"),
    **dict.fromkeys(["report", "demo", "cache"], "Report"),
    **dict.fromkeys(["results", "sql", "store"], "Store"),
}


def plain_metavars(command: Any, ctx: Any = None) -> Any:
    """Give every option of ``command`` (a click command of typer's) a plain metavar where it has none: nothing for a flag
    (``--json``, ``--fractions/--percent``), else its name in capitals (``--testbed TESTBED``).
    Arguments keep theirs; ``ctx`` given, its ``--help`` option too. Returns ``command``."""
    params = list(command.params)
    if ctx is not None and command.get_help_option(ctx) is not None:
        params.append(command.get_help_option(ctx))
    for param in params:
        if getattr(param, "param_type_name", None) == "option" and param.metavar is None:
            param.metavar = "" if param.is_flag or param.count else (param.name or "value").upper()
    return command


class PlainHelpGroup(TyperGroup):
    """The CLI's click group: commands in :data:`PANELS`' panels, options with plain metavars."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            plain_metavars(command, ctx)
            panel = PANELS.get(cmd_name, "Other") if ctx.parent is None else "Commands"  # sub-groups: one panel
            if getattr(command, "rich_help_panel", None) in (None, "") or isinstance(
                    getattr(command, "rich_help_panel", None), DefaultPlaceholder):
                command.rich_help_panel = panel  # type: ignore[attr-defined] - typer's commands and groups have it
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        plain_metavars(self, ctx)
        for name in self.list_commands(ctx):      # panels are read from each command while rendering
            self.get_command(ctx, name)
        super().format_help(ctx, formatter)
