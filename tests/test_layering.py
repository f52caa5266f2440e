"""The floor plan stays true (docs/architecture.md): the import-linter contracts in pyproject.toml
hold, a CSV-only user never loads torch, and an import inside a function says why it is there."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "shiftbench"


def test_the_import_linter_contracts_hold():
    lint = Path(sys.executable).parent / "lint-imports"
    out = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml")], capture_output=True, text=True,
                         cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "floors KEPT" in out.stdout and "0 broken" in out.stdout


def test_the_analysis_floors_and_the_cli_load_no_torch():
    code = ("import sys, shiftbench, shiftbench.analysis, shiftbench.testbed, shiftbench.reference, "
            "shiftbench.correctness, shiftbench.cli, shiftbench.report; "
            "print(sorted(m for m in ('torch', 'torchvision', 'timm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _imports_inside_functions(path: Path):
    tree = ast.parse(path.read_text())
    lines = path.read_text().splitlines()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    yield node.lineno, "\n".join(lines[node.lineno - 1:node.end_lineno])


def test_every_import_inside_a_function_says_why():
    bare = [f"{p.relative_to(ROOT)}:{line}: {text.strip()}"
            for p in sorted(SRC.rglob("*.py")) for line, text in _imports_inside_functions(p) if "#" not in text]
    assert not bare, "imports inside functions without a reason (# deferred: ...):\n" + "\n".join(bare[:20])
