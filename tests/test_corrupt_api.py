"""``shiftbench.corrupt`` and ``shiftbench.transforms.Corrupt``: the engine's shifts on the image
forms users hold, with the engine's pixels for the same (seed, example index).

The engine's path is the one the runner takes: ``get_shift(name, severity)(x, indices, seed)`` on a
channels-last float32 batch made by the model's pixel pipeline (``Preprocessing.transform``), and
once end to end, the batches a real ``shiftbench.evaluate`` feeds a model. Photos: scikit-image's
chelsea, coffee and astronaut at 64 px (tests/corruption_photos.py).
"""
from __future__ import annotations

import doctest
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import shiftbench as sb
from corruption_photos import photos_u8
from shiftbench.errors import ConfigError
from shiftbench.models import Preprocessing
from shiftbench.shifts import get_shift, list_shifts
from shiftbench.shifts.corruptions import CORRUPTIONS
from shiftbench.transforms import Corrupt

ROOT = Path(__file__).resolve().parents[1]
SIZE = 64
SEED = 3
FIRST = 10           # the dataset index of the first photo
#: deterministic and random corruptions, each at two severities
CASES = [("contrast", 2), ("contrast", 5), ("jpeg_compression", 1), ("jpeg_compression", 4), ("pixelate", 3),
         ("gaussian_noise", 1), ("gaussian_noise", 4), ("fog", 2), ("fog", 5), ("glass_blur", 1), ("glass_blur", 3)]
HALF_LEVEL = 0.5 / 255 + 1e-6


@pytest.fixture(scope="module")
def photos() -> np.ndarray:
    """(3, 64, 64, 3) uint8: the images at the model's input size."""
    return photos_u8(SIZE)


@pytest.fixture(scope="module")
def engine_x(photos) -> torch.Tensor:
    """The engine's batch of the photos: its pixel pipeline, stacked, channels-last (runner.py)."""
    pre = Preprocessing(input_size=SIZE, resize=SIZE).transform()
    x = torch.stack([pre(Image.fromarray(im)) for im in photos])
    return x.contiguous(memory_format=torch.channels_last)


def engine(x: torch.Tensor, name: str, severity: int | None, indices, seed: int = SEED) -> torch.Tensor:
    """What the runner's ``Pass._shifted`` computes: the shift on the batch, dataset indices as a tensor."""
    with torch.inference_mode():
        return get_shift(name, severity)(x, torch.as_tensor(indices), seed).clone()


def levels(u8) -> torch.Tensor:
    return torch.as_tensor(np.array(u8)).double() / 255


def nchw(hwc) -> torch.Tensor:
    return levels(hwc).permute(2, 0, 1)


# ---------------------------------------------------------------- the engine's pixels, every form

def test_the_engine_batch_is_uint8_over_255(photos, engine_x):
    u8 = torch.from_numpy(photos).permute(0, 3, 1, 2)
    assert torch.equal(engine_x, u8.float().mul(1 / 255))
    assert torch.equal(sb.corrupt(u8, "contrast", 3).float(), sb.corrupt(engine_x, "contrast", 3).mul(255).round())


