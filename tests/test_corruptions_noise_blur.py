"""ImageNet-C noise and blur corruptions against the reference ``imagecorruptions`` (imaug fork)
on real photographs (scikit-image's chelsea, coffee and astronaut resized to 224 x 224 and
32 x 32).

Measured when these tests were written (mean absolute difference in grey levels, 0-255):

* gaussian_blur, defocus_blur, zoom_blur, motion_blur (the reference's angle replayed): < 1e-4
  at 224 and 32 px (max < 5e-4; float32 vs the reference's float64);
* gaussian_noise, speckle_noise, impulse_noise replaying the reference's NumPy draws: < 1e-4;
  glass_blur replaying its numba draws: < 1e-4 (max 0.4: a value on a uint8 truncation
  boundary may round the other way in float32);
* with our own generators: noise residual std, salt/pepper fractions, shot noise's
  mean/variance per grey level, glass and motion blur's mean change agree with the reference's
  within sampling error.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image

from corruption_photos import GREY_LEVEL, photos_u8, reference, to_numpy, to_tensor
from shiftbench.errors import ConfigError
from shiftbench.shifts import get_shift, list_shifts
from shiftbench.shifts.corruptions import blur, noise, replay

NOISE = ["gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise"]
BLUR = ["gaussian_blur", "defocus_blur", "motion_blur", "zoom_blur", "glass_blur"]
RANDOM = NOISE + ["motion_blur", "glass_blur"]
DETERMINISTIC = ["gaussian_blur", "defocus_blur", "zoom_blur"]
SCALED = ["gaussian_blur-scaled", "defocus_blur-scaled", "motion_blur-scaled", "glass_blur-scaled"]
ALL = NOISE + BLUR


def run_reference(name: str, u8: np.ndarray, severity: int, **kwargs) -> np.ndarray:
    """The reference's float output (before ``corrupt``'s uint8 truncation), in [0, 1], (B, H, W, 3)."""
    fn = getattr(reference(), name)
    return np.stack([np.asarray(fn(Image.fromarray(im), severity, **kwargs), dtype=np.float64) for im in u8]) / 255


@pytest.fixture(scope="module")
def photos224() -> np.ndarray:
    return photos_u8(224)


# ---------------------------------------------------------------- contract: shape, range, registry

@pytest.mark.parametrize("size", [224, 32, (40, 72)], ids=["224px", "32px", "40x72px"])
def test_every_corruption_and_severity_keeps_shape_and_range_without_nan(size):
    x = to_tensor(photos_u8(size))
    for name in ALL + (SCALED if size != 224 else []):
        for severity in range(1, 6):
            out = get_shift(name, severity)(x, [0, 1, 2], seed=0)
            assert out.shape == x.shape and out.dtype == x.dtype, (name, severity)
            assert not torch.isnan(out).any(), (name, severity)
            assert torch.isfinite(out).all() and out.min() >= 0 and out.max() <= 1, (name, severity)


def test_dtype_and_layout_of_the_batch_are_kept():
    x = to_tensor(photos_u8(32))
    for name in ALL:
        shift = get_shift(name, 3)
        assert shift(x.double(), [0, 1, 2], seed=0).dtype == torch.float64, name
        assert shift(x.bfloat16(), [0, 1, 2], seed=0).dtype == torch.bfloat16, name
        channels_last = x.contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(shift(channels_last, [0, 1, 2], seed=0), shift(x, [0, 1, 2], seed=0))


def test_scaled_variants_equal_the_reference_parameters_at_224_px_and_are_milder_below():
    big, small = to_tensor(photos_u8(224))[:1], to_tensor(photos_u8(32))
    for name in ("gaussian_blur", "defocus_blur", "motion_blur", "glass_blur"):
        for severity in (1, 5):
            plain, scaled = get_shift(name, severity), get_shift(f"{name}-scaled", severity)
            if not plain.random:      # same parameters at 224 px (random ones draw from another stream)
                torch.testing.assert_close(scaled(big, [0], seed=0), plain(big, [0], seed=0))
            change = [(s(small, [0, 1, 2], seed=0) - small).abs().mean() for s in (plain, scaled)]
            if name != "glass_blur":  # glass: less blur, but shuffling by +-1 px is its floor
                assert change[1] < change[0], (name, severity, change)
    assert blur._glass_params(5, 32, 32, True) == pytest.approx((1.5 * 32 / 224, 1, 2))


def test_registered_with_descriptions_and_randomness_flags():
    shifts = list_shifts()
    for name in ALL + SCALED:
        assert shifts[name], name
    assert all(get_shift(n, 1).random for n in RANDOM)
    assert not any(get_shift(n, 1).random for n in DETERMINISTIC)
    assert get_shift("glass_blur-scaled", 2).id == "glass_blur-scaled.2"


@pytest.mark.parametrize("name", ALL + SCALED)
def test_severities_outside_1_to_5_are_config_errors(name):
    for bad in (0, 6, -1, None, 2.5, True):
        with pytest.raises(ConfigError):
            get_shift(name, bad)


def test_unknown_names_are_config_errors_with_suggestions():
    with pytest.raises(ConfigError, match="gaussian_noise"):
        get_shift("gausian_noise", 3)
    with pytest.raises(ConfigError, match="motion_blur"):
        get_shift("motion-blur", 3)
    with pytest.raises(ConfigError, match="severity"):
        noise.gaussian_noise(torch.zeros(1, 3, 32, 32), 7, [])


def test_images_below_32_px_are_rejected_naming_the_size():
    for name in ("gaussian_noise", "glass_blur", "zoom_blur"):
        with pytest.raises(ConfigError, match="31x40"):
            get_shift(name, 1)(torch.rand(1, 3, 40, 31), [0], seed=0)
        with pytest.raises(ConfigError, match="at least 32x32"):
            get_shift(name, 1)(torch.rand(2, 3, 16, 64), [0, 1], seed=0)


def test_a_batch_needs_float_pixels_and_one_dataset_index_per_image():
    x = torch.rand(2, 3, 32, 32)
    with pytest.raises(ConfigError, match="indices"):
        get_shift("shot_noise", 1)(x, [0], seed=0)
    for name in ("impulse_noise", "defocus_blur"):
        with pytest.raises(ConfigError, match="float pixels"):
            get_shift(name, 1)((x * 255).to(torch.uint8), [0, 1], seed=0)


# ---------------------------------------------------------------- reproducibility

@pytest.mark.parametrize("name", ALL)
def test_result_depends_on_seed_and_index_not_on_batch(name):
    x = to_tensor(photos_u8(64))
    image7 = x[2:3]
    batch = torch.stack([x[0], x[1], x[2], x[0].flip(-2)])   # image 7 at position 2 of a batch of 4
    for severity in (1, 5):
        shift = get_shift(name, severity)
        alone = shift(image7, [7], seed=3)
        in_batch = shift(batch, [3, 11, 7, 5], seed=3)
        reversed_batch = shift(batch.flip(0), [5, 7, 11, 3], seed=3)
        torch.testing.assert_close(in_batch[2:3], alone, atol=1e-6, rtol=0)
        torch.testing.assert_close(reversed_batch[1:2], alone, atol=1e-6, rtol=0)
        torch.testing.assert_close(shift(image7, torch.tensor([7]), seed=3), alone, atol=0, rtol=0)


@pytest.mark.parametrize("name", RANDOM)
def test_different_seeds_and_indices_give_different_corruptions(name, photos224):
    x = to_tensor(photos224[:1])
    for severity in (1, 5):
        shift = get_shift(name, severity)
        a, b, c = shift(x, [0], seed=0), shift(x, [0], seed=1), shift(x, [1], seed=0)
        assert (a - b).abs().mean() > 1e-4 and (a - c).abs().mean() > 1e-4, severity


# ---------------------------------------------------------------- fidelity: deterministic blurs

@pytest.mark.parametrize("size", [224, 32])
@pytest.mark.parametrize("name", DETERMINISTIC)
def test_deterministic_blurs_match_the_reference_on_photos(name, size):
    u8 = photos_u8(size)
    x = to_tensor(u8)
    for severity in range(1, 6):
        ours = to_numpy(get_shift(name, severity)(x, [0, 1, 2], seed=0))
        mad = np.abs(ours - run_reference(name, u8, severity)).mean()
        assert mad <= 2 * GREY_LEVEL                                     # the contract
        assert mad < 1e-3 * GREY_LEVEL, (name, severity, mad * 255)      # measured: < 1e-4 grey levels


@pytest.mark.parametrize("size", [224, 32])
def test_motion_blur_matches_the_reference_at_the_reference_angle(size):
    u8 = photos_u8(size)
    x = to_tensor(u8)
    for severity in range(1, 6):
        np.random.seed(severity)
        theirs = run_reference("motion_blur", u8, severity)   # one U(-45, 45) angle per image
        np.random.seed(severity)
        angles = [np.random.uniform(-45, 45) for _ in u8]
        ours = to_numpy(blur.motion_blur_from_noise(x, severity, angles))
        mad = np.abs(ours - theirs).mean()
        assert mad < 1e-3 * GREY_LEVEL, (severity, mad * 255)             # measured: < 1e-4 grey levels


def test_motion_blur_on_small_images_drops_the_shifts_beyond_the_image_like_the_reference():
    x = torch.full((1, 3, 32, 32), 0.5)
    out = blur.motion_blur_from_noise(x, 5, [0.0])   # 41 taps, the last 9 reach past a 32 px image
    k = np.exp(-np.arange(41) ** 2 / (2 * 15 ** 2))
    assert out.mean().item() == pytest.approx(0.5 * k[:32].sum() / k.sum(), rel=1e-5)


def test_disk_kernel_is_the_reference_kernel_including_its_reflected_mass():
    ref = reference()
    for radius, alias in blur.DEFOCUS_BLUR:
        theirs = ref.disk(radius=radius, alias_blur=alias)
        ours = blur.disk_kernel(float(radius), float(alias))
        np.testing.assert_allclose(ours, theirs, atol=1e-7)
    assert blur.disk_kernel(10.0, 0.5).sum() == pytest.approx(1.0107858, abs=1e-6)   # reflect-101 in the array


def test_zoom_blur_reproduces_scipys_zero_last_sample_at_odd_sizes():
    u8 = photos_u8((37, 45))     # sizes where scipy's last sample falls past the crop for some zooms
    x = to_tensor(u8)
    for severity in (1, 3, 5):
        mad = np.abs(to_numpy(blur.zoom_blur(x, severity)) - run_reference("zoom_blur", u8, severity)).mean()
        assert mad < 1e-3 * GREY_LEVEL, (severity, mad * 255)


# ---------------------------------------------------------------- fidelity: random corruptions, replayed

def test_gaussian_and_speckle_noise_match_the_reference_on_its_own_normals(photos224):
    x = to_tensor(photos224)
    for name, fn in (("gaussian_noise", noise.gaussian_noise_from_noise),
                     ("speckle_noise", noise.speckle_noise_from_noise)):
        for severity in range(1, 6):
            np.random.seed(severity)
            theirs = run_reference(name, photos224, severity)
            np.random.seed(severity)
            z = np.stack([np.random.normal(size=im.shape) for im in photos224])   # same stream, scale 1
            ours = to_numpy(fn(x, severity, torch.from_numpy(z).permute(0, 3, 1, 2).float()))
            mad = np.abs(ours - theirs).mean()
            assert mad < 1e-3 * GREY_LEVEL, (name, severity, mad * 255)


def test_impulse_noise_matches_the_reference_on_its_own_uniforms(photos224):
    x = to_tensor(photos224)
    for severity in range(1, 6):
        c = noise.IMPULSE_NOISE[severity - 1]
        theirs = np.stack([np.asarray(reference().impulse_noise(Image.fromarray(im), severity, seed=10 + i),
                                      dtype=np.float64) for i, im in enumerate(photos224)]) / 255
        flipped, salted = [], []
        for i, im in enumerate(photos224):        # scikit-image: rng.random <= amount, then rng.random <= 0.5
            rng = np.random.default_rng(10 + i)
            flipped.append(rng.random(im.shape) <= c)
            salted.append(rng.random(im.shape) <= 0.5)
        f, s = (torch.from_numpy(np.stack(a)).permute(0, 3, 1, 2) for a in (flipped, salted))
        ours = to_numpy(noise.impulse_noise_from_noise(x, f, s))
        assert np.abs(ours - theirs).max() < 1e-6, severity


def _numba_glass_draws(h: int, w: int, delta: int, iterations: int, seed: int) -> torch.Tensor:
    """The reference's offsets: numba's stream after ``np.random.seed(seed)``, drawn in its loop
    order, returned as ``(iterations, 2, H - 2d, W - 2d)`` (dx, dy) in raster order."""
    pytest.importorskip("numba")
    return replay.glass_reference_offsets(h, w, delta, iterations, seed)


@pytest.mark.parametrize("size", [224, (45, 38)])
def test_glass_blur_matches_the_reference_on_its_own_offsets(size):
    u8 = photos_u8(size)
    x = to_tensor(u8)
    h, w = x.shape[-2:]
    for severity in range(1, 6):
        _, delta, iterations = blur.GLASS_BLUR[severity - 1]
        seeds = [100 * severity + i for i in range(len(u8))]
        theirs = np.stack([run_reference("glass_blur", u8[i:i + 1], severity, seed=s)[0] for i, s in enumerate(seeds)])
        offsets = [_numba_glass_draws(h, w, delta, iterations, s) for s in seeds]
        ours = to_numpy(blur.glass_blur_from_noise(x, severity, offsets))
        diff = np.abs(ours - theirs)
        assert diff.mean() < 1e-3 * GREY_LEVEL, (severity, diff.mean() * 255)   # measured: < 1e-4
        assert (diff > 0.5 * GREY_LEVEL).mean() < 1e-3, severity   # uint8 truncation ties only


def test_glass_shuffle_map_is_the_sequential_copy_loop():
    """The reference's loop, in plain Python, on random offsets and a small odd-sized image."""
    rng = np.random.default_rng(0)
    for h, w, delta, iterations in ((40, 37, 3, 2), (33, 50, 1, 3), (36, 36, 4, 1)):
        offsets = torch.from_numpy(rng.integers(-delta, delta, (iterations, 2, h - 2 * delta, w - 2 * delta)))
        img = rng.integers(0, 1 << 30, (h, w))
        expect = img.copy()
        for t in range(iterations):
            for hh in range(h - delta, delta, -1):
                for ww in range(w - delta, delta, -1):
                    dx, dy = offsets[t, :, hh - delta - 1, ww - delta - 1].tolist()
                    expect[hh, ww] = expect[hh + dy, ww + dx]       # the reference's "swap"
        got = img.reshape(-1)[blur.glass_shuffle_map(offsets, h, w, delta).long().numpy()].reshape(h, w)
        np.testing.assert_array_equal(got, expect)


