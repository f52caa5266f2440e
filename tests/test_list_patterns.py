"""``shiftbench list models|settings|shifts|testbeds PATTERN``: fnmatch wildcards as in timm's
``list_models``; nothing matching is one line on stderr and exit status 1. Also: the one list of
corruptions and the shared option declarations behind the commands."""
from __future__ import annotations

import fnmatch

import pytest
from typer.testing import CliRunner

from shiftbench import cli
from shiftbench.reference import load_testbed

REF = "imagenet-reference"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def invoke(*args: str):
    return CliRunner().invoke(cli.app, list(args))


def lines(*args: str) -> list[str]:
    result = invoke(*args)
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout.splitlines()


def test_list_settings_pattern_keeps_the_matching_registered_settings():
    assert lines("list", "settings", "imagenet-c.fog.*") == (
        [f"imagenet-c.fog.{s}_on-disk" for s in range(1, 6)] + [f"imagenet-c.fog.{s}_in-memory" for s in range(1, 6)])
    assert lines("list", "settings", "imagenet-c.*.3_in-memory")[:2] == [
        "imagenet-c.gaussian_noise.3_in-memory", "imagenet-c.shot_noise.3_in-memory"]
    assert lines("list", "settings", "greyscale") == ["greyscale"]       # no wildcard: an exact name


def test_list_settings_pattern_filters_the_long_table_too():
    out = "\n".join(lines("list", "settings", "--long", "pgd.l2.*"))
    assert "2 evaluation settings" in out and "pgd.l2.eps0.1" in out and "pgd.linf" not in out


def test_list_models_of_a_testbed_takes_a_wildcard_like_timm():
    tb = load_testbed(REF)
    got = lines("list", "models", "-t", REF, "*resnet*")
    assert got == [m for m in tb.models if fnmatch.fnmatchcase(m, "*resnet*")] and "resnet50" in got
    typed = lines("list", "models", "-t", REF, "--type", "STANDARD", "resnet*")
    assert typed and set(typed) <= set(got) and all(m.startswith("resnet") for m in typed)


def test_list_settings_of_a_testbed_and_shifts_and_testbeds_take_patterns():
    tb = load_testbed(REF)
    assert lines("list", "settings", "-t", REF, "imagenetv2-*") == [s for s in tb.settings if s.startswith("imagenetv2-")]
    shifts = [line.split("\t")[0] for line in lines("list", "shifts", "*_blur")]
    assert shifts == ["defocus_blur", "gaussian_blur", "glass_blur", "motion_blur", "zoom_blur"]
    testbeds = [line.split("\t")[0] for line in lines("list", "testbeds")]
    assert [line.split("\t")[0] for line in lines("list", "testbeds", "*-reference")] == [
        t for t in testbeds if t.endswith("-reference")]
    assert lines("list", "models", "timm*")[0].startswith("timm")   # model sources without --testbed


@pytest.mark.parametrize("args", [("list", "settings", "imagenet-c.fgo.*"), ("list", "models", "-t", REF, "*nothing*"),
                                  ("list", "shifts", "blur"), ("list", "testbeds", "x?z")])
def test_a_pattern_matching_nothing_is_one_line_on_stderr_and_exit_status_1(args):
    result = invoke(*args)
    assert result.exit_code == 1 and result.stdout == ""
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("no ") and repr(args[-1]) in err[0]


def test_a_pattern_without_wildcards_that_matches_nothing_suggests_them():
    result = invoke("list", "shifts", "blur")
    assert "'*blur*'" in result.stderr


def test_list_help_documents_the_pattern_and_the_exit_status():
    for what in ("models", "settings", "shifts", "testbeds"):
        text = " ".join(invoke("list", what, "--help").stdout.split())
        assert "PATTERN" in text and "exit status is 1" in text.replace("│ ", "").replace(" │", ""), what


def test_every_name_list_of_corruptions_is_the_shift_registry_list():
    from shiftbench import settings
    from shiftbench.datasets import IMAGENET_C_CORRUPTIONS
    from shiftbench.shifts import list_shifts
    from shiftbench.shifts.corruptions import CORRUPTIONS

    assert len(CORRUPTIONS) == 19 and set(CORRUPTIONS) <= set(list_shifts())
    assert settings.CORRUPTIONS is CORRUPTIONS and IMAGENET_C_CORRUPTIONS is CORRUPTIONS


def test_store_and_model_options_are_declared_once_and_shared():
    import inspect
    import re

    import shiftbench.cli_options as options
    from shiftbench import commands

    sources = [inspect.getsource(cli)] + [inspect.getsource(m) for m in _command_modules(commands)]
    for flag in ('"--store"', '"--model"'):
        assert all(flag not in src for src in sources), flag
        assert len(re.findall(flag, inspect.getsource(options))) == 2


def _command_modules(package):
    import importlib
    import pkgutil

    return [importlib.import_module(f"{package.__name__}.{m.name}") for m in pkgutil.iter_modules(package.__path__)]