@pytest.mark.parametrize("name, severity", CASES, ids=[f"{n}.{s}" for n, s in CASES])
def test_corrupt_gives_the_engine_pixels_on_every_input_form(name, severity, photos, engine_x):
    indices = [FIRST, FIRST + 1, FIRST + 2]
    want = engine(engine_x, name, severity, indices)
    kw = {"severity": severity, "seed": SEED}
    # float batch: bit for bit; one image: to float rounding (a batch's GEMM blocking)
    assert torch.equal(sb.corrupt(engine_x, name, index=FIRST, **kw), want)
    torch.testing.assert_close(sb.corrupt(engine_x[1].contiguous(), name, index=FIRST + 1, **kw), want[1],
                               atol=1e-6, rtol=0)
    # one index per image, in any order
    order = [2, 0, 1]
    torch.testing.assert_close(sb.corrupt(engine_x[order], name, index=[indices[i] for i in order], **kw),
                               want[order], atol=1e-6, rtol=0)
    # uint8 forms: the engine's floats rounded, within half a level (a level where a float sits on a .5)
    batch_u8 = sb.corrupt(photos, name, index=FIRST, **kw)
    assert batch_u8.shape == photos.shape and batch_u8.dtype == np.uint8
    assert (levels(batch_u8).permute(0, 3, 1, 2) - want.double()).abs().max() <= HALF_LEVEL
    for i, form in enumerate([photos[0], Image.fromarray(photos[1]), torch.from_numpy(photos[2]).permute(2, 0, 1)]):
        out = sb.corrupt(form, name, index=FIRST + i, **kw)
        assert type(out) is type(form)
        got = nchw(out) if not isinstance(out, torch.Tensor) else out.double() / 255
        assert (got - want[i].double()).abs().max() <= 1 / 255 + 1e-6, (type(form).__name__, i)


def test_corrupt_reproduces_what_evaluate_feeds_the_model(photos, tmp_path):
    """A real ``shiftbench.evaluate`` on a folder: a model records the batches it is fed."""
    from shiftbench.models.base import LoadedModel

    for im, cls in zip(photos_u8((80, 72)), ("Egyptian cat", "espresso", "missile")):
        (tmp_path / "photos" / cls).mkdir(parents=True)
        Image.fromarray(im).save(tmp_path / "photos" / cls / "photo.png")

    class Recorder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[torch.Tensor] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.seen.append(x.clone())
            return torch.zeros(x.shape[0], 1000)

    rec = Recorder()
    model = LoadedModel("recorder", "recorder", rec, Preprocessing(SIZE, 72, "bilinear", (0, 0, 0), (1, 1, 1)),
                        num_classes=1000, fingerprint="recorder")
    fed = {}
    for setting in ("folder:photos", "folder:photos+fog.2", "folder:photos+glass_blur.1", "folder:photos+contrast.3"):
        rec.seen.clear()
        sb.evaluate(model, [setting], store=tmp_path / "store", data_root=tmp_path, progress=False, workers=0,
                    batch_size=2, seed=SEED)
        fed[setting.partition("+")[2]] = torch.cat(rec.seen)
    clean = fed.pop("")
    assert clean.shape == (3, 3, SIZE, SIZE)
    crops = [Image.fromarray(u.permute(1, 2, 0).numpy()) for u in clean.mul(255).round().to(torch.uint8)]
    for shift, pixels in fed.items():
        name, severity = shift.rsplit(".", 1)
        assert torch.equal(sb.corrupt(clean, name, int(severity), seed=SEED, index=0), pixels), shift
        for i, crop in enumerate(crops):                   # the user's loop over PIL crops, index = example
            out = sb.corrupt(crop, name, int(severity), seed=SEED, index=i)
            assert (nchw(out) - pixels[i].double()).abs().max() <= HALF_LEVEL, (shift, i)
        assert not torch.equal(sb.corrupt(clean, name, int(severity), seed=SEED + 1, index=0), pixels) \
            or name == "contrast"                          # another seed: other draws (random shifts)


def test_the_reference_package_agrees_where_the_project_claims_it(photos):
    """imagecorruptions.corrupt (imaug fork): JPEG and pixelate bit-exact (uint8 results);
    contrast within one level (it truncates to uint8, we round)."""
    ic = pytest.importorskip("imagecorruptions")
    for severity in (2, 5):
        for name in ("jpeg_compression", "pixelate"):
            np.testing.assert_array_equal(sb.corrupt(photos, name, severity),
                                          np.stack([ic.corrupt(im, corruption_name=name, severity=severity)
                                                    for im in photos]))
        ours = sb.corrupt(photos, "contrast", severity).astype(int)
        theirs = np.stack([ic.corrupt(im, corruption_name="contrast", severity=severity) for im in photos]).astype(int)
        assert np.abs(ours - theirs).max() <= 1 and (ours >= theirs).all()


