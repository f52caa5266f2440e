"""place_models (shiftbench.analysis.placement): where given models sit against a testbed's trends."""
from __future__ import annotations

import doctest

import numpy as np
import pandas as pd
import pytest

import shiftbench as sb
from shiftbench.analysis import placement
from shiftbench.analysis.placement import NATURAL_SHIFTS, PLACEMENT_COLUMNS, place_models
from shiftbench.errors import ConfigError
from shiftbench import testbed as tbmod

V2 = "imagenetv2-matched-frequency-format-val"


def hand_testbed() -> tbmod.Testbed:
    """Four STANDARD models around ``v2 = val - 10`` and ``sk = val - 30`` with residuals orthogonal
    to [1, val] (so the linear fits are exactly those lines), one robust model, two of 'mine'.

    Effective robustness by hand (linear scale, pp):
      v2: std +1, -1, -1, +1; robust 70 - 65 = +5; mine1 66 - 62 = +4; mine2 83 - 85 = -2
      sk: std +.5, -.5, -.5, +.5; robust 50 - 45 = +5; mine1 40 - 42 = -2; mine2 has no sk
    """
    frame = pd.DataFrame({
        "model": ["s1", "s2", "s3", "s4", "robust", "mine1", "mine2"],
        "model_type": ["STANDARD"] * 4 + ["ROBUST_INTV", "UNKNOWN", "UNKNOWN"],
        "val": [60.0, 70.0, 80.0, 90.0, 75.0, 72.0, 95.0],
        "v2": [51.0, 59.0, 69.0, 81.0, 70.0, 66.0, 83.0],
        "sk": [30.5, 39.5, 49.5, 60.5, 50.0, 40.0, np.nan],
    })
    frame["val_dataset_size"] = 50_000
    frame["v2_dataset_size"] = 10_000
    frame["sk_dataset_size"] = 10_000
    return tbmod.Testbed.from_frame(frame, name="hand")


def row(placed: pd.DataFrame, model: str, shift: str) -> pd.Series:
    hit = placed[(placed["model"] == model) & (placed["shift"] == shift)]
    assert len(hit) == 1, placed[["model", "shift"]]
    return hit.iloc[0]


