"""The notebook journeys of issue 31: a model object and torch data straight into
``shiftbench.evaluate``, as a user holds them.

A tiny CNN is trained here on real handwritten digits (scikit-learn's ``load_digits``, classes
0-2, upscaled to 32 px); the validation digits are a folder of PNGs read through torchvision's
``ImageFolder`` and a ``DataLoader``. Every number is checked against the same weights evaluated
through a ``python:`` spec on ``folder:`` (imported from the working directory), so the object
path and the spec path are one evaluation.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset
from torchvision.datasets import ImageFolder

import shiftbench as sb
from adoption_models import DigitCNN, trained
from shiftbench.errors import ConfigError, DataError, ModelError
from shiftbench.models import LoadedModel, Preprocessing

SHIFTS = ["gaussian_noise.2", "gaussian_noise.5", "fog.1", "fog.4", "contrast.2", "contrast.5"]
PIXELS = Preprocessing(input_size=32, resize=32, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
FAST = {"workers": 0, "progress": False}


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """``(val folder, trained DigitCNN, its weights file)``: 10 validation digits per class as
    greyscale PNGs in ``val/<digit>/``, the model fitted on 20 other digits per class."""
    from sklearn.datasets import load_digits

    root = tmp_path_factory.mktemp("digits")
    d = load_digits()
    keep = d.target < 3
    images = np.rint(np.kron(d.images[keep] / 16.0, np.ones((4, 4))) * 255).astype(np.uint8)   # 8 -> 32 px
    labels = d.target[keep]
    val, train = [], []
    for c in range(3):
        idx = np.flatnonzero(labels == c)
        val += list(idx[:10])
        train += list(idx[10:30])
    for i, k in enumerate(val):
        path = root / "val" / str(labels[k]) / f"{i:03d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(images[k]).save(path)
    x = torch.tensor(images[train], dtype=torch.float32).div(255).unsqueeze(1).repeat(1, 3, 1, 1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)          # a shared 2-core machine: one thread trains fastest
    try:
        net = trained(x, torch.tensor(labels[train]))
    finally:
        torch.set_num_threads(threads)
    weights = root / "digit_cnn.pt"
    torch.save(net.state_dict(), weights)
    return root / "val", net, weights


def _builder_module(folder: Path, weights: Path) -> str:
    """A ``python:`` module written to ``folder`` (imported from the working directory): ``declared``
    states its input size, ``plain`` does not."""
    name = f"adoption_builders_{uuid.uuid4().hex[:8]}"
    (folder / f"{name}.py").write_text(
        "import torch\nfrom adoption_models import DigitCNN\n\n\n"
        "def _net():\n    net = DigitCNN()\n"
        f"    net.load_state_dict(torch.load({str(weights)!r}, weights_only=True))\n    return net\n\n\n"
        "def declared():\n    return _net()\n\n\n"
        "declared.preprocessing = {'input_size': 32, 'resize': 32, 'mean': (0, 0, 0), 'std': (1, 1, 1)}\n\n\n"
        "def plain():\n    return _net()\n")
    return name


def _numbers(frame: pd.DataFrame) -> list[tuple]:
    return [tuple(r) for r in frame[["accuracy", "top5", "n_examples", "n_skipped"]].itertuples(index=False)]


def test_a_module_on_an_imagefolder_and_a_dataloader_equals_the_python_spec_on_the_folder(
        digits, tmp_path, monkeypatch):
    val, net, weights = digits
    monkeypatch.chdir(tmp_path)
    module = _builder_module(tmp_path, weights)
    folder = ImageFolder(val)
    loader = DataLoader(folder, batch_size=7, shuffle=True)          # batching and shuffle are not used
    mine = sb.evaluate([net, f"python:{module}:declared"], [{"digits-val": loader}, f"folder:{val}"],
                       name="digit-cnn", input_size=32, shifts=SHIFTS, store=tmp_path / "s", **FAST)
    assert set(mine["model"]) == {"digit-cnn", f"{module}.declared"}
    obj = mine[mine["model"] == "digit-cnn"]
    spec = mine[mine["model"] == f"{module}.declared"]
    on_loader, on_folder = obj.iloc[:7], obj.iloc[7:]
    assert list(on_loader["setting"]) == ["digits-val", *(f"digits-val+{s}" for s in SHIFTS)]
    assert on_loader["dataset"].str.startswith("torch:").all() and set(on_loader["n_examples"]) == {30}
    # the DataLoader's data, the folder, the object and the spec: one evaluation
    assert _numbers(on_loader) == _numbers(on_folder) == _numbers(spec.iloc[:7]) == _numbers(spec.iloc[7:])
    assert on_loader["accuracy"].iloc[0] >= 90 and on_loader["accuracy"].min() < on_loader["accuracy"].max()
    # the ImageFolder itself, named after its class and folder, is the same data: the same numbers
    again = sb.evaluate(net, folder, input_size=32, shifts=SHIFTS, store=tmp_path / "s", **FAST)
    assert again["setting"].iloc[0] == "ImageFolder-val" and _numbers(again) == _numbers(on_loader)
    runs = [json.loads(p.read_text()) for p in (tmp_path / "s" / "runs").iterdir()]
    assert max(r["models_in_pass"] for r in runs) == 2              # both models fed by one stream


def test_changed_weights_are_recomputed_for_modules_and_hand_built_loaded_models(digits, tmp_path):
    val, net, _ = digits
    data = {"digits-val": ImageFolder(val)}
    copy = DigitCNN()
    copy.load_state_dict(net.state_dict())
    copy.train()                            # a notebook's model, mid-training
    before = sb.evaluate(copy, data, input_size=32, store=tmp_path, **FAST)["accuracy"].iloc[0]
    assert before >= 90 and copy.training                           # the user's module is handed back as it was
    hand = LoadedModel(spec="mine", name="hand-built", module=copy, preprocessing=PIXELS, num_classes=3)
    assert sb.evaluate(hand, data, store=tmp_path, **FAST)["accuracy"].iloc[0] == before
    with torch.no_grad():
        for p in copy.parameters():
            p.zero_()                      # every logit equal: class 0 everywhere, a third of the digits
    assert sb.evaluate(copy, data, input_size=32, store=tmp_path, **FAST)["accuracy"].iloc[0] == pytest.approx(100 / 3)
    assert sb.evaluate(hand, data, store=tmp_path, **FAST)["accuracy"].iloc[0] == pytest.approx(100 / 3)


def test_a_loaded_models_mean_and_std_are_applied_and_stored_as_numbers(digits, tmp_path):
    val, net, _ = digits
    mean, std = np.array([0.2, 0.2, 0.2], np.float32), torch.tensor([0.5, 0.5, 0.5])   # not plain floats
    hand = LoadedModel(spec="mine", name="normalised", module=net, num_classes=3,
                       preprocessing=Preprocessing(input_size=32, resize=32, mean=mean, std=std))
    got = sb.evaluate(hand, {"digits-val": ImageFolder(val)}, store=tmp_path, **FAST)
    want = sb.evaluate(net, {"digits-val": ImageFolder(val)}, input_size=32, mean=(0.2,) * 3, std=(0.5,) * 3,
                       store=None, **FAST)
    assert _numbers(got) == _numbers(want)
    stored = json.loads(next((tmp_path / "keys").iterdir()).read_text())["preprocessing"]
    assert stored["mean"] == pytest.approx([0.2] * 3) and all(isinstance(v, float) for v in stored["std"])
    with pytest.raises(ConfigError, match="mean"):
        Preprocessing(mean="0.485,0.456,0.406")


def test_store_none_writes_no_file_and_returns_the_same_frame(digits, tmp_path, monkeypatch):
    val, net, _ = digits
    work, tmp = tmp_path / "cwd", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    data = [{"digits-val": ImageFolder(val)}, "digits-val+fog.3"]
    # workers=0: a DataLoader worker forked from a pytest-xdist worker (which runs threads) can
    # wait forever for its first index (seen once, in a full `make test` run); the loader workers are
    # exercised by tests/test_engine.py in subprocesses
    quiet = sb.evaluate(net, data, input_size=32, store=None, workers=0, progress=False)
    assert list(work.iterdir()) == [] and list(tmp.iterdir()) == []
    stored = sb.evaluate(net, data, input_size=32, store=tmp_path / "store", workers=0, progress=False)
    pd.testing.assert_frame_equal(quiet.drop(columns="finished"), stored.drop(columns="finished"))
    assert list(quiet["setting"]) == ["digits-val", "digits-val+fog.3"]


def test_a_python_spec_is_found_in_the_working_directory_and_evaluated_at_its_size(digits, tmp_path, monkeypatch,
                                                                                  capsys):
    from typer.testing import CliRunner

    from shiftbench import cli

    val, net, weights = digits
    monkeypatch.chdir(tmp_path)
    module = _builder_module(tmp_path, weights)
    want = sb.evaluate(net, f"folder:{val}", input_size=32, store=None, **FAST)
    runner = CliRunner()
    for args in (["-m", f"python:{module}:declared"], ["-m", f"python:{module}:plain", "--input-size", "32"]):
        out = runner.invoke(cli.app, ["eval", *args, "-s", f"folder:{val}", "--store", "s", "--workers", "0",
                                      "--json"])
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout)[0]["accuracy"] == pytest.approx(want["accuracy"].iloc[0])
    # nothing declared and no --input-size: evaluated at 224 px, and the output says so
    assumed = sb.evaluate(f"python:{module}:plain", f"folder:{val}", store=None, workers=0)
    note = f"model '{module}.plain': no input size declared; evaluated at 224 px (resize 256, centre crop 224"
    assert note in capsys.readouterr().err and note in assumed["notes"].iloc[0][0]
    assert assumed["preprocessing"].iloc[0]["input_size"] == 224
    assert str(tmp_path) not in sys.path                           # the working directory only while importing


def test_an_object_without_a_declared_size_gets_a_note_and_a_timm_model_its_own_transform(digits):
    import timm

    from shiftbench.models.objects import as_model

    _, net, _ = digits
    assumed = as_model(net)
    assert assumed.preprocessing.input_size == 224 and "no input size declared" in assumed.metadata["notes"][0]
    small = as_model(net, input_size=64)
    assert (small.preprocessing.input_size, small.preprocessing.resize, small.metadata["notes"]) == (64, 64, ())
    vit = timm.create_model("resnet10t", pretrained=False, num_classes=3)
    own = as_model(vit)
    cfg = timm.data.resolve_data_config({}, model=vit)
    assert own.preprocessing.input_hw == tuple(cfg["input_size"][1:]) and own.preprocessing.mean == cfg["mean"]
    assert own.name == "ResNet" and own.num_classes == 3 and own.metadata["notes"] == ()


# ---------------------------------------------------------------------------------- bad input
class Items(Dataset):
    """A map-style dataset of the given items."""

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def _image(seed: int = 0, size=(32, 32)) -> torch.Tensor:
    return torch.rand(3, *size, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("items, message", [
    ([(_image(), 0), (_image(1), 1), (_image(2), 0, "extra")], "item 2 is a tuple of 3; expected an (image, label) pair"),
    ([_image()], "item 0 is a Tensor; expected an (image, label) pair"),
    ([(_image(), 0), (_image(1), 1.0)], "item 1 has label 1.0; expected one class index (an int >= 0)"),
    ([(_image(), -1)], "item 0 has label -1; expected one class index"),
    ([(_image() * 4 - 2, 0)], "item 0: its float image has values in [-2, 2]; expected [0, 1] (drop Normalize"),
    ([(torch.zeros(5, 8, 8, dtype=torch.uint8), 0)], "item 0: its image has shape (5, 8, 8); expected (C, H, W)"),
    ([("a.png", 0)], "item 0: its image is a str; expected a PIL image"),
    ([], "is empty: expected at least one (image, label) item"),
])
def test_bad_items_are_one_line_errors_naming_the_item(digits, items, message):
    _, net, _ = digits
    with pytest.raises(DataError) as exc:
        sb.evaluate(net, {"bad": DataLoader(Items(items))}, input_size=32, store=None, **FAST)
    assert message in _one_line(exc)


def test_labels_outside_a_models_outputs_fail_that_model_only(digits, tmp_path):
    _, net, _ = digits
    wide = DigitCNN(classes=6)                  # untrained: any numbers, but 6 outputs
    data = {"six": TensorDataset(torch.stack([_image(i) for i in range(6)]), torch.arange(6))}
    with pytest.raises(ModelError) as exc:
        sb.evaluate({"narrow": net, "wide": wide}, data, input_size=32, store=tmp_path, **FAST)
    text = _one_line(exc)
    assert "1 of 2 models failed" in text
    assert "data 'six': item 3 has label 3, but model 'narrow' has 3 outputs (labels 0..2 expected)" in text
    assert list(exc.value.results["model"]) == ["wide"]            # the other model finished
    keys = [json.loads(p.read_text())["model"] for p in (tmp_path / "keys").iterdir()]
    assert keys == ["wide"]                                        # nothing written for the failed one


def test_declared_classes_must_match_the_models_outputs(digits):
    val, _, _ = digits
    with pytest.raises(DataError) as exc:
        sb.evaluate(DigitCNN(classes=6), {"digits-val": ImageFolder(val)}, input_size=32, store=None, **FAST)
    assert ("data 'digits-val' declares 3 classes ('0', '1', '2'), but model 'DigitCNN' has 6 outputs"
            in _one_line(exc))


def test_data_beyond_the_memory_budget_is_read_again_and_checked(digits, monkeypatch):
    from torchvision import transforms as T

    import shiftbench.datasets.torch_data as td

    val, net, _ = digits
    held = sb.evaluate(net, {"v": ImageFolder(val)}, input_size=32, store=None, **FAST)
    monkeypatch.setattr(td, "MAX_HELD_BYTES", 10_000)             # about three 32 px digits
    again = sb.evaluate(net, {"v": ImageFolder(val)}, input_size=32, store=None, **FAST)
    assert _numbers(again) == _numbers(held) and "read again from the dataset" in again["notes"].iloc[0][0]
    jitter = ImageFolder(val, transform=T.ColorJitter(brightness=0.9))   # random: not the pixels hashed
    moved = sb.evaluate(net, {"v": jitter}, input_size=32, store=None, **FAST)
    assert moved["n_skipped"].iloc[0] > 0
    assert "differs from when it was first read (a random transform" in moved["skipped_files"].iloc[0][0]


def test_mixed_modes_and_sizes_just_work(digits):
    _, net, _ = digits
    rgb = Image.fromarray(np.uint8(np.random.default_rng(0).integers(0, 255, (40, 30, 3))))
    items = [(rgb, 0), (rgb.convert("L"), 1), (rgb.convert("RGBA"), 2), (rgb.convert("P").resize((50, 50)), 0),
             (np.asarray(rgb), 1), (torch.from_numpy(np.array(rgb)).permute(2, 0, 1), 2), (_image(), 0)]
    res = sb.evaluate(net, {"mixed": Items(items)}, input_size=32, store=None, **FAST)
    assert (res["n_examples"].iloc[0], res["n_skipped"].iloc[0]) == (7, 0)


def test_a_subset_sampler_selects_its_examples_and_other_samplers_are_refused(digits):
    from torch.utils.data import SubsetRandomSampler, WeightedRandomSampler

    val, net, _ = digits
    folder = ImageFolder(val)
    picked = sb.evaluate(net, {"some": DataLoader(folder, sampler=SubsetRandomSampler([3, 1, 12]))},
                         input_size=32, store=None, **FAST)
    same = sb.evaluate(net, {"some": Subset(folder, [1, 3, 12])}, input_size=32, store=None, **FAST)
    assert picked["n_examples"].iloc[0] == 3 and _numbers(picked) == _numbers(same)
    with pytest.raises(ConfigError) as exc:
        sb.evaluate(net, {"w": DataLoader(folder, sampler=WeightedRandomSampler([1.0] * 30, 30))},
                    input_size=32, store=None, **FAST)
    assert "WeightedRandomSampler does not give each example once" in _one_line(exc)


@pytest.mark.parametrize("model, data, message", [
    (42, "cifar10", "model of type int is not accepted; give a model spec string"),
    (DigitCNN, "cifar10", "model 'DigitCNN' is a class, not a model: pass an instance (DigitCNN(...))"),
    ("NET", 42, "data of type int is not accepted; give a setting name"),
    ("NET", {"v": [1, 2]}, "data 'v' is a list; a dict maps names to torch Datasets or DataLoaders"),
    ("NET", {"cifar10": TensorDataset(torch.zeros(1, 3, 8, 8), torch.zeros(1, dtype=torch.long))},
     "data name 'cifar10' is a registered setting"),
    ("NET", {"a+b": TensorDataset(torch.zeros(1, 3, 8, 8), torch.zeros(1, dtype=torch.long))},
     "data name 'a+b': '+', '@' and ':' are taken"),
])
def test_other_inputs_are_one_line_config_errors_saying_what_is_accepted(digits, model, data, message):
    _, net, _ = digits
    with pytest.raises(ConfigError) as exc:
        sb.evaluate(net if model == "NET" else model, data, input_size=32, store=None, **FAST)
    assert message in _one_line(exc)


def test_two_objects_of_one_class_must_be_named(digits):
    _, net, _ = digits
    data = {"t": TensorDataset(torch.zeros(1, 3, 8, 8), torch.zeros(1, dtype=torch.long))}
    with pytest.raises(ConfigError, match="model name 'DigitCNN' is given to more than one model object"):
        sb.evaluate([net, DigitCNN()], data, input_size=32, store=None, **FAST)


def test_a_hand_built_loaded_model_keeps_a_given_fingerprint_and_gets_one_when_empty(digits):
    from shiftbench.models.objects import prepare_loaded

    _, net, _ = digits
    hand = LoadedModel(spec="mine", name="mine", module=net, preprocessing=PIXELS, num_classes=3)
    ready = prepare_loaded(hand)
    assert ready.fingerprint.startswith("object:") and prepare_loaded(ready) is ready
    assert prepare_loaded(dataclasses.replace(hand, fingerprint="v1")).fingerprint == "v1"
