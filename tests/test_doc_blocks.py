"""Docs are tests: every ``console`` and ``python`` block of README.md and docs/*.md runs, and
console output must match what the docs show (conventions: ``tests/docblocks.py`` and README.md,
"Docs are tests"). Each Markdown file runs in its own working directory, blocks in order."""
from __future__ import annotations

import os

import pytest

import docblocks as D

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

BLOCKS = [b for b in D.all_blocks() if b.lang in D.RUN_LANGS]


@pytest.fixture(scope="module")
def doc_runs(tmp_path_factory, request):
    """One DocRun per Markdown file; registries that importing ``shiftbench.demo`` or a plugin
    fills are restored afterwards (other test modules check their exact contents). Setups that
    need a fixture (the session's reduced digits demo) get it from ``request``."""
    from shiftbench import settings
    from shiftbench.datasets import DATASETS
    from shiftbench.models.registry import ARCHS

    saved = [(registry, dict(registry)) for registry in (DATASETS, settings._SETTINGS, ARCHS)]
    runs: dict = {}

    def get(path):
        if path not in runs:
            runs[path] = D.DocRun(path, tmp_path_factory.mktemp(path.stem), fixture=request.getfixturevalue)
        return runs[path]

    import torch                                # the blocks load it anyway

    threads = torch.get_num_threads()
    yield get
    for registry, old in saved:
        registry.clear()
        registry.update(old)
    torch.set_num_threads(threads)              # a block may pin it (docs/trajectories.md)


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.name}-{b.lang}" for b in BLOCKS])
def test_doc_block(block, doc_runs, monkeypatch, request):
    # what ran and what was skipped reaches the summary line (tests/conftest.py) through the
    # test's report, so it is counted under pytest-xdist as well
    record = request.node.user_properties
    if block.skip:
        record.append(("docblock", ("skipped", block.name, block.skip)))
        pytest.skip(f"{block.name}: {block.skip}")
    run = doc_runs(block.path)
    monkeypatch.chdir(run.workdir)
    record.append(("docblock", ("ran", block.name, "")))
    try:
        run.run(block)
    except BaseException as exc:
        if not isinstance(exc, pytest.skip.Exception):
            record.append(("docblock", ("failed", block.name, "")))
        raise


def test_every_directive_is_well_formed_and_every_setup_used():
    blocks = D.all_blocks()                     # parse() raises on a stray or malformed directive
    used = {s for b in blocks for s in b.setup}
    assert used == set(D.SETUPS), f"unused setups: {set(D.SETUPS) - used}"
    names = [b.file for b in blocks if b.file]
    assert len({(b.path, b.file) for b in blocks if b.file}) == len(names), "a file is written twice"


@pytest.mark.parametrize("shown, printed, ok", [
    ('{"slope": 0.923..., "r2": 0.9959..., "n_models": 87}', '{"slope": 0.9232979, "r2": 0.99594637, "n_models": 87}', True),
    ("r2 0.923", "r2 0.92314", True), ("r2 0.923", "r2 0.9236", False), ("n 87", "n 88", False),
    ("1,797 examples", "1,797 examples", True), ("acc 22.04", "acc 22.0585", False),
    ("report: /path/to/my-report/index.html", "report: /tmp/x/y/my-report/index.html", True),
    ("analysis: 2 testbeds, 3.0 s", "analysis: 2 testbeds, 12.7 s", True),
    ("bar ━━━━━━ 18/18 0:00:02", "bar ━━━━━━━━━━━━━━ 18/18 0:01:10", True),
    ("│ 0 │ 20 │ ... │ -0.020 │", "│ 0   │ 20     │ 4 │ 0.65 │ -0.020 │", True),
    ("cnn-w8-e3 step20", "cnn-w8-e3 step21", False),
])
def test_output_matching_rules(shown, printed, ok):
    assert D.output_matches(D._lines(shown), D._lines(printed)) is ok


def test_wildcard_lines_match_any_number_of_lines():
    shown = D._lines("first\n... (one line per step)\nlast")
    assert D.output_matches(shown, D._lines("first\nlast"))
    assert D.output_matches(shown, D._lines("first\na\nb\nlast"))
    assert not D.output_matches(shown, D._lines("first\na\nb"))


def test_console_commands_continuations_and_comments():
    block = D.Block(D.ROOT / "README.md", 1, "console",
                    "$ shiftbench eval --model m \\\n    --setting val   # a comment\nout 1\n"
                    "$ for s in a b; do\n>   echo \"#$s\"; done\n#a\n#b\n$ # just a note\n")
    cmds = D.parse_console(block)
    assert [c.command for c in cmds] == ["shiftbench eval --model m --setting val",
                                         "for s in a b; do\n  echo \"#$s\"; done", ""]
    assert cmds[0].expected == ["out 1"] and cmds[1].expected == ["#a", "#b"] and cmds[0].line == 2


def test_an_output_block_is_what_the_python_block_before_it_must_print(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("```python\nprint(0.91234, 7)\n```\n\n<!-- docs-test: output -->\n```\n0.912 7\n```\n")
    block = D.parse(doc)[0]
    assert block.expected == "0.912 7\n"
    D.DocRun(doc, tmp_path).run(block)                  # numbers to the precision shown
    block.expected = "0.913 7\n"
    with pytest.raises(D.DocsTestError, match="the python block prints"):
        D.DocRun(doc, tmp_path).run(block)
    doc.write_text("```console\n$ true\n```\n\n<!-- docs-test: output -->\n```\n1\n```\n")
    with pytest.raises(D.DocsTestError, match="goes right after a python block"):
        D.parse(doc)


def test_a_setup_that_needs_a_fixture_gets_it_and_says_so_without_one(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- docs-test: setup digits-demo -->\n```python\npass\n```\n")
    block = D.parse(doc)[0]
    with pytest.raises(D.DocsTestError, match="needs the pytest fixture 'reduced_demo'"):
        D.DocRun(doc, tmp_path).run(block)
