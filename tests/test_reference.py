"""The shipped reference testbeds (``imagenet-reference``, ``timm-reference``) and :func:`load_testbed`.

Checked against the package data files themselves and against numbers published with them
(Taori et al. 2020; timm's ``results/`` README). Builds are cached per process, so the file runs in
a few seconds.
"""
from __future__ import annotations

import subprocess
import sys
from importlib.resources import files

import numpy as np
import pandas as pd
import pytest

from shiftbench.errors import ConfigError, DataError
from shiftbench.reference import data_path, list_testbeds, load_testbed
from shiftbench.reference.timm import SETTINGS, classify_pretrain, unclassified_models

V2 = "imagenetv2-matched-frequency-format-val"
TIMM_SETTINGS = [
    "val", "val-real", V2, "imagenet-sketch", "imagenet-a",
    "val-on-imagenet-a-classes", "imagenet-r", "val-on-imagenet-r-classes",
]


@pytest.fixture(scope="module")
def imagenet():
    return load_testbed("imagenet-reference")


@pytest.fixture(scope="module")
def timm():
    return load_testbed("timm-reference")


def timm_results(stem: str) -> pd.DataFrame:
    return pd.read_csv(data_path("reference", "timm", f"results-{stem}.csv"), thousands=",")


# ---------------------------------------------------------------------- registry


def test_both_references_are_listed():
    assert {"imagenet-reference", "timm-reference"} <= set(list_testbeds())


def test_load_testbed_returns_an_independent_copy(imagenet):
    first = load_testbed("imagenet-reference")
    model, setting = first.models[0], first.settings[0]
    before = first.accuracies.at[model, setting]
    first.accuracies.at[model, setting] = 1.0
    first.sizes.at[model, setting] = 1.0
    first.metadata.at[model, "model_type"] = "CHANGED"
    again = load_testbed("imagenet-reference")
    assert again.accuracies.at[model, setting] == before
    assert again.sizes.at[model, setting] != 1.0
    assert again.metadata.at[model, "model_type"] != "CHANGED"


# ---------------------------------------------------------------------- imagenet-reference


def test_imagenet_reference_has_338_models_and_213_settings(imagenet):
    assert len(imagenet) == 338
    assert len(imagenet.models) == len(set(imagenet.models)) == 338
    assert len(imagenet.settings) == 213
    assert imagenet.name == "imagenet-reference"


def test_imagenet_c_cells_equal_to_clean_accuracy_are_left_out_and_kept_in_the_raw_testbed(imagenet):
    """543 published severity-1 in-memory cells equal the model's val accuracy (the corruption was
    not applied); imagenet-reference leaves them empty, imagenet-reference-raw keeps the files as
    published."""
    from shiftbench.reference.imagenet import defective_cells

    bad = defective_cells()
    assert len(bad) == 543 and bad["setting"].str.endswith(".1_in-memory").all()
    assert bad["setting"].nunique() == 18 and (bad["setting"] == "imagenet-c.zoom_blur.1_in-memory").sum() == 119
    assert ((bad["accuracy"] - bad["val"]).abs() < 1e-9).all()
    raw = load_testbed("imagenet-reference-raw")
    assert raw.name == "imagenet-reference-raw" and raw.accuracies.shape == imagenet.accuracies.shape
    for row in bad.itertuples():
        assert np.isnan(imagenet.accuracies.at[row.model, row.setting])
        assert np.isnan(imagenet.sizes.at[row.model, row.setting])
        assert raw.accuracies.at[row.model, row.setting] == row.accuracy
    assert len(defective_cells(imagenet.accuracies)) == 0
    # everything else is untouched, and the on-disk cells of the same models are real measurements
    both = raw.accuracies.mask(imagenet.accuracies.isna())
    pd.testing.assert_frame_equal(both, imagenet.accuracies)
    on_disk = raw.accuracies.loc["senet154", "imagenet-c.gaussian_noise.1_on-disk"]
    assert on_disk < raw.accuracies.loc["senet154", "val"] - 5


