"""The two shipped ImageNet -> CIFAR-10 class maps: shiftbench's ``imagenet-to-cifar10`` and
CINIC-10's synset assignment ``imagenet-to-cifar10-cinic`` (Darlow et al. 2018), compared class by class."""
from __future__ import annotations

import csv
from types import SimpleNamespace

import numpy as np
import pytest

from shiftbench.datasets import classmaps as cm
from shiftbench.datasets.arrays import CIFAR10_CLASSES
from shiftbench.errors import ConfigError
from shiftbench.settings import get_setting
from shiftbench.views import ClassMapSpec
from shiftbench.views.classmap import SHIPPED_CLASS_MAPS, class_map_path

OURS, CINIC = "imagenet-to-cifar10", "imagenet-to-cifar10-cinic"


def rows(name: str) -> list[dict[str, str]]:
    text = class_map_path(name).read_text()
    return list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))


def per_class(name: str) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {c: set() for c in CIFAR10_CLASSES}
    for r in rows(name):
        out[r["target"]].add(int(r["source"]))
    return out


def test_both_maps_ship_by_name_and_the_cinic_file_names_its_source_and_licence():
    assert set(SHIPPED_CLASS_MAPS) == {OURS, CINIC}
    head = class_map_path(CINIC).read_text().splitlines()[:3]
    assert any("BayesWatch/cinic-10" in line for line in head) and any("MIT" in line for line in head)
    readme = (cm.CLASSMAP_DIR / "README.md").read_text()
    assert "imagenet_to_cifar10_cinic.csv" in readme and "MIT licence" in readme and "Andreassen" in readme


def test_cinic_rows_are_imagenet_1k_classes_with_their_wnids():
    for r in rows(CINIC):
        assert (r["wnid"], r["imagenet_name"]) == cm.imagenet_classes()[int(r["source"])]


def test_counts_per_class_of_the_two_maps():
    ours, cinic = per_class(OURS), per_class(CINIC)
    assert {c: len(v) for c, v in cinic.items()} == {
        "airplane": 1, "automobile": 10, "bird": 59, "cat": 13, "deer": 1, "dog": 41, "frog": 3, "horse": 1,
        "ship": 6, "truck": 8}
    assert {c: len(v) for c, v in ours.items()} == {
        "airplane": 3, "automobile": 10, "bird": 59, "cat": 5, "deer": 3, "dog": 118, "frog": 3, "horse": 1,
        "ship": 15, "truck": 5}
    assert sum(map(len, cinic.values())) == 143 and len(set().union(*cinic.values())) == 142
    assert sum(map(len, ours.values())) == len(set().union(*ours.values())) == 222


def test_overlap_of_the_two_maps():
    ours, cinic = per_class(OURS), per_class(CINIC)
    same = {c for c in CIFAR10_CLASSES if ours[c] == cinic[c]}
    assert same == {"automobile", "bird", "frog", "horse"}
    assert cinic["airplane"] < ours["airplane"] and cinic["cat"] > ours["cat"]    # airliner only; + big cats
    assert cinic["cat"] - ours["cat"] == set(range(286, 294))
    assert cinic["deer"] == {347} and not cinic["deer"] & ours["deer"]            # bison vs three antelopes
    assert cinic["dog"] - ours["dog"] == set(range(269, 281))                     # wolves, foxes, ...
    assert len(cinic["dog"] & ours["dog"]) == 29
    assert cinic["ship"] < ours["ship"]
    assert cinic["truck"] - ours["truck"] == {656, 717, 734}                      # minivan, pickup, police van
    pairs = lambda m: {(s, c) for c, v in m.items() for s in v}                
    # 1 + 10 + 59 + 5 + 0 + 29 + 3 + 1 + 6 + 5 pairs in common: 119 of CINIC-10's 143, of our 222
    assert len(pairs(ours) & pairs(cinic)) == 119


def test_minivan_feeds_automobile_and_truck_in_cinic():
    view = ClassMapSpec(CINIC).bind(
        SimpleNamespace(class_names=None, num_classes=1000, label_space="imagenet-1k"),
        SimpleNamespace(class_names=list(CIFAR10_CLASSES), num_classes=10, name="cifar10"))
    t2s = view.target_to_sources
    auto, truck, deer = (CIFAR10_CLASSES.index(c) for c in ("automobile", "truck", "deer"))
    assert 656 in t2s[auto] and 656 in t2s[truck]
    logits = np.zeros((1, 1000))
    logits[0, 347] = 5.0                       # bison scores as deer through CINIC-10's map
    assert view.scores(logits).argmax() == deer
    assert view.name.startswith(f"classmap:{CINIC}@")


def test_the_cinic_map_is_a_setting_suffix_and_a_typo_suggests_it():
    assert get_setting(f"cifar10@classmap:{CINIC}").name == f"cifar10@classmap:{CINIC}"
    with pytest.raises(ConfigError, match=f"did you mean '{CINIC}'"):
        get_setting("cifar10@classmap:imagenet-to-cifar10-cinik")
