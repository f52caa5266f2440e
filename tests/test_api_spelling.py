"""One name per concept in the Python API (issue 32): bootstrap counts are ``n_resamples`` and
interval levels are ``confidence`` in every public function and class reachable from
``shiftbench``, ``shiftbench.analysis`` and
``shiftbench.report`` (their ``__all__``)."""

from __future__ import annotations

import inspect

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