def test_every_accuracy_is_a_whole_number_of_examples_with_the_corrected_counts(imagenet):
    """The published counts of ImageNet-Sketch (50,000) and YTBB-Robust pm-k (2,530) do not divide
    the published accuracies; 50,889 and 2,030 divide every one of them, and every other cell of
    the testbed is a whole count of its stated size."""
    from shiftbench.reference.imagenet import SIZE_CORRECTIONS, count_mismatches

    assert count_mismatches(imagenet.accuracies, imagenet.sizes).sum() == 0
    raw = load_testbed("imagenet-reference-raw")
    wrong = count_mismatches(raw.accuracies, raw.sizes)
    assert set(wrong[wrong > 300].index) == set(SIZE_CORRECTIONS) and wrong.drop(list(SIZE_CORRECTIONS)).sum() == 0
    assert raw.sizes["imagenet-sketch"].dropna().eq(50000).all() and imagenet.sizes["imagenet-sketch"].eq(50889).all()
    assert imagenet.sizes["ytbb-robust_pm10"].eq(2030).all()


def test_imagenet_reference_has_the_published_model_types(imagenet):
    assert imagenet.model_types["resnet50"] == "STANDARD"
    assert (imagenet.model_types == "STANDARD").sum() == 87
    published = pd.read_csv(data_path("reference", "imagenet", "model_types.csv")).set_index("model")["model_type"]
    assert imagenet.model_types.to_dict() == published.to_dict()
    assert "UNKNOWN" not in set(imagenet.model_types)


def test_imagenet_reference_resnet50_val_accuracy(imagenet):
    assert imagenet.accuracies.at["resnet50", "val"] == pytest.approx(76.13, abs=0.01)
    assert imagenet.accuracies.at["resnet50", V2] == pytest.approx(63.21, abs=0.01)


@pytest.mark.parametrize(("setting", "n"), [("val", 50_000), ("imagenet-a", 7_500), ("objectnet-1.0-beta", 18_514)])
def test_imagenet_reference_sizes(imagenet, setting, n):
    evaluated = imagenet.accuracies[setting].notna()
    assert evaluated.sum() > 300
    assert (imagenet.sizes.loc[evaluated, setting] == n).all()


@pytest.mark.parametrize("setting", ["imagenet-c.fog.3_in-memory", "imagenet-c.gaussian_noise.5_on-disk"])
def test_imagenet_c_cell_gets_its_per_corruption_size(imagenet, setting):
    corruption, mode = setting.removeprefix("imagenet-c.").split(".")[0], setting.rsplit("_", 1)[1]
    raw = pd.read_csv(data_path("reference", "imagenet", "dataset_sizes.csv")).set_index("model")
    expected = raw[f"{corruption}_{mode}_dataset_size"].reindex(imagenet.models)
    evaluated = imagenet.accuracies[setting].notna()
    assert evaluated.sum() > 100
    assert imagenet.sizes.at["resnet50", setting] == 50_000
    pd.testing.assert_series_equal(imagenet.sizes.loc[evaluated, setting], expected[evaluated],
                                   check_names=False)


@pytest.mark.parametrize("name", ["imagenet-reference", "timm-reference"])
def test_every_evaluated_cell_has_a_size(name):
    tb = load_testbed(name)
    missing = tb.accuracies.notna() & tb.sizes.isna()
    assert not missing.to_numpy().any(), missing.sum()[lambda s: s > 0].to_dict()


# ---------------------------------------------------------------------- timm-reference


def test_timm_reference_has_1556_rows_and_the_8_aligned_settings(timm):
    assert len(timm) == 1556
    assert len(set(timm.models)) == 1556
    assert timm.settings == TIMM_SETTINGS
    assert [s for s, _ in SETTINGS.values()] == TIMM_SETTINGS


@pytest.mark.parametrize(("setting", "n"), [(s, n) for s, n in SETTINGS.values()])
def test_timm_reference_sizes(timm, setting, n):
    evaluated = timm.accuracies[setting].notna()
    assert evaluated.sum() >= 1555
    assert (timm.sizes.loc[evaluated, setting] == n).all()


