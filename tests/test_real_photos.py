"""Real photographs through the whole command line: every shift, a real model, the store.

A folder of JPEGs cut from scikit-image's sample photographs (varied sizes, both
orientations, one truncated file) is evaluated with ``shiftbench eval`` at the default batch
size and thread count under every ImageNet-C corruption, greyscale, Noise2Net, PGD and a
``composite:`` study, and the stored per-example rows are checked against the same images
evaluated one at a time (``--batch-size 1``): a shift may batch and thread its work however
it likes (and the engine slices CPU batches, :data:`~shiftbench.engine.runner.CPU_SLICE_BYTES`),
but no example may come out differently. The model is EfficientNet-Lite0 with its
real ImageNet weights (the 1000-way logits score a ``manifest:`` of the photos with a
declared ``imagenet-1k`` label space); PGD's 100 steps use a small ResNet-18 (random weights,
32 px inputs) on a ``folder:`` of three classes, which keeps the file near a minute on 2 cores.

The failure paths: an unexpected exception inside a shift is one line on stderr naming the
shift and the setting (never a traceback), and an undecodable file is skipped and listed in
every shifted setting exactly as in the clean one.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image, ImageDraw
from typer.testing import CliRunner

import shiftbench
from shiftbench import cli
from shiftbench.errors import ConfigError, ShiftbenchError, ShiftError
from shiftbench.settings import CORRUPTIONS
from shiftbench.shifts import base as shift_registry
from shiftbench.store import Store

FIXTURES = Path(__file__).parent / "fixtures"
#: photo -> ImageNet class (Egyptian cat, espresso, missile, suit)
PHOTOS = {"chelsea": 285, "coffee": 967, "rocket": 657, "astronaut": 834}
#: every corruption once; the severities cycle 1..5 so each severity is exercised
SHIFTS = [f"{c}.{i % 5 + 1}" for i, c in enumerate(CORRUPTIONS)] + ["greyscale", "noise2net"]
TRUNCATED = "chelsea/truncated.jpg"
N_ONE_BY_ONE = 24  # examples re-evaluated at --batch-size 1 (the first of the manifest)

runner = CliRunner()


# --------------------------------------------------------------------------- data
def _photo(name: str) -> np.ndarray:
    import skimage.data

    return getattr(skimage.data, name)()[..., :3]


def _crop(img: np.ndarray, rng: np.random.Generator, portrait: bool) -> Image.Image:
    """A random crop of ``img`` resized (bicubic) to a random size, portrait or landscape."""
    h, w = img.shape[:2]
    ch, cw = int(rng.integers(h // 2, h + 1)), int(rng.integers(w // 2, w + 1))
    y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
    long, short = int(rng.integers(200, 420)), int(rng.integers(120, 300))
    return Image.fromarray(img[y:y + ch, x:x + cw]).resize((short, long) if portrait else (long, short),
                                                           Image.BICUBIC)


def _truncated(path: Path, img: np.ndarray) -> None:
    """A JPEG cut after 40% of its bytes (the header is intact, the scan is not)."""
    Image.fromarray(img).save(path, quality=90)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * 0.4)])


def _composite_spec(root: Path) -> Path:
    """An SI-SCORE-style spec: two segmented objects (cat, cup) x one background x 2 sizes x
    2 locations x 2 rotations = 16 images."""
    (root / "fg").mkdir(parents=True)
    for name, box in (("chelsea", (60, 20, 300, 260)), ("coffee", (120, 20, 460, 330))):
        obj = Image.fromarray(_photo(name)).crop(box).convert("RGBA")
        alpha = Image.new("L", obj.size, 0)
        ImageDraw.Draw(alpha).ellipse((8, 8, obj.size[0] - 8, obj.size[1] - 8), fill=255)
        obj.putalpha(alpha)
        obj.save(root / "fg" / f"{name}.png")
    Image.fromarray(_photo("rocket")).save(root / "background.jpg", quality=90)
    spec = {"foregrounds": [{"image": "fg/chelsea.png", "class_id": PHOTOS["chelsea"]},
                            {"image": "fg/coffee.png", "class_id": PHOTOS["coffee"]}],
            "backgrounds": ["background.jpg"], "sizes": [0.15, 0.3], "locations": [[0.35, 0.5], [0.65, 0.5]],
            "rotations": [0, 30], "image_size": 224, "num_classes": 1000, "label_space": "imagenet-1k",
            "name": "photo-composite"}
    path = root / "composite.json"
    path.write_text(json.dumps(spec))
    return path


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``<root>/<photo>/<photo>_<i>.jpg``: 40 JPEGs (10 per photo, sizes 120-420 px, alternately
    portrait and landscape, quality 70-95) and one truncated JPEG, listed in ``photos.csv``
    (ImageNet labels, label space declared in ``photos.csv.classes.json``); ``pgd/`` holds
    two JPEGs of three photos plus the truncated one as a 3-class ``folder:``; ``composite/``
    a compositing spec."""
    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    rows = []
    names = list(PHOTOS)
    for i in range(40):
        name = names[i % len(names)]
        (root / name).mkdir(exist_ok=True)
        rel = f"{name}/{name}_{i:02d}.jpg"
        _crop(_photo(name), rng, portrait=bool(i % 2)).save(root / rel, quality=int(rng.integers(70, 96)))
        rows.append((rel, PHOTOS[name]))
        if i == 4:
            _truncated(root / TRUNCATED, _photo("chelsea"))
            rows.append((TRUNCATED, PHOTOS["chelsea"]))
    pd.DataFrame(rows, columns=["path", "label"]).to_csv(root / "photos.csv", index=False)
    (root / "photos.csv.classes.json").write_text(json.dumps({"label_space": "imagenet-1k"}))
    for name in ("astronaut", "chelsea", "coffee"):
        (root / "pgd" / name).mkdir(parents=True)
        for k in range(2):
            _crop(_photo(name), rng, portrait=bool(k)).save(root / "pgd" / name / f"{k}.jpg", quality=90)
    _truncated(root / "pgd" / "chelsea" / "truncated.jpg", _photo("chelsea"))
    _composite_spec(root / "composite")
    return root