def test_place_models_docstring_example_runs():
    result = doctest.testmod(placement, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_place_models_gives_hand_computed_effective_robustness_and_ranks():
    placed = place_models(hand_testbed(), ["mine1", "mine2"], [("val", "v2"), ("sketch", "val", "sk")],
                          scale="linear", n_resamples=0)
    assert list(placed.columns) == PLACEMENT_COLUMNS
    # model-major, shifts in the order given; mine2 has no sk accuracy, so no row there
    assert list(zip(placed["model"], placed["shift"])) == [("mine1", "v2 vs val"), ("mine1", "sketch"),
                                                           ("mine2", "v2 vs val")]
    r = row(placed, "mine1", "v2 vs val")
    assert (r["x"], r["y"], r["x_acc"], r["y_acc"]) == ("val", "v2", 72.0, 66.0)
    assert r["predicted_y_acc"] == pytest.approx(62.0)
    assert r["effective_robustness"] == pytest.approx(4.0)
    assert (r["rank"], r["n_ranked"], r["in_fit_range"]) == (2, 7, True)      # only robust (+5) is above
    r = row(placed, "mine2", "v2 vs val")
    assert r["effective_robustness"] == pytest.approx(-2.0)
    assert (r["rank"], r["n_ranked"]) == (7, 7)                                # below every std (-1 at worst)
    assert not r["in_fit_range"]                                               # 95% > the fitted 60-90%
    r = row(placed, "mine1", "sketch")
    assert r["predicted_y_acc"] == pytest.approx(42.0)
    assert r["effective_robustness"] == pytest.approx(-2.0)
    assert (r["rank"], r["n_ranked"]) == (6, 6)                                # mine2 is not ranked on sk
    # n_resamples=0: no band, so the interval is the Clopper-Pearson interval of y alone
    assert r["er_low"] < r["effective_robustness"] < r["er_high"]
    assert set(placed.attrs["fits"]) == {"v2 vs val", "sketch"}


def test_the_best_model_is_rank_one():
    placed = place_models(hand_testbed(), ["robust"], [("val", "v2"), ("val", "sk")], scale="linear",
                          n_resamples=0)
    assert list(placed["rank"]) == [1, 1]
    assert placed["effective_robustness"].to_numpy() == pytest.approx([5.0, 5.0])


def test_interval_and_values_match_effective_robustness_at_the_given_confidence():
    tb = hand_testbed()
    placed = place_models(tb, ["mine1", "robust"], [("val", "v2")], n_resamples=300, seed=3, confidence=0.9)
    er = sb.effective_robustness(tb, "val", "v2", n_resamples=300, seed=3, confidence=0.9)
    for model in ("mine1", "robust"):
        r = row(placed, model, "v2 vs val")
        for col in ("predicted_y_acc", "effective_robustness", "er_low", "er_high"):
            assert r[col] == er.at[model, col], (model, col)
        assert r["er_low"] < r["effective_robustness"] < r["er_high"]
        assert r["rank"] == 1 + int((er["effective_robustness"] > er.at[model, "effective_robustness"]).sum())


def test_your_models_stay_out_of_the_fit_unless_fit_on_selects_them():
    tb = hand_testbed()
    placed = place_models(tb, ["mine1", "mine2"], [("val", "v2")], scale="linear", n_resamples=0)
    fit = placed.attrs["fits"]["v2 vs val"]
    assert set(fit.models) == {"s1", "s2", "s3", "s4"}
    # the same as fitting without your models at all
    alone = sb.fit_trend(tb.select(models=["s1", "s2", "s3", "s4", "robust"]), "val", "v2", "linear")
    assert (fit.slope, fit.intercept) == pytest.approx((alone.slope, alone.intercept))
    # selecting their type puts them in, and the trend moves
    both = place_models(tb, ["mine1"], [("val", "v2")], scale="linear", n_resamples=0,
                        fit_on=("STANDARD", "UNKNOWN"))
    assert {"mine1", "mine2"} <= set(both.attrs["fits"]["v2 vs val"].models)
    assert both["effective_robustness"].iloc[0] != pytest.approx(4.0)


def test_default_shifts_are_the_natural_ones_the_testbed_has_and_unfittable_ones_are_skipped():
    frame = pd.DataFrame({
        "model": ["a", "b", "c", "mine"], "model_type": ["STANDARD"] * 3 + ["UNKNOWN"],
        "val": [60.0, 70.0, 80.0, 75.0], V2: [48.0, 58.0, 68.0, 66.0], "imagenet-sketch": [20.0, np.nan, 30.0, 28.0]})
    placed = place_models(tbmod.Testbed.from_frame(frame), ["mine"], scale="linear", n_resamples=0)
    assert list(placed["shift"]) == ["ImageNetV2"]
    sketch = [r for r in placed.attrs["skipped"] if r["shift"] == "ImageNet-Sketch"]   # two STANDARD models:
    assert [(r["model"], r["missing"]) for r in sketch] == [("mine", [])]               # too few for a trend
    assert sketch[0]["reason"].startswith("no trend: ")
    # an explicit shift that cannot be fitted raises
    with pytest.raises(sb.DataError):
        place_models(tbmod.Testbed.from_frame(frame), ["mine"], [("val", "imagenet-sketch")])


def test_unknown_model_or_setting_raises_with_a_suggestion():
    tb = hand_testbed()
    with pytest.raises(ConfigError, match="mine1"):
        place_models(tb, ["mine11"], [("val", "v2")])
    with pytest.raises(ConfigError, match="v2"):
        place_models(tb, ["mine1"], [("val", "v3")])
    with pytest.raises(ConfigError, match="ShiftPair"):
        place_models(tb, ["mine1"], ["v2"])


def test_place_models_is_exported_from_the_top_level():
    assert sb.place_models is place_models and "place_models" in sb.__all__


# --------------------------------------------------------------------------- the reference testbed
@pytest.fixture(scope="module")
def reference() -> tbmod.Testbed:
    return sb.load_testbed("imagenet-reference")


def test_on_the_reference_testbed_placement_equals_effective_robustness(reference):
    models = ["resnet50", "resnet50_augmix"]                        # a standard and a robust model
    placed = place_models(reference, models)
    assert set(placed["shift"]) == {s.label for s in NATURAL_SHIFTS}
    # the published testbed: the authors' model selection (recipe taori2020) by default
    er = sb.effective_robustness(reference, "val", V2, fit=sb.fit_trend(reference, "val", V2, recipe="taori2020"))
    assert placed.attrs["fits"]["ImageNetV2"].recipe == "taori2020"
    for model in models:
        r = row(placed, model, "ImageNetV2")
        for col in ("x_acc", "y_acc", "predicted_y_acc", "effective_robustness", "er_low", "er_high"):
            assert r[col] == er.at[model, col], (model, col)
        assert r["n_ranked"] == len(er)
        assert r["rank"] == 1 + int((er["effective_robustness"] > er.at[model, "effective_robustness"]).sum())
    # ImageNet-A: the report's two lines split at ResNet-50 (the authors' recipe), the same numbers
    from shiftbench.report.shifts import analyse_shift

    a = analyse_shift(reference, next(s for s in NATURAL_SHIFTS if s.label == "ImageNet-A"))
    assert a.fit.kind == "two-line" and placed.attrs["fits"]["ImageNet-A"].kind == "two-line"
    for model in models:
        r = row(placed, model, "ImageNet-A")
        assert (r["effective_robustness"], r["er_low"], r["er_high"]) == tuple(
            a.er.loc[model, ["effective_robustness", "er_low", "er_high"]])


def test_a_merged_user_model_is_ranked_against_all_reference_models(reference):
    mine = tbmod.Testbed.from_frame(pd.DataFrame({"model": ["my-net"], "val": [80.0], V2: [72.0]}), name="mine")
    merged = reference.merge(mine)
    placed = place_models(merged, ["my-net"], [("val", V2)])
    r = placed.iloc[0]
    assert r["shift"] == "ImageNetV2"                               # an (x, y) of a natural shift keeps its name
    assert r["n_ranked"] == len(sb.effective_robustness(reference, "val", V2)) + 1
    # the reference's trend, untouched by the user's model
    fit = placed.attrs["fits"]["ImageNetV2"]
    ref = sb.fit_trend(reference, "val", V2, recipe="taori2020")     # imagenet-reference+mine: the authors' recipe
    assert "my-net" not in fit.models and (fit.slope, fit.intercept) == (ref.slope, ref.intercept)
    assert r["effective_robustness"] == pytest.approx(72.0 - float(ref.predict(80.0)))