def test_timm_model_at_two_resolutions_gets_at_img_size_name_and_test_res_tag(timm):
    raw = timm_results("imagenet").set_index(["model", "img_size"])
    raw_r = timm_results("imagenet-r").set_index(["model", "img_size"])
    plain, larger = "convnext_atto.d2_in1k", "convnext_atto.d2_in1k@288"
    assert timm.metadata.at[plain, "img_size"] == 224
    assert timm.metadata.at[larger, "img_size"] == 288
    assert timm.metadata.at[plain, "tags"] == ("timm",)
    assert "test-res" in timm.metadata.at[larger, "tags"]
    assert timm.metadata.at[larger, "timm_model"] == plain
    for row, size in [(plain, 224), (larger, 288)]:
        assert timm.accuracies.at[row, "val"] == pytest.approx(raw.at[(plain, size), "top1"])
        assert timm.accuracies.at[row, "imagenet-r"] == pytest.approx(raw_r.at[(plain, size), "top1"])


def test_every_duplicated_timm_model_keeps_its_plain_name_at_the_smallest_resolution(timm):
    raw = timm_results("imagenet")
    dup = raw[raw["model"].duplicated(keep=False)]
    assert dup["model"].nunique() == 290
    smallest = dup.groupby("model")["img_size"].min()
    assert (timm.metadata.loc[smallest.index, "img_size"] == smallest).all()
    test_res = [m for m in timm.models if "test-res" in timm.metadata.at[m, "tags"]]
    assert len(test_res) == 290
    assert all("@" in m for m in test_res)
    for m in test_res:
        base, size = m.split("@")
        assert int(size) == timm.metadata.at[m, "img_size"] > timm.metadata.at[base, "img_size"]


@pytest.mark.parametrize(("model", "expected"), [
    ("resnet50.tv_in1k", "STANDARD"),
    ("resnet50.a1_in1k", "STANDARD"),
    ("resnet50.ra_in1k", "STANDARD"),  # RandAugment is not AugMix ("ram")
    ("convnextv2_base.fcmae_ft_in1k", "STANDARD"),  # self-supervised on ImageNet-1k only
    ("deit_base_distilled_patch16_224.fb_in1k", "STANDARD"),
    ("convnext_base.fb_in22k_ft_in1k", "MORE_DATA"),
    ("convnextv2_base.fcmae_ft_in22k_in1k", "MORE_DATA"),
    ("vit_base_patch16_clip_224.laion2b_ft_in1k", "MORE_DATA"),
    ("vit_base_patch16_clip_224.openai_ft_in1k", "MORE_DATA"),
    ("tf_efficientnet_b0.ns_jft_in1k", "MORE_DATA"),
    ("resnet50.fb_swsl_ig1b_ft_in1k", "MORE_DATA"),
    ("resnet50.fb_ssl_yfcc100m_ft_in1k", "MORE_DATA"),
    ("inception_v3.tf_adv_in1k", "LP_ADV"),
    ("inception_resnet_v2.tf_ens_adv_in1k", "LP_ADV"),
    ("tf_efficientnet_b0.ap_in1k", "ROBUST_INTV"),
    ("resnet50.am_in1k", "ROBUST_INTV"),
    ("resnet50.ram_in1k", "ROBUST_INTV"),
])
def test_classify_pretrain_from_the_pretrained_tag(timm, model, expected):
    assert classify_pretrain(model)[0] == expected
    assert timm.model_types[model] == expected  # the shipped table uses the same rule


@pytest.fixture(scope="module")
def arch_pretrain() -> dict[str, str]:
    meta = pd.read_csv(data_path("reference", "timm", "model_metadata-in1k.csv"))
    return dict(zip(meta["model"], meta["pretrain"]))


@pytest.mark.parametrize(("arch", "pretrain", "expected"), [
    ("bat_resnext26ts", "in1k", "STANDARD"),
    ("cait_s24_224", "in1k-dist", "STANDARD"),
    ("adv_inception_v3", "in1k-adv", "LP_ADV"),
    ("tf_efficientnet_b0_ap", "in1k-ap", "ROBUST_INTV"),
    ("tf_efficientnet_b0_ns", "jft300m-ns", "MORE_DATA"),
    ("swsl_resnet50", "ig1b-swsl", "MORE_DATA"),
    ("beit_base_patch16_224", "in21k-selfsl", "MORE_DATA"),
])
def test_classify_pretrain_of_an_untagged_arch_uses_the_metadata_file(arch_pretrain, arch, pretrain, expected):
    assert arch_pretrain[arch] == pretrain
    model_type, reason = classify_pretrain(arch, arch_pretrain)
    assert model_type == expected
    assert pretrain in reason