# ---------------------------------------------------------------- fidelity: random corruptions, statistics

def _z(a: float, b: float, se: float) -> float:
    return abs(a - b) / se


def test_gaussian_and_speckle_noise_residuals_have_the_reference_spread(photos224):
    x = to_tensor(photos224)
    mid = (x > 0.3) & (x < 0.7)
    m = mid.sum().item()
    for name, table, relative in (("gaussian_noise", noise.GAUSSIAN_NOISE, False),
                                  ("speckle_noise", noise.SPECKLE_NOISE, True)):
        for severity in (1, 3, 5):
            c = table[severity - 1]
            np.random.seed(severity)
            theirs = torch.from_numpy(run_reference(name, photos224, severity)).permute(0, 3, 1, 2).float()
            ours = get_shift(name, severity)(x, [0, 1, 2], seed=0)
            s_ours, s_theirs = (((o - x) / (x if relative else 1))[mid].std().item() for o in (ours, theirs))
            if severity == 1:                         # no clipping within 3.75 sigma: the std is c
                assert s_ours == pytest.approx(c, rel=0.01) and s_theirs == pytest.approx(c, rel=0.01)
            assert _z(s_ours, s_theirs, c / math.sqrt(m)) < 4, (name, severity, s_ours, s_theirs)


def test_impulse_noise_replaces_the_reference_fraction_by_salt_and_pepper(photos224):
    x = to_tensor(photos224)
    inner = (x > 0.01) & (x < 0.99)
    n = inner.sum().item()
    for severity in range(1, 6):
        c = noise.IMPULSE_NOISE[severity - 1]
        ours = get_shift("impulse_noise", severity)(x, [0, 1, 2], seed=0)
        # the reference seeded per image (unseeded, it drew from fresh entropy: a rare run failed at z = 4.2)
        theirs = np.stack([np.asarray(reference().impulse_noise(Image.fromarray(im), severity, seed=100 * severity + i),
                                      dtype=np.float64) for i, im in enumerate(photos224)]) / 255
        theirs = torch.from_numpy(theirs).permute(0, 3, 1, 2)
        for out in (ours, theirs.float()):
            salt, pepper = (out[inner] == 1).float().mean().item(), (out[inner] == 0).float().mean().item()
            se = math.sqrt(c / 2 * (1 - c / 2) / n)
            assert _z(salt, c / 2, se) < 4 and _z(pepper, c / 2, se) < 4, (severity, salt, pepper)
        assert ((ours != x) & inner & (ours != 0) & (ours != 1)).sum() == 0


