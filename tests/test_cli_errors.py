"""No traceback reaches a user: every failure of ``shiftbench`` is one line on stderr.

Each case goes through ``shiftbench.cli.main()`` (in-process, ``sys.argv`` patched; two cases
through the installed console script) and must exit 1 with exactly one non-empty line on
stderr, ``error: <what and the fix>``, and no ``Traceback``; ``--debug`` shows the traceback.
The inputs are built here, a few bytes each: image folders, composite specs, testbed tables.
"""
from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from shiftbench import cli
from clirun import run_main  # noqa: E402 - tests/ helper

REF = "imagenet-reference"
X, Y = "val", "imagenetv2-matched-frequency-format-val"
ORACLE = "python:oracle_models:oracle"
SCRIPT = Path(sys.executable).with_name("shiftbench")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "MPLBACKEND": "Agg",
       "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent / "fixtures"), os.environ.get("PYTHONPATH", "")])}


# --------------------------------------------------------------------------- helpers


def one_line(code: int, err: str, *needles: str, status: int = 1) -> str:
    """The single ``error:`` line of a failed run, checked to contain every needle."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == status, err
    assert len(lines) == 1, err
    assert "Traceback" not in err
    line = lines[0]
    assert line.startswith("error: "), line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def fails(monkeypatch, capsys, args, *needles: str) -> str:
    code, _, err = run_main(monkeypatch, capsys, *args)
    return one_line(code, err, *needles)


@pytest.fixture
def blocker(tmp_path: Path) -> Path:
    """A regular file where a folder is expected."""
    path = tmp_path / "afile"
    path.write_text("not a folder\n")
    return path


@pytest.fixture
def images(tmp_path: Path) -> Path:
    """A class-folder dataset of two 16x16 images."""
    for cls in range(2):
        (tmp_path / "data" / f"class{cls}").mkdir(parents=True)
        Image.new("RGB", (16, 16), (cls, 0, 128)).save(tmp_path / "data" / f"class{cls}" / "0.png")
    return tmp_path / "data"


def eval_args(data: Path, store: Path, *extra: str) -> list[str]:
    return ["eval", "-m", ORACLE, "-s", f"folder:{data}", "--store", str(store), "--workers", "0", "--json", *extra]


# --------------------------------------------------------------------------- OS errors
def test_store_under_a_regular_file_names_the_file(monkeypatch, capsys, images, blocker) -> None:
    line = fails(monkeypatch, capsys, eval_args(images, blocker / "store"), str(blocker), "regular file",
                 "choose another --store")
    assert str(blocker / "store") in line


@pytest.mark.parametrize("code, needles", [
    (errno.EROFS, ["read-only file system", "choose another --store"]),
    (errno.EACCES, ["permission denied", "check the permissions"]),
])
def test_unwritable_store_names_the_path_and_the_fix(monkeypatch, capsys, images, tmp_path, code, needles) -> None:
    store = tmp_path / "store"
    real_mkdir = os.mkdir

    def mkdir(path, *args, **kwargs):
        if str(path).startswith(str(store)):
            raise (PermissionError if code == errno.EACCES else OSError)(code, os.strerror(code), str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    fails(monkeypatch, capsys, eval_args(images, store), str(store), *needles)


def test_full_disk_names_the_store(monkeypatch, capsys, images, tmp_path) -> None:
    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))   # as a write on a full disk: no file name

    monkeypatch.setattr(os, "fsync", fsync)
    fails(monkeypatch, capsys, eval_args(images, tmp_path / "store"), "no space left", "free some space",
          f"--store {tmp_path / 'store'}")


@pytest.mark.parametrize("command", [["plot", "--x", X, "--y", Y, "-t", REF, "-o", "OUT/fig.png"],
                                     ["report", "-t", REF, "--resamples", "1", "-o", "OUT/report"]])
def test_output_under_a_regular_file(monkeypatch, capsys, blocker, command) -> None:
    args = [a.replace("OUT", str(blocker)) for a in command]
    fails(monkeypatch, capsys, args, str(blocker), "regular file", "choose another -o")


def test_export_into_a_missing_folder_says_to_create_it(monkeypatch, capsys, tmp_path) -> None:
    missing = tmp_path / "nodir"
    fails(monkeypatch, capsys, ["results", "--store", str(tmp_path / "store"), "--output", str(missing / "r.csv")],
          "--output", str(missing), "does not exist", "mkdir -p")
    assert not missing.exists()          # refused, not created


def test_export_onto_a_folder(monkeypatch, capsys, tmp_path) -> None:
    (tmp_path / "r.csv").mkdir()
    fails(monkeypatch, capsys, ["results", "--store", str(tmp_path / "store"), "-o", str(tmp_path / "r.csv")],
          str(tmp_path / "r.csv"), "is a folder")


@pytest.mark.parametrize("exc, needles", [
    (FileNotFoundError(errno.ENOENT, "No such file or directory", "/nowhere/at/all/x.csv"),
     ["/nowhere/at/all/x.csv", "folder /nowhere does not exist", "mkdir -p /nowhere/at/all"]),
    (IsADirectoryError(errno.EISDIR, "Is a directory", "/tmp"), ["/tmp", "is a folder, not a file"]),
])
def test_os_errors_anywhere_are_one_line(monkeypatch, capsys, exc, needles) -> None:
    def boom(*args, **kwargs):
        raise exc

    monkeypatch.setattr(cli, "_testbed", boom)
    fails(monkeypatch, capsys, ["place", "-t", REF], *needles)


# --------------------------------------------------------------------------- devices
def _gpus() -> int:
    import torch

    return torch.cuda.device_count()


@pytest.mark.parametrize("device, needles", [
    ("tpu7", ["--device 'tpu7'", "not a device", "use cpu, cuda"]),
    ("cuda:3", ["--device cuda:3", "--device cpu"]),
    ("cuda:0", ["--device cuda:0", "--device cpu"]),
])
def test_device_is_checked_before_any_work(monkeypatch, capsys, tmp_path, images, device, needles) -> None:
    if device.startswith("cuda") and _gpus() > int(device.split(":")[1]):
        pytest.skip(f"this machine has {device}")
    fails(monkeypatch, capsys, eval_args(images, tmp_path / "store", "--device", device), *needles)
    assert not (tmp_path / "store").exists()


def test_gpu_index_beyond_the_machine_lists_the_gpus(monkeypatch, capsys, tmp_path, images) -> None:
    import torch

    from shiftbench.models.device import check_device

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert check_device("cuda:1") == "cuda:1" and check_device("cuda") == "cuda"
    assert check_device("cuda:7", here=False) == "cuda:7"       # a Ray worker's device: spelling only
    fails(monkeypatch, capsys, eval_args(images, tmp_path / "store", "--device", "cuda:3"),
          "--device cuda:3", "2 cuda device(s) (cuda:0, cuda:1)")


def test_sweep_device_is_checked_too(monkeypatch, capsys, tmp_path) -> None:
    fails(monkeypatch, capsys, ["resolution-sweep", "-m", ORACLE, "-s", "val", "--store", str(tmp_path / "s"),
                                "--device", "tpu7"], "--device 'tpu7'")


# --------------------------------------------------------------------------- composite specs
GOOD_SPEC = {"foregrounds": [{"image": "fg.png", "class_id": 1}], "backgrounds": "bg", "sizes": [0.2],
             "image_size": 16}


@pytest.mark.parametrize("change, needles", [
    ({"sizes": "big"}, ["sizes must be a non-empty list of numbers", "'big'"]),
    ({"sizes": [-0.2]}, ["sizes are fractions of the image area"]),
    ({"foregrounds": None}, ["foregrounds must be a non-empty list"]),
    ({"colour": "red"}, ["unknown keys ['colour']"]),
    ({"locations": [0.5, 0.5]}, ["locations must be [[x, y], ...]"]),
    ({"foregrounds": {"image": "fg.png", "class_id": 1}}, ["foregrounds must be a non-empty list"]),
    ({"image_size": "big"}, ["image_size must be an integer"]),
    ({"num_classes": "1000"}, ["num_classes must be an integer"]),
    ({"locations": {"grid": "five"}}, ["locations must be {\"grid\": N"]),
    ({"backgrounds": [5]}, ["backgrounds must be a folder or a non-empty list"]),
    ({"foregrounds": [{"image": "fg.png", "class_id": "one"}]}, ["foregrounds[0].class_id", "'one'"]),
    ("{foregrounds: [", ["invalid JSON"]),
    ("missing", ["missing 'foregrounds'"]),
])
def test_malformed_composite_spec_is_one_line(monkeypatch, capsys, tmp_path, change, needles) -> None:
    Image.new("RGBA", (8, 8), (255, 0, 0, 255)).save(tmp_path / "fg.png")
    (tmp_path / "bg").mkdir()
    Image.new("RGB", (32, 32), (0, 0, 255)).save(tmp_path / "bg" / "b.png")
    spec = tmp_path / "spec.json"
    if change == "missing":
        spec.write_text(json.dumps({k: v for k, v in GOOD_SPEC.items() if k != "foregrounds"}))
    elif isinstance(change, str):
        spec.write_text(change)
    else:
        spec.write_text(json.dumps({**GOOD_SPEC, **change}))
    fails(monkeypatch, capsys, ["eval", "-m", ORACLE, "-s", f"composite:{spec}", "--store", str(tmp_path / "s"),
                                "--workers", "0", "--json"], f"composite spec {spec}", *needles)


# --------------------------------------------------------------------------- resolution bound
def test_huge_resolution_is_refused_before_any_work(monkeypatch, capsys, tmp_path) -> None:
    fails(monkeypatch, capsys, ["resolution-sweep", "-m", ORACLE, "-s", "val", "--store", str(tmp_path / "s"),
                                "--resolutions", "64,100000"], "resolution 100000 is above 4096", "GiB")
    assert not (tmp_path / "s").exists()


# --------------------------------------------------------------------------- Ray
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_ray_address_is_named(monkeypatch, capsys, tmp_path, images) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    fails(monkeypatch, capsys, eval_args(images, tmp_path / "s", "--executor", "ray", "--address", address),
          f"cannot reach the Ray cluster at '{address}'", "check --address")


def test_ray_connection_error_is_one_line(monkeypatch, capsys, tmp_path, images) -> None:
    ray = pytest.importorskip("ray")

    def init(*args, **kwargs):
        raise ConnectionError("Could not find any running Ray instance.\nPlease specify the one to connect to.")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    fails(monkeypatch, capsys, eval_args(images, tmp_path / "s", "--executor", "ray", "--address", "auto"),
          "cannot connect to the Ray cluster at 'auto'", "Could not find any running Ray instance")


def test_address_without_ray_is_refused(monkeypatch, capsys, tmp_path, images) -> None:
    fails(monkeypatch, capsys, eval_args(images, tmp_path / "s", "--address", "10.0.0.1:6379"),
          "--address only applies with --executor ray")


# --------------------------------------------------------------------------- silent acceptance
@pytest.mark.parametrize("args, needles", [
    (["place", "-t", REF, "--model", "resnet50", "--scale", "cubic"], ["unknown scale 'cubic'"]),
    (["place", "-t", REF, "--model", "resnet50", "--fit-on", "NOPE"], ["'NOPE'"]),
    (["place", "-t", REF, "--model", "resnet50", "--resamples", "-5"], ["--resamples -5", "0 or more"]),
    (["report", "-t", REF, "-o", "REPORT", "--resamples", "-5"], ["--resamples -5"]),
    (["report", "-t", REF, "-o", "REPORT", "--resamples", "0"], ["--resamples 0", "positive number", "bootstrap band"]),
    (["report", "-t", REF, "-o", "REPORT", "--scale", "cubic"], ["unknown scale 'cubic'"]),
    (["transfer-correlation", "-t", REF, "--x", X, "--resamples", "-5"], ["--resamples -5", "0 or more"]),
    (["similarity", "-s", X, "-o", "REPORT", "--max-models", "0"], ["--max-models 0", "a positive number"]),
])
def test_bad_analysis_options_are_refused_up_front(monkeypatch, capsys, tmp_path, args, needles) -> None:
    args = [str(tmp_path / "rep") if a == "REPORT" else a for a in args]
    fails(monkeypatch, capsys, args, *needles)
    assert not (tmp_path / "rep").exists()


TABLE = {"model": ["m1", "m2", "m3", "m4"], "model_type": ["STANDARD"] * 4,
         "id": [60.0, 65.0, 70.0, 75.0], "ood": [45.0, 50.0, 55.0, 60.0]}


@pytest.mark.parametrize("suffix, change, needles", [
    (".parquet", {"ood": [True, False, True, False]}, ["column 'ood' holds true/false values"]),
    (".csv", {"ood": [True, False, True, False]}, ["column 'ood' holds true/false values"]),
    (".csv", {"id_dataset_size": ["many", "10", "10", "10"]}, ["'id_dataset_size'", "'many'", "'m1'"]),
    (".parquet", {"id_dataset_size": [10, 0, 10, 10]}, ["'id_dataset_size'", "0", "'m2'", "positive integer"]),
    (".parquet", {"id_dataset_size": [10, 10, -3, 10]}, ["'id_dataset_size'", "-3", "'m3'"]),
    (".parquet", {"id_dataset_size": [10.5, 10, 10, 10]}, ["'id_dataset_size'", "10.5"]),
])
def test_bad_table_cells_name_the_file_and_column(monkeypatch, capsys, tmp_path, suffix, change, needles) -> None:
    path = tmp_path / f"mine{suffix}"
    frame = pd.DataFrame({**TABLE, **change})
    frame.to_parquet(path) if suffix == ".parquet" else frame.to_csv(path, index=False)
    fails(monkeypatch, capsys, ["fit", "--testbed", str(path), "--x", "id", "--y", "ood"], str(path), *needles)


# --------------------------------------------------------------------------- the last resort, Ctrl-C, --debug
def test_unexpected_errors_point_to_debug(monkeypatch, capsys) -> None:
    def boom(*args, **kwargs):
        raise ZeroDivisionError("division by zero\nsecond line")

    monkeypatch.setattr(cli, "_testbed", boom)
    fails(monkeypatch, capsys, ["place", "-t", REF], "unexpected ZeroDivisionError: division by zero second line",
          "run with --debug for the traceback")


def test_ctrl_c_exits_130_with_one_line(monkeypatch, capsys) -> None:
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_testbed", interrupt)
    code, _, err = run_main(monkeypatch, capsys, "place", "-t", REF)
    one_line(code, err, "interrupted", status=130)


def test_debug_reraises_os_errors(monkeypatch, capsys, images, blocker) -> None:
    monkeypatch.setattr(sys, "argv", ["shiftbench", "--debug", *eval_args(images, blocker / "store")])
    with pytest.raises(NotADirectoryError):
        cli.main()


@pytest.mark.parametrize("debug", [False, True])
def test_script_os_error_one_line_or_traceback(tmp_path, images, blocker, debug) -> None:
    proc = subprocess.run([str(SCRIPT), *(["--debug"] if debug else []), *eval_args(images, blocker / "store")],
                          capture_output=True, text=True, env=ENV, timeout=120)
    if debug:
        assert proc.returncode == 1 and "Traceback" in proc.stderr and "NotADirectoryError" in proc.stderr
    else:
        one_line(proc.returncode, proc.stderr, str(blocker), "regular file")
        assert proc.stdout == ""