# --------------------------------------------------------------------------- helpers
def eval_json(*args: str) -> list[dict]:
    """``shiftbench eval ... --json`` in-process; the parsed rows."""
    result = runner.invoke(cli.app, ["eval", *args, "--json"])
    assert result.exit_code == 0, (result.output[-3000:], result.exception)
    return json.loads(result.stdout.strip().splitlines()[-1])


def stored(store: Path) -> dict[str, pd.DataFrame]:
    """Setting -> its per-example rows in ``store``, by dataset index."""
    s = Store(store)
    return {r.setting: s.read_predictions(r.key).sort_values("index").reset_index(drop=True)
            for r in s.results().itertuples()}


def assert_same_examples(batched: pd.DataFrame, one_by_one: pd.DataFrame, atol: float) -> None:
    """The rows of ``one_by_one`` (a prefix of the examples) equal ``batched``'s, example by example."""
    head = batched.iloc[:len(one_by_one)].reset_index(drop=True)
    for col in ("index", "id", "status", "error", "pred", "correct", "correct5"):
        pd.testing.assert_series_equal(head[col], one_by_one[col], check_names=False, obj=col)
    assert [list(t) for t in head["top5"]] == [list(t) for t in one_by_one["top5"]]
    np.testing.assert_allclose(head["confidence"], one_by_one["confidence"], rtol=0, atol=atol)


def assert_skipped_alike(store: Path, clean: str, shifted: list[str], n_skipped: int) -> None:
    """Every shifted setting skips and lists exactly the files the clean one does."""
    res = Store(store).results().set_index("setting")
    assert res.loc[clean, "n_skipped"] == n_skipped
    assert all(TRUNCATED.split("/")[-1] in f and "cannot decode" in f for f in res.loc[clean, "skipped_files"])
    for s in shifted:
        assert res.loc[s, "n_skipped"] == n_skipped, s
        assert list(res.loc[s, "skipped_files"]) == list(res.loc[clean, "skipped_files"]), s
        assert res.loc[s, "n_examples"] == res.loc[clean, "n_examples"], s
    rows = stored(store)
    cols = ["index", "id", "status", "error"]
    for s in shifted:
        pd.testing.assert_frame_equal(rows[s].loc[rows[s]["status"] != "ok", cols],
                                      rows[clean].loc[rows[clean]["status"] != "ok", cols])


