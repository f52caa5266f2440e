"""The Ray executor where a lab would use it: a real two-node Ray cluster on this machine.

Two 1-CPU nodes (Ray's own ``ray.cluster_utils.Cluster``, bound to 127.0.0.1) evaluate two
models × four folder datasets (four tasks, one per dataset, each streaming its dataset once for
both models) into one store; the second node is killed mid-run (its raylet and workers, no
graceful drain). Ray's task retries re-run what it lost, and the store must end exactly as an
uninterrupted local run leaves it: the same keys, the same rows, no duplicates; and the run
records show tasks on both nodes. The same request cut into three interleaved shards of each
dataset's chunks (twelve tasks) leaves the same store again.

Then a cluster whose nodes share nothing but a bucket: the images and the store in an
S3-compatible server (moto's server mode, started by the test on this machine), two nodes that
each have their own working directory, home, temporary and cache folders, and their own
environment holding the endpoint and credentials; each task opens the bucket's images and store
itself. The second node is removed mid-run, and the bucket store must equal an uninterrupted run
row for row, with nothing written anywhere but the bucket. A store the workers cannot see
(``memory://``, which lives in one process as a local folder lives on one machine) stops the run
at the first task with one line.

The two tests are in one file so that their clusters never start at the same time. A node with
a home of its own gets Ray's authentication token in its environment when token authentication
is on (a local ``ray.init()`` earlier in the same process turns it on), as a real cluster's
nodes do: without it its raylet aborts and the node never registers.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from shiftbench.engine import EvalRequest, LocalExecutor
from shiftbench.errors import ConfigError
from shiftbench.store import Store

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
from oracle_models import folder_dataset  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from s3server import CREDENTIALS, bucket, endpoint  # noqa: E402,F401 - fixtures: moto's S3 server, a new bucket

MODELS = ["python:oracle_models:slow_oracle7", "python:oracle_models:slow_oracle7_twin"]


def request(tmp_path: Path, store: Path) -> EvalRequest:
    settings = [f"folder:{folder_dataset(tmp_path / f'data{k}', 40, k)}" for k in range(4)]
    return settings_request(settings, store)


def settings_request(settings: list[str], store: str | Path) -> EvalRequest:
    return EvalRequest.build(MODELS, settings, store=store, batch_size=4, chunk_size=8, workers=0, device="cpu")


def partial_keys(store: Path) -> set[str]:
    """Keys with parts written but no result yet: the keys of tasks in flight."""
    done = {p.stem for p in store.glob("done/*.json")}
    return {d.name.removeprefix("key=") for d in store.glob("predictions/key=*")
            if any(d.glob("part-*.parquet"))} - done


def node_runs(store: Path) -> pd.DataFrame:
    return Store(store).runs() if list(store.glob("runs/*.json")) else pd.DataFrame(columns=["ray_node_id"])


def stored(store: str | Path) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    s = Store.existing(store)
    results = s.results().drop(columns=["finished"]).sort_values("key").reset_index(drop=True)
    return results, {k: s.read_predictions(k) for k in results["key"]}


def start_cluster(head_env: dict[str, str], second_env: dict[str, str], head_dir: Path | None = None,
                  second_dir: Path | None = None):
    """A two-node 1-CPU Ray cluster on 127.0.0.1, each node's raylet (so its workers) started in
    its own working directory with its own environment overrides; ``(cluster, second node)``."""
    from ray.cluster_utils import Cluster

    here = os.getcwd()
    cluster = Cluster(initialize_head=False)
    try:
        if head_dir:
            os.chdir(head_dir)
        cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1", include_dashboard=False, env_vars=head_env or None)
        if second_dir:
            os.chdir(second_dir)
        second = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1", env_vars=second_env or None)
    except BaseException:
        cluster.shutdown()
        raise
    finally:
        os.chdir(here)
    return cluster, second


def node_workers() -> dict[str, tuple[str, str]]:
    """``{node id: (working directory, temporary folder)}`` of a worker on each node: two tasks
    that each hold their node's one CPU for a second, so one runs on each node. It also starts a
    Python worker on both nodes before the evaluation, so neither node's tasks wait for one."""
    import ray

    @ray.remote(num_cpus=1)
    def where() -> tuple[str, str, str]:
        import tempfile
        time.sleep(1.0)                                      # hold the slot: the other task goes to the other node
        return ray.get_runtime_context().get_node_id(), os.getcwd(), tempfile.gettempdir()

    return {node: (cwd, tmp) for node, cwd, tmp in ray.get([where.remote() for _ in range(2)])}


