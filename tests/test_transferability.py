"""Robustness vs transfer (Djolonga et al. 2021): Spearman per metric x task group with bootstrap
intervals over models, and the partial correlation given ID accuracy."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from typer.testing import CliRunner

from shiftbench.analysis.transferability import robustness_transfer_correlation, spearman_with_interval
from shiftbench.cli import app
from shiftbench.errors import ConfigError, DataError
from shiftbench.testbed import Testbed


def planted(n: int = 40, seed: int = 0) -> Testbed:
    """ID accuracy drives everything; UCI accuracy carries a robustness term that the natural task
    shares and the structured task does not."""
    rng = np.random.default_rng(seed)
    idacc, rob = rng.uniform(60, 95, n), rng.normal(0, 3, n)
    acc = pd.DataFrame({
        "mnist-test": idacc, "uci": idacc * 0.7 + rob,
        "mnist-test+fog.1": idacc * 0.9 + rng.normal(0, 2, n), "mnist-test+fog.3": idacc * 0.8 + rng.normal(0, 2, n),
        "transfer:fashion": 40 + 0.3 * idacc + 2 * rob + rng.normal(0, 1, n),
        "transfer:count": 50 + rng.normal(0, 5, n),
    }, index=[f"m{i}" for i in range(n)])
    types = ["STANDARD"] * (n - n // 8) + ["ROBUST_INTV"] * (n // 8)
    return Testbed(acc, metadata=pd.DataFrame({"model_type": types}, index=acc.index), name="planted")


GROUPS = {"fashion": "natural", "count": "structured"}


def _partial_by_residuals(m, t, c):
    rm, rt, rc = (stats.rankdata(v) for v in (m, t, c))
    res = [v - np.polyval(np.polyfit(rc, v, 1), rc) for v in (rm, rt)]
    return np.corrcoef(*res)[0, 1]


def test_spearman_and_partial_match_independent_computations():
    rng = np.random.default_rng(1)
    c = rng.normal(size=50)
    m, t = c + rng.normal(size=50), c + 0.5 * rng.normal(size=50)
    r = spearman_with_interval(m, t, c, n_resamples=0)
    assert r["rho"] == pytest.approx(stats.spearmanr(m, t).statistic)
    assert r["partial_rho"] == pytest.approx(_partial_by_residuals(m, t, c))
    # the percentile bootstrap interval over models, as an independent loop computes it
    boot = spearman_with_interval(m, t, c, n_resamples=400, seed=5)
    idx = np.random.default_rng(5).integers(0, 50, size=(400, 50))
    loop = [stats.spearmanr(m[i], t[i]).statistic for i in idx]
    assert (boot["low"], boot["high"]) == pytest.approx(tuple(np.quantile(loop, [0.025, 0.975])))


def test_a_metric_that_shares_the_natural_tasks_robustness_term_says_more_than_id_accuracy():
    res = robustness_transfer_correlation(planted(), "mnist-test", groups=GROUPS, n_resamples=500)
    rows = res.rows.set_index(["metric", "group"])
    uci = rows.loc[("er:uci", "natural")]
    assert uci["partial_low"] > 0.5 and uci["n_models"] == 40
    assert rows.loc[("er:uci", "structured"), "low"] < 0 < rows.loc[("er:uci", "structured"), "high"]
    # fog accuracy tracks natural transfer only through ID accuracy: its partial interval holds 0
    fog = rows.loc[("acc:mnist-test+fog.3", "natural")]
    assert fog["rho"] > 0.3 and fog["partial_low"] < 0 < fog["partial_high"]
    # ID accuracy itself has no partial correlation; the corruption average is a metric
    assert np.isnan(rows.loc[("acc:mnist-test", "natural"), "partial_rho"])
    assert {"acc:corruptions", "er:corruptions"} <= set(res.metrics.columns)
    assert list(res.matrix().columns) == ["natural", "structured", "mean"]


def test_the_shared_resamples_give_what_each_cell_alone_gives():
    res = robustness_transfer_correlation(planted(), "mnist-test", groups=GROUPS, n_resamples=300, seed=2)
    alone = spearman_with_interval(res.metrics["acc:uci"].to_numpy(), res.targets["natural"].to_numpy(),
                                   res.metrics["acc:mnist-test"].to_numpy(), n_resamples=300, seed=2)
    row = res.rows.set_index(["metric", "group"]).loc[("acc:uci", "natural")]
    for k, v in alone.items():
        assert row[k] == pytest.approx(v)


def test_bad_input_is_one_line():
    with pytest.raises(ConfigError, match="ID setting 'val' is not in testbed 'planted'"):
        robustness_transfer_correlation(planted(), "val", groups=GROUPS)
    tb = planted(n=4)
    with pytest.raises(DataError, match="fewer than 5 models have transfer results"):
        robustness_transfer_correlation(tb, "mnist-test", groups=GROUPS)
    no_transfer = Testbed(planted().accuracies.drop(columns=["transfer:fashion", "transfer:count"]), name="x")
    with pytest.raises(DataError, match="no transfer results"):
        robustness_transfer_correlation(no_transfer, "mnist-test")


def test_the_cli_prints_the_metrics_by_groups_table_and_json(tmp_path):
    path = tmp_path / "tb.csv"
    planted().to_frame().to_csv(path, index=False)
    (tmp_path / "groups.csv").write_text("task,group\nfashion,natural\ncount,structured\n")
    runner = CliRunner()
    args = ["transfer-correlation", "--testbed", str(path), "--x", "mnist-test", "--groups",
            str(tmp_path / "groups.csv"), "--resamples", "200"]
    shown = runner.invoke(app, args)
    assert shown.exit_code == 0, shown.output
    assert "Robustness vs transfer" in shown.output and "er:uci" in shown.output and "natural ρ" in shown.output
    rows = json.loads(runner.invoke(app, [*args, "--json"]).output)
    assert {r["group"] for r in rows} == {"natural", "structured", "mean"}
    assert {"metric", "rho", "low", "high", "partial_rho", "n_models"} <= set(rows[0])
