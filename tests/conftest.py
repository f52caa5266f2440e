"""Suite-wide: no hub downloads (a failed one retries for ~50 s), no display, and the fixture
models (``tests/fixtures/oracle_models.py``) importable as ``oracle_models`` and by
``python:oracle_models:<fn>`` model specs."""
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

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
