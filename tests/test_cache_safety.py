"""The report caches are safe to point anywhere and to receive from anyone
(shiftbench.report.cache): they remove only the entries they wrote, in a folder they tagged as
a cache, never unpickle an entry this user's shiftbench did not write, and the report's worker
processes (shiftbench.report.figures) die with the report."""
from __future__ import annotations

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import pickle  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from report_testbed import tiny_testbed  # noqa: E402
from shiftbench.errors import ConfigError  # noqa: E402
from shiftbench.report import write_html_report  # noqa: E402
from shiftbench.report.cache import (  # noqa: E402
    CACHE_DIR,
    CACHEDIR_SIGNATURE,
    CACHEDIR_TAG,
    KEY_ENV,
    ReportCache,
    SharedCache,
    cache_key_file,
    cache_secret,
    seal,
)
from shiftbench.report.shifts import ShiftPair  # noqa: E402
from shiftbench import testbed as tbmod  # noqa: E402

SCRIPT = Path(sys.executable).with_name("shiftbench")
FIXTURES = Path(__file__).parent
FIG = "f" * 40 + ".png"          # a figure entry's name: its hash and format


class _Payload:
    """A pickle that, when loaded, creates ``marker`` (what a planted entry would do, and worse)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204 - pickle's protocol
        return os.mkdir, (str(self.marker),)


def _frame(score: int = 1) -> pd.DataFrame:
    return pd.DataFrame({"score": [score]}, index=pd.Index(["a"], name="model"))


def _counting():
    calls: list[int] = []

    def compute() -> pd.DataFrame:
        calls.append(1)
        return _frame(len(calls))

    return calls, compute


# ---------------------------------------------------------------------------- planted pickles
def test_a_planted_pickle_in_a_report_folder_is_not_run_and_is_recomputed(tmp_path: Path):
    root, marker = tmp_path / "report" / CACHE_DIR, tmp_path / "pwned"
    calls, compute = _counting()
    ReportCache(root).get("ranking", (1,), compute)
    (entry,) = root.glob("ranking-*.pkl")                      # the exact name the entry has
    entry.write_bytes(pickle.dumps(_Payload(marker)))
    value = ReportCache(root).get("ranking", (1,), compute)
    assert not marker.exists()
    assert len(calls) == 2 and value["score"].iloc[0] == 2
    assert ReportCache(root).get("ranking", (1,), compute)["score"].iloc[0] == 2 and len(calls) == 2  # kept again


def test_a_planted_pickle_in_the_shared_cache_is_not_run_and_is_recomputed(tmp_path: Path):
    shared, marker = SharedCache(tmp_path / "shared"), tmp_path / "pwned"
    calls, compute = _counting()
    ReportCache(tmp_path / "a" / CACHE_DIR, shared).get("ranking", (1,), compute)
    (entry,) = (tmp_path / "shared" / "analyses").glob("ranking-*.pkl")
    entry.write_bytes(pickle.dumps(_Payload(marker)))
    other = ReportCache(tmp_path / "b" / CACHE_DIR, shared)
    assert other.get("ranking", (1,), compute)["score"].iloc[0] == 2
    assert not marker.exists() and len(calls) == 2


def _two_group_testbed() -> tbmod.Testbed:
    """12 STANDARD and 12 MORE_DATA models that a shifted setting separates: the report ranks the
    settings' informativeness, an analysis it keeps in its caches."""
    val = np.linspace(60.0, 80.0, 12).tolist() * 2
    types = ["STANDARD"] * 12 + ["MORE_DATA"] * 12
    sep = np.where(np.array(types) == "MORE_DATA", 60.0, 40.0) + np.linspace(0, 2, 24)
    frame = pd.DataFrame({"model": [f"m{i}" for i in range(24)], "model_type": types, "val": val, "sep": sep})
    return tbmod.Testbed.from_frame(frame, name="two")


