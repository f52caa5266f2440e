"""A store you can query, copy and move; one setting per folder; model types of finished models;
commands reading ``--store`` refuse a folder that is not a store.

The store is built by real evaluations of the oracle (tests/fixtures/oracle_models.py, which
reads a 7-class label out of an image's colour and counts the images it sees) on tiny folders.
"""
from __future__ import annotations

import doctest
import os
import shutil
import sys
from pathlib import Path

import pytest

from shiftbench import cli
from shiftbench.errors import ConfigError, StoreError
from shiftbench.store import NotAStoreError, Store

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
from oracle_models import Oracle  # noqa: E402
from oracle_models import wrong_every_folder as folder  # noqa: E402
from clirun import run_main  # noqa: E402 - tests/ helper

ORACLE7 = "python:oracle_models:oracle7"


def evaluate(settings, store: Path, **kw):
    from shiftbench.engine import evaluate as ev

    kw.setdefault("progress", False)
    return ev(kw.pop("model", ORACLE7), settings, store=store, workers=0, batch_size=8, **kw)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store with the oracle on two folders (14 and 7 images)."""
    a, b = folder(tmp_path / "a", 14, wrong_every=5), folder(tmp_path / "b", 7)
    evaluate([f"folder:{a}", f"folder:{b}"], tmp_path / "store")
    return tmp_path / "store"


def counts(root: Path) -> tuple[int, int, int]:
    con = Store(root).connect()
    try:
        return tuple(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("predictions", "results", "keys"))
    finally:
        con.close()


# ---------------------------------------------------------------------------- copy and move
def test_a_copied_store_reads_its_own_files_and_survives_the_original_moving(store, tmp_path):
    assert counts(store) == (21, 2, 2)
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(store, copy)
    evaluate([f"folder:{folder(tmp_path / 'c', 5)}"], copy)          # one more result, in the copy only
    assert counts(copy) == (26, 3, 3) and counts(store) == (21, 2, 2)
    moved = tmp_path / "moved"
    store.rename(moved)                                                # the original moved away
    assert counts(copy) == (26, 3, 3) and counts(moved) == (21, 2, 2)
    con = Store(copy).connect()
    files = con.execute("SELECT DISTINCT filename FROM read_parquet(?, filename = true)",
                        [f"{copy.resolve()}/predictions/*/*.parquet"]).fetchall()
    assert all(f.startswith(str(copy.resolve())) for (f,) in files)
    joined = con.execute("SELECT r.setting, count(*) FROM predictions p JOIN results r USING (key) "
                         "GROUP BY r.setting ORDER BY 2").fetchall()
    assert [n for _, n in joined] == [5, 7, 14]


def test_a_store_under_a_path_with_glob_characters_and_quotes_reads_its_files(store, tmp_path):
    odd = tmp_path / "we[ird] 'name'*" / "store"
    shutil.copytree(store, odd)
    assert counts(odd) == (21, 2, 2)


def test_connect_writes_nothing_into_the_store(store):
    before = sorted(p.relative_to(store) for p in store.rglob("*"))
    Store(store).connect().close()
    assert sorted(p.relative_to(store) for p in store.rglob("*")) == before


# ---------------------------------------------------------------------------- empty stores
@pytest.mark.parametrize("layout", [(), ("keys", "runs"), ("done",)])
def test_an_empty_store_connects_with_empty_tables_and_their_columns(tmp_path, store, layout):
    empty = tmp_path / "empty"
    empty.mkdir()
    for name in layout:
        (empty / name).mkdir()
    con, full = Store(empty).connect(), Store(store).connect()
    for table in ("predictions", "logits", "results", "results_history", "keys", "runs"):
        assert con.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,)
        described = con.execute(f"DESCRIBE {table}").fetchall()
        if table != "logits":                  # no kept logits in either store
            assert [c[:2] for c in described] == [c[:2] for c in full.execute(f"DESCRIBE {table}").fetchall()]
    assert sorted(p.name for p in empty.iterdir()) == sorted(layout)   # no temporary file, no .duckdb
    with pytest.raises(NotAStoreError, match="no such folder"):
        Store(tmp_path / "missing").connect()


# ---------------------------------------------------------------------------- a foreign .duckdb file
def test_a_duckdb_file_made_elsewhere_is_never_read_nor_broken(store, tmp_path):
    import duckdb

    other = tmp_path / "other"
    evaluate([f"folder:{folder(tmp_path / 'x', 3)}"], other)
    for db in (store / "shiftbench.duckdb", store / "mine.duckdb"):
        con = duckdb.connect(str(db))          # what the duckdb CLI, or an earlier shiftbench, leaves
        con.execute("CREATE TABLE predictions (x INTEGER)")
        con.execute(f"CREATE VIEW results AS SELECT * FROM read_parquet('{other.resolve()}/predictions/*/*.parquet')")
        con.close()
    size = (store / "shiftbench.duckdb").stat().st_size
    assert counts(store) == (21, 2, 2)
    assert counts(store) == (21, 2, 2)                                # and again
    assert (store / "shiftbench.duckdb").stat().st_size == size      # left as it was


# ---------------------------------------------------------------------------- results and history
def test_sql_results_are_store_results_and_history_keeps_every_finished_key(tmp_path):
    a = folder(tmp_path / "a", 14, wrong_every=5)
    evaluate([f"folder:{a}"], tmp_path / "s", limit=7)                 # a quick look, then the full run
    evaluate([f"folder:{a}"], tmp_path / "s")
    st = Store(tmp_path / "s")
    con = st.connect()
    assert con.execute("SELECT key, n_examples FROM results").fetchall() == \
        list(st.results()[["key", "n_examples"]].itertuples(index=False, name=None))
    hist = con.execute("SELECT n_examples, current FROM results_history ORDER BY n_examples").fetchall()
    assert hist == [(7, False), (14, True)]
    acc = con.execute("SELECT avg(correct::INT) * 100 FROM predictions JOIN results USING (key)").fetchone()[0]
    assert acc == pytest.approx(st.results()["accuracy"].iloc[0])


# ---------------------------------------------------------------------------- model type
def test_a_model_type_for_a_finished_model_is_recorded_without_a_forward_pass(store, tmp_path, capsys):
    from shiftbench import Testbed

    assert set(Store(store).results()["model_type"]) == {"UNKNOWN"}
    Oracle.seen = 0
    res = evaluate([f"folder:{tmp_path / 'a'}"], store, model_type="STANDARD", progress=True)
    assert Oracle.seen == 0                                            # no forward pass
    assert list(res["model_type"]) == ["STANDARD"]
    assert "model type STANDARD recorded on 2 finished result(s) (was UNKNOWN); nothing recomputed" \
        in capsys.readouterr().err
    assert set(Store(store).results(history=True)["model_type"]) == {"STANDARD"}   # the other folder's too
    assert set(Testbed.from_store(store).model_types) == {"STANDARD"}
    before = {p.name: p.stat().st_mtime_ns for p in (store / "done").iterdir()}
    evaluate([f"folder:{tmp_path / 'a'}"], store)                     # no --model-type: the type stays
    assert {p.name: p.stat().st_mtime_ns for p in (store / "done").iterdir()} == before
    with pytest.raises(ConfigError, match="did you mean 'STANDARD'"):
        evaluate([f"folder:{tmp_path / 'a'}"], store, model_type="STANDART")


# ---------------------------------------------------------------------------- one folder, one setting
def test_every_spelling_of_a_folder_is_one_setting_and_one_key(tmp_path, monkeypatch):
    from shiftbench.settings import canonical_setting_name

    folder(tmp_path / "data" / "val", 7)
    (tmp_path / "link").symlink_to(tmp_path / "data", target_is_directory=True)
    monkeypatch.chdir(tmp_path / "data")
    Oracle.seen = 0
    spellings = ["folder:val", "folder:./val", f"folder:{tmp_path}/data/val/", f"folder:{tmp_path}/link/val",
                 "folder:../data/val"]
    names = [evaluate([s], tmp_path / "store")["setting"].iloc[0] for s in spellings]
    assert Oracle.seen == 7                                            # computed once
    assert set(names) == {f"folder:{(tmp_path / 'data' / 'val').resolve()}"}
    assert len(list((tmp_path / "store" / "keys").iterdir())) == 1
    assert evaluate(["folder:val"], tmp_path / "s2", data_root=tmp_path / "data")["setting"].iloc[0] == names[0]
    monkeypatch.chdir(tmp_path)                                        # relative to --data-root
    assert canonical_setting_name("folder:val+fog.3", data_root=tmp_path / "data") == names[0] + "+fog.3"
    assert canonical_setting_name("imagenet-a") == "imagenet-a"
    assert doctest.testmod(__import__("shiftbench.setting_names", fromlist=["x"])).failed == 0


def test_commands_look_a_folder_setting_up_by_any_spelling(tmp_path, monkeypatch, capsys):
    folder(tmp_path / "imgs", 14, wrong_every=5)
    monkeypatch.chdir(tmp_path)
    evaluate(["folder:imgs", "folder:imgs+greyscale"], tmp_path / "store",
             model=[f"python:multimodel_models:cnn_{m}" for m in "abc"])
    code, out, err = run_main(monkeypatch, capsys, "estimate", "--store", "store", "--x", "folder:./imgs",
                              "--y", "folder:imgs/+greyscale", "--method", "atc", "--json")
    assert code == 0, err


# ---------------------------------------------------------------------------- --store on a non-store


@pytest.mark.parametrize("what", ["missing", "empty", "other files"])
@pytest.mark.parametrize("command", [
    ["results"], ["fit", "--x", "val", "--y", "imagenet-a", "-t", "imagenet-reference"],
    ["place", "-t", "imagenet-reference"], ["report", "-o", "{tmp}/rep"],
    ["estimate", "--x", "val", "--y", "imagenet-a"], ["sql", "SELECT 1"]])
def test_commands_reading_a_store_refuse_a_folder_that_is_not_one(command, what, tmp_path, monkeypatch, capsys):
    path = tmp_path / "not-a-store"
    if what != "missing":
        path.mkdir()
    if what == "other files":
        (path / "notes.txt").write_text("hello\n")
        (path / "photos").mkdir()
    args = [a.format(tmp=tmp_path) for a in command]
    code, out, err = run_main(monkeypatch, capsys, *args, "--store", str(path))
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"error: {path}: ") and "shiftbench eval" in lines[0], lines[0]
    assert ("no such folder" in lines[0]) == (what == "missing")
    assert not (tmp_path / "rep").exists() and (what == "missing") == (not path.exists())


def test_store_existing_is_a_store_error_naming_the_path_and_the_fix(tmp_path, store):
    (tmp_path / "file").write_text("x")
    for bad, why in ((tmp_path / "nope", "no such folder"), (tmp_path / "file", "a file, not a folder"),
                     (tmp_path / "a", "not a results store")):
        with pytest.raises(NotAStoreError, match=why) as err:
            Store.existing(bad)
        assert isinstance(err.value, StoreError) and isinstance(err.value, ConfigError)
        assert str(bad) in str(err.value) and "\n" not in str(err.value)
    assert Store.existing(store).root == store
    os.makedirs(tmp_path / "studies-only" / "studies" / "trajectory")
    assert Store.existing(tmp_path / "studies-only").looks_like_store()


def test_eval_creates_a_store_in_a_missing_or_empty_folder(tmp_path, monkeypatch, capsys):
    data = folder(tmp_path / "d", 7)
    (tmp_path / "empty").mkdir()
    for target in (tmp_path / "new" / "store", tmp_path / "empty"):
        code, out, err = run_main(monkeypatch, capsys, "eval", "-m", ORACLE7, "-s", f"folder:{data}", "--store",
                                  str(target), "--workers", "0", "--json")
        assert code == 0, err
        assert Store.existing(target).results()["n_examples"].tolist() == [7]


def test_sql_command_prints_a_query_and_refuses_bad_sql_in_one_line(store, monkeypatch, capsys):
    import json

    code, out, err = run_main(monkeypatch, capsys, "sql", "--store", str(store), "--json",
                              "SELECT regexp_extract(setting, '[^/]*$') AS folder, n_examples FROM results ORDER BY 1")
    assert code == 0, err
    assert json.loads(out) == [{"folder": "a", "n_examples": 14}, {"folder": "b", "n_examples": 7}]
    code, out, err = run_main(monkeypatch, capsys, "sql", "--store", str(store), "SELECT count(*) AS n FROM predictions")
    assert code == 0 and "21" in out
    code, out, err = run_main(monkeypatch, capsys, "sql", "--store", str(store), "SELECT nope FROM results")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith("error: SQL: Binder Error") and "results_history" in lines[0]
