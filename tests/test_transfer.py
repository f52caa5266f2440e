"""VTAB-1k-style transfer (shiftbench.studies.transfer, shiftbench.analysis.transfer): the seeded
800/200 draw, the C chosen on the validation part and refit on all, results as testbed cells,
resume and the feature cache, penultimate features, bad input, the CLI and per-group means."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from typer.testing import CliRunner

import shiftbench.studies.transfer as T
from shiftbench import testbed as tbmod
from shiftbench.analysis.transfer import (
    task_groups,
    transfer_group_means,
    transfer_setting,
)
from shiftbench.datasets import load_dataset
from shiftbench.errors import ConfigError, DataError, ModelError
from shiftbench.models import load_model
from shiftbench.store import Store
from shiftbench.studies import study_name

SMALL = {"n_train": 80, "n_val": 20}


def colour_folder(root: Path, n: int, classes: int = 7, seed: int = 0, names: list[str] | None = None) -> Path:
    """``n`` 16 x 16 noisy images of a class colour in ``class0``.. (or ``names``) folders."""
    rng = np.random.default_rng(seed)
    names = names or [f"class{c}" for c in range(classes)]
    for i in range(n):
        c = i % len(names)
        d = root / names[c]
        d.mkdir(parents=True, exist_ok=True)
        base = np.array([(37 * c) % 256, (90 + 23 * c) % 256, 160], np.float32)
        img = np.clip(base + rng.normal(0, 40, (16, 16, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(d / f"{i:04d}.png")
    return root


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> T.TransferTask:
    root = tmp_path_factory.mktemp("task")
    colour_folder(root / "train", 140, seed=1)
    colour_folder(root / "test", 35, seed=2)
    return T.TransferTask("colours", f"folder:{root / 'train'}", f"folder:{root / 'test'}", "natural")


def run(task, store, model="python:transfer_models:tiny", **kw):
    return T.transfer(model, [task], store=store, progress=False, **{**SMALL, **kw})


def test_the_800_200_draw_is_seeded_disjoint_and_falls_back_to_all_examples():
    tr, va, note = T.draw_split(1500, seed=3)
    tr2, va2, _ = T.draw_split(1500, seed=3)
    assert (len(tr), len(va), note) == (800, 200, "")
    assert not set(tr) & set(va) and (tr == tr2).all() and (va == va2).all()
    assert set(T.draw_split(1500, seed=4)[0]) != set(tr)
    tr, va, note = T.draw_split(500)
    assert (len(tr), len(va)) == (400, 100) and "fewer than 1,000" in note and not set(tr) & set(va)
    with pytest.raises(DataError, match="at least 20"):
        T.draw_split(T.MIN_EXAMPLES - 1)


def test_the_probe_chooses_the_c_with_the_best_validation_accuracy_and_refits_on_train_and_val(task, tmp_path):
    frame = run(task, tmp_path / "s")
    row = frame.iloc[0]
    assert (row["n_train"], row["n_val"], row["n_test"]) == (80, 20, 35)
    assert row["setting"] == "transfer:colours" and row["hyperparameter"] == "C"
    # an independent scikit-learn loop over the cached features of the same draw
    (train_cache,) = [p for p in (tmp_path / "s" / "features").glob("*.npz") if len(np.load(p)["positions"]) == 100]
    (test_cache,) = [p for p in (tmp_path / "s" / "features").glob("*.npz") if p != train_cache]
    feats, test = np.load(train_cache)["features"], np.load(test_cache)["features"]
    targets = np.asarray(load_dataset("folder", path=task.train.partition(":")[2]).targets)
    test_targets = np.asarray(load_dataset("folder", path=task.test.partition(":")[2]).targets)
    tr, va, _ = T.draw_split(140, 80, 20, seed=0)
    x, y = feats, targets[np.concatenate([tr, va])]

    def fit(xs, ys, c):
        scaler = StandardScaler().fit(xs)
        return lambda z: LogisticRegression(C=c, max_iter=1000).fit(scaler.transform(xs), ys).predict(scaler.transform(z))
    val = {c: np.mean(fit(x[:80], y[:80], c)(x[80:]) == y[80:]) for c in T.C_GRID}
    best = max(val, key=lambda c: (val[c], -T.C_GRID.index(c)))
    assert row["chosen"] == best and row["val_accuracy"] == pytest.approx(100 * val[best])
    expected = 100 * np.mean(fit(x, y, best)(test) == test_targets)
    assert row["accuracy"] == pytest.approx(expected)


def test_a_transfer_result_is_a_testbed_cell_beside_the_robustness_settings(task, tmp_path):
    frame = run(task, tmp_path / "s")
    tb = tbmod.Testbed.from_store(tmp_path / "s")
    assert "transfer:colours" in tb.settings
    assert tb.accuracies.loc["transfer_models.tiny", "transfer:colours"] == pytest.approx(frame["accuracy"][0])
    assert tb.sizes.loc["transfer_models.tiny", "transfer:colours"] == 35
    study = Store(tmp_path / "s").read_study("transfer", study_name("transfer_models.tiny", "linear", "seed0"))
    assert list(study["task"]) == ["colours"]
    assert T.stored_groups(tmp_path / "s") == {"colours": "natural"}
    assert transfer_group_means(tb, T.stored_groups(tmp_path / "s")).loc["transfer_models.tiny", "natural"] == \
        pytest.approx(frame["accuracy"][0])


def test_a_rerun_skips_finished_keys_and_a_killed_probe_reuses_the_cached_features(task, tmp_path, monkeypatch):
    calls = []
    extract = T.extract_features
    monkeypatch.setattr(T, "extract_features", lambda *a, **k: calls.append(1) or extract(*a, **k))
    first = run(task, tmp_path / "s")
    assert len(calls) == 2                                   # train draw and test set, once each
    again = run(task, tmp_path / "s")
    assert len(calls) == 2 and again["accuracy"][0] == first["accuracy"][0]
    for done in (tmp_path / "s" / "done").glob("*.json"):   # killed after the features, before the result
        done.unlink()
    probed = run(task, tmp_path / "s")
    assert len(calls) == 2 and probed["accuracy"][0] == first["accuracy"][0]
    run(task, tmp_path / "s", seed=1)                       # another draw: new train features, same test set
    assert len(calls) == 3
    run(task, tmp_path / "s", force=True)
    assert len(calls) == 5


def test_penultimate_features_are_the_models_pre_logit_activations():
    import torch

    x = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    tiny = load_model("python:transfer_models:tiny")
    net = tiny.module.net
    assert torch.allclose(T.penultimate(tiny)(x), net.pre_logits((x - 0.5) / 0.25), atol=1e-6)
    cnn = load_model("python:transfer_models:digits_cnn")
    net = cnn.module.net
    want = net.features(((x - 0.1) / 0.3).mean(1, keepdim=True)).flatten(1)
    assert T.penultimate(cnn)(x).shape == (3, 512) and torch.allclose(T.penultimate(cnn)(x), want, atol=1e-5)
    rn = load_model("torchvision:resnet18", pretrained=False)
    net = rn.module.net.eval()
    with torch.no_grad():
        z = (x - rn.module.mean) / rn.module.std
        body = torch.nn.Sequential(*list(net.children())[:-1])
        assert torch.allclose(T.penultimate(rn)(x), body(z).flatten(1), atol=1e-5)


def test_penultimate_features_of_a_timm_model_are_its_pre_logits():
    import torch

    m = load_model("timm:resnet18", pretrained=False)
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        feats = T.penultimate(m)(x)
        z = (x - m.module.mean) / m.module.std
        assert torch.allclose(feats, m.module.net.forward_head(m.module.net.forward_features(z), pre_logits=True))
    assert feats.shape == (2, 512)


@pytest.mark.parametrize("spec, why", [("python:transfer_models:conv_head", "no torch.nn.Linear layer runs"),
                                       ("python:transfer_models:scaled", "is not its output layer")])
def test_a_model_without_a_reachable_penultimate_layer_is_an_error_naming_it(task, tmp_path, spec, why):
    with pytest.raises(ModelError, match=f"model 'transfer_models.{spec.split(':')[-1]}': .*{why}"):
        run(task, tmp_path / "s", model=spec)


def test_features_from_a_named_layer_and_an_unknown_layer_named_with_the_option(task, tmp_path):
    import torch

    x = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    cnn = load_model("python:transfer_models:digits_cnn")
    net = cnn.module.net
    want = net.features[:4](((x - 0.1) / 0.3).mean(1, keepdim=True)).flatten(1)   # the first conv stage
    assert torch.allclose(T.penultimate(cnn, "features.3")(x), want, atol=1e-5)
    with pytest.raises(ModelError, match="unknown layer of model .* 'feature'; did you mean 'features'"):
        T.penultimate(cnn, "feature")
    # a model without a Linear classifier transfers through the layer --features names
    rows = run(task, tmp_path / "s", model="python:transfer_models:conv_head", features="body")
    assert rows["accuracy"].notna().all()
    with pytest.raises(ModelError, match="--features LAYER"):
        run(task, tmp_path / "s2", model="python:transfer_models:conv_head")


def test_a_task_with_fewer_than_1000_examples_uses_them_all_and_says_so(tmp_path):
    colour_folder(tmp_path / "train", 50)
    colour_folder(tmp_path / "test", 14)
    small = T.TransferTask("small", f"folder:{tmp_path / 'train'}", f"folder:{tmp_path / 'test'}")
    row = T.transfer("python:transfer_models:tiny", small, store=tmp_path / "s", progress=False).iloc[0]
    assert (row["n_train"], row["n_val"]) == (40, 10)
    assert "50 training examples, fewer than 1,000" in row["notes"]
    colour_folder(tmp_path / "tiny", 12)
    few = T.TransferTask("few", f"folder:{tmp_path / 'tiny'}", f"folder:{tmp_path / 'test'}")
    with pytest.raises(DataError, match="12 training examples: a transfer task needs at least 20"):
        T.transfer("python:transfer_models:tiny", few, store=tmp_path / "s", progress=False)


def test_a_label_space_mismatch_between_train_and_test_is_an_error(tmp_path):
    colour_folder(tmp_path / "train", 60)
    colour_folder(tmp_path / "test6", 12, classes=6)
    colour_folder(tmp_path / "renamed", 14, names=[f"c{i}" for i in range(7)])
    for test, shown in (("test6", "6 classes"), ("renamed", r"7 classes \(c0, c1")):
        bad = T.TransferTask("bad", f"folder:{tmp_path / 'train'}", f"folder:{tmp_path / test}")
        with pytest.raises(DataError, match=f"task 'bad': training set .* has 7 classes .* test set .* has {shown}"):
            T.transfer("python:transfer_models:tiny", bad, store=tmp_path / "s", progress=False)


def test_task_specs_and_tables_parse_and_bad_ones_say_how(tmp_path):
    assert T.parse_task("svhn=folder:a,folder:b") == T.TransferTask("svhn", "folder:a", "folder:b", "natural")
    assert T.parse_task("mine=folder:a,folder:b,structured").group == "structured"
    assert T.parse_task("mine=folder:a,folder:b").group == "other"
    assert T.parse_task("mine=folder:a,folder:b", {"mine": "specialized"}).group == "specialized"
    for bad in ("svhn", "svhn=folder:a", "svhn=a,b,c,d"):
        with pytest.raises(ConfigError, match="NAME=TRAIN_SETTING,TEST_SETTING"):
            T.parse_task(bad)
    with pytest.raises(ConfigError, match="task name 'a/b'"):
        T.parse_task("a/b=folder:a,folder:b")
    (tmp_path / "tasks.csv").write_text("task,train,test,group\neurosat,folder:e/tr,folder:e/te,\nx,folder:x,folder:y,mine\n")
    assert [(t.name, t.group) for t in T.read_tasks(tmp_path / "tasks.csv")] == [("eurosat", "specialized"), ("x", "mine")]
    (tmp_path / "bad.csv").write_text("task,train\nx,folder:x\n")
    with pytest.raises(DataError, match="missing test"):
        T.read_tasks(tmp_path / "bad.csv")
    with pytest.raises(ConfigError, match="unknown transfer protocol 'probe'"):
        T.transfer("python:transfer_models:tiny", T.parse_task("x=folder:a,folder:b"), protocol="probe",
                   store=tmp_path / "s")


def test_finetuning_chooses_a_learning_rate_and_is_stored_as_its_own_setting(task, tmp_path):
    row = run(task, tmp_path / "s", protocol="finetune", finetune_steps=15, lr_grid=(0.01, 0.1)).iloc[0]
    assert row["setting"] == "transfer:colours@finetune" and row["hyperparameter"] == "lr"
    assert row["chosen"] in (0.01, 0.1) and 0 <= row["accuracy"] <= 100
    assert "transfer:colours@finetune" in tbmod.Testbed.from_store(tmp_path / "s").settings


def test_group_means_average_each_group_and_need_every_task_of_it():
    acc = pd.DataFrame({"transfer:svhn": [80.0, 70.0], "transfer:dtd": [60.0, None], "transfer:eurosat": [90.0, 50.0],
                        "transfer:mine": [40.0, 30.0], "transfer:mine@finetune": [99.0, 99.0], "val": [75.0, 65.0]},
                       index=pd.Index(["a", "b"], name="model"))
    means = transfer_group_means(acc, {"mine": "structured"})
    assert list(means.columns) == ["natural", "specialized", "structured", "mean", "n_tasks"]
    assert means.loc["a"].tolist() == [70.0, 90.0, 40.0, 67.5, 4]
    assert np.isnan(means.loc["b", "natural"]) and np.isnan(means.loc["b", "mean"]) and means.loc["b", "n_tasks"] == 3
    assert transfer_group_means(acc, complete=False).loc["b", "natural"] == 70.0
    assert transfer_group_means(acc).loc["a", "other"] == 40.0
    assert transfer_group_means(acc, protocol="finetune").loc["a", "other"] == 99.0
    with pytest.raises(DataError, match="no transfer results"):
        transfer_group_means(acc[["val"]])
    assert task_groups()["smallnorb_azimuth"] == "structured" and len(task_groups()) == 19
    assert transfer_setting("x", "finetune") == "transfer:x@finetune"


def test_the_cli_prints_results_and_group_means_and_fails_in_one_line(task, tmp_path):
    from shiftbench.cli import app

    spec = f"colours={task.train},{task.test}"
    args = ["transfer", "-m", "python:transfer_models:tiny", "--task", spec + ",natural", "--store",
            str(tmp_path / "s"), "--n-train", "80", "--n-val", "20"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "colours" in res.output and "C=" in res.output and "mean top-1 % per task group" in res.output
    res = CliRunner().invoke(app, [*args, "--json"])
    payload = json.loads(res.stdout)
    assert payload["results"][0]["task"] == "colours" and payload["results"][0]["n_train"] == 80
    assert set(payload["group_means"]["transfer_models.tiny"]) == {"natural", "mean", "n_tasks"}
    (tmp_path / "tasks.csv").write_text(f"task,train,test\ncolours,{task.train},{task.test}\n")
    (tmp_path / "groups.csv").write_text("task,group\ncolours,structured\n")
    res = CliRunner().invoke(app, ["transfer", "-m", "python:transfer_models:tiny", "--tasks", str(tmp_path / "tasks.csv"),
                                   "--groups", str(tmp_path / "groups.csv"), "--store", str(tmp_path / "s"),
                                   "--n-train", "80", "--n-val", "20", "--json"])
    payload = json.loads(res.stdout)                      # resumed: the finished key, with the group given now
    assert payload["results"][0]["group"] == "structured" and "structured" in payload["group_means"]["transfer_models.tiny"]
    bad = CliRunner().invoke(app, ["transfer", "-m", "python:transfer_models:conv_head", "--task", spec,
                                   "--store", str(tmp_path / "s")])
    assert bad.exit_code != 0 and isinstance(bad.exception, ModelError)
    none = CliRunner().invoke(app, ["transfer", "-m", "python:transfer_models:tiny", "--store", str(tmp_path / "s")])
    assert isinstance(none.exception, ConfigError) and "no task" in str(none.exception)


@pytest.mark.parametrize("module", ["shiftbench.analysis.transfer", "shiftbench.studies.transfer"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.slow
def test_the_ray_executor_runs_one_task_per_model_and_task_into_the_same_store(task, tmp_path, monkeypatch):
    import os

    ray = pytest.importorskip("ray")
    fixtures = str(Path(__file__).parent / "fixtures")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([fixtures, os.environ.get("PYTHONPATH", "")]))
    local = run(task, tmp_path / "local")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        remote = run(task, tmp_path / "ray", executor="ray")
    finally:
        ray.shutdown()
    assert remote["accuracy"].tolist() == local["accuracy"].tolist()
    assert remote["key"].tolist() == local["key"].tolist()
    assert "transfer:colours" in tbmod.Testbed.from_store(tmp_path / "ray").settings