# ---------------------------------------------------------------- forms in, the same forms out

def test_greyscale_in_greyscale_out_is_the_rgb_result_in_luma(photos):
    grey = Image.fromarray(photos[0]).convert("L")
    rgb = sb.corrupt(grey.convert("RGB"), "gaussian_noise", 3, index=4)
    out = sb.corrupt(grey, "gaussian_noise", 3, index=4)
    assert out.mode == "L" and out.size == grey.size
    np.testing.assert_array_equal(np.asarray(out), np.asarray(rgb.convert("L")))      # Pillow's luma
    hw = np.asarray(grey)
    np.testing.assert_array_equal(sb.corrupt(hw, "gaussian_noise", 3, index=4), np.asarray(out))
    assert sb.corrupt(hw[..., None], "gaussian_noise", 3, index=4).shape == (SIZE, SIZE, 1)
    x = torch.from_numpy(hw).float().div(255)[None]                   # (1, H, W) float: float luma
    y = sb.corrupt(x, "gaussian_noise", 3, index=4)
    full = sb.corrupt(x.expand(3, -1, -1), "gaussian_noise", 3, index=4)
    assert y.shape == x.shape
    torch.testing.assert_close(y[0], (0.299 * full[0] + 0.587 * full[1] + 0.114 * full[2]).clamp(0, 1))


def test_alpha_passes_unchanged_and_pil_modes_are_kept(photos):
    rgba = np.concatenate([photos[0], np.arange(SIZE * SIZE, dtype=np.uint8).reshape(SIZE, SIZE, 1)], axis=-1)
    out = sb.corrupt(Image.fromarray(rgba), "fog", 2)
    assert out.mode == "RGBA"
    np.testing.assert_array_equal(np.asarray(out)[..., 3], rgba[..., 3])
    np.testing.assert_array_equal(np.asarray(out)[..., :3], sb.corrupt(photos[0], "fog", 2))
    wide = Image.fromarray(photos_u8((40, 90))[0])    # 40 rows, 90 columns
    assert sb.corrupt(wide, "pixelate", 2).size == (90, 40)


def test_float_dtype_and_device_are_kept(engine_x):
    x16 = engine_x[0].half()
    out = sb.corrupt(x16, "gaussian_noise", 2)
    assert out.dtype == torch.float16 and out.shape == x16.shape and out.device == x16.device
    x64 = engine_x.double()
    assert sb.corrupt(x64, "contrast", 2).dtype == torch.float64


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_batch_stays_on_its_device_and_draws_what_the_cpu_draws(engine_x):
    out = sb.corrupt(engine_x.cuda(), "gaussian_noise", 2, index=FIRST)
    assert out.is_cuda
    torch.testing.assert_close(out.cpu(), sb.corrupt(engine_x, "gaussian_noise", 2, index=FIRST), atol=1e-5, rtol=0)


def test_a_tensor_that_needs_grad_is_corrupted_without_autograd(engine_x):
    x = engine_x[:1].clone().requires_grad_(True)
    out = sb.corrupt(x, "fog", 1)
    assert not out.requires_grad
    out.sum()                                                          # an ordinary tensor, not an inference one


# ---------------------------------------------------------------- one-line errors

