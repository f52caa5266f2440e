"""DeepAugment as a data generator (Hendrycks et al. 2021, §4): the CAE and EDSR networks with the
authors' layers, their distortion families, and ``shiftbench deepaugment`` writing K copies.

Tiny data (16 px sklearn digits), tiny networks (``width``), one torch thread."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from clirun import run_main
from PIL import Image

from shiftbench import errors
from shiftbench.datasets import image_folder
from shiftbench.datasets.deepaugment import deepaugment
from shiftbench.errors import ConfigError, DataError, MissingExtraError
from shiftbench.shifts import deepaugment as da

WIDTH = {"cae": 0.25, "edsr": 0.125}
#: the authors' CAE_distort_imagenet.py ``weight_keys``, in order (weight and bias of each layer)
AUTHORS_CAE_KEYS = [f"{layer}.{p}" for layer in da.CAE_LAYERS for p in ("weight", "bias")]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)        # tiny tensors on a shared 2-core machine: threads only contend
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def nets():
    """Tiny CAE and EDSR, trained for 40 steps on noise so that their output follows their input."""
    out = {}
    images = [torch.rand(3, 16, 16, generator=torch.Generator().manual_seed(i)) for i in range(8)]
    for name in ("cae", "edsr"):
        torch.manual_seed(0)
        net = da.build_network(name, WIDTH[name])
        da.train_network(net, images, name, steps=40, batch_size=4, patch=16, lr=3e-3)
        out[name] = (net, {k: v.clone() for k, v in net.state_dict().items()})
    return out


def _x(seed: int = 0) -> torch.Tensor:
    return torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def _run(net, state, name, options, x, seed=3):
    """The network's output with ``options``' weight and forward draws from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    weights, _ = da.distort_weights(state, options, g)
    net.load_state_dict(weights)
    try:
        with torch.no_grad():
            return da.apply_network(net, x, name, da.draw_forward(options, g), torch.Generator().manual_seed(1))
    finally:
        net.load_state_dict(state)


@pytest.mark.parametrize("name", ["cae", "edsr"])
def test_distortions_that_are_off_leave_the_output_undistorted(nets, name):
    net, state = nets[name]
    x = _run(net, state, name, da.default_distortions(name).off(), _x())
    with torch.no_grad():
        plain = da.apply_network(net, _x(), name, None, torch.Generator().manual_seed(1))
    assert torch.equal(x, plain)
    weights, drawn = da.distort_weights(state, da.default_distortions(name).off(), torch.Generator())
    assert drawn == [] and all(torch.equal(weights[k], state[k]) for k in state)


@pytest.mark.parametrize("name,family", [(n, f) for n in ("cae", "edsr") for f in da.default_distortions(n).families()])
def test_each_distortion_family_changes_the_output(nets, name, family):
    net, state = nets[name]
    options = da.default_distortions(name)
    plain = _run(net, state, name, options.off(), _x())
    distorted = _run(net, state, name, options.only(family), _x())
    assert (distorted - plain).abs().max() > 1e-5, family


def test_the_authors_defaults_draw_their_families_uniformly():
    cae, edsr = da.CAEDistortions(), da.EDSRDistortions()
    assert {getattr(cae, f).probability for f in cae.GROUPS["code"]} == {1 / 9}
    assert [getattr(cae, f).probability for f in cae.GROUPS["weights"]] == [1 / 8] * 8 + [0.0]   # keep_max: never
    assert {getattr(edsr, f).probability for f in edsr.GROUPS["weights"]} == {1 / 17} and edsr.weight_draws == 3
    assert sum(getattr(edsr, f).probability for f in edsr.GROUPS["head"]) == pytest.approx(0.75)
    assert sum(getattr(edsr, f).probability for f in edsr.GROUPS["body"]) == pytest.approx(0.8)
    with pytest.raises(ConfigError, match="sum to"):
        da.CAEDistortions(flip_filters=da.Distortion(0.9)).check()
    with pytest.raises(ConfigError, match="did you mean 'zero_filters'"):
        cae.only("zero_filter")


