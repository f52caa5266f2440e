"""Fast to start: ``import shiftbench`` and ``shiftbench --help`` load none of the heavy libraries
(the public names are imported on first use, the commands import what they run inside their
bodies). The bound is on *what is imported*, not on seconds: bench/startup.py times both against
a git commit, side by side."""
from __future__ import annotations

import subprocess
import sys

HEAVY = ("numpy", "scipy", "pandas", "pyarrow", "duckdb", "matplotlib", "plotly", "PIL", "sklearn", "torch",
         "rich.progress")
REPORT = f"\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"


def _loaded(code: str) -> str:
    """The heavy libraries loaded once a fresh interpreter has run ``code`` (which imports sys)."""
    out = subprocess.run([sys.executable, "-c", code + REPORT], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_import_shiftbench_loads_no_heavy_library():
    assert _loaded("import sys, shiftbench") == "[]"


def test_help_loads_no_heavy_library():
    code = ("import sys\nfrom shiftbench.cli import app\ntry:\n    app(['--help'])\nexcept SystemExit as exc:\n"
            "    assert exc.code == 0, exc.code\n")
    assert _loaded(code) == "[]"


def test_a_command_help_loads_no_heavy_library():
    code = ("import sys\nfrom shiftbench.cli import app\ntry:\n    app(['informativeness', '--help'])\n"
            "except SystemExit as exc:\n    assert exc.code == 0, exc.code\n")
    assert _loaded(code) == "[]"


def test_a_lazy_name_loads_its_module_when_used():
    loaded = _loaded("import sys, shiftbench; shiftbench.fit_trend")
    assert "'pandas'" in loaded and "'scipy'" in loaded and "torch" not in loaded


def test_every_analysis_name_resolves_and_is_listed():
    import shiftbench.analysis as analysis

    for name in analysis.__all__:
        assert getattr(analysis, name) is not None, name
    assert set(analysis.__all__) <= set(dir(analysis))
    assert analysis.fit_trend is __import__("shiftbench.analysis.trend", fromlist=["fit_trend"]).fit_trend