def test_a_rebuilt_report_runs_no_planted_pickle(tmp_path: Path):
    """Every analysis entry of a built report, in its own folder and in the shared cache,
    replaced by a payload: the rebuild computes them again (the same ranking) and keeps them anew."""
    out, marker = tmp_path / "report", tmp_path / "pwned"

    def build() -> str:
        return write_html_report([_two_group_testbed()], out, shifts=[ShiftPair("Sep", "val", "sep")],
                                 n_resamples=10, figure_formats=()).read_text()

    first = build()
    assert "Metric informativeness" in first
    planted = [*(out / CACHE_DIR).glob("*.pkl"), *Path(os.environ["SHIFTBENCH_CACHE_DIR"], "analyses").glob("*.pkl")]
    assert len(planted) >= 2, "the report keeps its analyses in both caches"
    payload = pickle.dumps(_Payload(marker))
    for p in planted:
        p.write_bytes(payload)

    ranking = pd.read_csv(out / "two" / "informativeness.csv")
    assert "Metric informativeness" in build()
    assert not marker.exists()
    pd.testing.assert_frame_equal(pd.read_csv(out / "two" / "informativeness.csv"), ranking)
    assert all(p.read_bytes() != payload for p in planted if p.exists())


def test_a_valid_pickle_of_the_wrong_type_is_recomputed_not_raised(tmp_path: Path):
    root = tmp_path / CACHE_DIR
    calls, compute = _counting()
    ReportCache(root).get("ranking", (1,), compute)
    (entry,) = root.glob("ranking-*.pkl")
    entry.write_bytes(pickle.dumps(["not", "a", "frame"]))              # unauthenticated: recomputed
    assert isinstance(ReportCache(root).get("ranking", (1,), compute), pd.DataFrame) and len(calls) == 2
    # authenticated by this user's key, but not what the caller expects: recomputed too
    entry.write_bytes(seal(cache_secret(), entry.name, pickle.dumps(["still", "not"])))
    value = ReportCache(root).get("ranking", (1,), compute, expect=pd.DataFrame)
    assert isinstance(value, pd.DataFrame) and len(calls) == 3


def test_an_entry_moved_to_another_key_is_not_trusted(tmp_path: Path):
    root = tmp_path / CACHE_DIR
    ReportCache(root).get("ranking", (1,), lambda: _frame(1))
    ReportCache(root).get("ranking", (2,), lambda: _frame(2))
    one, two = sorted(root.glob("ranking-*.pkl"), key=lambda p: p.stat().st_mtime_ns)
    two.write_bytes(one.read_bytes())                                   # key 1's result under key 2's name
    assert ReportCache(root).get("ranking", (2,), lambda: _frame(22))["score"].iloc[0] == 22