# --------------------------------------------------------------------------- every shift, EfficientNet-Lite0
@pytest.fixture(scope="module")
def lite0_run(photos: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], list[dict]]:
    """EfficientNet-Lite0 on the manifest under every corruption, greyscale and Noise2Net, and on
    the composite study (clean and fog), at the default batch size and thread count."""
    clean = f"manifest:{photos / 'photos.csv'}"
    composite = f"composite:{photos / 'composite' / 'composite.json'}"
    settings = [clean, *(f"{clean}+{s}" for s in SHIFTS), composite, f"{composite}+fog.3"]
    store = tmp_path_factory.mktemp("lite0-batched")
    rows = eval_json("-m", "efficientnet-lite0", *(a for s in settings for a in ("-s", s)),
                     "--data-root", str(photos), "--store", str(store))
    return store, settings, rows


@pytest.mark.slow
def test_every_shift_on_real_photos_scores_each_example_as_one_at_a_time(photos, lite0_run, tmp_path):
    store, settings, rows = lite0_run
    clean, composite = settings[0], settings[-2]
    assert [r["setting"] for r in rows] == settings
    by = {r["setting"]: r for r in rows}
    assert by[clean]["n_examples"] == 40 and by[clean]["n_skipped"] == 1
    assert by[composite]["n_examples"] == 16
    assert by[clean]["accuracy"] > 25          # the real weights recognise the photos...
    corrupted = [by[f"{clean}+{s}"]["accuracy"] for s in SHIFTS]
    assert np.mean(corrupted) < by[clean]["accuracy"]   # ...and the corruptions hurt on average

    # the store, the testbed built from it and the command's output agree
    res = Store(store).results().set_index("setting")
    assert set(res["shift"].dropna()) == set(SHIFTS) | {"fog.3"}
    tb = shiftbench.Testbed.from_store(store)
    for s in settings:
        assert tb.accuracies.at["efficientnet-lite0", s] == pytest.approx(by[s]["accuracy"])
        assert tb.sizes.at["efficientnet-lite0", s] == by[s]["n_examples"]

    batched = stored(store)
    for s in (s for s in settings if "+" in s):   # every shift changed the pixels the model saw
        base = clean if s.startswith(clean) else composite
        assert not np.allclose(batched[s]["confidence"], batched[base]["confidence"], equal_nan=True), s

    # the same images one at a time: identical predictions, correctness and top-5 per example
    one_store = tmp_path / "one-by-one"
    eval_json("-m", "efficientnet-lite0", *(a for s in settings for a in ("-s", s)), "--data-root", str(photos),
              "--store", str(one_store), "--batch-size", "1", "--limit", str(N_ONE_BY_ONE))
    one = stored(one_store)
    assert set(one) == set(settings)
    for s in settings:
        assert len(one[s]) == min(N_ONE_BY_ONE, len(batched[s])), s
        assert_same_examples(batched[s], one[s], atol=1e-4)


@pytest.mark.slow
def test_truncated_jpeg_is_skipped_and_listed_in_every_shifted_setting_as_in_the_clean_one(lite0_run):
    store, settings, _ = lite0_run
    clean = settings[0]
    assert_skipped_alike(store, clean, [s for s in settings if s.startswith(clean + "+")], n_skipped=1)


