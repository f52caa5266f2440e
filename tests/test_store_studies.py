"""Studies in the results store: long-form tables beyond one accuracy per key."""
import pandas as pd
import pytest

from shiftbench.errors import StoreError
from shiftbench.store import Store


def test_study_round_trips_and_is_replaced_atomically(tmp_path):
    store = Store(tmp_path / "s")
    frame = pd.DataFrame({"step": [0, 1], "setting": ["a", "a"], "accuracy": [10.0, 20.0]})
    store.write_study("trajectory", "cnn-pretrained", frame, meta={"model": "cnn"})
    store.write_study("trajectory", "cnn-pretrained", frame.assign(accuracy=[11.0, 21.0]))
    store.write_study("trajectory", "cnn-scratch", frame)
    assert store.study_names("trajectory") == ["cnn-pretrained", "cnn-scratch"]
    got = store.read_study("trajectory", "cnn-pretrained")
    assert got["accuracy"].tolist() == [11.0, 21.0]
    both = store.read_studies("trajectory")
    assert sorted(both["study"].unique()) == ["cnn-pretrained", "cnn-scratch"] and len(both) == 4
    assert store.study_meta("trajectory", "cnn-scratch")["kind"] == "trajectory"
    assert not list((tmp_path / "s").rglob("*.tmp"))
    assert store.read_studies("resolution").empty


def test_missing_or_unsafe_study_names_are_clear_errors(tmp_path):
    store = Store(tmp_path / "s")
    store.write_study("resolution", "r50", pd.DataFrame({"resolution": [64], "accuracy": [1.0]}))
    with pytest.raises(StoreError, match="no resolution study named 'r18'.*stored: r50"):
        store.read_study("resolution", "r18")
    with pytest.raises(StoreError, match="plain name"):
        store.write_study("resolution", "../escape", pd.DataFrame({"a": [1]}))


def test_read_predictions_can_read_only_some_columns_in_dataset_order(tmp_path):
    import pyarrow as pa

    store = Store(tmp_path / "s")
    for chunk, idx in ((1, [3, 2]), (0, [0, 1])):
        part = pd.DataFrame({"index": idx, "id": [f"e{i}" for i in idx], "correct": [i % 2 == 0 for i in idx],
                             "logits": [[0.1 * i] * 4 for i in idx]})
        store.write_part("key", chunk, pa.Table.from_pandas(part, preserve_index=False))
    some = store.read_predictions("key", columns=["id", "correct", "no_such_column"])
    assert list(some.columns) == ["index", "id", "correct"] and list(some["id"]) == ["e0", "e1", "e2", "e3"]
    assert list(store.read_predictions("key").columns) == ["index", "id", "correct", "logits"]
