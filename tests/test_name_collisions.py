"""One name, one file (DESIGN: "every name on disk is derived injectively"): names that differ only
in ``/``, ``_``, ``-``, spaces or case never share a stored study, a report file or a carved
manifest, and whoever reads a name back finds what was written."""
from __future__ import annotations

import itertools
import json
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from typer.testing import CliRunner

from shiftbench.commands.multilabel import split_label
from shiftbench.commands.similarity import study_name as similarity_study_name
from shiftbench.datasets.attributes import split_file_name
from shiftbench.report.section_similarity import pairs_csv, similarity_stem
from shiftbench.report.tables import file_slug, trajectory_stem
from shiftbench.store import Store
from shiftbench.store.files import name_slug
from shiftbench.studies import StudyResult, study_name
from shiftbench.studies.base import stored_study_name

#: Characters that the old derivations folded together, and a letter in both cases.
FOLDED = ["/", "_", "-", " ", ":", "a", "A"]
#: Every string of up to four of them (2,801 names).
VARIANTS = ["".join(p) for n in range(5) for p in itertools.product(FOLDED, repeat=n)]
SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+=-")


def _file_name_ok(stem: str) -> bool:
    return bool(stem) and set(stem) <= SAFE | {"@"} and not stem.startswith(".") and len(stem) < 200


# ---------------------------------------------------------------------------- the naming functions
@pytest.mark.parametrize("derive", [name_slug, file_slug, lambda n: name_slug(n, max_len=3),
                                    lambda n: study_name("m", n), lambda n: study_name(n, "val"),
                                    similarity_study_name, lambda n: split_file_name(f"colour={n}")],
                         ids=["name_slug", "file_slug", "name_slug-short", "study_name-setting",
                              "study_name-model", "similarity", "carved-split"])
def test_every_derivation_is_injective_over_names_differing_in_punctuation_and_case(derive):
    names = [derive(v) for v in VARIANTS]
    assert len(set(names)) == len(VARIANTS)
    assert all(_file_name_ok(Path(n).stem) for n in names)
    assert [derive(v) for v in VARIANTS[:50]] == names[:50]          # the same name, the same file


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40))
def test_name_slug_is_injective_and_a_safe_file_name(a, b):
    for lower in (False, True):
        x, y = name_slug(a, lower=lower), name_slug(b, lower=lower)
        assert (x == y) == (a == b)
        assert _file_name_ok(x) and len(x) <= 48 + 11


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=12), min_size=1, max_size=3), st.lists(st.text(max_size=12), min_size=1, max_size=3))
def test_study_names_are_injective_in_their_parts_also_where_a_part_ends(a, b):
    assert (study_name(*a) == study_name(*b)) == (a == b)
    assert study_name("a__b", "c") != study_name("a", "b__c")


def test_the_contract_examples_hold():
    assert name_slug("folder:/data/good") == "folder-data-good-37b3b9f4af"
    assert name_slug("folder:/data_good") != name_slug("folder:/data/good")
    assert study_name("timm/resnet50.a1_in1k", "folder:/data/x").startswith("timm_resnet50.a1_in1k__folder_data_x-")
    assert trajectory_stem("val", "a_vs_b") != trajectory_stem("a", "b_vs_val")


# ---------------------------------------------------------------------------- stored studies
def test_two_studies_on_settings_differing_only_in_slash_or_underscore_are_both_kept(tmp_path):
    store = Store(tmp_path / "s")
    settings_ = ["folder:/t/data/good", "folder:/t/data_good", "folder:/t/data-good", "folder:/t/data good",
                 "folder:/t/Data/good"]
    for i, setting in enumerate(settings_):
        name = stored_study_name(store, "resolution", ("m", setting), {"model": "m", "setting": setting})
        StudyResult("resolution", name, pd.DataFrame({"accuracy": [float(i)]}), {"model": "m", "setting": setting}
                    ).write(store)
    assert len(store.study_names("resolution")) == len(settings_)
    for i, setting in enumerate(settings_):
        name = study_name("m", setting)
        assert store.study_meta("resolution", name)["setting"] == setting
        assert store.read_study("resolution", name)["accuracy"].tolist() == [float(i)]
    assert sorted(store.read_studies("resolution")["accuracy"]) == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_a_rerun_in_an_older_store_replaces_its_study_but_never_another_settings(tmp_path):
    store = Store(tmp_path / "s")
    # written before names carried a hash: "m__folder_t_data_good" holds folder:/t/data_good
    store.write_study("resolution", "m__folder_t_data_good", pd.DataFrame({"accuracy": [1.0]}),
                      {"model": "m", "setting": "folder:/t/data_good"})
    same = stored_study_name(store, "resolution", ("m", "folder:/t/data_good"),
                             {"model": "m", "setting": "folder:/t/data_good"})
    other = stored_study_name(store, "resolution", ("m", "folder:/t/data/good"),
                              {"model": "m", "setting": "folder:/t/data/good"})
    assert same == "m__folder_t_data_good"                  # recorded name: replaced, not duplicated
    assert other == study_name("m", "folder:/t/data/good")   # the old name is another setting's


