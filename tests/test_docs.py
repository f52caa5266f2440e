"""The README's Python example and the docstring examples run and stay true (every console and
python block of the docs also runs in tests/test_doc_blocks.py)."""
from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("module", ["shiftbench", "shiftbench.testbed", "shiftbench.analysis.trend",
                                    "shiftbench.analysis.similarity", "shiftbench.analysis.informativeness",
                                    "shiftbench.analysis.diagnostics", "shiftbench.analysis.trajectory",
                                    "shiftbench.views.classmap", "shiftbench.views.multilabel",
                                    "shiftbench.analysis.hypotheses", "shiftbench.analysis.transfer",
                                    "shiftbench.analysis.transferability", "shiftbench.analysis.multilabel"])
def test_docstring_examples_run(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def test_readme_python_example_runs_and_its_numbers_hold(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)[0]
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)
    fit = ns["fit"]
    # the numbers the README quotes in its comments
    assert (round(fit.slope, 3), round(fit.intercept, 3), round(fit.r2, 3), fit.n_models) == (0.923, -0.498, 0.996, 87)
    assert (tmp_path / "sketch.png").stat().st_size > 10_000


def test_every_lazily_exported_name_resolves_without_importing_torch():
    import subprocess
    import sys

    code = ("import sys, shiftbench as sb; [getattr(sb, n) for n in sb.__all__]; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
