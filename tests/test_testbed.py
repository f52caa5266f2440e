"""Behaviour of :class:`shiftbench.testbed.Testbed`: reading, writing, selecting, merging, checking.

Every table here is a few rows written by hand (real accuracies of real models where it matters),
so the whole file runs in well under a second.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from shiftbench.errors import ConfigError, DataError, ShiftbenchError
from shiftbench import testbed as sbt  # not `import Testbed`: pytest would try to collect it


def wide_frame() -> pd.DataFrame:
    """Four models, three settings, sizes for two of them, metadata and two extra columns."""
    return pd.DataFrame({
        "model": ["resnet50", "resnet18", "vit_b16", "007"],
        "model_type": ["STANDARD", "STANDARD", "MORE_DATA", None],
        "arch": ["resnet50", "resnet18", "vit_base_patch16_224", None],
        "tags": ["cnn;torchvision", "cnn;small", "transformer", ""],
        "meta:params": [25_557_032.0, 11_689_512.0, 86_567_656.0, np.nan],
        "meta:source": ["torchvision", "torchvision", "timm", None],
        "val": [76.13, 69.76, 81.07, 50.0],
        "imagenetv2-matched-frequency-format-val": [63.21, 57.3, np.nan, 38.5],
        "imagenet-a": [0.0, np.nan, 100.0, 2.5],
        "val_dataset_size": [50000, 50000, 50000, 50000],
        "imagenet-a_dataset_size": [7500, np.nan, 7500, 7500],
    })


@pytest.fixture
def tb() -> sbt.Testbed:
    return sbt.Testbed.from_frame(wide_frame(), name="tiny")


def write(path, text: str):
    path.write_text(text)
    return path


# ---------------------------------------------------------------------- construction


def test_from_frame_separates_settings_sizes_and_metadata(tb):
    assert tb.models == ["resnet50", "resnet18", "vit_b16", "007"]
    assert tb.settings == ["val", "imagenetv2-matched-frequency-format-val", "imagenet-a"]
    assert tb.accuracies.at["resnet50", "val"] == pytest.approx(76.13)
    assert math.isnan(tb.accuracies.at["resnet18", "imagenet-a"])
    assert tb.sizes.at["resnet50", "imagenet-a"] == 7500
    # a setting without a size column has unknown sizes
    assert tb.sizes["imagenetv2-matched-frequency-format-val"].isna().all()
    assert tb.metadata.at["resnet50", "tags"] == ("cnn", "torchvision")
    assert tb.metadata.at["007", "tags"] == ()
    assert tb.metadata.at["vit_b16", "params"] == 86_567_656.0
    assert tb.metadata.at["vit_b16", "source"] == "timm"
    assert tb.tags == {"cnn", "torchvision", "small", "transformer"}


def test_missing_model_type_becomes_unknown(tb):
    assert tb.model_types["007"] == "UNKNOWN"
    bare = sbt.Testbed.from_frame(pd.DataFrame({"model": ["a"], "val": [70.0]}))
    assert bare.model_types.tolist() == ["UNKNOWN"]


def test_meta_column_is_not_read_as_a_setting_even_outside_0_100(tb):
    assert "meta:params" not in tb.settings and "params" not in tb.settings


def test_accuracies_of_exactly_0_and_100_are_accepted(tb):
    assert tb.accuracies.at["resnet50", "imagenet-a"] == 0.0
    assert tb.accuracies.at["vit_b16", "imagenet-a"] == 100.0


def test_empty_and_blank_cells_are_not_evaluated_not_errors(tmp_path):
    path = write(tmp_path / "t.csv", "model,val,v2\na,70.5,\nb,  ,60\nc,NA,61\n")
    tb = sbt.Testbed.read(path)
    assert tb.accuracies["val"].isna().tolist() == [False, True, True]
    assert tb.accuracies["v2"].isna().tolist() == [True, False, False]


# ---------------------------------------------------------------------- round trip


def assert_same_testbed(a: sbt.Testbed, b: sbt.Testbed) -> None:
    assert a.models == b.models
    assert a.settings == b.settings
    pd.testing.assert_frame_equal(a.accuracies, b.accuracies)
    pd.testing.assert_frame_equal(a.sizes, b.sizes)
    pd.testing.assert_series_equal(a.model_types, b.model_types)
    assert a.metadata["tags"].tolist() == b.metadata["tags"].tolist()
    assert list(a.metadata.columns) == list(b.metadata.columns)
    for col in a.metadata.columns:
        left, right = a.metadata[col].tolist(), b.metadata[col].tolist()
        assert [None if pd.isna(v) else v for v in left] == [None if pd.isna(v) else v for v in right], col


@pytest.mark.parametrize("ext", ["csv", "parquet", "pq"])
def test_save_then_read_gives_the_same_testbed(tb, tmp_path, ext):
    path = tb.save(tmp_path / "sub" / f"tiny.{ext}")
    assert path.exists()
    back = sbt.Testbed.read(path)
    assert_same_testbed(tb, back)
    assert back.metadata.at["resnet50", "params"] == 25_557_032.0
    assert back.metadata.at["vit_b16", "source"] == "timm"
    assert "007" in back.models  # a numeric-looking model name stays a string


def test_saved_wide_form_has_model_metadata_settings_then_sizes(tb, tmp_path):
    frame = pd.read_csv(tb.save(tmp_path / "tiny.csv"), dtype={"model": str})
    assert list(frame.columns) == [
        "model", "model_type", "arch", "tags", "meta:params", "meta:source",
        "val", "imagenetv2-matched-frequency-format-val", "imagenet-a",
        "val_dataset_size", "imagenet-a_dataset_size",
    ]
    assert frame.loc[0, "tags"] == "cnn;torchvision"


def test_read_uses_file_stem_as_name_and_path_as_source(tb, tmp_path):
    back = sbt.Testbed.read(tb.save(tmp_path / "my-models.csv"))
    assert back.name == "my-models"
    assert back.source == str(tmp_path / "my-models.csv")
    assert sbt.Testbed.read(tmp_path / "my-models.csv", name="other").name == "other"


# ---------------------------------------------------------------------- long form


def test_long_form_gives_the_same_table_as_the_wide_form(tmp_path):
    wide = write(tmp_path / "wide.csv",
                 "model,model_type,tags,val,v2,val_dataset_size,v2_dataset_size\n"
                 "resnet50,STANDARD,cnn,76.13,63.21,50000,10000\n"
                 "vit_b16,MORE_DATA,vit;big,81.07,,50000,\n")
    long = write(tmp_path / "long.csv",
                 "model,setting,accuracy,n_examples,model_type,tags\n"
                 "resnet50,val,76.13,50000,STANDARD,cnn\n"
                 "resnet50,v2,63.21,10000,STANDARD,cnn\n"
                 "vit_b16,val,81.07,50000,MORE_DATA,vit;big\n")
    assert_same_testbed(sbt.Testbed.read(wide), sbt.Testbed.read(long))


def test_long_form_keeps_first_appearance_order_of_models_and_settings():
    frame = pd.DataFrame({"model": ["m2", "m1", "m1"], "setting": ["val", "v2", "val"],
                          "accuracy": [75.0, 58.0, 70.0]})
    tb = sbt.Testbed.from_frame(frame)
    assert tb.models == ["m2", "m1"]
    assert tb.settings == ["val", "v2"]
    assert tb.accuracies.at["m1", "val"] == 70.0
    assert math.isnan(tb.accuracies.at["m2", "v2"])
    assert tb.sizes.isna().all().all()


def test_to_long_then_from_frame_gives_the_same_testbed(tb):
    back = sbt.Testbed.from_frame(tb.to_long())
    pd.testing.assert_frame_equal(tb.accuracies, back.accuracies)
    pd.testing.assert_frame_equal(tb.sizes, back.sizes)
    pd.testing.assert_series_equal(tb.model_types, back.model_types)


def test_to_long_has_one_row_per_evaluated_cell(tb):
    long = tb.to_long()
    assert len(long) == int(tb.accuracies.notna().to_numpy().sum())
    assert long["accuracy"].notna().all()


def test_long_form_with_two_rows_for_one_cell_raises_data_error(tmp_path):
    path = write(tmp_path / "long.csv", "model,setting,accuracy\nm1,val,75\nm1,val,70\n")
    with pytest.raises(DataError, match=r"'m1'.*'val'"):
        sbt.Testbed.read(path)


def test_long_form_non_numeric_accuracy_names_model_setting_and_file(tmp_path):
    path = write(tmp_path / "long.csv", "model,setting,accuracy\nm1,val,75\nm2,v2,n/a%\n")
    with pytest.raises(DataError) as err:
        sbt.Testbed.read(path)
    assert "'m2'" in str(err.value) and "'v2'" in str(err.value) and str(path) in str(err.value)


# ---------------------------------------------------------------------- select


def test_select_models_keeps_the_given_order_and_aligns_sizes_and_metadata(tb):
    sub = tb.select(models=["vit_b16", "resnet50"])
    assert sub.models == ["vit_b16", "resnet50"]
    assert sub.settings == tb.settings
    assert sub.sizes.at["vit_b16", "imagenet-a"] == 7500
    assert sub.model_types.tolist() == ["MORE_DATA", "STANDARD"]
    assert sub.name == "tiny"
    assert tb.models == ["resnet50", "resnet18", "vit_b16", "007"]  # original untouched


def test_select_settings(tb):
    sub = tb.select(settings=["imagenet-a", "val"], name="sub")
    assert sub.settings == ["imagenet-a", "val"]
    assert sub.models == tb.models
    assert sub.sizes.columns.tolist() == ["imagenet-a", "val"]
    assert sub.name == "sub"


def test_select_by_model_types_and_tags(tb):
    assert tb.select(model_types=["STANDARD"]).models == ["resnet50", "resnet18"]
    assert tb.select(model_types=["MORE_DATA", "UNKNOWN"]).models == ["vit_b16", "007"]
    assert tb.select(tags=["cnn"]).models == ["resnet50", "resnet18"]
    assert tb.select(tags=["small", "transformer"]).models == ["resnet18", "vit_b16"]
    assert tb.select(model_types=["STANDARD"], tags=["small"]).models == ["resnet18"]
    assert tb.select(model_types=["LP_ADV"]).models == []


def test_select_unknown_model_suggests_the_closest_names(tb):
    with pytest.raises(ConfigError, match=r"did you mean 'resnet50'"):
        tb.select(models=["resnet05"])


def test_select_unknown_setting_suggests_the_closest_names(tb):
    with pytest.raises(ConfigError, match=r"unknown setting 'imagenet_a'; did you mean 'imagenet-a'"):
        tb.select(settings=["imagenet_a"])


def test_check_setting_and_check_model(tb):
    assert tb.check_setting("val") == "val"
    assert tb.check_model("007") == "007"
    with pytest.raises(ConfigError, match=r"did you mean 'val'"):
        tb.check_setting("vall")
    with pytest.raises(ConfigError, match=r"did you mean 'vit_b16'"):
        tb.check_model("vit_b_16")


# ---------------------------------------------------------------------- merge


def small(name: str, rows: dict[str, dict[str, float]], model_type: str | None = None,
          sizes: dict[str, float] | None = None) -> sbt.Testbed:
    frame = pd.DataFrame.from_dict(rows, orient="index").rename_axis("model").reset_index()
    if model_type is not None:
        frame["model_type"] = model_type
    for setting, n in (sizes or {}).items():
        frame[f"{setting}_dataset_size"] = n
    return sbt.Testbed.from_frame(frame, name=name)


def test_merge_is_the_union_of_models_and_settings():
    a = small("A", {"m1": {"val": 70.0, "v2": 58.0}, "m2": {"val": 75.0, "v2": 63.0}}, "STANDARD",
              {"val": 50000})
    b = small("B", {"m2": {"val": 75.0, "sketch": 30.0}, "m3": {"val": 80.0, "sketch": 40.0}}, "MORE_DATA",
              {"sketch": 50889})
    m = a.merge(b)
    assert m.models == ["m1", "m2", "m3"]
    assert m.settings == ["val", "v2", "sketch"]
    assert m.accuracies.at["m2", "sketch"] == 30.0  # a shared model keeps cells from both
    assert m.accuracies.at["m2", "v2"] == 63.0
    assert math.isnan(m.accuracies.at["m3", "v2"])
    assert m.sizes.at["m1", "val"] == 50000 and m.sizes.at["m3", "sketch"] == 50889
    assert m.model_types["m3"] == "MORE_DATA"
    assert m.name == "A+B"
    assert a.merge(b, name="both").name == "both"


def test_merge_accepts_equal_overlapping_cells_and_empty_cells():
    a = small("A", {"m1": {"val": 70.0, "v2": 58.0}})
    b = small("B", {"m1": {"val": 70.0 + 1e-9, "v2": np.nan}})
    m = a.merge(b)
    assert m.accuracies.loc["m1"].tolist() == [70.0, 58.0]


def test_merge_conflicting_cell_raises_data_error_naming_model_and_setting():
    a = small("A", {"m1": {"val": 70.0}, "m2": {"val": 75.0, "v2": 63.0}})
    b = small("B", {"m2": {"v2": 64.0}})
    with pytest.raises(DataError) as err:
        a.merge(b)
    msg = str(err.value)
    assert "'m2'" in msg and "'v2'" in msg and "on_conflict" in msg
    assert "'A'" in msg and "'B'" in msg


@pytest.mark.parametrize(("on_conflict", "expected"), [("left", 63.0), ("right", 64.0)])
def test_merge_on_conflict_chooses_which_side_wins(on_conflict, expected):
    a = small("A", {"m1": {"val": 70.0}, "m2": {"val": 75.0, "v2": 63.0}})
    b = small("B", {"m2": {"v2": 64.0}, "m3": {"v2": 50.0}})
    m = a.merge(b, on_conflict=on_conflict)
    assert m.accuracies.at["m2", "v2"] == expected
    assert m.accuracies.at["m2", "val"] == 75.0  # non-conflicting cells kept either way
    assert m.models == ["m1", "m2", "m3"]


def test_merge_rejects_an_unknown_on_conflict_option(tb):
    with pytest.raises(ConfigError, match="on_conflict"):
        tb.merge(tb, on_conflict="mean")


# ---------------------------------------------------------------------- resolve


def test_resolve_none_and_all_select_every_model(tb):
    assert tb.resolve(None) == tb.models
    assert tb.resolve("all") == tb.models
    assert tb.resolve(["STANDARD", "all"]) == tb.models


def test_resolve_types_tags_and_model_names(tb):
    assert tb.resolve("STANDARD") == ["resnet50", "resnet18"]
    assert tb.resolve(["transformer"]) == ["vit_b16"]
    assert tb.resolve(["007"]) == ["007"]


def test_resolve_is_a_union_in_table_order(tb):
    assert tb.resolve(["007", "MORE_DATA", "small"]) == ["resnet18", "vit_b16", "007"]


def test_resolve_prefixes_force_one_reading():
    tb = sbt.Testbed.from_frame(pd.DataFrame({
        "model": ["vit", "clip_vit", "resnet50"],
        "model_type": ["STANDARD", "MORE_DATA", "STANDARD"],
        "tags": ["transformer", "vit;MORE_DATA", "cnn"],
        "val": [79.0, 85.0, 76.0]}))
    assert tb.resolve("model:vit") == ["vit"]
    assert tb.resolve("tag:vit") == ["clip_vit"]
    assert tb.resolve("type:STANDARD") == ["vit", "resnet50"]
    assert tb.resolve("tag:MORE_DATA") == ["clip_vit"]
    assert tb.resolve(["type:MORE_DATA", "model:resnet50"]) == ["clip_vit", "resnet50"]


def test_a_one_letter_word_is_not_read_as_an_abbreviation():
    from shiftbench.errors import closest

    ref = ["imagenet-a", "imagenet-r", "imagenet-sketch", "imagenet-c.brightness.1_on-disk", "val"]
    assert set(closest("imagenet-b", ref)[:2]) == {"imagenet-a", "imagenet-r"}
    assert "imagenet-c.brightness.1_on-disk" not in closest("imagenet-b", ref)
    assert closest("imagenet-c.bright.1", ref)[0] == "imagenet-c.brightness.1_on-disk"   # longer prefixes still do


def test_resolve_unknown_name_suggests_the_closest(tb):
    with pytest.raises(ConfigError, match=r"did you mean 'STANDARD'"):
        tb.resolve("STANDRD")
    with pytest.raises(ConfigError, match=r"did you mean 'resnet50'"):
        tb.resolve(["model:resnet05"])


# ---------------------------------------------------------------------- paired


def test_paired_keeps_models_evaluated_on_both_and_counts_the_skipped(tb):
    frame, skipped = tb.paired("val", "imagenet-a")
    assert frame.index.tolist() == ["resnet50", "vit_b16", "007"]
    assert skipped == 1
    assert list(frame.columns) == ["x_acc", "y_acc", "x_n", "y_n", "model_type"]
    assert frame.loc["resnet50"].tolist() == [76.13, 0.0, 50000.0, 7500.0, "STANDARD"]


def test_paired_counts_only_the_requested_models(tb):
    frame, skipped = tb.paired("val", "imagenetv2-matched-frequency-format-val", models=["vit_b16", "resnet18"])
    assert frame.index.tolist() == ["resnet18"]
    assert skipped == 1
    assert math.isnan(frame.at["resnet18", "y_n"])


def test_paired_unknown_setting_suggests_the_closest(tb):
    with pytest.raises(ConfigError, match=r"did you mean 'imagenet-a'"):
        tb.paired("val", "imagenet-A")


def test_paired_unknown_model_suggests_the_closest(tb):
    with pytest.raises(ConfigError, match=r"did you mean 'resnet50'"):
        tb.paired("val", "imagenet-a", models=["resnet50", "resnet05"])


# ---------------------------------------------------------------------- bad input


def test_non_numeric_cell_names_the_model_the_setting_and_the_file(tmp_path):
    path = write(tmp_path / "acc.csv", "model,val,v2\nresnet50,76.13,63.21\nresnet18,69.76,57.3x\n")
    with pytest.raises(DataError) as err:
        sbt.Testbed.read(path)
    msg = str(err.value)
    assert "'resnet18'" in msg and "'v2'" in msg and str(path) in msg and "'57.3x'" in msg


@pytest.mark.parametrize("value", ["-0.5", "100.5", "7613"])
def test_accuracy_outside_0_100_names_the_model_and_the_setting(tmp_path, value):
    path = write(tmp_path / "acc.csv", f"model,val,v2\nresnet50,76.13,63.21\nresnet18,69.76,{value}\n")
    with pytest.raises(DataError, match=r"'resnet18' on setting 'v2' is outside \[0, 100\]"):
        sbt.Testbed.read(path)


def test_missing_model_column_raises_data_error(tmp_path):
    path = write(tmp_path / "acc.csv", "name,val\nresnet50,76.13\n")
    with pytest.raises(DataError, match="no 'model' column"):
        sbt.Testbed.read(path)


def test_duplicate_model_rows_raise_data_error(tmp_path):
    path = write(tmp_path / "acc.csv", "model,val\nresnet50,76.13\nresnet18,69.76\nresnet50 ,76.15\n")
    with pytest.raises(DataError, match="'resnet50' appears in two rows"):
        sbt.Testbed.read(path)


def test_duplicate_setting_columns_raise_data_error():
    acc = pd.DataFrame([[70.0, 71.0]], index=["m1"], columns=["val", "val"])
    with pytest.raises(DataError, match="'val' appears twice"):
        sbt.Testbed(acc)


def test_blank_model_name_raises_data_error(tmp_path):
    path = write(tmp_path / "acc.csv", "model,val\nresnet50,76.13\n,69.76\n")
    with pytest.raises(DataError):
        sbt.Testbed.read(path)


def test_missing_file_raises_data_error(tmp_path):
    with pytest.raises(DataError, match="no such testbed file"):
        sbt.Testbed.read(tmp_path / "nope.csv")


def test_unknown_extension_raises_on_read_and_save(tb, tmp_path):
    path = write(tmp_path / "acc.xlsx", "model,val\nresnet50,76.13\n")
    with pytest.raises(DataError, match=r"unknown table format '.xlsx'"):
        sbt.Testbed.read(path)
    with pytest.raises(ShiftbenchError, match=r"unknown table format '.txt'"):
        tb.save(tmp_path / "out.txt")
    assert not (tmp_path / "out.txt").exists()


def test_corrupt_parquet_raises_data_error(tmp_path):
    path = write(tmp_path / "acc.parquet", "model,val\nresnet50,76.13\n")
    with pytest.raises(DataError, match="cannot read the table"):
        sbt.Testbed.read(path)
