"""DeepAugment in the digits demo (shiftbench.demo.deepaugment): the zoo's two DeepAugment models,
the stage that makes their copies with shiftbench.deepaugment (deterministic, resumable, cached),
the training recipe that uses them, and the digits group table that puts them in the hypotheses
table. The stage runs here on a few synthetic digits with a short training (the full demo copies
all 7,000 training digits, which is not part of the reduced demo the suite builds)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")

from shiftbench.errors import ConfigError, DataError  # noqa: E402

#: the stage's mechanics, cheaply: same networks and width, a few training steps
FAST = {"networks": ["cae", "edsr"], "width": 0.25, "train_steps": 3, "seed": 0, "p": 0.5}
N = 12


@pytest.fixture(scope="module", autouse=True)
def _registries():
    """Importing shiftbench.demo registers its datasets, settings and architectures; restore the
    registries afterwards (other test modules check their exact contents)."""
    from shiftbench import settings
    from shiftbench.datasets import DATASETS
    from shiftbench.models.registry import ARCHS

    saved = [(registry, dict(registry)) for registry in (DATASETS, settings._SETTINGS, ARCHS)]
    import shiftbench.demo

    shiftbench.demo.register()
    yield
    for registry, old in saved:
        registry.clear()
        registry.update(old)


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    """12 synthetic 32 x 32 'digits' (a bright bar at a seeded place) with labels 0-9."""
    rng = np.random.default_rng(0)
    x = np.zeros((N, 32, 32), np.uint8)
    for i in range(N):
        r, c = rng.integers(6, 20, size=2)
        x[i, r:r + 8, c:c + 3] = 255
    return x, np.arange(N) % 10


def _zoo():
    from shiftbench.demo.zoo import build_zoo

    return {m.name: m for m in build_zoo()}


def test_full_zoo_has_deepaugment_and_deepaugment_augmix_models_with_their_recipes():
    from shiftbench.demo.deepaugment import SETTINGS
    from shiftbench.demo.zoo import INTERVENTIONS, select_zoo

    zoo = _zoo()
    for base in ("cnn-w4-e4", "cnn-w8-e3"):
        da, both, augmix = zoo[f"{base}-deepaugment"], zoo[f"{base}-deepaugment-augmix"], zoo[f"{base}-augmix"]
        for m in (da, both):
            assert m.model_type == "ROBUST_INTV" and m.base == base and "deepaugment" in m.tags
            assert m.recipe["deepaugment"] == SETTINGS
            assert {k: v for k, v in m.recipe.items() if k not in ("deepaugment", "augment", "p")} == zoo[base].recipe
        assert "augment" not in da.recipe and "augmix" not in da.tags
        # DeepAugment + AugMix: the zoo's AugMix recipe on top of the copies
        assert (both.recipe["augment"], both.recipe["p"]) == (augmix.recipe["augment"], augmix.recipe["p"])
        assert {"augmix", "deepaugment+augmix"} <= set(both.tags)
    assert set(SETTINGS["networks"]) == {"cae", "edsr"} and 0 < SETTINGS["p"] < 1
    assert INTERVENTIONS["deepaugment"][0] == INTERVENTIONS["deepaugment-augmix"][0] == "ROBUST_INTV"
    assert not any("deepaugment" in m.recipe for m in select_zoo("small"))   # the reduced demo has no copies


def test_intervention_kind_tells_deepaugment_from_augmix():
    from shiftbench.demo.report import _intervention_kind

    zoo = _zoo()
    kinds = {n: _intervention_kind(zoo[n].tags) for n in
             ("cnn-w8-e3-augmix", "cnn-w8-e3-deepaugment", "cnn-w8-e3-deepaugment-augmix")}
    assert kinds == {"cnn-w8-e3-augmix": "augmix", "cnn-w8-e3-deepaugment": "deepaugment",
                     "cnn-w8-e3-deepaugment-augmix": "deepaugment+augmix"}


def test_deepaugment_stage_is_deterministic_and_resumes_from_cache(digits, tmp_path):
    from shiftbench.demo.deepaugment import copies_dir, load_copies, make_copies, network_of

    x, y = digits
    first = make_copies(tmp_path / "a", x, y, "digest", FAST)
    assert (first["images"], first["written"], first["already"], first["cached"]) == (N, N, 0, False)
    copies = load_copies(tmp_path / "a", FAST, "digest")
    assert copies.shape == (N, 32, 32, 3) and copies.dtype == np.uint8
    assert not np.array_equal(copies.mean(-1).round(), x)          # the networks changed the digits
    # the same digits and settings elsewhere: the same bytes (one thread; jobs do not matter)
    make_copies(tmp_path / "b", x, y, "digest", FAST, jobs=2)
    np.testing.assert_array_equal(load_copies(tmp_path / "b", FAST, "digest"), copies)
    # a finished stage is read from its cache
    assert make_copies(tmp_path / "a", x, y, "digest", FAST)["cached"]
    # interrupted after some images: only the missing ones are written, and the copy is the same
    root = copies_dir(tmp_path / "a", FAST, "digest")
    (root / "copies.npz").unlink()
    lost = [root / network_of(i, FAST["networks"]) / str(y[i]) / f"{i:05d}.0.png" for i in (0, 1, 5)]
    for path in lost:
        path.unlink()
    again = make_copies(tmp_path / "a", x, y, "digest", FAST)
    assert (again["written"], again["already"], again["cached"]) == (len(lost), N - len(lost), False)
    np.testing.assert_array_equal(load_copies(tmp_path / "a", FAST, "digest"), copies)
    # other settings or other training digits are another cache entry, with other copies
    other = {**FAST, "seed": 1}
    assert copies_dir(tmp_path / "a", other, "digest") != root != copies_dir(tmp_path / "a", FAST, "other")
    make_copies(tmp_path / "a", x, y, "digest", other)
    assert not np.array_equal(load_copies(tmp_path / "a", other, "digest"), copies)


def test_missing_copies_say_what_to_run(tmp_path):
    from shiftbench.demo.deepaugment import load_copies

    with pytest.raises(DataError, match="make demo"):
        load_copies(tmp_path, FAST, "digest")


def test_a_partly_written_input_folder_is_written_again(digits, tmp_path):
    from shiftbench.demo.deepaugment import copies_dir, load_copies, make_copies

    x, y = digits
    root = copies_dir(tmp_path, FAST, "digest")
    (root / ".input-partial" / "cae" / "3").mkdir(parents=True)            # killed while writing the inputs
    (root / ".input-partial" / "cae" / "3" / "junk.png").write_bytes(b"not a png")
    make_copies(tmp_path, x, y, "digest", FAST)
    make_copies(tmp_path / "fresh", x, y, "digest", FAST)
    np.testing.assert_array_equal(load_copies(tmp_path, FAST, "digest"), load_copies(tmp_path / "fresh", FAST, "digest"))


def test_deepaugment_recipe_trains_on_the_copies_reproducibly(digits):
    import torch

    from shiftbench.demo.training import _deepaugmented, train_torch
    from shiftbench.demo.zoo import build_zoo

    x, y = digits
    copies = np.repeat((255 - x)[..., None], 3, axis=-1)       # inverted digits: easy to tell apart
    batch = torch.from_numpy(x).float().div(255)[:, None].expand(-1, 3, -1, -1)
    idx = torch.arange(N)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(_deepaugmented(batch, idx, copies, 0.0, g), batch)
    swapped = _deepaugmented(batch, idx, copies, 1.0, g)
    assert torch.equal(swapped, torch.from_numpy(copies).permute(0, 3, 1, 2).float() / 255)
    half = _deepaugmented(batch, idx, copies, 0.5, torch.Generator().manual_seed(3))
    replaced = (half != batch).flatten(1).any(1)
    assert 0 < int(replaced.sum()) < N

    recipe = {**next(m for m in build_zoo() if m.name == "cnn-w4-e4-deepaugment-augmix").recipe, "epochs": 1}
    nets = [train_torch(recipe, x, y, copies=c) for c in (copies, copies, np.zeros_like(copies))]
    weights = [torch.cat([p.detach().flatten() for p in n.parameters()]) for n in nets]
    assert torch.equal(weights[0], weights[1]) and not torch.equal(weights[0], weights[2])
    with pytest.raises(ConfigError, match="DeepAugment copies"):
        train_torch(recipe, x, y)


def test_digits_group_table_puts_each_intervention_with_its_exact_base():
    from shiftbench.analysis.hypotheses import load_groups, match_baselines, select_models
    from shiftbench.testbed import Testbed

    zoo = _zoo()
    frame = pd.DataFrame({"model": list(zoo), "model_type": [m.model_type for m in zoo.values()],
                          "tags": [";".join(m.tags) for m in zoo.values()],
                          "mnist-test": np.linspace(60, 99, len(zoo)), "uci-digits": np.linspace(30, 80, len(zoo))})
    tb = Testbed.from_frame(frame, name="digits")
    groups = load_groups("digits").set_index("group")
    chosen = {g: select_models(tb, groups.at[g, "select"])[0] for g in groups.index}
    assert sorted(chosen["DeepAugment"]) == ["cnn-w4-e4-deepaugment", "cnn-w8-e3-deepaugment"]
    assert sorted(chosen["DeepAugment + AugMix"]) == ["cnn-w4-e4-deepaugment-augmix", "cnn-w8-e3-deepaugment-augmix"]
    assert sorted(chosen["AugMix"]) == ["cnn-w4-e4-augmix", "cnn-w8-e3-augmix"]
    assert len(chosen["DeepAugment (alone or with AugMix)"]) == 4 and len(chosen["DeepAugment and AugMix"]) == 6
    every = sorted({m for ms in chosen.values() for m in ms})
    assert every == sorted(n for n, m in zoo.items() if m.base)                   # every intervention, once at least
    for g in groups.index:
        bases = match_baselines(tb, chosen[g], groups.at[g, "baseline"])
        assert bases == {m: [zoo[m].base] for m in chosen[g]}, g