def test_the_released_channel_swap_copies_and_the_released_skip_does_not_chain(nets):
    x = torch.arange(8.0).view(1, 2, 2, 2)
    g = torch.Generator().manual_seed(0)
    copied = da._edsr_head("swap_channels", da.Distortion(1, 50), g, released=True)(x)
    swapped = da._edsr_head("swap_channels", da.Distortion(1, 1), torch.Generator().manual_seed(5), released=False)(x)
    assert any(torch.equal(copied[0, 0], copied[0, 1]) for _ in [0])             # a copy, as the script's views did
    assert sorted(swapped.flatten().tolist()) == sorted(x.flatten().tolist())    # a swap keeps every value
    net, _ = nets["edsr"]
    y = torch.rand(1, 3, 4, 4)
    with torch.no_grad():
        assert not torch.equal(net(y, skip=frozenset({3}), chain_skips=False), net(y, skip=frozenset({3}), chain_skips=True))


def test_the_networks_have_the_authors_state_dict_keys_and_shapes():
    cae = da.build_cae(1.0).state_dict()
    assert list(cae) == AUTHORS_CAE_KEYS
    assert cae["e_conv_1.1.weight"].shape == (64, 3, 5, 5) and cae["e_conv_3.0.weight"].shape == (32, 128, 5, 5)
    assert cae["d_up_conv_2.3.weight"].shape == (32, 256, 2, 2)          # ConvTranspose2d(32, 256)
    edsr = da.build_edsr(1.0).state_dict()
    assert len([k for k in edsr if k.startswith("body.") and k.endswith("body.0.weight")]) == 16
    assert edsr["head.0.weight"].shape == (64, 3, 3, 3) and edsr["body.16.weight"].shape == (64, 64, 3, 3)
    assert edsr["tail.0.0.weight"].shape == (256, 64, 3, 3) and edsr["tail.0.2.weight"].shape == (256, 64, 3, 3)
    assert edsr["tail.1.weight"].shape == (3, 64, 3, 3) and "sub_mean.bias" in edsr


# ---------------------------------------------------------------------------- the copy on disk
@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """``digits/<class>/NNN.png``: 20 sklearn digits at 16 px in 10 class folders."""
    from sklearn.datasets import load_digits

    root = tmp_path_factory.mktemp("da") / "digits"
    d = load_digits()
    for i in range(20):
        folder = root / str(d.target[i])
        folder.mkdir(parents=True, exist_ok=True)
        img = Image.fromarray((d.images[i] / 16 * 255).astype(np.uint8)).resize((16, 16), Image.BILINEAR)
        img.save(folder / f"{i:03d}.png")
    return root


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "cae.pt"
    torch.manual_seed(1)
    torch.save(da.build_cae(WIDTH["cae"]).state_dict(), path)
    return path


