"""One evaluation request, validated once, run by an executor that owns the model × dataset loop."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from PIL import Image

from shiftbench.engine import EvalRequest, Executor, LocalExecutor, evaluate
from shiftbench.errors import ConfigError
from shiftbench.settings import Setting
from shiftbench.store import Store

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
from oracle_models import colour_of  # noqa: E402


def test_request_resolves_settings_once_and_slices_by_dataset_and_shard():
    req = EvalRequest.build(["python:a:f", "python:b:g"], ["val", "imagenet-r", "val-on-imagenet-a-classes"],
                            store="somewhere", batch_size=8)
    assert all(isinstance(s, Setting) for s in req.settings) and req.store == Path("somewhere")
    assert [[s.name for s in g] for g in req.groups()] == [["val", "val-on-imagenet-a-classes"], ["imagenet-r"]]
    tasks = list(req.tasks())
    both = ("python:a:f", "python:b:g")  # a task streams its dataset once for every model
    assert [(t.models, t.setting_names, t.shard) for t in tasks] == [
        (both, ["val", "val-on-imagenet-a-classes"], None), (both, ["imagenet-r"], None)]
    sharded = list(req.tasks(shards=3))
    assert [(t.setting_names[0], t.shard) for t in sharded] == [
        ("val", (0, 3)), ("val", (1, 3)), ("val", (2, 3)), ("imagenet-r", (0, 3)), ("imagenet-r", (1, 3)),
        ("imagenet-r", (2, 3))]
    assert all(t.batch_size == 8 for t in tasks + sharded)
    assert isinstance(LocalExecutor(), Executor)


@pytest.mark.parametrize("kw, match", [
    ({"settings": "val+spater.3"}, "did you mean 'spatter'"),
    ({"convention": "argmax"}, "convention"),
    ({"batch_size": 0}, "batch_size=0"),
    ({"limit": 0}, "limit=0"),
    ({"settings": []}, "no setting given"),
    ({"models": []}, "no model given"),
    ({"batchsize": 4}, "unknown evaluation option"),
])
def test_request_is_validated_where_it_is_built(kw, match):
    args = {"models": "python:a:f", "settings": "val", **kw}
    with pytest.raises(ConfigError, match=match):
        EvalRequest.build(args.pop("models"), args.pop("settings"), **args)


def test_evaluate_takes_a_list_of_models_and_returns_every_row(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    for i in range(10):
        d = tmp_path / "imgs" / f"class{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (16, 16), colour_of(i % 7)).save(d / f"{i}.png")
    models = ["python:oracle_models:oracle7", "python:oracle_models:oracle7_wide"]
    res = evaluate(models, [f"folder:{tmp_path / 'imgs'}"], store=tmp_path / "s", workers=0, progress=False)
    assert list(res["model"]) == ["oracle_models.oracle7", "oracle_models.oracle7_wide"]
    assert list(res["accuracy"]) == [100.0, 100.0] and len(Store(tmp_path / "s").runs()) == 2