def node_dirs(base: Path, name: str) -> tuple[Path, dict[str, str]]:
    """A node's own working directory, and the environment its raylet (so its workers) gets:
    its own home, temporary and cache folders, and the bucket's endpoint and credentials."""
    home = base / name
    for sub in ("work", "home", "tmp", "cache"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    env = {"HOME": str(home / "home"), "TMPDIR": str(home / "tmp"), "XDG_CACHE_HOME": str(home / "cache"),
           "TORCH_HOME": str(home / "cache" / "torch"), "HF_HOME": str(home / "cache" / "hf"),
           "AWS_ENDPOINT_URL": os.environ["AWS_ENDPOINT_URL"], **CREDENTIALS}
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
        # a local ray.init() earlier in this process turned Ray's token authentication on; a node
        # whose home is its own finds no ~/.ray/auth_token, so it gets the token as a cluster's
        # nodes do, in its environment (without it the raylet aborts and the node never registers)
        path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
        env["RAY_AUTH_TOKEN"] = os.environ.get("RAY_AUTH_TOKEN") or path.read_text().strip()
    return home / "work", env


def bucket_images(local: Path, uri: str, datasets: int = 4, n: int = 40) -> list[str]:
    """``datasets`` folder datasets written under ``local``, uploaded to ``uri``; their settings
    read them from the bucket (``folder:s3://...``)."""
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    for k in range(datasets):
        fs.put(str(folder_dataset(local / f"data{k}", n, k)), f"{uri.removeprefix('s3://')}/data{k}", recursive=True)
    return [f"folder:{uri}/data{k}" for k in range(datasets)]


def in_flight(uri: str) -> tuple[set[str], pd.DataFrame]:
    """Keys of the bucket store with parts but no result yet (tasks in flight), and its run records."""
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)
    root = uri.removeprefix("s3://")
    done = {Path(p).stem for p in fs.glob(f"{root}/done/*.json")}
    partial = {p.split("/key=")[1].split("/")[0] for p in fs.glob(f"{root}/predictions/key=*/part-*.parquet")}
    runs = Store(uri).runs() if fs.glob(f"{root}/runs/*.json") else pd.DataFrame(columns=["ray_node_id"])
    return partial - done, runs


def assert_same_store(store: str | Path, local: Path, n_keys: int, n: int) -> None:
    """``store`` holds exactly the local run's keys, results and per-example rows, no duplicates."""
    results, preds = stored(store)
    local_results, local_preds = stored(local)
    pd.testing.assert_frame_equal(results, local_results)
    assert preds.keys() == local_preds.keys() and len(preds) == n_keys
    for key, rows in preds.items():
        assert rows["index"].is_unique and len(rows) == n
        pd.testing.assert_frame_equal(rows, local_preds[key])
    total, distinct = Store(store).connect().execute(
        "SELECT count(*), count(DISTINCT (key, index)) FROM predictions").fetchone()
    assert total == distinct == n_keys * n


@pytest.mark.slow
def test_two_node_ray_cluster_survives_a_killed_node_and_matches_a_local_run(tmp_path, monkeypatch):
    import ray

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
    cluster, second = start_cluster({}, {})
    try:
        nodes = {cluster.head_node.node_id, second.node_id}
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        assert node_workers().keys() == nodes                # a worker up on each node before the run
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


