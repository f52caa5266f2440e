"""The named recipes: every recipe the docs name is in code, every recipe in code is documented.

``shiftbench.analysis.recipes.REGISTRY`` (analysis -> {recipe: (description, source)}) is the one
list; the docs name a recipe by the convention of docs/methods.md ("Naming a recipe in the docs"):
a code span right after or right before the word *recipe*, the code spans after a heading's last
colon, on docs/methods.md a list item that begins with a code span, the options ``--recipe NAME`` /
``informativeness ... --method NAME``, the keywords ``recipe="NAME"`` / ``method="NAME"``, or the
first column of a table headed ``--recipe``, ``--method`` or *recipe*.
The checks read REGISTRY, so a recipe added there must be documented (and named) this way.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from shiftbench.analysis import recipes
from shiftbench.analysis.recipes import DEFAULTS, REGISTRY, check_recipe, recipe_text
from shiftbench.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

#: What a recipe name looks like: lowercase letters and digits, words joined by - or _.
NAME = r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*"
#: Prose (outside fenced blocks): recipe `NAME`, the `NAME` recipe.
PROSE = (re.compile(rf"\b[Rr]ecipes? `({NAME})`"),
         re.compile(rf"`({NAME})`(?: \(default\))? recipe\b"))
#: A heading "...: `NAME`, `NAME`": the code spans after its last colon.
HEADING = re.compile(rf"^#{{1,6}} .*:((?:,? `{NAME}`)+)\s*$")
#: The recipes page, where a list item that begins with a code span names a recipe.
RECIPES_PAGE = "docs/methods.md"
LIST_ITEM = re.compile(rf"^\s*[-*] `({NAME})`")
#: Anywhere (code spans and fenced blocks): the command-line options and the Python keywords.
CODE = (re.compile(rf"--recipe[ =]({NAME})\b"),
        re.compile(rf"\binformativeness\b.*--method[ =]({NAME})\b"),
        re.compile(rf"\b(?:recipe|method)=[\"']({NAME})[\"']"))
#: First header cells of a table whose first column names recipes.
TABLE_HEADS = {"`--recipe`", "`--method`", "recipe", "recipes"}
FENCE = re.compile(r"^\s*(```|~~~)")


def named_recipes(text: str, *, recipes_page: bool = False) -> list[tuple[int, str, str]]:
    """``(line number, recipe name, section text)`` for every recipe ``text`` (Markdown) names by
    the convention (``recipes_page``: list items too); a section is the text from one ``#``/``##``
    heading to the next (fenced blocks do not split it)."""
    lines = text.splitlines()
    # sections: level-1/2 headings outside fenced blocks
    in_fence, starts = False, [0]
    for i, line in enumerate(lines):
        if FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and re.match(r"^#{1,2} ", line) and i:
            starts.append(i)
    bounds = list(zip(starts, [*starts[1:], len(lines)]))
    found: list[tuple[int, str, str]] = []
    in_fence, table_names = False, False
    for i, line in enumerate(lines):
        section = next("\n".join(lines[a:b]) for a, b in bounds if a <= i < b)
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        names = [m for rx in CODE for m in rx.findall(line)]
        if not in_fence:
            names += [m for rx in PROSE for m in rx.findall(line)]
            if (heading := HEADING.match(line)) is not None:
                names += re.findall(r"`([^`]+)`", heading[1])
            if recipes_page:
                names += LIST_ITEM.findall(line)
            cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
            if not cells:
                table_names = False
            elif cells[0].lower() in TABLE_HEADS:
                table_names = True
            elif table_names and not set(cells[0]) <= set("-: "):
                names += re.findall(rf"`({NAME})`", cells[0])
        found += [(i + 1, n, section) for n in names]
    return found


def mentions(section: str, analysis: str) -> bool:
    """Whether ``section`` names ``analysis`` (``synthetic-vs-natural`` as ``synthetic vs natural``,
    ``Synthetic-vs-natural``, ...)."""
    words = [re.escape(w) for w in re.split(r"[-_\s]+", analysis)]
    return re.search(r"\b" + r"[-_\s]+".join(words) + r"\b", section, re.I) is not None


@pytest.fixture(scope="module")
def documented() -> list[tuple[str, int, str, str]]:
    """``(doc, line, recipe, section)`` for every recipe README.md and docs/*.md name."""
    found = []
    for path in DOCS:
        doc = path.relative_to(ROOT).as_posix()
        found += [(doc, line, name, section) for line, name, section
                  in named_recipes(path.read_text(encoding="utf-8"), recipes_page=doc == RECIPES_PAGE)]
    return found


# ---------------------------------------------------------------------------- the convention itself
def test_the_convention_finds_each_form_and_skips_what_is_not_a_recipe():
    text = """## Synthetic vs natural: `taori2020`, `lima`

Recipe `alpha` is the default; the `beta-gamma` recipe and the `delta` (default) recipe too.
A training recipe (Adam, `lr 1e-3`) is not one, nor is `Store.connect()` nor `--recipe NAME`.

| `--method` | description |
|---|---|
| `one-vs-two` (default) | a row |
| `echo_5` | another `not-this` |

| setting | value |
|---|---|
| `zeta` | no |

```console
$ shiftbench synthetic-vs-natural --recipe foxtrot
$ shiftbench informativeness --resamples 10 --method golf
$ shiftbench estimate --method hotel
```

```python
# a comment, not a heading: `india`
run(tb, recipe="juliet", method='kilo')
```

## The `store`: `Store.connect()` and `shiftbench sql`

- `mike` (the default): a list item
"""
    names = [n for _, n, _ in named_recipes(text)]
    assert sorted(names) == sorted(["taori2020", "lima", "alpha", "beta-gamma", "delta", "one-vs-two", "echo_5",
                                    "foxtrot", "golf", "juliet", "kilo"])
    assert [n for _, n, _ in named_recipes(text, recipes_page=True)][-1] == "mike"
    assert all(mentions(s, "synthetic-vs-natural") for _, _, s in named_recipes(text))
    assert not mentions("synthetic data vs natural", "synthetic-vs-natural")
    assert mentions("the Informativeness ranking", "informativeness") and not mentions("misfit", "fit")


def test_the_docs_name_the_recipes_by_the_convention(documented):
    """Not vacuous: the recipes documented before this test are found where they are documented."""
    where = {(doc, name) for doc, _, name, _ in documented}
    assert {("docs/methods.md", "taori2020"), ("docs/methods.md", "per-setting"),
            ("docs/metrics.md", "djolonga2021"), ("docs/metrics.md", "one-vs-standard")} <= where


# ---------------------------------------------------------------------------- docs <-> REGISTRY
def test_every_recipe_the_docs_name_is_registered(documented):
    known = {name for table in REGISTRY.values() for name in table}
    unknown = sorted({f"{doc}:{line}: {name}" for doc, line, name, _ in documented if name not in known})
    assert not unknown, ("recipes the docs name that are not in shiftbench.analysis.recipes.REGISTRY "
                         f"(register them, or fix the name): {unknown}")


def test_every_registered_recipe_is_documented_where_its_analysis_is(documented):
    undocumented = [f"{analysis}: {name}" for analysis, table in REGISTRY.items() for name in table
                    if not any(n == name and mentions(section, analysis) for _, _, n, section in documented)]
    assert not undocumented, ("registered recipes no section of README.md or docs/*.md names by the convention "
                              "of docs/methods.md together with their analysis: " + "; ".join(undocumented))


# ---------------------------------------------------------------------------- REGISTRY's own shape
PAPER_WITH_YEAR = re.compile(r"\b[A-Z][\w'-]+(?: et al\.| (?:&|and) [A-Z][\w'-]+)?,? \(?(?:19|20)\d{2}\b")


@pytest.mark.parametrize("analysis,name", [(a, n) for a, table in REGISTRY.items() for n in table])
def test_every_recipe_has_a_one_line_description_and_a_source(analysis, name):
    description, source = REGISTRY[analysis][name]
    assert re.fullmatch(NAME, name), f"{analysis}: recipe name {name!r}: lowercase words joined by - or _"
    assert description.strip() and "\n" not in description, f"{analysis}: {name}: one-line description"
    if source.startswith("shiftbench"):
        assert source.startswith("shiftbench's variant"), (
            f"{analysis}: {name}: a source about shiftbench starts with \"shiftbench's variant\": {source!r}")
    else:
        assert PAPER_WITH_YEAR.search(source), f"{analysis}: {name}: the source names no paper with a year: {source!r}"
    assert recipe_text(analysis, name) == f"{name}: {description} ({source})"


def test_source_rule_tells_a_paper_from_a_variant():
    assert PAPER_WITH_YEAR.search("Taori et al. 2020, Measuring Robustness ... (NeurIPS), §4.2")
    assert PAPER_WITH_YEAR.search("Hendrycks & Dietterich 2019, Benchmarking ... (ICLR), §3")
    assert not PAPER_WITH_YEAR.search("the authors' plotting code")


def test_defaults_are_registered_recipes_of_their_analysis():
    assert set(DEFAULTS) <= set(REGISTRY), f"defaults of unregistered analyses: {set(DEFAULTS) - set(REGISTRY)}"
    for analysis, name in DEFAULTS.items():
        assert name in REGISTRY[analysis], f"{analysis}: default {name!r} is not one of its recipes"
    assert DEFAULTS["synthetic-vs-natural"] == "taori2020" and DEFAULTS["informativeness"] == "djolonga2021"


def test_recipes_module_stays_plain_data():
    """The command line's --help reads REGISTRY at start-up: no numpy, pandas or scipy behind it."""
    source = Path(recipes.__file__).read_text(encoding="utf-8")
    assert not re.search(r"^\s*(?:import|from)\s+(?:numpy|pandas|scipy|sklearn|torch)\b", source, re.M)


# ---------------------------------------------------------------------------- the options that take a recipe
def test_check_recipe_suggests_the_closest_name_in_one_line():
    for analysis, table in REGISTRY.items():
        for name in table:
            assert check_recipe(analysis, name) == name
    with pytest.raises(ConfigError) as err:
        check_recipe("synthetic-vs-natural", "taori2021")
    message = str(err.value)
    assert "\n" not in message and "did you mean 'taori2020'?" in message and "--recipe" in message
    assert all(name in message for name in REGISTRY["synthetic-vs-natural"])


@pytest.mark.parametrize("argv,message", [
    (["synthetic-vs-natural", "--recipe", "taori-2020"],
     "error: unknown --recipe 'taori-2020' for synthetic-vs-natural (did you mean 'taori2020'?)"),
    (["informativeness", "--method", "djolonga"],
     "error: unknown --method 'djolonga' for informativeness (did you mean 'djolonga2021'?)"),
])
def test_cli_recipe_options_refuse_an_unknown_recipe_before_loading_anything(argv, message, tmp_path, monkeypatch,
                                                                            capsys):
    from shiftbench.cli import main

    missing = tmp_path / "no-such-testbed.csv"     # the recipe is checked first: no error about the file
    monkeypatch.setattr(sys, "argv", ["shiftbench", *argv, "--testbed", str(missing)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 1 and len(err) == 1, err
    assert err[0].startswith(message), err


@pytest.mark.parametrize("command,analysis", [("synthetic-vs-natural", "synthetic-vs-natural"),
                                              ("informativeness", "informativeness")])
def test_cli_help_lists_every_recipe_with_its_source(command, analysis):
    from typer.testing import CliRunner

    from shiftbench.cli import app

    res = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400", "TERM": "dumb"})
    assert res.exit_code == 0, res.output
    text = re.sub(r"[\s│|]+", " ", res.output)
    for name, (_, source) in REGISTRY[analysis].items():
        assert f"{name}:" in text, name
        assert re.sub(r"\s+", " ", source)[:30] in text, source