def test_classify_pretrain_of_an_unknown_model_is_unknown(arch_pretrain):
    assert classify_pretrain("mystery_net")[0] == "UNKNOWN"
    assert classify_pretrain("mystery_net", arch_pretrain)[0] == "UNKNOWN"
    assert classify_pretrain("mystery_net.some_tag", arch_pretrain)[0] == "UNKNOWN"


def test_unclassified_models_is_a_list_of_unknown_timm_models(timm):
    left = unclassified_models()
    assert isinstance(left, list)
    assert all(timm.model_types[m] == "UNKNOWN" for m in left)
    assert len(left) == int((timm.model_types == "UNKNOWN").sum())


# ---------------------------------------------------------------------- both references


def test_references_share_the_val_and_v2_settings(imagenet, timm):
    shared = set(imagenet.settings) & set(timm.settings)
    assert {"val", V2, "imagenet-a", "imagenet-r", "imagenet-sketch"} <= shared
    assert "val-real" not in imagenet.settings


def test_torchvision_resnet50_agrees_across_references(imagenet, timm):
    # the cross-check quoted in the timm data README: 76.13 / 63.21 (Taori) vs 76.16 / 63.19 (timm)
    assert timm.accuracies.at["resnet50.tv_in1k", "val"] == pytest.approx(76.16, abs=0.005)
    for setting in ["val", V2]:
        assert imagenet.accuracies.at["resnet50", setting] == pytest.approx(
            timm.accuracies.at["resnet50.tv_in1k", setting], abs=0.1)


@pytest.mark.parametrize("how", ["method", "name"])
def test_merging_both_references_gives_1894_models(imagenet, timm, how):
    merged = imagenet.merge(timm) if how == "method" else load_testbed("imagenet-reference+timm-reference")
    assert len(merged) == 1894
    assert len(merged.settings) == 214  # 213 + val-real
    assert merged.model_types["resnet50"] == "STANDARD"
    assert merged.accuracies.at["resnet50.tv_in1k", "val"] == pytest.approx(76.156)


# ---------------------------------------------------------------------- load_testbed of files and typos


def test_load_testbed_of_a_csv_path(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("model,model_type,val,imagenetv2-matched-frequency-format-val\n"
                    "resnet50,STANDARD,76.13,63.21\nresnet18,STANDARD,69.76,57.3\n")
    for arg in (path, str(path)):
        tb = load_testbed(arg)
        assert tb.models == ["resnet50", "resnet18"]
        assert tb.name == "mine"
    assert load_testbed(tb) is tb


def test_load_testbed_of_a_missing_csv_raises_data_error(tmp_path):
    with pytest.raises(DataError, match="no such testbed file"):
        load_testbed(tmp_path / "nope.csv")


def test_load_testbed_typo_suggests_the_reference_name():
    with pytest.raises(ConfigError, match=r"unknown testbed 'imagenet-referense'; did you mean 'imagenet-reference'"):
        load_testbed("imagenet-referense")


# ---------------------------------------------------------------------- packaging


@pytest.mark.parametrize(("folder", "licence", "first_line"), [
    ("imagenet", "LICENSE-imagenet-testbed", "MIT License"),
    ("timm", "LICENSE-timm", "Apache License"),
])
def test_licence_notice_ships_next_to_the_reference_data(folder, licence, first_line):
    root = files("shiftbench").joinpath("data", "reference", folder)
    assert root.joinpath(licence).is_file()
    assert first_line in root.joinpath(licence).read_text()
    data_files = [p.name for p in root.iterdir() if p.name.endswith(".csv")]
    assert data_files, f"no data next to {licence}"


def test_testbed_and_reference_import_without_torch():
    # a finder that refuses torch: importing it anywhere raises ImportError
    code = (
        "import sys, importlib.abc\n"
        "class NoTorch(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'torchvision'):\n"
        "            raise ImportError(f'{name} is blocked in this test')\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        "import shiftbench, shiftbench.testbed, shiftbench.reference, shiftbench.analysis\n"
        "from shiftbench.reference import load_testbed\n"
        "tb = load_testbed('timm-reference')\n"
        "assert len(tb) == 1556\n"
        "shiftbench.effective_robustness(tb, 'val', 'imagenet-a', n_resamples=10)\n"
        "assert 'torch' not in sys.modules and 'torchvision' not in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
