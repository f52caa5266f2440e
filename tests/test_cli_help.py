"""``shiftbench --help`` and every command's help: grouped into panels, plain metavars, --version."""
from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from shiftbench import cli
from shiftbench.cli_help import PANELS
from shiftbench.version import __version__

RUNNER = CliRunner()
TYPE_LABEL = re.compile(r"<(?:bool|int|float|str|path|text|list\[[^\]]*\])>")
OPTION_ROW = re.compile(r"^│\s+(?:\*\s+)?--")   # a row of an options panel (arguments keep typer's labels)


def _help(*args: str) -> str:
    result = RUNNER.invoke(cli.app, [*args, "--help"], env={"COLUMNS": "200", "TERM": "dumb"})
    assert result.exit_code == 0, result.output
    return result.output


def test_version_prints_the_package_version():
    result = RUNNER.invoke(cli.app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"shiftbench {__version__}"


def test_top_level_help_groups_every_command_into_the_five_panels():
    text = _help()
    for panel in ("Evaluate", "Analyse", "Studies", "Report", "Store"):
        assert f"─ {panel} " in text, panel
    assert "─ Other " not in text and "─ Commands " not in text   # no command left unfiled
    names = set(typer_commands())
    assert names <= set(PANELS), f"commands without a panel: {names - set(PANELS)}"


def typer_commands() -> list[str]:
    import typer.main

    group = typer.main.get_command(cli.app)
    return list(group.commands)


@pytest.mark.parametrize("command", [[], ["list"], ["list", "settings"], *[[c] for c in sorted(PANELS) if c != "list"]])
def test_help_shows_plain_metavars_and_nothing_after_a_flag(command):
    text = _help(*command)
    labelled = [row for row in text.splitlines() if OPTION_ROW.match(row) and TYPE_LABEL.search(row)]
    assert not labelled, labelled
    if command == ["place"]:
        assert re.search(r"--testbed\s+-t\s+TESTBED", text) and re.search(r"--json\s{2,}Print", text)
