"""One name per concept in the Python API (issue 32): bootstrap counts are ``n_resamples`` and
interval levels are ``confidence`` in every public function and class reachable from
``shiftbench``, ``shiftbench.analysis`` and
``shiftbench.report`` (their ``__all__``)."""

from __future__ import annotations

import inspect

import numpy as np
import pandas as pd
import pytest

import shiftbench
import shiftbench.analysis
import shiftbench.report

RETIRED = {"n_boot": "n_resamples", "ci": "confidence"}


def public_callables() -> list[tuple[str, object]]:
    out = {}
    for module in (shiftbench, shiftbench.analysis, shiftbench.report):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                out[f"{module.__name__}.{name}"] = obj
            if inspect.isclass(obj):
                for meth, fn in vars(obj).items():
                    if not meth.startswith("_") and inspect.isfunction(fn):
                        out[f"{module.__name__}.{name}.{meth}"] = fn
    return sorted(out.items())


CALLABLES = public_callables()


def test_there_are_public_callables_to_check() -> None:
    names = {n.rsplit(".", 1)[-1] for n, _ in CALLABLES}
    assert len(CALLABLES) > 20
    assert {"hypotheses_table", "robustness_transfer_correlation", "plot_trend"} & names


@pytest.mark.parametrize(("name", "obj"), CALLABLES, ids=[n for n, _ in CALLABLES])
def test_no_retired_parameter_names(name: str, obj: object) -> None:
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        pytest.skip(f"{name} has no signature")
    bad = {p: RETIRED[p] for p in params if p in RETIRED}
    assert not bad, f"{name}: rename {bad}"


@pytest.mark.parametrize(("name", "obj"), CALLABLES, ids=[n for n, _ in CALLABLES])
def test_the_testbed_comes_first(name: str, obj: object) -> None:
    """One calling convention: a public function that reads a testbed takes it first
    (a result class holding a testbed as a field is not a function that reads one)."""
    if inspect.isclass(obj):
        pytest.skip(f"{name} is a class")
    try:
        params = [p for p in inspect.signature(obj).parameters if p not in ("self", "cls")]
    except (TypeError, ValueError):
        pytest.skip(f"{name} has no signature")
    if "testbed" in params and name.rsplit(".", 1)[-1] != "fitted_on_note":
        assert params[0] == "testbed", f"{name}: testbed is parameter {params.index('testbed') + 1}, not the first"


@pytest.fixture(scope="module")
def tb() -> shiftbench.Testbed:
    rng = np.random.default_rng(0)
    x = rng.uniform(40, 90, 12)
    rows = [{"model": f"m{i}", "model_type": "STANDARD", "setting": s, "accuracy": a, "n_examples": 1000}
            for i, (xi, yi) in enumerate(zip(x, x - 10 + rng.normal(0, 1, 12)))
            for s, a in (("val", xi), ("shift", yi))]
    return shiftbench.Testbed.from_frame(pd.DataFrame(rows), fractions=False)


def test_testbed_first_positionally_and_by_keyword(tb: shiftbench.Testbed) -> None:
    a = shiftbench.fit_trend(tb, "val", "shift")
    b = shiftbench.fit_trend(testbed=tb, x="val", y="shift")
    assert a.slope == b.slope and a.n_models == 12
    er = shiftbench.effective_robustness(tb, "val", "shift", n_resamples=0)
    assert len(er) == 12
    assert shiftbench.fit_trend(x=[40, 60, 80], y=[30, 50, 70], scale="linear").slope == pytest.approx(1.0)


@pytest.mark.parametrize("call", [
    lambda tb: shiftbench.fit_trend("val", "shift", testbed=tb),
    lambda tb: shiftbench.fit_trend("val", "shift"),
    lambda tb: shiftbench.fit_trend([40, 60, 80], [30, 50, 70]),
    lambda tb: shiftbench.effective_robustness("val", "shift"),
    lambda tb: shiftbench.relative_robustness("shift", "m0", testbed=tb),
    lambda tb: shiftbench.fit_piecewise_trend("val", "shift", 60.0),
])
def test_the_old_order_is_one_clear_line(tb: shiftbench.Testbed, call: object) -> None:
    with pytest.raises((shiftbench.ConfigError, TypeError)) as info:
        call(tb)  # type: ignore[operator]
    msg = str(info.value)
    assert "\n" not in msg
    assert "testbed first" in msg or "multiple values for argument 'testbed'" in msg
