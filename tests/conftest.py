"""Suite-wide: no hub downloads (a failed one retries for ~50 s), no display, and the fixture
models (``tests/fixtures/oracle_models.py``) importable as ``oracle_models`` and by
``python:oracle_models:<fn>`` model specs."""
import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# the reports' shared cache (shiftbench.report.cache.SharedCache): never the user's own; one for
# the session's module-scoped fixtures, and one per test (_own_shared_cache)
_SESSION_CACHE = tempfile.mkdtemp(prefix="shiftbench-test-cache-")
os.environ["SHIFTBENCH_CACHE_DIR"] = _SESSION_CACHE
atexit.register(shutil.rmtree, _SESSION_CACHE, ignore_errors=True)

FIXTURES = Path(__file__).parent / "fixtures"
if str(FIXTURES) not in sys.path:
    sys.path.insert(0, str(FIXTURES))


def pytest_terminal_summary(terminalreporter):
    """``docs: N blocks run, M marked not runnable offline: FILE:LINE (reason), ...`` after a run
    that included tests/test_doc_blocks.py (shown with -q too)."""
    docblocks = sys.modules.get("docblocks")
    line = docblocks.summary_line() if docblocks else None
    if line:
        terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _own_shared_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with an empty shared report cache: a figure or analysis another test
    kept there would make a first build look like a rebuild."""
    monkeypatch.setenv("SHIFTBENCH_CACHE_DIR", str(tmp_path_factory.mktemp("shared-cache")))
