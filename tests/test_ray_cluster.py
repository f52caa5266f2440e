"""The Ray executor where a lab would use it: a real two-node Ray cluster on this machine.

Two 1-CPU nodes (Ray's own ``ray.cluster_utils.Cluster``, bound to 127.0.0.1) evaluate two
models × four folder datasets (four tasks, one per dataset, each streaming its dataset once for
both models) into one store; the second node is killed mid-run (its raylet and workers, no
graceful drain). Ray's task retries re-run what it lost, and the store must end exactly as an
uninterrupted local run leaves it: the same keys, the same rows, no duplicates; and the run
records show tasks on both nodes. The same request cut into three interleaved shards of each
dataset's chunks (twelve tasks) leaves the same store again.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from shiftbench.engine import EvalRequest, LocalExecutor
from shiftbench.store import Store

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
from oracle_models import colour_of  # noqa: E402

MODELS = ["python:oracle_models:slow_oracle7", "python:oracle_models:slow_oracle7_twin"]


def folder_dataset(root: Path, n: int, shade: int) -> Path:
    """``n`` 16 px images in ``class0``..``class6`` folders, a third of them drawn in the wrong class."""
    for i in range(n):
        cls = i % 7
        d = root / f"class{cls}"
        d.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (16, 16), colour_of(cls if (i + shade) % 3 else (cls + 1) % 7)).save(d / f"{i:04d}.png")
    return root


def request(tmp_path: Path, store: Path) -> EvalRequest:
    settings = [f"folder:{folder_dataset(tmp_path / f'data{k}', 40, k)}" for k in range(4)]
    return EvalRequest.build(MODELS, settings, store=store, batch_size=4, chunk_size=8, workers=0, device="cpu")


def partial_keys(store: Path) -> set[str]:
    """Keys with parts written but no result yet: the keys of tasks in flight."""
    done = {p.stem for p in store.glob("done/*.json")}
    return {d.name.removeprefix("key=") for d in store.glob("predictions/key=*")
            if any(d.glob("part-*.parquet"))} - done


def node_runs(store: Path) -> pd.DataFrame:
    return Store(store).runs() if list(store.glob("runs/*.json")) else pd.DataFrame(columns=["ray_node_id"])


def stored(store: Path) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    s = Store(store)
    results = s.results().drop(columns=["finished"]).sort_values("key").reset_index(drop=True)
    return results, {k: s.read_predictions(k) for k in results["key"]}


@pytest.mark.slow
def test_two_node_ray_cluster_survives_a_killed_node_and_matches_a_local_run(tmp_path, monkeypatch):
    import ray
    from ray.cluster_utils import Cluster

    from shiftbench.engine.ray_executor import RayExecutor

    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setenv("ORACLE_DELAY", "0")
    local = LocalExecutor().run(request(tmp_path, tmp_path / "local"), progress=False)
    assert len(local) == 8 and set(local["n_examples"]) == {40}

    # the raylets (and so every worker) inherit this environment: the fixture models and their delay
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("ORACLE_DELAY", "0.2")                # 10 batches: about 2 s per task
    # a driver given 127.0.0.1 swaps in the IP of the default route (ray._private.services.
    # resolve_ip_for_localhost), which on a box without a network is not reachable: keep loopback
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    monkeypatch.setattr(ray._private.ray_constants, "ENABLE_RAY_CLUSTER", False)
    store = tmp_path / "ray"
    req = request(tmp_path, store)
    t0 = time.time()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False})
    try:
        second = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        nodes = {cluster.head_node.node_id, second.node_id}
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        startup = time.time() - t0
        ref = _run_in_background(RayExecutor(max_retries=3, shards=1), req)
        deadline = time.time() + 120
        in_flight: set[str] = set()
        while time.time() < deadline and not ref.done():
            on_second = (node_runs(store)["ray_node_id"] == second.node_id).any()
            in_flight = partial_keys(store)
            if on_second and len(in_flight) == 4:            # both nodes are mid-task (two keys each:
                break                                        # one per model), the second has finished one
            time.sleep(0.02)
        assert not ref.done() and len(in_flight) == 4, "the run ended before both nodes were mid-task"
        killed_at = time.time()
        cluster.remove_node(second, allow_graceful=False)
        frame = ref.result(timeout=180)
        elapsed = time.time() - t0
        # shards: each dataset's chunks cut three ways, every task streaming both models
        monkeypatch.setenv("ORACLE_DELAY", "0")
        sharded = RayExecutor(shards=3).run(request(tmp_path, tmp_path / "sharded"))
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(f"ray cluster start {startup:.1f} s, start to finish {elapsed:.1f} s")

    # the final store is the uninterrupted local run's: same keys, same results, same rows
    ray_results, ray_preds = stored(store)
    local_results, local_preds = stored(tmp_path / "local")
    pd.testing.assert_frame_equal(ray_results, local_results)
    assert ray_preds.keys() == local_preds.keys()
    for key, rows in ray_preds.items():
        assert rows["index"].is_unique and len(rows) == 40
        pd.testing.assert_frame_equal(rows, local_preds[key])
    con = Store(store).connect()
    n, distinct = con.execute("SELECT count(*), count(DISTINCT (key, index)) FROM predictions").fetchone()
    assert n == distinct == 8 * 40
    pd.testing.assert_frame_equal(frame.drop(columns=["finished"]).reset_index(drop=True),
                                  local.drop(columns=["finished"]).reset_index(drop=True))

    # tasks ran on both nodes; the task the second node lost was re-run after the kill
    runs = Store(store).runs()
    assert set(runs["ray_node_id"]) == nodes
    keys = {k: Store(store).key_meta(k) for k in in_flight}
    rerun = [k for k, meta in keys.items()
             if (runs.loc[(runs["model"] == meta["model"]) & runs["settings"].map(lambda s: meta["setting"] in s),
                          "started"] > killed_at).any()]
    assert rerun, "no task in flight at the kill was run again"
    assert {(m, s) for m, ss in zip(runs["model"], runs["settings"]) for s in ss} == \
        set(zip(local["model"], local["setting"]))
    assert set(runs["models_in_pass"]) == {2}

    sharded_results, sharded_preds = stored(tmp_path / "sharded")
    pd.testing.assert_frame_equal(sharded_results, local_results)
    for key, rows in sharded_preds.items():
        pd.testing.assert_frame_equal(rows, local_preds[key])
    pd.testing.assert_frame_equal(sharded.drop(columns=["finished"]).reset_index(drop=True),
                                  local.drop(columns=["finished"]).reset_index(drop=True))
    shard_runs = Store(tmp_path / "sharded").runs()
    assert sorted(map(tuple, shard_runs["shard"])) == sorted([(i, 3) for i in range(3)] * 4 * 2)


def _run_in_background(executor, req):
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1)
    fut = pool.submit(executor.run, req)
    pool.shutdown(wait=False)
    return fut
