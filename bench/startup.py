"""Benchmark: how long ``import shiftbench`` and ``shiftbench --help`` take to start, the working
tree against a git commit (default ``HEAD``), side by side in one invocation.

Each measurement is a fresh ``python`` subprocess (this venv's interpreter), timed from start to
exit: ``import shiftbench``, and the console script's ``main()`` with ``--help``. The commit's
``src/`` is extracted with ``git archive`` into a temporary folder and put first on
``PYTHONPATH``, as the working tree's ``src/`` is for its side, so both run on the same
interpreter and packages and differ only in shiftbench's code. The two sides alternate, after one
untimed run each (it writes the ``.pyc`` files), and each reports the best of ``--repeat`` runs,
as ``timeit`` does, so a busy machine penalises neither side. Two floors are printed with them:
the bare interpreter (``python -c pass``) and a two-command typer app's rich ``--help`` (what any
typer CLI pays to print its help).

The suite asserts no wall-clock time; tests/test_startup.py bounds what is imported instead (no
numpy, pandas, scipy, pyarrow, duckdb, matplotlib, scikit-learn or torch for either).

Usage: python bench/startup.py [--commit HEAD] [--repeat 10]
"""
from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

IMPORT = "import shiftbench"
HELP = "import sys; from shiftbench.cli import main; sys.argv[0] = 'shiftbench'; sys.exit(main())"
WHERE = "import shiftbench; print(shiftbench.__file__)"
TYPER_FLOOR = """
import typer
app = typer.Typer()
@app.command()
def a(x: int = 1):
    "One command."
@app.command()
def b(y: str = "b"):
    "Another command."
app()
"""


def extract(commit: str, into: Path) -> Path:
    """``src/`` of ``commit`` written under ``into`` (``git archive``); returns that ``src``."""
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit, "src"],
                         capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(into, filter="data")
    return into / "src"


def run_once(code: str, src: Path | None, args: tuple[str, ...] = ()) -> float:
    """Seconds for one fresh interpreter to run ``code`` with ``src`` first on the path."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [os.environ.get("PYTHONPATH")])])
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, *args], env=env, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def check_tree(src: Path) -> None:
    """Fail unless ``import shiftbench`` with ``src`` on the path loads that tree's package."""
    env = dict(os.environ, PYTHONPATH=str(src))
    found = subprocess.run([sys.executable, "-c", WHERE], env=env, capture_output=True, text=True,
                           check=True).stdout.strip()
    if not Path(found).resolve().is_relative_to(src.resolve()):
        sys.exit(f"PYTHONPATH={src} imports shiftbench from {found}; cannot compare the trees")


def best_of(repeat: int, cases: dict[str, tuple]) -> dict[str, float]:
    """The best time of each case over ``repeat`` rounds, the cases alternating within a round
    (after one untimed warm-up round)."""
    for case in cases.values():
        run_once(*case)
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(repeat):
        for name, case in cases.items():
            best[name] = min(best[name], run_once(*case))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", default="HEAD", help="The commit to compare with (default HEAD).")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()

    here = ROOT / "src"
    label = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.commit], capture_output=True,
                           text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="shiftbench-startup-") as tmp:
        base = extract(args.commit, Path(tmp))
        check_tree(here)
        check_tree(base)
        t = best_of(args.repeat, {
            "import, working tree": (IMPORT, here), "import, commit": (IMPORT, base),
            "help, working tree": (HELP, here, ("--help",)), "help, commit": (HELP, base, ("--help",)),
            "python -c pass": ("pass", None), "typer --help": (TYPER_FLOOR, None, ("--help",)),
        })

    print(f"start-up, working tree vs {args.commit} ({label}), fresh interpreter each, "
          f"best of {args.repeat} runs each ({sys.executable})")
    for what, key in (("import shiftbench", "import"), ("shiftbench --help", "help")):
        new, old = t[f"{key}, working tree"], t[f"{key}, commit"]
        print(f"  {what + ':':19s} working tree {new:6.3f} s, {label} {old:6.3f} s, {old / new:5.1f}x faster")
    print(f"  floors: python -c pass {t['python -c pass']:.3f} s; a two-command typer app's --help "
          f"{t['typer --help']:.3f} s")


if __name__ == "__main__":
    main()
