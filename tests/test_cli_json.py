"""``--json`` on the commands that write files or run studies (``plot``, ``report``, ``cache``,
``demo``, ``resolution-sweep``, ``composite``): stdout holds exactly one JSON value with the
documented keys, and the notes and progress bars go to stderr."""
from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from report_testbed import V2, tiny_testbed  # noqa: E402
from shiftbench import cli  # noqa: E402

TINY_MODELS = textwrap.dedent('''
    import torch

    class Constant(torch.nn.Module):
        """Always class 0."""

        num_classes = 2  # (declared, so loading needs no probe forward pass)

        def forward(self, x):
            return torch.stack([torch.ones(x.shape[0]), torch.zeros(x.shape[0])], 1)

    def build():
        return Constant()
''')


def run_json(*args: str) -> tuple[object, str]:
    """Run ``shiftbench ARGS --json``: the one JSON value on stdout, and stderr."""
    res = CliRunner().invoke(cli.app, [*args, "--json"])
    assert res.exit_code == 0, (res.output, res.exception)
    return json.loads(res.stdout), res.stderr


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A tiny testbed table, a shared report cache of its own, and a report written into it."""
    root = tmp_path_factory.mktemp("json")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHIFTBENCH_CACHE_DIR", str(root / "shared"))
        csv = tiny_testbed().save(root / "mine.csv")
        report, stderr = run_json("report", "--testbed", str(csv), "-o", str(root / "rep"), "--resamples", "20",
                                  "--figure-formats", "png")
        yield {"root": root, "csv": csv, "report": report, "report_stderr": stderr}


def test_plot_json_names_the_file_and_the_fit(env):
    out = env["root"] / "v2.png"
    d, _ = run_json("plot", "--x", "val", "--y", V2, "-t", str(env["csv"]), "-o", str(out))
    assert set(d) == {"files", "x", "y", "scale", "fit"}
    assert d["files"] == [str(out)] and out.is_file()
    assert (d["x"], d["y"], d["scale"]) == ("val", V2, "logit")
    assert set(d["fit"]) == {"kind", "recipe", "slope", "intercept", "r2", "n_models", "n_excluded", "excluded"}
    assert d["fit"]["n_models"] >= 3 and (d["fit"]["kind"], d["fit"]["recipe"]) == ("linear", "standard")
    assert 0 < d["fit"]["r2"] <= 1


def test_report_json_gives_index_sections_figures_and_times(env):
    d = env["report"]
    assert set(d) == {"index", "testbeds", "sections", "figures", "times"}
    assert d["index"] == str((env["root"] / "rep" / "index.html").resolve()) and Path(d["index"]).is_file()
    assert d["testbeds"] == ["mine"] and d["sections"] and all(isinstance(s, str) for s in d["sections"])
    assert d["figures"] == len(list((env["root"] / "rep").glob("*/*.png"))) > 0
    assert d["times"]["total"] > 0
    assert "HTML report" in env["report_stderr"]       # the progress bar went to stderr


def test_cache_json_counts_entries_and_clear_counts_removed(env, monkeypatch):
    monkeypatch.setenv("SHIFTBENCH_CACHE_DIR", str(env["root"] / "shared"))
    d, _ = run_json("cache")
    assert set(d) == {"root", "enabled", "foreign", "analyses", "figures", "bytes", "max_bytes"}
    assert d["root"] == str(env["root"] / "shared") and d["enabled"] and not d["foreign"]
    assert d["figures"] > 0 and d["bytes"] > 0
    kept = d["analyses"] + d["figures"]
    d, _ = run_json("cache", "--clear")
    assert d == {"root": str(env["root"] / "shared"), "enabled": True, "removed": kept}
    monkeypatch.setenv("SHIFTBENCH_CACHE_DIR", "off")
    d, _ = run_json("cache")
    assert d["root"] is None and d["enabled"] is False


def test_demo_json_without_digits_gives_paths_testbeds_and_times(tmp_path, monkeypatch):
    monkeypatch.setenv("SHIFTBENCH_CACHE_DIR", "off")
    d, stderr = run_json("demo", "--no-digits", "-o", str(tmp_path / "demo"), "--resamples", "20",
                         "--figure-formats", "none", "--workspace", str(tmp_path / "ws"))
    assert set(d) == {"report", "summary", "testbeds", "times"}
    assert Path(d["report"]).name == "index.html" and Path(d["report"]).is_file()
    assert Path(d["summary"]).name == "summary.md" and Path(d["summary"]).is_file()
    assert d["testbeds"] == list(cli.REFERENCE_TESTBEDS)
    assert set(d["times"]) == {"reference", "digits", "html", "total"}
    assert "reference analysis" in stderr and "html report" in stderr   # the notes went to stderr


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A constant model (python:json_models:build), a two-class folder dataset, a composite spec."""
    root = tmp_path_factory.mktemp("tiny")
    (root / "json_models.py").write_text(TINY_MODELS)
    for cls, shade in (("a", 60), ("b", 200)):
        (root / "data" / cls).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (96, 96), (shade + i, shade, shade)).save(root / "data" / cls / f"{i}.png")
    (root / "fg").mkdir()
    (root / "bg").mkdir()
    disc = Image.new("RGBA", (64, 64), (0, 0, 0, 0))
    ImageDraw.Draw(disc).ellipse((4, 4, 60, 60), fill=(220, 30, 30, 255))
    disc.save(root / "fg" / "disc.png")
    Image.fromarray(np.full((96, 128, 3), 128, np.uint8)).save(root / "bg" / "grey.png")
    spec = {"name": "json-mini", "num_classes": 2, "foregrounds": [{"image": "fg/disc.png", "class_id": 0}],
            "backgrounds": ["bg/grey.png"], "sizes": [0.05, 0.2], "locations": {"grid": 2, "margin": 0.2},
            "rotations": [0]}
    (root / "spec.json").write_text(json.dumps(spec))
    sys.path.insert(0, str(root))
    yield {"root": root, "model": "python:json_models:build", "store": root / "store"}
    sys.path.remove(str(root))
    sys.modules.pop("json_models", None)


def test_resolution_sweep_json_gives_accuracy_per_resolution_and_the_best(tiny):
    d, _ = run_json("resolution-sweep", "--model", tiny["model"], "--setting", f"folder:{tiny['root'] / 'data'}",
                    "--resolutions", "32,64", "--store", str(tiny["store"]), "--batch-size", "4")
    assert {"model", "setting", "study", "store", "native_resolution", "best_resolution", "accuracy",
            "rows"} <= set(d)
    assert d["store"] == str(tiny["store"]) and d["accuracy"] == {"32": 50.0, "64": 50.0}
    assert d["best_resolution"] == 32          # a tie: the smallest resolution
    assert [r["resolution"] for r in d["rows"]] == [32, 64] and sum(r["best"] for r in d["rows"]) == 1


def test_composite_json_gives_accuracy_per_factor_value(tiny):
    d, _ = run_json("composite", "--model", tiny["model"], "--spec", str(tiny["root"] / "spec.json"),
                    "--store", str(tiny["store"]), "--batch-size", "8")
    assert {"model", "setting", "study", "store", "accuracy", "n_examples", "factors"} <= set(d)
    assert d["n_examples"] == 2 * 4 and d["accuracy"] == 100.0       # the constant model always says class 0
    sizes = [f for f in d["factors"] if f["factor"] == "size"]
    assert [f["label"] for f in sizes] == ["0.05", "0.2"] and all(f["accuracy"] == 100.0 for f in sizes)
