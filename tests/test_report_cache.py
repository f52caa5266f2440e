"""What a report build keeps for the next one (shiftbench.report.cache): content hashes that are
equal for equal inputs in any process and differ when anything changes, figures pickled the same
way whatever the process did before, figures and analyses reused only while their inputs and
files are unchanged, and a second build of a report that draws and computes nothing again."""
from __future__ import annotations

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import pickle  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from report_testbed import calibration_store, tiny_testbed  # noqa: E402
from shiftbench.report import write_html_report  # noqa: E402
from shiftbench.report.cache import CACHE_DIR, ReportCache, content_hash, store_stamp  # noqa: E402
from shiftbench.report.figures import FigureWriter, plot_trend, stable_pickle  # noqa: E402
from shiftbench.store import Store  # noqa: E402


def _frame(v: float = 0.5) -> pd.DataFrame:
    return pd.DataFrame({"val": [71.0, 65.5], "v2": [60.0, v]}, index=pd.Index(["a", "b"], name="model"))


# ---------------------------------------------------------------------------- content_hash
def test_content_hash_is_equal_for_equal_inputs_and_changes_with_any_value():
    base = content_hash(_frame(), {"seed": 0, "n": 20}, [1, "x"], np.arange(3))
    assert base == content_hash(_frame(), {"n": 20, "seed": 0}, [1, "x"], np.arange(3))   # dict order is not content
    assert base != content_hash(_frame(0.51), {"seed": 0, "n": 20}, [1, "x"], np.arange(3))
    assert base != content_hash(_frame(), {"seed": 1, "n": 20}, [1, "x"], np.arange(3))
    assert base != content_hash(_frame().rename(columns={"v2": "v3"}), {"seed": 0, "n": 20}, [1, "x"], np.arange(3))
    assert base != content_hash(_frame(), {"seed": 0, "n": 20}, [1, "x"], np.arange(3, dtype=np.int32))
    assert content_hash("1") != content_hash(1) and content_hash([1, 2]) != content_hash((1, 2))