@pytest.mark.slow
def test_two_nodes_sharing_only_a_bucket_survive_a_removed_node_and_match_a_local_run(
        bucket, tmp_path, monkeypatch):
    import ray

    from shiftbench.engine.ray_executor import RayExecutor

    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setenv("ORACLE_DELAY", "0")
    settings = bucket_images(tmp_path / "images", f"s3://{bucket}/images")   # nothing local: the bucket's
    local = LocalExecutor().run(settings_request(settings, tmp_path / "local"), progress=False)
    assert len(local) == 8 and set(local["n_examples"]) == {40}

    # the raylets (and so every worker) inherit this environment: the fixture models and their delay
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("ORACLE_DELAY", "0.2")                # 10 batches: about 2 s per task
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")   # keep loopback (as above)
    monkeypatch.setattr(ray._private.ray_constants, "ENABLE_RAY_CLUSTER", False)
    head_dir, head_env = node_dirs(tmp_path / "nodes", "head")
    second_dir, second_env = node_dirs(tmp_path / "nodes", "second")
    driver_dir = tmp_path / "driver"
    driver_dir.mkdir()
    uri = f"s3://{bucket}/results"
    # each node starts in its own working directory (a raylet's workers start where it does)
    cluster, second = start_cluster(head_env, second_env, head_dir, second_dir)
    monkeypatch.chdir(driver_dir)
    try:
        nodes = {cluster.head_node.node_id, second.node_id}
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        assert node_workers() == {cluster.head_node.node_id: (str(head_dir), head_env["TMPDIR"]),
                        second.node_id: (str(second_dir), second_env["TMPDIR"])}

        ref = _run_in_background(RayExecutor(max_retries=3, shards=1), settings_request(settings, uri))
        deadline = time.time() + 120
        partial: set[str] = set()
        while time.time() < deadline and not ref.done():
            partial, runs = in_flight(uri)
            if (runs["ray_node_id"] == second.node_id).any() and len(partial) == 4:
                break                                        # both nodes mid-task, the second has finished one
            time.sleep(0.1)
        assert not ref.done() and len(partial) == 4, "the run ended before both nodes were mid-task"
        killed_at = time.time()
        cluster.remove_node(second, allow_graceful=False)
        frame = ref.result(timeout=180)

        # a store the workers cannot see: memory:// lives in one process, as a local folder on one machine
        mem = settings_request(settings[:1], "memory://sb-not-shared/results")
        with pytest.raises(ConfigError) as err:
            RayExecutor(shards=1).run(mem)
    finally:
        ray.shutdown()
        cluster.shutdown()

    message = str(err.value)
    assert "\n" not in message and message.startswith("--store memory://sb-not-shared/results: the Ray task on node")
    assert "does not see the store the driver wrote to" in message and "--store s3://bucket/prefix" in message

    # the bucket store is the uninterrupted local run's: same keys, results and rows, no duplicates
    assert_same_store(uri, tmp_path / "local", n_keys=8, n=40)
    pd.testing.assert_frame_equal(frame.drop(columns=["finished"]).reset_index(drop=True),
                                  local.drop(columns=["finished"]).reset_index(drop=True))
    runs = Store(uri).runs()
    assert set(runs["ray_node_id"]) == nodes                 # tasks ran on both nodes
    rerun = [k for k in partial if (runs.loc[runs["settings"].map(
        lambda s, k=k: Store(uri).key_meta(k)["setting"] in s), "started"] > killed_at).any()]
    assert rerun, "no task in flight at the removal was run again"
    # nothing was written anywhere but the bucket: not a node's or the driver's working folder
    assert not list(driver_dir.iterdir())
    for work in (head_dir, second_dir):
        assert not list(work.iterdir()), f"{work} was written to"
    assert not Store(uri).fs.glob("runs", "*.dispatch")      # the driver's mark is gone with the run


def _run_in_background(executor, req):
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1)
    fut = pool.submit(executor.run, req)
    pool.shutdown(wait=False)
    return fut