def test_truncated_jpeg_is_skipped_alike_under_shifts_with_a_fast_model(photos, tmp_path, monkeypatch):
    """The same check in the fast suite (a 32 px colour oracle instead of EfficientNet)."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    clean = f"manifest:{photos / 'photos.csv'}"
    shifted = [f"{clean}+{s}" for s in ("fog.3", "glass_blur.2", "zoom_blur.1", "greyscale")]
    rows = eval_json("-m", "python:oracle_models:oracle32", "-s", clean, *(a for s in shifted for a in ("-s", s)),
                     "--store", str(tmp_path / "store"), "--batch-size", "8")
    assert all(r["n_skipped"] == 1 and r["n_examples"] == 40 for r in rows)
    assert_skipped_alike(tmp_path / "store", clean, shifted, n_skipped=1)


# --------------------------------------------------------------------------- PGD
TINY_RESNET = '''
import torch, torchvision
from shiftbench.models import Preprocessing

def resnet18_32px():
    """ResNet-18 with seeded random weights, 3 classes, 32 px inputs (PGD's 100 steps stay cheap)."""
    torch.manual_seed(0)
    net = torchvision.models.resnet18(num_classes=3)
    net.preprocessing = Preprocessing(input_size=32, resize=36, interpolation="bilinear")
    net.num_classes = 3
    return net
'''


@pytest.mark.slow
def test_pgd_on_real_photos_scores_each_example_as_one_at_a_time(photos, tmp_path, monkeypatch):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "tiny_resnet.py").write_text(TINY_RESNET)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    clean = f"folder:{photos / 'pgd'}"
    settings = [clean, f"{clean}+pgd.linf.eps2", f"{clean}+pgd.l2.eps0.5"]
    args = ["-m", "python:tiny_resnet:resnet18_32px", *(a for s in settings for a in ("-s", s))]
    rows = eval_json(*args, "--store", str(tmp_path / "batched"))
    assert [(r["n_examples"], r["n_skipped"]) for r in rows] == [(6, 1)] * 3
    eval_json(*args, "--store", str(tmp_path / "one"), "--batch-size", "1")
    batched, one = stored(tmp_path / "batched"), stored(tmp_path / "one")
    for s in settings[1:]:   # the attack moved the model's outputs
        assert not np.allclose(batched[s]["confidence"], batched[clean]["confidence"], equal_nan=True), s
    for s in settings:       # batched conv / backward sums differ in the last bits: 1e-3 on confidences
        assert_same_examples(batched[s], one[s], atol=1e-3)
    assert_skipped_alike(tmp_path / "batched", clean, settings[1:], n_skipped=1)


# --------------------------------------------------------------------------- a shift that fails
def _failing_factory(exc: Exception):
    def fn(x, indices, seed):
        raise exc

    def factory(severity):
        return shift_registry.Shift("fog", severity, fn, random=True)
    return factory


def run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``cli.main()`` with ``sys.argv`` patched (the console script's one-line error path)."""
    monkeypatch.setattr(sys, "argv", ["shiftbench", *args])
    code = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_an_exception_inside_a_shift_is_one_line_naming_the_shift_and_setting(photos, tmp_path, monkeypatch,
                                                                                capsys):
    shift_registry.get_shift("fog", 3)   # load the built-in shifts before replacing one
    _, severities, desc = shift_registry._SHIFTS["fog"]
    boom = RuntimeError("tensor sizes differ\n  at line 2 of the kernel")   # a multi-line message
    monkeypatch.setitem(shift_registry._SHIFTS, "fog", (_failing_factory(boom), severities, desc))
    monkeypatch.syspath_prepend(str(FIXTURES))
    setting = f"manifest:{photos / 'photos.csv'}+fog.3"
    code, out, err = run_main(monkeypatch, capsys, "eval", "-m", "python:oracle_models:oracle32", "-s", setting,
                              "--store", str(tmp_path / "store"), "--json")
    assert code != 0 and out == ""
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    line = lines[0]
    assert line.startswith("error: shift 'fog.3' failed") and repr(setting) in line
    assert "RuntimeError: tensor sizes differ at line 2 of the kernel" in line


def test_a_failing_shift_raises_shift_error_from_the_api_with_the_cause_attached(photos, tmp_path, monkeypatch):
    from shiftbench.engine import evaluate

    shift_registry.get_shift("fog", 3)
    _, severities, desc = shift_registry._SHIFTS["fog"]
    cause = IndexError("index 7 is out of bounds")
    monkeypatch.setitem(shift_registry._SHIFTS, "fog", (_failing_factory(cause), severities, desc))
    monkeypatch.syspath_prepend(str(FIXTURES))
    with pytest.raises(ShiftError, match=r"shift 'fog\.3' failed .*IndexError: index 7") as info:
        evaluate("python:oracle_models:oracle32", [f"manifest:{photos / 'photos.csv'}+fog.3"],
                 store=tmp_path / "store", workers=0, progress=False)
    assert isinstance(info.value, ShiftbenchError) and info.value.__cause__ is cause


def test_a_shiftbench_error_inside_a_shift_passes_unchanged(photos, tmp_path, monkeypatch):
    from shiftbench.engine import evaluate

    shift_registry.get_shift("fog", 3)
    _, severities, desc = shift_registry._SHIFTS["fog"]
    own = ConfigError("shift fog.3: severity table is empty")
    monkeypatch.setitem(shift_registry._SHIFTS, "fog", (_failing_factory(own), severities, desc))
    monkeypatch.syspath_prepend(str(FIXTURES))
    with pytest.raises(ConfigError) as info:
        evaluate("python:oracle_models:oracle32", [f"manifest:{photos / 'photos.csv'}+fog.3"],
                 store=tmp_path / "store", workers=0, progress=False)
    assert info.value is own
    assert not torch.is_inference_mode_enabled()