CONSTANT_MODEL = textwrap.dedent('''
    import torch

    class Constant(torch.nn.Module):
        num_classes = 2

        def forward(self, x):
            return torch.zeros(x.shape[0], 2)

    def build():
        return Constant()
''')


def test_resolution_sweeps_on_data_slash_good_and_data_underscore_good_are_two_studies(tmp_path, monkeypatch):
    """The hostile tester's case: ``resolution-sweep`` on ``folder:/t/data/good``, then on
    ``folder:/t/data_good``, used to keep one study (the second overwrote the first)."""
    from shiftbench.studies.resolution import resolution_sweep

    for folder, n in (("data/good", 2), ("data_good", 3)):
        for cls in ("a", "b"):
            (tmp_path / folder / cls).mkdir(parents=True)
            for i in range(n):
                Image.new("RGB", (16, 16), (40 * i, 0, 0)).save(tmp_path / folder / cls / f"{i}.png")
    (tmp_path / "constant_models.py").write_text(CONSTANT_MODEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    store = Store(tmp_path / "store")
    sweeps = {folder: resolution_sweep("python:constant_models:build", f"folder:{tmp_path / folder}",
                                       resolutions=(16,), store=store, batch_size=8)
              for folder in ("data/good", "data_good")}
    names = {f: s.attrs["study"] for f, s in sweeps.items()}
    assert len(set(names.values())) == 2 and sorted(store.study_names("resolution")) == sorted(names.values())
    for folder, n in (("data/good", 2), ("data_good", 3)):
        assert store.read_study("resolution", names[folder])["n_examples"].tolist() == [2 * n]
        assert store.study_meta("resolution", names[folder])["setting"] == f"folder:{tmp_path / folder}"


# ---------------------------------------------------------------------------- report files
def test_settings_differing_only_in_slash_or_dash_get_their_own_similarity_files(tmp_path):
    settings_ = ["folder:/x/data/med", "folder:/x/data-med", "folder:/x/data_med", "folder:/x/data med",
                 "folder:/x/Data/med"]
    stems = [similarity_stem(tmp_path, s) for s in settings_]
    assert len(set(stems)) == len(settings_) and all(p.parent == tmp_path / "similarity" for p in stems)
    csvs = [pairs_csv(p) for p in stems]
    assert len(set(csvs)) == len(settings_)
    for i, csv in enumerate(csvs):                     # each one written: none overwrites another
        csv.parent.mkdir(parents=True, exist_ok=True)
        csv.write_text(f"{i}\n")
    assert sorted(p.read_text() for p in (tmp_path / "similarity").glob("*-pairs.csv")) == \
        [f"{i}\n" for i in range(len(settings_))]
    assert stems[0].name.startswith("folder-x-data-med-") and stems[1].name.startswith("folder-x-data-med-")


def test_shift_figures_compositing_and_resolution_files_are_one_per_name():
    labels = ["val vs folder:/x/data/med", "val vs folder:/x/data-med", "ImageNet-A", "ImageNet A", "imagenet-a"]
    assert len({file_slug(label) for label in labels}) == len(labels)
    assert len({trajectory_stem("val", y) for y in labels}) == len(labels)
    assert len({trajectory_stem(x, "val") for x in labels}) == len(labels)


def test_the_models_table_keeps_a_column_per_shift_whose_labels_share_a_slug(tmp_path):
    from report_testbed import V2, tiny_testbed

    from shiftbench.report import ShiftPair, write_html_report

    shifts = [ShiftPair("ImageNet V2", "val", V2), ShiftPair("ImageNet-V2", "val", V2)]
    write_html_report([tiny_testbed()], tmp_path / "rep", shifts=shifts, n_resamples=20, figure_formats=(".png",))
    models = pd.read_csv(tmp_path / "rep" / "tiny" / "models.csv")
    assert {"er_imagenet-v2", "er_imagenet-v2-2"} <= set(models.columns)
    assert (tmp_path / "rep" / "tiny" / f"{file_slug('ImageNet V2')}.png").exists()
    assert (tmp_path / "rep" / "tiny" / f"{file_slug('ImageNet-V2')}.png").exists()


# ---------------------------------------------------------------------------- carve
VALUES = ["a b", "a/b", "a_b", "A_b"]


def _manifest(folder: Path) -> Path:
    """A manifest with attribute ``colour``: 8 ``red`` rows (the training value) and 2 rows of
    each value in :data:`VALUES`."""
    (folder / "img").mkdir(parents=True)
    rows = []
    for value in ["red"] * 4 + VALUES:
        for label in (0, 1):
            i = len(rows)
            Image.fromarray(np.full((4, 4), i, np.uint8)).save(folder / "img" / f"{i}.png")
            rows.append({"path": f"img/{i}.png", "label": label, "colour": value})
    path = folder / "m.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_carve_writes_one_manifest_per_attribute_value_and_counts_the_files_it_wrote(tmp_path):
    from shiftbench.cli import app

    manifest = _manifest(tmp_path / "data")
    out = tmp_path / "carved"
    result = CliRunner().invoke(app, ["carve", "--manifest", str(manifest), "--train", "colour=red", "--id-test", "2",
                                      "-o", str(out)])
    assert result.exit_code == 0, result.output
    on_disk = sorted(p.name for p in out.glob("*.csv"))
    assert len(on_disk) == 2 + len(VALUES)                               # train, id-test, one per value
    assert f"wrote {len(on_disk)} manifests" in result.output
    summary = json.loads((out / "splits.json").read_text())
    files = {split: info["file"] for split, info in summary["splits"].items()}
    assert sorted(files.values()) == on_disk and len(set(files.values())) == len(files)
    for value in VALUES:
        split = f"colour={value}"
        assert files[split] == split_file_name(split)
        rows = pd.read_csv(out / files[split])
        assert len(rows) == 2 and summary["splits"][split]["value"] == value
        assert summary["splits"][split]["setting"] == f"manifest:{(out / files[split]).resolve()}"
        assert split_label(f"manifest:{out / files[split]}") == split   # read back from splits.json
    # a re-carve into the same folder removes exactly the files the first carve listed
    again = CliRunner().invoke(app, ["carve", "--manifest", str(manifest), "--train", "colour=red,a b", "--id-test", "2",
                                     "-o", str(out)])
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in out.glob("*.csv")) == sorted(
        ["train.csv", "id-test.csv", *(split_file_name(f"colour={v}") for v in VALUES if v != "a b")])


def test_an_attribute_whose_name_holds_an_equals_sign_is_refused(tmp_path):
    from shiftbench.errors import ConfigError
    from shiftbench.studies.attributes import attribute_splits

    frame = pd.DataFrame({"path": [f"{i}.png" for i in range(8)], "label": [i % 2 for i in range(8)],
                          "a=b": ["c"] * 4 + ["d"] * 4})
    with pytest.raises(ConfigError, match="without '='"):
        attribute_splits(frame, train={"a=b": "c"}, root=tmp_path)


def test_a_carve_from_before_file_names_carried_a_hash_still_reads_back():
    assert split_label("manifest:/nowhere/ood-zoom=large.csv") == "zoom=large"
    assert split_label(f"manifest:/nowhere/{split_file_name('zoom=large')}") == "zoom=large"
    assert split_label("manifest:/nowhere/id-test.csv") == "id-test" and split_label("val") == "val"