def _files(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.png"))}


def test_same_seed_same_bytes_and_another_seed_other_images(digits, checkpoint, tmp_path):
    kw = {"checkpoint": checkpoint, "copies": 2, "width": WIDTH["cae"]}
    a = deepaugment(digits, tmp_path / "a", seed=4, **kw)
    deepaugment(digits, tmp_path / "b", seed=4, **kw)
    deepaugment(digits, tmp_path / "c", seed=5, **kw)
    fa, fb, fc = _files(tmp_path / "a"), _files(tmp_path / "b"), _files(tmp_path / "c")
    assert (a.written, a.images, a.classes) == (40, 20, 10) and len(fa) == 40
    assert fa == fb
    assert fa.keys() == fc.keys() and fa != fc
    assert fa["0/000.0.png"] != fa["0/000.1.png"]                      # two copies, two draws
    read = image_folder(tmp_path / "a")
    src = image_folder(digits)
    assert read.class_names == src.class_names and len(read) == 2 * len(src)


def test_an_interrupted_copy_resumes_where_it_stopped(digits, checkpoint, tmp_path):
    kw = {"checkpoint": checkpoint, "copies": 2, "width": WIDTH["cae"], "seed": 2}
    whole = deepaugment(digits, tmp_path / "whole", **kw)

    def stop(stage, done, total):
        if done == 7:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        deepaugment(digits, tmp_path / "part", on_progress=stop, **kw)
    assert len(_files(tmp_path / "part")) == 7
    resumed = deepaugment(digits, tmp_path / "part", **kw)
    assert (resumed.already, resumed.written) == (7, whole.written - 7)
    assert _files(tmp_path / "part") == _files(tmp_path / "whole")
    with pytest.raises(ConfigError, match="made with another seed"):
        deepaugment(digits, tmp_path / "part", **{**kw, "seed": 3})


def test_a_checkpoint_whose_layers_do_not_match_names_the_first_key(digits, checkpoint, tmp_path):
    with pytest.raises(DataError, match=r"does not match the edsr network: missing key 'head.0.weight'"):
        deepaugment(digits, tmp_path / "o", network="edsr", checkpoint=checkpoint, width=WIDTH["edsr"])
    with pytest.raises(DataError, match=r"key 'e_conv_1.1.weight' has shape \(16, 3, 5, 5\) in the checkpoint"):
        deepaugment(digits, tmp_path / "o", checkpoint=checkpoint)           # the authors' width 1
    assert not (tmp_path / "o").exists()                                     # nothing written


def test_bad_input_is_one_line(digits, checkpoint, tmp_path):
    (tmp_path / "empty" / "cat").mkdir(parents=True)
    kw = {"checkpoint": checkpoint, "width": WIDTH["cae"]}
    with pytest.raises(DataError, match="no image files"):
        deepaugment(tmp_path / "empty", tmp_path / "o", **kw)
    with pytest.raises(ConfigError, match="is inside --input"):
        deepaugment(digits, digits / "augmented", **kw)
    with pytest.raises(ConfigError, match="--copies 0"):
        deepaugment(digits, tmp_path / "o", copies=0, **kw)
    with pytest.raises(ConfigError, match="give either --checkpoint"):
        deepaugment(digits, tmp_path / "o")
    with pytest.raises(ConfigError, match="not both"):
        deepaugment(digits, tmp_path / "o", train_on=digits, **kw)
    with pytest.raises(ConfigError, match="unknown DeepAugment network 'cea'"):
        deepaugment(digits, tmp_path / "o", network="cea", **kw)


def test_without_torch_it_names_the_eval_extra(digits, checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr(errors, "_installed", lambda module: module != "torch")
    with pytest.raises(MissingExtraError, match=r"pip install 'shiftbench\[eval\]'"):
        deepaugment(digits, tmp_path / "o", checkpoint=checkpoint)


def test_a_manifest_becomes_class_folders_of_its_labels(digits, checkpoint, tmp_path):
    rows = ["path,label"] + [f"{p.relative_to(digits.parent)},{p.parent.name}" for p in sorted(digits.rglob("*.png"))]
    (digits.parent / "digits.csv").write_text("\n".join(rows) + "\n")
    res = deepaugment(digits.parent / "digits.csv", tmp_path / "m", checkpoint=checkpoint, width=WIDTH["cae"])
    assert res.written == 20 and (tmp_path / "m" / "0" / "digits" / "0" / "000.0.png").is_file()
    assert image_folder(tmp_path / "m").class_names == [str(c) for c in range(10)]


@pytest.mark.parametrize("network", ["cae", "edsr"])
def test_the_cli_journey_trains_on_the_folder_and_writes_the_copies(monkeypatch, capsys, digits, tmp_path, network):
    args = ["deepaugment", "--network", network, "--input", str(digits), "--output", str(tmp_path / "out"),
            "--train-on", str(digits), "--copies", "2", "--seed", "0", "--width", str(WIDTH[network]),
            "--steps", "20"]
    code, out, err = run_main(monkeypatch, capsys, *args)
    assert code == 0, err
    assert f"{network} (width {WIDTH[network]:g}) trained on" in out and "wrote 40 images (2 copies of 20" in out
    code, out, err = run_main(monkeypatch, capsys, *args, "--json")                  # again: all there
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["written"], summary["already"], summary["train_steps"]) == (0, 40, 20)
    assert len(image_folder(tmp_path / "out")) == 40
    code, out, err = run_main(monkeypatch, capsys, *args[:-6], "--copies", "0")
    assert code == 1 and err.strip() == "error: --copies 0: give a positive number"
