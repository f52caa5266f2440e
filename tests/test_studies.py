"""The studies package: one shape (config dataclass, run(config, store) -> StudyResult), a registry
of kinds each with its report section, results through Store.write_study, and nothing below the
studies importing them."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pandas as pd
import pytest

import shiftbench
from shiftbench.errors import ConfigError, StoreError
from shiftbench.store import Store
from shiftbench.studies import (
    AttributeConfig, ReplicationConfig, StudyResult, get_study, list_studies, run_study, study_name)

SRC = Path(shiftbench.__file__).parent
KINDS = {"resolution": "resolution", "compositing": "compositing", "trajectory": "fine-tuning",
         "attributes": "attributes", "replication": "replication", "transfer": "transfer"}


def test_every_study_kind_is_registered_with_a_config_dataclass_and_a_report_section():
    import shiftbench.report.html  # noqa: F401 - imports every section module
    from shiftbench.report.sections import list_sections

    studies = list_studies()
    assert {k: s.section for k, s in studies.items()} == KINDS
    sections = list_sections()
    for kind, study in studies.items():
        assert study.kind == kind and dataclasses.is_dataclass(study.config_type)
        assert study.section in sections, f"{kind}: no report section {study.section!r}"
    with pytest.raises(ConfigError, match="did you mean 'resolution'"):
        get_study("resolutoin")
    with pytest.raises(ConfigError, match="not the config of a study"):
        run_study(object())


def test_nothing_below_the_studies_imports_them():
    below = [SRC / "settings.py", *(SRC / "engine").rglob("*.py"), *(SRC / "shifts").rglob("*.py"),
             *(SRC / "datasets").rglob("*.py")]
    for path in below:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n == "shiftbench.studies" or n.startswith("shiftbench.studies.") for n in names), path


def test_a_study_result_is_written_through_the_store(tmp_path):
    result = StudyResult("resolution", study_name("timm/r50", "folder:/x"), pd.DataFrame({"resolution": [64]}),
                         {"model": "r50"})
    path = result.write(tmp_path / "s")
    store = Store(tmp_path / "s")
    assert path == result.path and store.study_names("resolution") == ["timm_r50__folder_x-ea16bb5d59"]
    assert store.study_meta("resolution", "timm_r50__folder_x-ea16bb5d59")["model"] == "r50"


def test_replication_runs_as_a_study_and_is_stored_under_its_manifest_name(tmp_path):
    cands = pd.DataFrame({"path": [f"img/{c}{i}.png" for c in "ab" for i in range(3)],
                          "label": ["a"] * 3 + ["b"] * 3, "selection_frequency": [0.2, 0.9, 0.5, 0.1, 0.3, 0.7]})
    config = ReplicationConfig(cands, strategy="top-images", images_per_class=1, root=tmp_path,
                               output=tmp_path / "v2.csv")
    result = run_study(config, store=tmp_path / "s")
    assert result.kind == "replication" and result.name == "v2"
    assert sorted(result.value.manifest["path"].map(lambda p: Path(p).name)) == ["a1.png", "b2.png"]
    assert pd.read_csv(tmp_path / "v2.csv")["path"].tolist() == ["img/a1.png", "img/b2.png"]
    assert Store(tmp_path / "s").study_names("replication") == ["v2"]
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))
    with pytest.raises(StoreError, match="plain name"):
        run_study(dataclasses.replace(config, name="../x"), store=tmp_path / "s")


def test_carving_without_a_model_stores_nothing_and_a_model_needs_an_output_folder(tmp_path):
    frame = pd.DataFrame({"path": [f"{i}.png" for i in range(40)], "label": [i % 2 for i in range(40)],
                          "colour": ["red"] * 20 + ["blue"] * 20})
    result = run_study(AttributeConfig(frame, train={"colour": "red"}, root=tmp_path), store=tmp_path / "s")
    assert result.value.names == ["train", "id-test", "colour=blue"] and not (tmp_path / "s").exists()
    assert list(result.frame["split"]) == ["train", "id-test", "colour=blue"]
    with pytest.raises(ConfigError, match="output"):
        run_study(AttributeConfig(frame, train={"colour": "red"}, model="python:m:f"))