def test_content_hash_is_the_same_in_another_process_with_another_string_hash_seed():
    code = ("import pandas as pd; from shiftbench.report.cache import content_hash; "
            "print(content_hash(pd.DataFrame({'val': [71.0, 65.5], 'v2': [60.0, 0.5]}, "
            "index=pd.Index(['a', 'b'], name='model')), {'seed': 0, 'n': 20}, {'x', 'y', 'z'}))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip() for seed in ("1", "2")}
    assert outs == {content_hash(_frame(), {"seed": 0, "n": 20}, {"z", "y", "x"})}


def test_content_hash_refuses_what_it_cannot_hash_by_content():
    with pytest.raises(TypeError, match="object"):
        content_hash(object())


# ---------------------------------------------------------------------------- stable_pickle
def _trend_figure():
    tb = tiny_testbed()
    return plot_trend(tb, "val", tb.settings[1], title="t")


def test_a_figure_pickles_to_the_same_bytes_whatever_was_drawn_before():
    first, _ = stable_pickle(_trend_figure())
    plt.figure()                                     # another figure open: a different pyplot number
    _, ax = plt.subplots()
    ax.bar(["a", "b"], [1, 2])                       # sets interpolation steps on matplotlib's shared unit rectangle
    second, changed = stable_pickle(_trend_figure())
    plt.close("all")
    assert second == first
    assert changed          # the steps were set by the bar chart: the figure is sent plainly to be drawn
    fig = _trend_figure()
    fig.axes[0].set_title("another title")
    assert stable_pickle(fig)[0] != first


def test_the_stable_pickle_draws_the_same_png_as_the_figure(tmp_path: Path):
    fig = _trend_figure()
    blob, _ = stable_pickle(fig)
    fig.savefig(tmp_path / "a.png")
    pickle.loads(blob).savefig(tmp_path / "b.png")  # noqa: S301 - our own bytes
    plt.close("all")
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()


# ---------------------------------------------------------------------------- FigureWriter
@pytest.mark.parametrize("workers", [0, 1])
def test_an_unchanged_figure_is_not_drawn_again_and_a_changed_one_is(tmp_path: Path, workers: int):
    cache, stem = tmp_path / CACHE_DIR, tmp_path / "fig" / "trend"
    w = FigureWriter(workers, cache=cache)
    paths = w.save(_trend_figure(), stem)
    w.wait()
    assert w.written == 3 and all(p.exists() for p in paths)
    before = {p: p.stat().st_mtime_ns for p in paths}
    w = FigureWriter(workers, cache=cache)
    assert w.save(_trend_figure(), stem) == paths
    w.wait()
    assert (w.written, w.skipped) == (0, 3)
    assert {p: p.stat().st_mtime_ns for p in paths} == before
    paths[0].write_bytes(b"edited by hand")         # a file changed on disk is drawn again, the others not
    fig = _trend_figure()
    w = FigureWriter(workers, cache=cache)
    w.save(fig, stem)
    w.wait()
    assert (w.written, w.skipped) == (1, 2) and paths[0].read_bytes()[:4] == b"\x89PNG"
    fig = _trend_figure()
    fig.axes[0].set_title("changed")
    w = FigureWriter(workers, cache=cache)
    w.save(fig, stem)
    w.wait()
    assert w.written == 3


def test_two_writers_of_one_png_share_its_record(tmp_path: Path):
    """The Markdown summary writes stem.png, the HTML report stem.png/.svg/.pdf of the same
    figure: neither redraws the other's file."""
    cache, stem = tmp_path / CACHE_DIR, tmp_path / "trend"
    w = FigureWriter(0, cache=cache)
    w.save(_trend_figure(), stem, [".png"])
    w.save(_trend_figure(), stem, [".png", ".svg", ".pdf"])
    assert (w.written, w.skipped) == (3, 1)


# ---------------------------------------------------------------------------- ReportCache
def test_an_analysis_is_computed_once_while_its_inputs_and_code_are_unchanged(tmp_path: Path):
    calls = []

    def compute():
        calls.append(1)
        return _frame().assign(score=len(calls))

    first = ReportCache(tmp_path).get("ranking", (_frame(), 20), compute, code=(content_hash,))
    again = ReportCache(tmp_path).get("ranking", (_frame(), 20), compute, code=(content_hash,))
    pd.testing.assert_frame_equal(first, again)
    assert len(calls) == 1
    ReportCache(tmp_path).get("ranking", (_frame(), 21), compute)
    ReportCache(tmp_path).get("ranking", (_frame(0.7), 20), compute)
    assert len(calls) == 3
    assert ReportCache(None).get("ranking", (_frame(), 20), compute) is not None and len(calls) == 4


def test_a_damaged_entry_is_recomputed_and_unused_entries_are_pruned(tmp_path: Path):
    cache = ReportCache(tmp_path)
    cache.get("a", (1,), lambda: "one")
    cache.get("b", (2,), lambda: "two")
    entry = next(tmp_path.glob("a-*.pkl"))
    entry.write_bytes(b"not a pickle")
    later = ReportCache(tmp_path)
    assert later.get("a", (1,), lambda: "recomputed") == "recomputed"
    assert later.prune() == 1                       # "b" was not used by this build
    assert [p.name.split("-")[0] for p in tmp_path.glob("*.pkl")] == ["a"]


def test_a_store_stamp_changes_when_a_key_is_evaluated_again(tmp_path: Path):
    store = Store(calibration_store(tmp_path / "store"))
    stamp = store_stamp(store)
    key = store.results()["key"].iloc[0]
    summary = store._read_json(store.root / "done" / f"{key}.json")
    store.finish(key, {k: v for k, v in summary.items() if k not in ("key", "finished")})
    assert not store_stamp(store).equals(stamp)


# ---------------------------------------------------------------------------- a rebuilt report
def test_a_rebuilt_report_draws_nothing_again_and_is_the_same_page(tmp_path: Path):
    store = calibration_store(tmp_path / "store")
    out = tmp_path / "report"
    index = write_html_report([tiny_testbed()], out, store=store, n_resamples=50)
    figures = sorted(p for p in out.rglob("*") if p.suffix in (".png", ".svg", ".pdf"))
    assert figures and (out / CACHE_DIR / "figures").is_dir()
    stamps = {p: p.stat().st_mtime_ns for p in figures}
    first = index.read_text()
    write_html_report([tiny_testbed()], out, store=store, n_resamples=50)
    assert {p: p.stat().st_mtime_ns for p in figures} == stamps

    def body(doc: str) -> str:
        return doc.split("Generated", 1)[1].split("</p>", 1)[1]

    assert body(index.read_text()) == body(first)


def test_without_the_cache_nothing_is_kept(tmp_path: Path):
    write_html_report([tiny_testbed()], tmp_path / "report", n_resamples=50, figure_formats=(".png",), cache=False)
    assert not (tmp_path / "report" / CACHE_DIR).exists()


def test_a_figure_keyed_by_its_inputs_is_not_even_built_while_they_are_unchanged(tmp_path: Path):
    from shiftbench.report.figures import plot_trend_inputs

    tb, builds = tiny_testbed(), []
    y = tb.settings[1]

    def build(title: str = "t"):
        builds.append(title)
        return plot_trend(tb, "val", y, title=title)

    w = FigureWriter(0, cache=tmp_path / CACHE_DIR)
    paths = w.save_lazily(build, tmp_path / "trend", inputs=plot_trend_inputs(tb, "val", y, title="t"))
    assert all(p.exists() for p in paths) and builds == ["t"]
    w.save_lazily(build, tmp_path / "trend", inputs=plot_trend_inputs(tb, "val", y, title="t"))
    assert builds == ["t"] and w.skipped == 3
    w.save_lazily(lambda: build("u"), tmp_path / "trend", inputs=plot_trend_inputs(tb, "val", y, title="u"))
    assert builds == ["t", "u"] and w.written == 6


def _trend_built_in(pid_file: str, tb, y: str, title: str):
    """A module-level builder (picklable in a functools.partial) that says which process ran it."""
    Path(pid_file).write_text(str(os.getpid()))
    return plot_trend(tb, "val", y, title=title)


def test_a_partial_builder_is_built_and_saved_in_the_worker(tmp_path: Path):
    """plot_trend under functools.partial is pickled and built in the background process (the
    report's main process goes on with the next section); its files are keyed like any other."""
    import functools

    from shiftbench.report.figures import plot_trend_inputs

    tb, pid = tiny_testbed(), tmp_path / "pid"
    y = tb.settings[1]
    build = functools.partial(_trend_built_in, str(pid), tb, y, "t")
    w = FigureWriter(1, cache=tmp_path / CACHE_DIR)
    paths = w.save_lazily(build, tmp_path / "trend", inputs=plot_trend_inputs(tb, "val", y, title="t"))
    w.wait()
    assert all(p.exists() and p.stat().st_size > 0 for p in paths) and w.written == 3
    assert int(pid.read_text()) != os.getpid(), "built in the worker process"
    pid.unlink()
    w = FigureWriter(1, cache=tmp_path / CACHE_DIR)
    w.save_lazily(build, tmp_path / "trend", inputs=plot_trend_inputs(tb, "val", y, title="t"))
    w.wait()
    assert (w.written, w.skipped) == (0, 3) and not pid.exists(), "current files: not built at all"


def test_the_html_report_does_not_redraw_the_summarys_trend_pngs(tmp_path: Path):
    from shiftbench.report import write_report

    out = tmp_path / "report"
    write_report([tiny_testbed()], out, n_resamples=50)
    pngs = sorted((out / "tiny").glob("*.png"))
    assert pngs
    stamps = {p: p.stat().st_mtime_ns for p in pngs}
    write_html_report([tiny_testbed()], out, n_resamples=50)
    assert {p: p.stat().st_mtime_ns for p in pngs} == stamps
    assert all(p.with_suffix(".pdf").exists() for p in pngs)


# ---------------------------------------------------------------------------- prefetched analyses
def _in_worker(x: int) -> tuple[int, int]:
    return x * 2, os.getpid()


def _refuses(x: int) -> int:
    from shiftbench.errors import DataError

    raise DataError(f"only {x} models")


def _context(tmp_path: Path, workers: int = 1):
    from shiftbench.report.sections import ReportContext

    root = tmp_path / CACHE_DIR
    return ReportContext(out_dir=tmp_path, testbeds=[], figures=FigureWriter(workers, cache=root),
                         cache=ReportCache(root))


def test_a_prefetched_analysis_runs_in_a_worker_and_memo_takes_its_result(tmp_path: Path):
    ctx = _context(tmp_path)
    ctx.prefetch("double", (_frame(), 21), _in_worker, 21)
    ctx.prefetch("double", (_frame(), 21), _in_worker, 21)        # asked twice: started once
    assert len(ctx._started) == 1
    here = []
    value, pid = ctx.memo("double", (_frame(), 21), lambda: here.append(1) or _in_worker(21))
    ctx.figures.wait()
    assert value == 42 and pid != os.getpid() and not here, "the worker's result, not computed again"
    # kept for the next build: a new context finds it in the cache and starts nothing
    again = _context(tmp_path)
    again.prefetch("double", (_frame(), 21), _in_worker, 21)
    assert not again._started
    assert again.memo("double", (_frame(), 21), lambda: pytest.fail("recomputed")) == (42, pid)
    # other inputs: computed afresh (a prefetch under other inputs is not taken)
    again.prefetch("double", (_frame(0.7), 21), _in_worker, 5)
    assert again.memo("double", (_frame(0.9), 21), lambda: (0, 0)) == (0, 0)
    again.figures.wait()


def test_a_prefetched_analysis_raises_its_own_errors_and_a_failed_worker_computes_here(tmp_path: Path):
    from shiftbench.errors import DataError

    ctx = _context(tmp_path)
    ctx.prefetch("refused", (3,), _refuses, 3)
    with pytest.raises(DataError, match="only 3 models"):
        ctx.memo("refused", (3,), lambda: pytest.fail("a refusal is not retried"))
    # an argument that cannot be pickled fails in the pool, not in the analysis: computed here
    ctx.prefetch("lambda", (4,), _in_worker, lambda: 4)
    assert ctx.memo("lambda", (4,), lambda: (8, os.getpid())) == (8, os.getpid())
    ctx.figures.wait()
    # without workers nothing is started and memo computes
    inline = _context(tmp_path / "inline", workers=0)
    inline.prefetch("double", (1,), _in_worker, 1)
    assert not inline._started and inline.memo("double", (1,), lambda: (2, os.getpid())) == (2, os.getpid())


def test_analyses_run_at_the_pages_priority_and_figures_below_it():
    from shiftbench.report.figures import WORKER_NICENESS

    w = FigureWriter(1)
    here = os.nice(0)
    assert w.compute(os.nice, 0).result() == here, "the page waits for an analysis: same priority"
    assert w._worker().submit(os.nice, 0).result() == min(here + WORKER_NICENESS, 19), "figures fill what is left"
    w.wait()
    assert FigureWriter(0).compute(os.nice, 0) is None, "no workers: the caller computes"


# ---------------------------------------------------------------------------- the shared cache
def test_the_shared_cache_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    from shiftbench.report.cache import SharedCache, shared_cache_dir

    monkeypatch.setenv("SHIFTBENCH_CACHE_DIR", str(tmp_path / "mine"))
    assert shared_cache_dir() == tmp_path / "mine" and SharedCache.default().root == tmp_path / "mine"
    for off in ("off", "", "none"):
        monkeypatch.setenv("SHIFTBENCH_CACHE_DIR", off)
        assert shared_cache_dir() is None and SharedCache.default() is None
    monkeypatch.delenv("SHIFTBENCH_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert shared_cache_dir() == tmp_path / "xdg" / "shiftbench" / "report"


@pytest.mark.parametrize("workers", [0, 1])
def test_a_figure_drawn_for_one_report_is_copied_into_another_not_drawn(tmp_path: Path, workers: int):
    from shiftbench.report.cache import SharedCache

    shared = SharedCache(tmp_path / "shared")
    first = FigureWriter(workers, cache=tmp_path / "a" / CACHE_DIR, shared=shared)
    paths = first.save(_trend_figure(), tmp_path / "a" / "trend", [".png", ".pdf"])
    first.wait()
    assert (first.written, first.reused) == (2, 0)
    other = FigureWriter(workers, cache=tmp_path / "b" / CACHE_DIR, shared=shared)
    copies = other.save(_trend_figure(), tmp_path / "b" / "trend", [".png", ".pdf", ".svg"])
    other.wait()
    assert (other.written, other.skipped, other.reused) == (1, 2, 2)      # only the SVG is new
    assert [p.read_bytes() for p in copies[:2]] == [p.read_bytes() for p in paths]
    again = FigureWriter(workers, cache=tmp_path / "b" / CACHE_DIR, shared=shared)
    again.save(_trend_figure(), tmp_path / "b" / "trend", [".png", ".pdf", ".svg"])
    again.wait()
    assert (again.written, again.reused) == (0, 0)                        # current in its own folder
    fig = _trend_figure()
    fig.axes[0].set_title("changed")
    changed = FigureWriter(workers, cache=tmp_path / "c" / CACHE_DIR, shared=shared)
    changed.save(fig, tmp_path / "c" / "trend", [".png"])
    changed.wait()
    assert (changed.written, changed.reused) == (1, 0)


def test_an_analysis_computed_for_one_report_is_reused_by_another(tmp_path: Path):
    from shiftbench.report.cache import SharedCache

    shared, calls = SharedCache(tmp_path / "shared"), []

    def compute():
        calls.append(1)
        return _frame().assign(score=len(calls))

    first = ReportCache(tmp_path / "a", shared).get("ranking", (_frame(), 20), compute)
    other = ReportCache(tmp_path / "b", shared)
    assert other.holds("ranking", other.key("ranking", (_frame(), 20)))
    pd.testing.assert_frame_equal(other.get("ranking", (_frame(), 20), compute), first)
    assert len(calls) == 1 and len(list((tmp_path / "b").glob("ranking-*.pkl"))) == 1   # kept in b's own too
    next((tmp_path / "shared" / "analyses").glob("*.pkl")).write_bytes(b"damaged")
    assert ReportCache(tmp_path / "c", shared).get("ranking", (_frame(), 20), compute)["score"].iloc[0] == 2
    assert ReportCache(None, shared).get("ranking", (_frame(), 20), compute)["score"].iloc[0] == 3   # no cache: none


def test_the_shared_cache_drops_its_least_recently_used_entries_past_its_bound(tmp_path: Path):
    from shiftbench.report.cache import SharedCache

    shared = SharedCache(tmp_path, max_bytes=250)
    old, mid, new = (f"{c * 40}.png" for c in "abc")                   # entries are named by their hash
    for i, name in enumerate((old, mid, new)):
        shared.write("figures", name, bytes(100))
        os.utime(shared.path("figures", name), ns=(10**18 + i * 10**9,) * 2)
    assert shared.read("figures", old) == bytes(100)                    # a read is a use
    assert shared.prune() == 1
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == [old, new]


def test_a_report_built_into_a_new_folder_copies_what_the_last_one_drew(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch):
    from shiftbench.report import figures as fig_module

    store = calibration_store(tmp_path / "store")
    write_html_report([tiny_testbed()], tmp_path / "first", store=store, n_resamples=50)
    writers = []
    real = fig_module.FigureWriter.wait

    def wait(self):
        writers.append(self)
        return real(self)

    monkeypatch.setattr(fig_module.FigureWriter, "wait", wait)
    out = tmp_path / "second"
    write_html_report([tiny_testbed()], out, store=store, n_resamples=50)
    w = writers[-1]
    assert w.written == 0 and w.reused == w.skipped > 0
    first = sorted(p.relative_to(tmp_path / "first") for p in (tmp_path / "first").rglob("*.png"))
    assert first == sorted(p.relative_to(out) for p in out.rglob("*.png"))
    monkeypatch.setenv("SHIFTBENCH_CACHE_DIR", "off")
    write_html_report([tiny_testbed()], tmp_path / "third", store=store, n_resamples=50)
    assert writers[-1].reused == 0 and writers[-1].written == w.skipped


def test_the_shared_cache_folder_is_its_owners_alone(tmp_path: Path):
    from shiftbench.report.cache import SharedCache

    shared = SharedCache(tmp_path / "cache" / "report")
    x, y = (f"x-{c * 40}.pkl" for c in "01")
    shared.write("analyses", x, b"1")
    assert (tmp_path / "cache" / "report").stat().st_mode & 0o077 == 0
    assert shared.read("analyses", x) == b"1" and shared.read("analyses", y) is None


def test_a_testbed_hashes_by_what_it_holds():
    tb = tiny_testbed()
    assert content_hash(tb) == content_hash(tiny_testbed())
    changed = tiny_testbed()
    changed.accuracies.iloc[0, 0] += 0.01
    assert content_hash(changed) != content_hash(tb)
    assert content_hash(tb.select(list(tb.models)[:-1])) != content_hash(tb)


def test_a_read_only_shared_cache_is_still_read_and_never_fails_a_build(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch):
    """A team's cache on a read-only mount: entries are read and copied, touching, removing and
    writing them fail quietly (the tests run as root, which ignores permission bits: the
    filesystem's refusals are simulated)."""
    from shiftbench.report.cache import SharedCache

    shared = SharedCache(tmp_path / "shared", max_bytes=0)
    a_png, missing = "a" * 40 + ".png", "b" * 40 + ".png"
    shared.write("figures", a_png, b"png")

    def refuse(*args, **kwargs):
        raise PermissionError(30, "Read-only file system")

    monkeypatch.setattr(os, "utime", refuse)
    monkeypatch.setattr(Path, "unlink", refuse)
    assert shared.read("figures", a_png) == b"png"
    assert shared.copy_out("figures", a_png, tmp_path / "out" / "a.png") and (tmp_path / "out" / "a.png").exists()
    assert not shared.copy_out("figures", missing, tmp_path / "out" / "b.png")
    assert shared.prune() == 0 and shared.clear() == 0 and shared.has("figures", a_png)


def _bars(values: list[float]):
    fig, ax = plt.subplots()
    ax.bar(range(len(values)), values)
    return fig


def _lines(values: list[float]):
    fig, ax = plt.subplots()
    ax.plot(values)
    return fig


def test_two_functions_of_one_module_hash_apart_and_never_share_a_figure(tmp_path: Path):
    """The key of a figure holds its drawing function's name, not only its module's source: two
    figures drawn from the same arguments by two functions of one module are different files."""
    import functools

    from shiftbench.report.cache import SharedCache

    assert content_hash(_bars) != content_hash(_lines)
    shared = SharedCache(tmp_path / "shared")
    w = FigureWriter(0, cache=tmp_path / "a" / CACHE_DIR, shared=shared)
    bars = w.save_lazily(functools.partial(_bars, [1, 2]), tmp_path / "a" / "bars", [".png"], inputs=([1, 2],))
    lines = w.save_lazily(functools.partial(_lines, [1, 2]), tmp_path / "a" / "lines", [".png"], inputs=([1, 2],))
    w.wait()
    assert (w.written, w.reused) == (2, 0)
    assert bars[0].read_bytes() != lines[0].read_bytes()
