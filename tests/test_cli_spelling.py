"""One spelling per concept on the command line (issue 32): ID and shifted settings are --x and
--y, bootstrap counts --resamples, files written -o/--output, -m only --model; an old spelling is
one line naming the new one; setting aliases work wherever a setting name does."""
from __future__ import annotations

import json

import pytest
import typer

from shiftbench import cli
from shiftbench.cli_support import OLD_SPELLINGS
from shiftbench.setting_names import SETTING_ALIASES

from clirun import run_main

OLD = ("--id", "--ood", "--shift", "--natural", "--n-boot", "--export", "--csv")


def _commands():
    """(name, click command) for every command of the app, ``list`` subcommands included."""
    found = []

    def walk(command, path):
        subs = getattr(command, "commands", None)
        if subs is None:
            found.append((" ".join(path), command))
            return
        for name, sub in subs.items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(cli.app), [])
    return found


COMMANDS = _commands()


def _options(command):
    """The visible options of ``command``: [(param, [names...])]."""
    return [(p, [*p.opts, *p.secondary_opts]) for p in command.params
            if getattr(p, "param_type_name", "") == "option" and not getattr(p, "hidden", False)]


def test_the_commands_are_found():
    names = {n for n, _ in COMMANDS}
    assert {"fit", "estimate", "multilabel", "hypotheses", "synthetic-vs-natural", "carve", "results"} <= names


@pytest.mark.parametrize("name, command", COMMANDS, ids=[n for n, _ in COMMANDS])
def test_no_old_spelling_is_an_option(name, command):
    for _, names in _options(command):
        assert not set(names) & set(OLD), f"{name}: {names}"


@pytest.mark.parametrize("name, command", COMMANDS, ids=[n for n, _ in COMMANDS])
def test_m_is_only_model(name, command):
    for _, names in _options(command):
        if "-m" in names:
            assert "--model" in names, f"{name}: -m on {names}"


@pytest.mark.parametrize("name, command", COMMANDS, ids=[n for n, _ in COMMANDS])
def test_bootstrap_counts_are_resamples(name, command):
    for param, names in _options(command):
        if param.name in ("n_boot", "n_resamples", "resamples") or (param.help or "").lower().startswith("bootstrap"):
            assert names == ["--resamples"], f"{name}: {names}"


@pytest.mark.parametrize("name", ["fit", "effective-robustness", "plot", "estimate", "multilabel", "hypotheses",
                                  "synthetic-vs-natural", "trajectory"])
def test_id_and_shifted_settings_are_x_and_y(name):
    command = dict(COMMANDS)[name]
    names = {n for _, ns in _options(command) for n in ns}
    assert {"--x", "--y"} <= names


@pytest.mark.parametrize("args, old, new", [
    (["estimate", "--id", "val", "--ood", "imagenet-a"], "--id", "--x"),
    (["estimate", "--x", "val", "--ood", "imagenet-a"], "--ood", "--y"),
    (["multilabel", "--id", "id-test"], "--id", "--x"),
    (["hypotheses", "-t", "imagenet-reference", "--shift", "ImageNet-R"], "--shift", "--y"),
    (["hypotheses", "-t", "imagenet-reference", "--n-boot=10"], "--n-boot", "--resamples"),
    (["transfer-correlation", "--x", "val", "--n-boot", "10"], "--n-boot", "--resamples"),
    (["synthetic-vs-natural", "--natural", "imagenetv2"], "--natural", "--y"),
    (["synthetic-vs-natural", "--csv", "t.csv"], "--csv", "--output"),
    (["results", "--export", "r.csv"], "--export", "--output"),
    (["carve", "-m", "m.csv", "-o", "out"], "-m", "--manifest"),
])
def test_an_old_spelling_is_one_line_naming_the_new_one(monkeypatch, capsys, tmp_path, args, old, new):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(monkeypatch, capsys, *args)
    assert code not in (0, None)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: no such option {old} (it is {new} now") and "Traceback" not in err
    assert not list(tmp_path.iterdir())           # nothing written


def test_old_spellings_table_names_only_options_that_exist():
    names = {n for _, command in COMMANDS for _, ns in _options(command) for n in ns}
    for old, (new, *_rest) in OLD_SPELLINGS.items():
        assert new in names and old not in names - {"-m"}, old


def test_minus_m_is_still_model_elsewhere(monkeypatch, capsys):
    code, _, err = run_main(monkeypatch, capsys, "estimate", "--x", "val", "--y", "imagenet-a", "-m", "resnet50",
                            "--store", "no-such-store")
    assert code == 1 and "no such option" not in err


def test_an_alias_works_in_y_of_fit(monkeypatch, capsys):
    assert SETTING_ALIASES["imagenetv2"] == "imagenetv2-matched-frequency-format-val"
    code, out, err = run_main(monkeypatch, capsys, "fit", "-t", "imagenet-reference", "--x", "imagenet",
                              "--y", "imagenetv2", "--json")
    assert code == 0, err
    _, canonical, _ = run_main(monkeypatch, capsys, "fit", "-t", "imagenet-reference", "--x", "val",
                               "--y", "imagenetv2-matched-frequency-format-val", "--json")
    assert json.loads(out) == json.loads(canonical)


def test_a_lone_table_with_an_alias_column_answers_to_the_alias(monkeypatch, capsys, tmp_path):
    from shiftbench.reference import load_testbed

    ref = load_testbed("imagenet-reference")
    table = ref.accuracies[["val", "imagenetv2-matched-frequency-format-val"]].rename(
        columns={"imagenetv2-matched-frequency-format-val": "imagenetv2"}).dropna()
    table["model_type"] = ref.model_types.reindex(table.index)
    path = tmp_path / "mine.csv"
    table.rename_axis("model").reset_index().to_csv(path, index=False)
    code, _, err = run_main(monkeypatch, capsys, "fit", "-t", str(path), "--x", "val", "--y", "imagenetv2",
                            "--fit-on", "all", "--json")
    assert code == 0, err
    assert "read as 'imagenetv2-matched-frequency-format-val'" in err