@pytest.mark.parametrize("bad, match", [
    ([[0, 1]], "cannot corrupt a list; pass a PIL image"),
    (np.zeros((40, 40, 3)), "NumPy images must be uint8"),
    (np.zeros((40, 40, 5), np.uint8), "NumPy images must be uint8"),
    (torch.zeros(40, 40, 3), r"tensors must be \(C, H, W\)"),
    (torch.zeros(3, 40, 40, dtype=torch.int64), "float in"),
    (np.zeros((20, 40, 3), np.uint8), "at least 32x32 px"),
    (torch.full((3, 40, 40), 2.5), "corrupt before Normalize"),
    (torch.full((3, 40, 40), 255.0), "divide 0-255 pixels by 255"),
])
def test_wrong_inputs_are_one_line_config_errors_naming_what_is_accepted(bad, match):
    with pytest.raises(ConfigError, match=match) as info:
        sb.corrupt(bad, "fog", 2)
    assert "\n" not in str(info.value)


def test_other_pil_modes_say_how_to_convert():
    with pytest.raises(ConfigError, match=r"mode 'P'.*convert\('RGB'\)"):
        sb.corrupt(Image.new("P", (40, 40)), "fog", 2)


@pytest.mark.parametrize("name, severity, match", [
    ("fgo", 3, "unknown shift 'fgo'; did you mean 'fog'"),
    ("jpeg", 3, "did you mean 'jpeg_compression'"),
    ("fog", 0, "severity 0 is not one of 1, 2, 3, 4, 5"),
    ("fog", 6, "severity 6 is not one of"),
    ("fog", 2.5, "severity must be an integer 1-5"),
    ("fog", True, "severity must be an integer 1-5, got True"),
    ("fog", None, "severity None is not one of"),
    ("fgo", 2.5, "unknown shift 'fgo'"),
    ("greyscale", 3, "has no severities; pass severity=None"),
    ("pgd.linf.eps2", None, "attacks a model"),
    ("pgd.linf.eps2", 3, "attacks a model"),
    (3, 3, "name must be a string"),
])
def test_names_and_severities_are_checked_with_the_registry_messages(name, severity, match, photos):
    with pytest.raises(ConfigError, match=match) as info:
        sb.corrupt(photos[0], name, severity)
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match=match):
        Corrupt(name, severity)                                       # the transform fails when it is built


@pytest.mark.parametrize("kw, match", [({"index": [1, 2]}, "got 2 indices for 3 images"),
                                       ({"index": 2.5}, "index must be an integer"),
                                       ({"index": "0"}, "index must be an integer"),
                                       ({"seed": 0.5}, "seed must be an integer")])
def test_indices_and_seeds_must_be_integers(kw, match, photos):
    with pytest.raises(ConfigError, match=match):
        sb.corrupt(photos, "fog", 2, **kw)


def test_integer_like_indices_and_seeds_are_accepted(photos):
    want = sb.corrupt(photos, "gaussian_noise", 2, seed=1, index=5)
    for index in (np.int64(5), torch.tensor(5), np.array([5, 6, 7]), torch.arange(5, 8), (5, 6, 7)):
        np.testing.assert_array_equal(sb.corrupt(photos, "gaussian_noise", 2, seed=np.int32(1), index=index), want)


# ---------------------------------------------------------------- the transform

def test_the_transform_composes_before_normalize_and_shows_its_settings(photos):
    from torchvision import transforms as T

    fog = Corrupt("fog", 2, seed=SEED)
    assert repr(fog) == "Corrupt(name='fog', severity=2, seed=3)"
    assert repr(Corrupt("greyscale", None)) == "Corrupt(name='greyscale', severity=None, seed=0)"
    big = Image.fromarray(photos_u8(80)[0])
    crop = T.CenterCrop(SIZE)(big)
    on_pil = T.Compose([T.CenterCrop(SIZE), fog])(big)
    assert isinstance(on_pil, Image.Image) and on_pil.size == (SIZE, SIZE)
    np.testing.assert_array_equal(np.asarray(on_pil), np.asarray(fog(crop)))
    norm = T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    on_tensor = T.Compose([T.CenterCrop(SIZE), T.PILToTensor(), T.ConvertImageDtype(torch.float32), fog, norm])(big)
    assert on_tensor.shape == (3, SIZE, SIZE)
    torch.testing.assert_close(on_tensor, norm(fog(T.functional.pil_to_tensor(crop).float() / 255)), atol=1e-6,
                               rtol=0)
    with pytest.raises(ConfigError, match="corrupt before Normalize"):
        T.Compose([T.PILToTensor(), T.ConvertImageDtype(torch.float32), norm, fog])(crop)