def test_the_key_is_the_users_own_outside_every_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "config" / "cache-key"))
    key = cache_secret()
    path = cache_key_file()
    assert key is not None and len(key) == 32 and path.read_bytes() == key
    assert path.stat().st_mode & 0o777 == 0o600 and cache_secret() == key      # made once
    monkeypatch.delenv(KEY_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert cache_key_file() == tmp_path / "xdg" / "shiftbench" / "cache-key"


def test_a_key_others_can_read_is_refused_and_nothing_is_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    shared_key = tmp_path / "cache-key"
    shared_key.write_bytes(os.urandom(32))
    shared_key.chmod(0o644)
    monkeypatch.setenv(KEY_ENV, str(shared_key))
    calls, compute = _counting()
    with pytest.warns(UserWarning, match="not a private"):
        ReportCache(tmp_path / CACHE_DIR).get("ranking", (1,), compute)
        ReportCache(tmp_path / CACHE_DIR).get("ranking", (1,), compute)
    assert len(calls) == 2 and not list((tmp_path / CACHE_DIR).glob("*.pkl"))


# ---------------------------------------------------------------------------- a folder not a cache
def _users_folder(root: Path) -> dict[Path, bytes]:
    """A folder of someone's files, one of them named like a figure entry."""
    files = {root / "notes.txt": b"my notes", root / "Documents" / "notes.txt": b"more notes",
             root / "video.mp4": os.urandom(3 * 1024**2), root / "figures" / FIG: b"my own png"}
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def _unchanged(files: dict[Path, bytes]) -> bool:
    return all(p.is_file() and p.read_bytes() == data for p, data in files.items())


def test_cache_clear_refuses_a_folder_that_is_not_a_cache_in_one_line(tmp_path: Path):
    home = tmp_path / "home"
    files = _users_folder(home)
    env = {**os.environ, "SHIFTBENCH_CACHE_DIR": str(home)}
    res = subprocess.run([str(SCRIPT), "cache", "--clear"], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 1, res
    assert "Traceback" not in res.stderr + res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a shiftbench cache" in lines[0] and "SHIFTBENCH_CACHE_DIR" in lines[0]
    assert _unchanged(files) and not (home / CACHEDIR_TAG).exists()
    res = subprocess.run([str(SCRIPT), "cache"], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0 and "not a shiftbench cache" in res.stdout


def test_a_folder_that_is_not_a_cache_is_never_written_pruned_or_cleared(tmp_path: Path):
    files = _users_folder(tmp_path / "home")
    shared = SharedCache(tmp_path / "home", max_bytes=1)
    assert shared.is_foreign() and shared.entries() == []
    with pytest.warns(UserWarning, match="not a shiftbench cache"):
        assert shared.prune() == 0
    with pytest.raises(ConfigError, match="not a shiftbench cache"):
        shared.clear()
    shared.write("figures", "0" * 40 + ".png", b"drawn")
    shared.write("analyses", "x-" + "0" * 40 + ".pkl", b"kept")
    assert shared.read("figures", FIG) is None and not shared.has("figures", FIG)
    assert _unchanged(files) and not (tmp_path / "home" / "analyses").exists()
    assert not (tmp_path / "home" / "figures" / ("0" * 40 + ".png")).exists()


def test_a_report_skips_a_shared_folder_that_is_not_a_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    files = _users_folder(tmp_path / "home")
    monkeypatch.setenv("SHIFTBENCH_CACHE_DIR", str(tmp_path / "home"))
    with pytest.warns(UserWarning, match="not a shiftbench cache"):
        write_html_report([tiny_testbed()], tmp_path / "report", n_resamples=20, figure_formats=(".png",))
    assert (tmp_path / "report" / "index.html").exists()
    assert _unchanged(files) and sorted(p.name for p in (tmp_path / "home" / "figures").iterdir()) == [FIG]


def test_the_cache_tags_a_folder_it_makes_or_finds_empty(tmp_path: Path):
    made = SharedCache(tmp_path / "new" / "report")
    made.write("figures", FIG, b"png")
    assert (tmp_path / "new" / "report" / CACHEDIR_TAG).read_bytes().startswith(CACHEDIR_SIGNATURE)
    (tmp_path / "empty").mkdir()
    found = SharedCache(tmp_path / "empty")
    assert not found.is_foreign()
    found.write("figures", FIG, b"png")
    assert (tmp_path / "empty" / CACHEDIR_TAG).read_bytes().startswith(CACHEDIR_SIGNATURE)
    assert found.read("figures", FIG) == b"png"


def _write_after(barrier, root: str, i: int) -> None:
    barrier.wait()
    SharedCache(root).write("figures", f"{i:040x}.png", b"png")


def test_processes_that_start_an_empty_cache_at_once_all_keep_their_entries(tmp_path: Path):
    """The report's figure workers write their first entries into a new cache together: each may
    find the folder being tagged by another, and none is refused for it."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    for attempt in range(5):
        root = tmp_path / f"cache{attempt}"
        barrier = ctx.Barrier(6)
        procs = [ctx.Process(target=_write_after, args=(barrier, str(root), i)) for i in range(6)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
        assert sorted(p.name for p in (root / "figures").iterdir()) == [f"{i:040x}.png" for i in range(6)]
        assert not SharedCache(root).is_foreign()


def test_in_a_tagged_cache_only_entries_are_pruned_or_cleared(tmp_path: Path):
    root = tmp_path / "cache"
    shared = SharedCache(root, max_bytes=0)
    shared.write("figures", FIG, b"png")
    shared.write("analyses", "ranking-" + "1" * 40 + ".pkl", b"entry")
    foreign = {root / "notes.txt": b"mine", root / "figures" / "notes.txt": b"mine",
               root / "figures" / "holiday.png": b"mine", root / "figures" / ("F" * 40 + ".png"): b"mine",
               root / "analyses" / "my.pkl": b"mine", root / "other" / FIG: b"mine",
               tmp_path / "outside.png": b"mine"}
    for path, data in foreign.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "figures" / ("e" * 40 + ".png")).symlink_to(tmp_path / "outside.png")    # named like an entry
    assert sorted(p.name for _, _, p in shared.entries()) == sorted([FIG, "ranking-" + "1" * 40 + ".pkl"])
    assert shared.prune() == 2 and _unchanged(foreign)
    shared.write("figures", FIG, b"png")
    assert shared.clear() == 1 and _unchanged(foreign) and (root / CACHEDIR_TAG).exists()
    with pytest.raises(ValueError, match="not a shared report cache entry name"):
        shared.path("figures", "../notes.txt")


def test_a_report_cache_prunes_only_its_own_entries(tmp_path: Path):
    root = tmp_path / CACHE_DIR
    cache = ReportCache(root)
    cache.get("a", (1,), lambda: "one")
    cache.get("b", (2,), lambda: "two")
    mine = {root / "notes.txt": b"x", root / "b.pkl": b"x", root / "b-1234.pkl": b"x", root / "figures" / "r.json": b"{}"}
    for path, data in mine.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    later = ReportCache(root)
    later.get("a", (1,), lambda: "recomputed")
    assert later.prune() == 1 and _unchanged(mine)
    assert [p.name.split("-")[0] for p in root.glob("*-*.pkl") if p not in mine] == ["a"]


# ---------------------------------------------------------------------------- workers die with the report
_REPORT_WITH_BUSY_WORKERS = """
import sys, time
sys.path.insert(0, {fixtures!r})
from report_testbed import tiny_testbed
from shiftbench.report import html

def _analyse(ctx, testbeds, shifts):
    ctx.figures.compute(time.sleep, 600)                  # the analysis process
    pool = ctx.figures._worker()                          # the figure workers
    for _ in range(ctx.figures.workers):
        pool.submit(time.sleep, 600)
    print("ready", flush=True)
    time.sleep(600)

html._analyse = _analyse
html.write_html_report([tiny_testbed()], sys.argv[1], n_resamples=20)
"""


def _children(pid: int) -> set[int]:
    """The live child processes of ``pid`` (from /proc)."""
    found = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found |= {int(c) for c in (task / "children").read_text().split()}
        except OSError:
            pass
    return {c for c in found if _alive(c)}


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not reaped by its new parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked on Linux only")
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_killing_the_report_ends_its_workers(tmp_path: Path, signum: signal.Signals):
    script = tmp_path / "report.py"
    script.write_text(_REPORT_WITH_BUSY_WORKERS.format(fixtures=str(FIXTURES)))
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "out")], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        while len(workers := _children(proc.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(workers) == 3, "two figure workers and the analysis process"
        proc.send_signal(signum)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 5
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], "a worker outlived the report"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for w in _children(proc.pid):
            os.kill(w, signal.SIGKILL)


def _exit_code_of_worker_whose_parent_is(parent: int) -> int:
    import multiprocessing as mp

    from shiftbench.report.figures import die_with_parent

    child = mp.get_context("fork").Process(target=die_with_parent, args=(parent,))
    child.start()
    child.join()
    return child.exitcode


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked on Linux only")
def test_a_worker_whose_parent_is_already_gone_exits():
    assert _exit_code_of_worker_whose_parent_is(os.getpid()) == 0
    assert _exit_code_of_worker_whose_parent_is(2**22 + 1) == 1      # no such parent: it died before prctl


def test_a_cache_made_before_caches_were_tagged_is_adopted_and_its_old_entries_recomputed(tmp_path):
    """An untagged folder holding nothing but real ``analyses/`` and ``figures/`` folders is an old
    shiftbench cache: it is tagged and used; its unsigned analyses are never unpickled."""
    from shiftbench.report.cache import CACHEDIR_TAG, ReportCache, SharedCache

    root = tmp_path / "old-cache"
    (root / "analyses").mkdir(parents=True)
    (root / "figures").mkdir()
    shared = SharedCache(root)
    assert not shared.is_foreign()
    cache = ReportCache(tmp_path / "report" / ".shiftbench-cache", shared=shared)
    key = ReportCache.key("answer", [1])
    assert cache.get("answer", [1], lambda: 42, key=key) == 42
    assert (root / CACHEDIR_TAG).is_file() and shared.entries()
    # a folder holding anything else is not adopted
    (tmp_path / "other" / "analyses").mkdir(parents=True)
    (tmp_path / "other" / "notes.txt").write_text("mine")
    assert SharedCache(tmp_path / "other").is_foreign()
