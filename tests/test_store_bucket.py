"""The results store in a bucket: an S3-compatible server started by the test itself (moto's
server mode, on a free port of this machine), written by real evaluations of the fixture oracle
(tests/fixtures/oracle_models.py) and read by every reader, compared row for row with the same
store on a local disk; `store sync` both ways; kill -9 mid-write; and each way a bucket can be
wrong, a one-line error.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

from shiftbench.errors import ConfigError, StoreError  # noqa: E402
from shiftbench.store import NotAStoreError, Store  # noqa: E402
from shiftbench.store.sync import sync_store  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
sys.path.insert(0, str(Path(__file__).parent))
from clirun import run_main  # noqa: E402 - tests/ helper
from oracle_models import folder_dataset  # noqa: E402
from oracle_models import wrong_every_folder as folder  # noqa: E402
from report_testbed import V2, tiny_testbed  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHIFTBENCH = str(ROOT / ".venv" / "bin" / "shiftbench")
ORACLE7 = "python:oracle_models:oracle7"
SLOW_TWINS = ["python:oracle_models:slow_oracle7", "python:oracle_models:slow_oracle7_twin"]


# ---------------------------------------------------------------------------- the server
from s3server import CREDENTIALS, _fresh_clients, bucket, endpoint  # noqa: E402,F401 - fixtures: moto's S3 server, a new bucket


def evaluate(settings, store, **kw) -> pd.DataFrame:
    from shiftbench.engine import evaluate as ev

    kw.setdefault("progress", False)
    kw.setdefault("chunk_size", 4)
    return ev(kw.pop("model", ORACLE7), settings, store=store, workers=0, batch_size=4, **kw)


def rows(store) -> pd.DataFrame:
    """Every per-example row of every finished key of ``store``, in key and dataset order."""
    st = Store.existing(store)
    res = st.results()
    frames = [st.read_predictions(k).assign(setting=s) for k, s in zip(res["key"], res["setting"])]
    return pd.concat(frames, ignore_index=True).sort_values(["setting", "index"]).reset_index(drop=True)


def stable(frame: pd.DataFrame) -> pd.DataFrame:
    """A results table without the finishing times."""
    return frame.drop(columns=["finished"]).reset_index(drop=True)


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(FIXTURES), "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"}


# ---------------------------------------------------------------------------- the same store, in a bucket
def test_a_bucket_store_equals_the_local_one_row_for_row(bucket, tmp_path):
    a, b = folder(tmp_path / "a", 14, wrong_every=5), folder(tmp_path / "b", 7)
    settings = [f"folder:{a}", f"folder:{b}"]
    uri = f"s3://{bucket}/results"
    remote = evaluate(settings, uri, keep_logits=True)
    local = evaluate(settings, tmp_path / "local", keep_logits=True)
    pd.testing.assert_frame_equal(remote, local)
    pd.testing.assert_frame_equal(stable(Store.existing(uri).results()), stable(Store(tmp_path / "local").results()))
    pd.testing.assert_frame_equal(rows(uri), rows(tmp_path / "local"))
    # the Python testbed, and SQL through DuckDB reading the bucket's Parquet (no extension download)
    from shiftbench import Testbed

    tb_remote, tb_local = Testbed.from_store(uri), Testbed.from_store(tmp_path / "local")
    pd.testing.assert_frame_equal(tb_remote.accuracies, tb_local.accuracies)
    queries = ["SELECT key, count(*), sum(correct::INT) FROM predictions GROUP BY key ORDER BY key",
               "SELECT model, setting, accuracy, n_examples FROM results ORDER BY setting",
               "SELECT count(*), count(DISTINCT pass) FROM logits", "SELECT count(*) FROM keys",
               "SELECT count(*) FROM runs"]
    for con_remote, con_local in [(Store(uri).connect(), Store(tmp_path / "local").connect())]:
        for q in queries:
            assert con_remote.execute(q).fetchall() == con_local.execute(q).fetchall(), q
        assert con_remote.execute("SELECT count(*) FROM predictions").fetchone() == (21,)
    # a second run reuses every finished key: nothing is computed again
    before = Store(uri).fs.walk()
    again = evaluate(settings, uri, keep_logits=True)
    pd.testing.assert_frame_equal(again[["model", "setting", "accuracy"]], remote[["model", "setting", "accuracy"]])
    after = Store(uri).fs.walk()
    assert {k: v for k, v in after.items() if not k.startswith("runs/")} == \
           {k: v for k, v in before.items() if not k.startswith("runs/")}


def test_storage_options_give_the_endpoint_and_credentials(bucket, tmp_path, monkeypatch, endpoint):
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    _fresh_clients()
    options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
    res = evaluate([f"folder:{folder(tmp_path / 'a', 7)}"], f"s3://{bucket}/opts", storage_options=options)
    st = Store.existing(f"s3://{bucket}/opts", storage_options=options)
    assert st.results()["accuracy"].tolist() == res["accuracy"].tolist() == [100.0]
    with pytest.raises(ConfigError, match="storage_options are for a store URI"):
        Store(tmp_path / "local", storage_options=options)


def my_store(root: Path) -> Path:
    """A results store with six models of mine on ImageNet val and v2 (with calibration)."""
    store = Store(root)
    for i in range(6):
        for setting, acc in (("val", 60.0 + 3 * i), (V2, 48.0 + 3.2 * i)):
            store.finish(f"key{i}{setting[:3]}", {
                "model": f"mine-{i}", "setting": setting, "accuracy": acc, "top5": acc + 15, "n_examples": 1000,
                "n_skipped": 0, "convention": "full", "ece": 2.0 + i, "nll": 1.1 + i / 10, "brier": 0.3 + i / 100,
                "dataset": "x"})
    return root


def test_studies_and_the_report_read_a_bucket_store(bucket, tmp_path, monkeypatch, capsys):
    local = my_store(tmp_path / "local")
    frame = pd.DataFrame({"step": [0, 1], "accuracy": [50.0, 60.0]})
    Store(local).write_study("trajectory-test", "run1", frame, meta={"note": "x"})
    uri = f"s3://{bucket}/copy"
    sync_store(local, uri)
    st = Store.existing(uri)
    pd.testing.assert_frame_equal(st.read_study("trajectory-test", "run1"), frame)
    assert st.study_names("trajectory-test") == ["run1"] and st.study_meta("trajectory-test", "run1")["note"] == "x"
    # every command that reads --store, on the bucket as on the folder
    for args in (["results", "--json"], ["sql", "--json", "SELECT model, setting, ece FROM results ORDER BY 1, 2"],
                 ["fit", "-t", "imagenet-reference", "--x", "val", "--y", V2, "--json"],
                 ["place", "-t", "imagenet-reference", "--json"]):
        code_l, out_l, err_l = run_main(monkeypatch, capsys, *args, "--store", str(local))
        code_r, out_r, err_r = run_main(monkeypatch, capsys, *args, "--store", uri)
        assert code_l == code_r == 0, (args, err_l, err_r)
        assert out_r.replace(uri, "STORE") == out_l.replace(str(local), "STORE"), args
    csv = tiny_testbed().save(tmp_path / "tiny.csv")
    code, out, err = run_main(monkeypatch, capsys, "report", "-t", str(csv), "--store", uri, "-o",
                              str(tmp_path / "rep"), "--resamples", "50")
    assert code == 0, err
    doc = (tmp_path / "rep" / "index.html").read_text()
    assert 'id="calibration"' in doc and "Your models" in doc


# ---------------------------------------------------------------------------- sync
def test_sync_copies_a_store_out_of_the_bucket_and_back_resuming_and_verifying(bucket, tmp_path, monkeypatch,
                                                                                capsys):
    uri = f"s3://{bucket}/st"
    evaluate([f"folder:{folder(tmp_path / 'a', 14)}"], uri, keep_logits=True)
    code, out, err = run_main(monkeypatch, capsys, "store", "sync", uri, str(tmp_path / "out"), "--json")
    assert code == 0, err
    report = json.loads(out)
    files = Store(uri).fs.walk()
    assert report["files"] == report["copied"] == len(files) and report["skipped"] == 0
    assert Store(tmp_path / "out").fs.walk() == files
    pd.testing.assert_frame_equal(rows(tmp_path / "out"), rows(uri))
    # interrupted: some files missing, one truncated; the rerun copies just those and checks the rest
    parts = sorted(f for f in files if f.startswith("predictions/"))
    (tmp_path / "out" / parts[0]).unlink()
    (tmp_path / "out" / "done").rename(tmp_path / "gone")
    (tmp_path / "out" / parts[1]).write_bytes(b"half")
    code, out, err = run_main(monkeypatch, capsys, "store", "sync", uri, str(tmp_path / "out"), "--json")
    report = json.loads(out)
    assert code == 0 and report["copied"] == 3 and report["skipped"] == len(files) - 3
    assert Store(tmp_path / "out").fs.walk() == files
    # and back into another prefix: the same rows
    back = f"s3://{bucket}/back"
    assert sync_store(tmp_path / "out", back).copied == len(files)
    pd.testing.assert_frame_equal(rows(back), rows(uri))
    code, out, err = run_main(monkeypatch, capsys, "store", "sync", uri, str(tmp_path / "a"))
    assert code != 0 and err.strip().startswith("error: ") and "not a results store" in err
    assert len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------------------- two writers at once
def test_two_eval_processes_writing_the_same_keys_to_one_bucket_store_leave_no_duplicates(bucket, tmp_path):
    settings = [f"folder:{folder_dataset(tmp_path / f'data{k}', 28, k)}" for k in range(2)]
    uri = f"s3://{bucket}/shared"

    def cmd(store: str) -> list[str]:
        return [SHIFTBENCH, "eval", *[a for m in SLOW_TWINS for a in ("--model", m)],
                *[a for s in settings for a in ("--setting", s)], "--store", store,
                "--batch-size", "4", "--chunk-size", "4", "--workers", "0", "--device", "cpu"]

    local = subprocess.run(cmd(str(tmp_path / "local")), env={**env(), "ORACLE_DELAY": "0"},
                           capture_output=True, text=True, timeout=300)
    assert local.returncode == 0, local.stderr
    procs = [subprocess.Popen(cmd(uri), env={**env(), "ORACLE_DELAY": "0.05"}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]

    pd.testing.assert_frame_equal(stable(Store.existing(uri).results()), stable(Store(tmp_path / "local").results()))
    pd.testing.assert_frame_equal(rows(uri), rows(tmp_path / "local"))
    con = Store(uri).connect()
    assert con.execute("SELECT count(*), count(DISTINCT (key, index)) FROM predictions").fetchone() == (4 * 28,) * 2
    runs = Store(uri).runs()
    assert len(runs) == 2 * 2                                # each process recorded both models' passes
    runs["pid"] = runs["run_id"].str.split("-").str[1]     # run ids are <time>-<pid>-<digest>
    spans = runs.groupby("pid").agg(started=("started", "min"), finished=("finished", "max"))
    first, second = spans.sort_values("started").itertuples()
    assert second.started < first.finished, "the two processes did not overlap"


# ---------------------------------------------------------------------------- kill -9
@pytest.mark.slow
def test_kill_9_during_a_bucket_write_resumes_without_redoing_chunks_or_duplicating_rows(bucket, tmp_path):
    import s3fs

    data = folder(tmp_path / "imgs", 96)
    uri = f"s3://{bucket}/killed"

    def cmd(store: str) -> list[str]:
        return [SHIFTBENCH, "eval", "-m", "python:oracle_models:slow_oracle7", "-s", f"folder:{data}", "--store",
                store, "--workers", "0", "--batch-size", "4", "--chunk-size", "8", "--json"]

    clean = subprocess.run(cmd(str(tmp_path / "clean")), env={**env(), "ORACLE_DELAY": "0"}, capture_output=True,
                           text=True, timeout=300)
    assert clean.returncode == 0, clean.stderr
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    proc = subprocess.Popen(cmd(uri), env={**env(), "ORACLE_DELAY": "0.1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    parts: list[str] = []
    while time.time() < deadline and len(parts) < 3:
        time.sleep(0.05)
        fs.invalidate_cache()
        parts = fs.glob(f"{bucket}/killed/predictions/*/part-*.parquet")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    fs.invalidate_cache()
    before = {p: fs.info(p)["LastModified"] for p in fs.glob(f"{bucket}/killed/predictions/*/part-*.parquet")}
    assert 3 <= len(before) < 12, "killed too late to test a resume"
    assert not fs.glob(f"{bucket}/killed/done/*.json")
    time.sleep(1.1)                                      # a part written again would get a later time
    again = subprocess.run(cmd(uri), env={**env(), "ORACLE_DELAY": "0"}, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    fs.invalidate_cache()
    after = {p: fs.info(p)["LastModified"] for p in fs.glob(f"{bucket}/killed/predictions/*/part-*.parquet")}
    assert len(after) == 12 and all(after[p] == t for p, t in before.items())      # finished chunks kept
    preds = rows(uri)
    assert len(preds) == 96 and preds["index"].is_unique
    pd.testing.assert_frame_equal(preds, rows(tmp_path / "clean"))
    assert json.loads(again.stdout)[0]["accuracy"] == json.loads(clean.stdout)[0]["accuracy"]


# ---------------------------------------------------------------------------- a wrong bucket: one line each
def one_line(monkeypatch, capsys, *args: str) -> str:
    code, out, err = run_main(monkeypatch, capsys, *args)
    assert code != 0 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_unknown_scheme_missing_package_and_not_a_store_are_one_line(bucket, tmp_path, monkeypatch, capsys):
    err = one_line(monkeypatch, capsys, "results", "--store", "s4://bucket/x")
    assert "unknown URI scheme s4://" in err and "s3:// (pip install 'shiftbench[s3]', which adds s3fs)" in err
    if "gcsfs" not in sys.modules and not _installed("gcsfs"):
        err = one_line(monkeypatch, capsys, "results", "--store", "gs://bucket/x")
        assert err == "error: gs://bucket/x: a store at gs:// needs its filesystem package: pip install gcsfs"
    # something else in the bucket, nothing at all, a missing bucket, one object where the store should be
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.pipe_file(f"{bucket}/photos/cat.jpg", b"jpeg")
    fs.pipe_file(f"{bucket}/blob", b"x")
    for uri, says in ((f"s3://{bucket}/photos", "not a results store (none of done/"),
                      (f"s3://{bucket}/nothing", "no results store there (nothing under this prefix, or a missing "
                                                 "bucket)"),
                      (f"s3://{bucket}-missing/x", "no results store there"),
                      (f"s3://{bucket}/blob", "no results store there (an object, not a prefix)")):
        err = one_line(monkeypatch, capsys, "results", "--store", uri)
        assert err.startswith(f"error: {uri}: ") and says in err, err
        with pytest.raises(NotAStoreError):
            Store.existing(uri)


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_a_store_written_by_a_newer_version_is_refused_in_one_line(bucket, tmp_path, monkeypatch, capsys):
    uri = f"s3://{bucket}/newer"
    evaluate([f"folder:{folder(tmp_path / 'a', 7)}"], uri)
    Store(uri).fs.write_bytes("store.json", json.dumps({"format": 99, "written_by": "shiftbench 9.0"}).encode())
    err = one_line(monkeypatch, capsys, "results", "--store", uri)
    assert err == (f"error: {uri}: written by a newer shiftbench (store format 99, shiftbench 9.0); this shiftbench "
                   "reads format 1: upgrade it (pip install -U shiftbench)")
    with pytest.raises(StoreError, match="store format 99"):          # and nothing is written into it
        evaluate([f"folder:{folder(tmp_path / 'b', 7)}"], uri)
    assert len(Store(uri).results()) == 1


def test_a_missing_bucket_and_an_unreachable_endpoint_are_one_line(bucket, tmp_path, monkeypatch, capsys):
    data = folder(tmp_path / "a", 7)
    err = one_line(monkeypatch, capsys, "eval", "-m", ORACLE7, "-s", f"folder:{data}", "--workers", "0",
                   "--store", f"s3://{bucket}-missing/x")
    assert f"s3://{bucket}-missing/x: the bucket '{bucket}-missing' does not exist" in err and "create it" in err
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")         # nothing listens there
    _fresh_clients()
    try:
        err = one_line(monkeypatch, capsys, "results", "--store", f"s3://{bucket}/x")
    finally:
        monkeypatch.undo()
        _fresh_clients()
    assert err.startswith(f"error: s3://{bucket}/x: cannot reach the storage server") and "AWS_ENDPOINT_URL" in err


def test_wrong_credentials_and_a_read_only_bucket_are_one_line_and_lose_nothing(bucket, tmp_path, endpoint,
                                                                                 monkeypatch, capsys):
    import boto3
    from moto import settings as moto_settings

    uri = f"s3://{bucket}/st"
    evaluate([f"folder:{folder(tmp_path / 'a', 7)}"], uri)
    iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1")
    iam.create_user(UserName="reader")
    iam.put_user_policy(UserName="reader", PolicyName="read-only", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"],
                                                "Resource": "*"}]}))
    key = iam.create_access_key(UserName="reader")["AccessKey"]
    monkeypatch.setattr(moto_settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)   # the server checks every request
    try:
        for k, v in (("AWS_ACCESS_KEY_ID", key["AccessKeyId"]), ("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])):
            monkeypatch.setenv(k, v)
        _fresh_clients()
        code, out, err = run_main(monkeypatch, capsys, "results", "--store", uri, "--json")
        assert code == 0 and len(json.loads(out)) == 1, err                 # reading is allowed
        err = one_line(monkeypatch, capsys, "eval", "-m", ORACLE7, "-s", f"folder:{folder(tmp_path / 'b', 7)}",
                       "--workers", "0", "--store", uri)
        assert err.startswith(f"error: {uri}: access denied while trying to write ") and \
            "check the credentials" in err and "read-only bucket policy" in err
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG0")
        _fresh_clients()
        err = one_line(monkeypatch, capsys, "results", "--store", uri)
        assert err.startswith(f"error: {uri}: access denied while trying to read ") and "AWS_ACCESS_KEY_ID" in err
    finally:
        monkeypatch.undo()
        _fresh_clients()
    assert len(Store.existing(uri).results()) == 1                           # nothing already written is lost