def test_poisson_sampler_is_poisson():
    from scipy import stats

    g = torch.Generator().manual_seed(0)
    n = 200_000
    for lam_max, lam in ((60, 60.0), (60, 37.3), (25, 9.99), (12, 0.124), (12, 0.126), (5, 2.7), (3, 0.03), (3, 0.0)):
        u = torch.rand(2, n, dtype=torch.float64, generator=g)
        counts = noise.poisson(torch.full((n,), lam), lam_max, u[0], u[1]).numpy().astype(int)
        if lam == 0:
            assert counts.max() == 0
            continue
        obs = np.bincount(counts)
        exp = stats.poisson.pmf(np.arange(len(obs)), lam) * n
        keep = exp > 5
        chi2 = ((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum()
        assert stats.chi2.sf(chi2, keep.sum() - 1) > 1e-4, (lam_max, lam)
        assert counts.mean() == pytest.approx(lam, abs=5 * math.sqrt(lam / n))


def test_alias_tables_give_poissons_probabilities_at_every_grey_level():
    from scipy import stats

    cols, unit = noise.ALIAS_COLUMNS, 2 ** 24
    for c in noise.SHOT_NOISE:
        table = noise.poisson_alias_tables(float(c)).numpy().astype(np.int64) & 0xFFFFFFFF
        table = table.reshape(256, cols)
        threshold, alias = table & 0x1FFFFFF, table >> 25
        assert threshold.max() <= unit and alias.max() < cols
        for level in (0, 1, 37, 128, 254, 255):
            implied = np.bincount(np.arange(cols), weights=threshold[level], minlength=cols)
            implied = implied + np.bincount(alias[level], weights=unit - threshold[level], minlength=cols)
            implied = implied / (cols * unit)
            pmf = stats.poisson.pmf(np.arange(cols), c * level / 255) if level else (np.arange(cols) == 0) * 1.0
            assert np.abs(implied - pmf).max() < 2.0 ** -30, (c, level)


def test_shot_noise_on_the_uint8_grid_and_off_it_are_poisson_at_the_references_rates():
    """Grid inputs take the alias tables, others the CDF sampler: both give Poisson(c x) counts
    (chi-square per level) and the same mean and variance."""
    from scipy import stats

    level = torch.tensor([3, 64, 200]).view(3, 1, 1).expand(3, 256, 256)
    on_grid = (level.float() / 255).unsqueeze(0)                                # (1, 3, 256, 256)
    off_grid = on_grid + 0.3 / 255                                             # between two levels
    for severity in (1, 4):
        c = noise.SHOT_NOISE[severity - 1]
        for x, shift in ((on_grid, 0.0), (off_grid, 0.3)):
            counts = (get_shift("shot_noise", severity)(x, [0], seed=1) * c).round().long()[0]
            for ch in range(3):
                lam = c * (int(level[ch, 0, 0]) + shift) / 255
                k = counts[ch].reshape(-1).numpy()
                obs = np.bincount(k)
                exp = stats.poisson.pmf(np.arange(len(obs)), lam) * k.size
                exp[-1] += stats.poisson.sf(len(obs) - 1, lam) * k.size   # counts above c are clipped to c
                keep = exp > 5
                chi2 = ((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum()
                assert stats.chi2.sf(chi2, max(1, keep.sum() - 1)) > 1e-4, (severity, shift, ch)


def test_shot_noise_counts_have_the_reference_mean_and_variance_per_grey_level(photos224):
    x = to_tensor(photos224)
    for severity in (1, 3, 5):
        c = noise.SHOT_NOISE[severity - 1]
        ours = get_shift("shot_noise", severity)(x, [0, 1, 2], seed=0)
        theirs = torch.from_numpy(run_reference("shot_noise", photos224, severity)).permute(0, 3, 1, 2).float()
        for lo in (0.05, 0.2, 0.4):
            band = (x >= lo) & (x < lo + 0.1)
            m = band.sum().item()
            lam = (x[band] * c).double()
            stats = []
            for out in (ours, theirs):
                k = (out[band] * c).double().round()  # the (clipped) Poisson counts
                stats.append((k.mean().item(), ((k - lam) ** 2).mean().item()))
            (mean_o, var_o), (mean_t, var_t) = stats
            lm = lam.mean().item()
            assert _z(mean_o, mean_t, math.sqrt(2 * lm / m)) < 4, (severity, lo, mean_o, mean_t)
            assert _z(var_o, var_t, math.sqrt(2 * (lm + 2 * lm * lm) / m)) < 4, (severity, lo, var_o, var_t)
            if lo == 0.05:                            # no clipping: Poisson's mean and variance
                assert _z(mean_o, lm, math.sqrt(lm / m)) < 4 and var_o == pytest.approx(lm, rel=0.05)


@pytest.mark.parametrize("name", ["glass_blur", "motion_blur"])
def test_random_blurs_change_the_image_as_much_as_the_reference(name, photos224):
    """Our draws vs the reference's: the mean absolute change of the photos agrees within the
    spread between different draws."""
    x = to_tensor(photos224)
    for severity in (1, 3, 5):
        ours = [(get_shift(name, severity)(x, [0, 1, 2], seed=s) - x).abs().mean(dim=(1, 2, 3)) for s in range(3)]
        theirs = []
        for s in range(3):
            np.random.seed(s)
            kwargs = {"seed": s} if name == "glass_blur" else {}
            out = torch.from_numpy(run_reference(name, photos224, severity, **kwargs)).permute(0, 3, 1, 2)
            theirs.append((out.float() - x).abs().mean(dim=(1, 2, 3)))
        a, b = torch.stack(ours).mean(0), torch.stack(theirs).mean(0)
        tolerance = 0.03 if name == "glass_blur" else 0.25   # motion: the angle changes a lot per draw
        assert torch.allclose(a, b, rtol=tolerance), (name, severity, a, b)


# ---------------------------------------------------------------- speed paths stay exact

def test_batched_gaussian_and_speckle_noise_are_their_from_noise_functions_on_the_same_normals():
    from shiftbench.shifts.corruptions._common import generators

    x = to_tensor(photos_u8(40))
    for severity in (1, 5):
        z = torch.stack([torch.randn(x[0].shape, generator=g) for g in generators(x, [4, 9, 2], 1, "id")])
        for batched, from_noise in ((noise.gaussian_noise, noise.gaussian_noise_from_noise),
                                    (noise.speckle_noise, noise.speckle_noise_from_noise)):
            got = batched(x, severity, generators(x, [4, 9, 2], 1, "id"))
            assert torch.equal(got, from_noise(x, severity, z)), (batched.__name__, severity)


@pytest.mark.parametrize("chunk", [1, 2, None, 5])
def test_map_images_gives_the_whole_batch_result_for_any_piece_size(chunk):
    from shiftbench.shifts.corruptions._common import map_images

    x = torch.arange(5 * 3 * 4 * 4, dtype=torch.float32).view(5, 3, 4, 4)
    scale = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])

    def fn(xs, s):                       # per image: x * s_i + its own mean
        return xs * s.view(-1, 1, 1, 1) + xs.mean((1, 2, 3), keepdim=True)

    torch.testing.assert_close(map_images(fn, x, scale, chunk=chunk), fn(x, scale), rtol=0, atol=0)