def test_the_transform_with_an_index_gives_the_engine_pixels(engine_x):
    for name, severity in (("glass_blur", 3), ("contrast", 2)):
        want = engine(engine_x, name, severity, [FIRST, FIRST + 1, FIRST + 2])
        t = Corrupt(name, severity, seed=SEED)
        torch.testing.assert_close(t(engine_x[2].contiguous(), index=FIRST + 2), want[2], atol=1e-6, rtol=0)
        assert torch.equal(t(engine_x, index=FIRST), want)


def test_without_an_index_the_same_picture_gets_the_same_corruption_in_any_form(photos, engine_x):
    t = Corrupt("gaussian_noise", 4, seed=SEED)
    as_pil = nchw(t(Image.fromarray(photos[0])))
    as_array = nchw(t(photos[0].copy()))
    as_tensor = t(engine_x[0].contiguous()).double()
    assert torch.equal(as_pil, as_array)
    assert (as_pil - as_tensor).abs().max() <= HALF_LEVEL
    assert torch.equal(t(engine_x[0].contiguous()), t(engine_x[0].clone()))         # every call, every epoch
    other = photos[0].copy()
    other[0, 0, 0] ^= 1                                                              # one level in one pixel
    assert (np.abs(t(other).astype(int) - t(photos[0]).astype(int)) > 2).mean() > 0.5   # independent draws
    # in a batch, each image keys its own draws
    torch.testing.assert_close(t(engine_x)[1], t(engine_x[1].contiguous()), atol=1e-6, rtol=0)


def test_the_transform_pickles_for_dataloader_workers(photos):
    t = Corrupt("fog", 3, seed=1)
    back = pickle.loads(pickle.dumps(t))
    assert repr(back) == repr(t)
    np.testing.assert_array_equal(back(photos[0]), t(photos[0]))


# ---------------------------------------------------------------- names, docs, exports

def accepted_names() -> set[str]:
    """Every registered shift :func:`corrupt` takes: all but those that attack a model."""
    return {n for n in list_shifts() if not get_shift(n, None if _no_severity(n) else 1).needs_model}


def _no_severity(name: str) -> bool:
    try:
        get_shift(name, 1)
    except ConfigError:
        return True
    return False


def doc_names() -> list[str]:
    """The names listed in docs/corruptions.md, "Corrupt your own images" (its bullet list)."""
    text = (ROOT / "docs" / "corruptions.md").read_text()
    section = re.split(r"^#+ ", text.split("### Corrupt your own images", 1)[1], flags=re.M)[0]
    bullets = [line for line in re.split(r"\n(?=- |\S)", section) if line.startswith("- ")]
    return [n for b in bullets for n in re.findall(r"`([a-z][a-z0-9_.-]*)`", b)]


def test_the_docs_list_every_accepted_name_and_only_those():
    listed = doc_names()
    assert len(listed) == len(set(listed))
    assert set(listed) == accepted_names()
    assert tuple(listed[:len(CORRUPTIONS)]) == CORRUPTIONS          # the 15 + 4, in the paper's order


def test_every_listed_name_corrupts_an_image(photos):
    x = photos[0, :32, :32]
    for name in doc_names():
        out = sb.corrupt(x, name, None if _no_severity(name) else 1)
        assert out.shape == x.shape and out.dtype == np.uint8, name


def test_corrupt_is_exported_lazily_and_the_examples_run():
    import shiftbench.shifts.api as api
    import shiftbench.transforms as transforms

    assert sb.corrupt is api.corrupt and "corrupt" in sb.__all__
    for module in (api, transforms):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0, module.__name__
