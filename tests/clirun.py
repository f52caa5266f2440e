"""Run the ``shiftbench`` command in-process through ``cli.main()`` - the console script's path,
with its one-line errors - and get its exit status, stdout and stderr (tests/test_cli*.py and the
other tests that check what a user sees)."""
from __future__ import annotations

import sys

import pytest

from shiftbench import cli


def run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``shiftbench ARGS`` through ``cli.main()`` with ``sys.argv`` patched (``--debug`` off):
    exit status, stdout, stderr."""
    monkeypatch.setattr(sys, "argv", ["shiftbench", *args])
    monkeypatch.setitem(cli._state, "debug", False)
    code = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    captured = capsys.readouterr()
    return code, captured.out, captured.err
