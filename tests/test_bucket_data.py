"""Images in a bucket: ``folder:s3://bucket/prefix`` is a setting like ``folder:DIR``, read from an
S3 server started by the test itself (moto's server mode on a free port of this machine). The same
images evaluated from a local folder and from the bucket give the same results and per-example
rows, with DataLoader workers too; the scan is one listing and each image one GET; a bucket that
cannot be read is one line.
"""
from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

s3fs = pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from shiftbench.datasets import ImageDecodeError, LayoutError, image_folder, load_dataset  # noqa: E402
from shiftbench.datasets.classmaps import imagenet_wnids  # noqa: E402
from shiftbench.errors import ConfigError, StoreError  # noqa: E402
from shiftbench.settings import canonical_setting_name, get_setting  # noqa: E402
from shiftbench.store import Store  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
sys.path.insert(0, str(Path(__file__).parent))
from clirun import run_main  # noqa: E402 - tests/ helper
from oracle_models import colour_of  # noqa: E402
from s3server import CREDENTIALS, _fresh_clients, bucket, endpoint  # noqa: E402,F401 - fixtures: moto's S3 server, a new bucket

ORACLE32 = "python:oracle_models:oracle32"   # 32 px input: synthetic shifts need at least 32 x 32
ORACLE7 = "python:oracle_models:oracle7"
WNIDS = imagenet_wnids()[:7]
#: what a result row says of its data, beside the names (the setting names the URI, the notes its root)
SAME = ["accuracy", "top5", "n_examples", "n_skipped", "skipped_files", "ece", "nll", "brier", "n_skipped_on_scan",
        "skipped_on_scan", "shift", "seed", "label_space", "dataset"]


def photos(root: Path, n: int = 21) -> Path:
    """``n`` 32 px images in 7 ImageNet wnid folders (every 5th drawn in the next class's colour),
    a truncated image, a text file in a class folder, an image outside the class folders and a
    dot-file: everything a scan must treat as a local scan does."""
    for i in range(n):
        cls = i % 7
        (root / WNIDS[cls]).mkdir(parents=True, exist_ok=True)
        shown = (cls + 1) % 7 if i % 5 == 0 else cls
        Image.new("RGB", (32, 32), colour_of(shown)).save(root / WNIDS[cls] / f"{i:03d}.png")
    (root / WNIDS[1] / "truncated.png").write_bytes((root / WNIDS[1] / "001.png").read_bytes()[:40])
    (root / WNIDS[2] / "notes.txt").write_text("not an image")
    (root / WNIDS[3] / ".DS_Store").write_bytes(b"\0")
    Image.new("RGB", (32, 32)).save(root / "stray.png")
    return root


def upload(local: Path, bucket: str, prefix: str) -> str:
    """``local``'s files under ``s3://bucket/prefix``; the URI."""
    s3fs.S3FileSystem(skip_instance_cache=True).put(f"{local}/", f"{bucket}/{prefix}", recursive=True)
    return f"s3://{bucket}/{prefix}"


def evaluate(model, settings, store, **kw) -> pd.DataFrame:
    from shiftbench.engine import evaluate as ev

    return ev(model, settings, store=store, batch_size=4, chunk_size=8, progress=False, **kw)


def rows(store: Path) -> pd.DataFrame:
    """Every per-example row of ``store``, by setting (without the setting's name) and index."""
    st = Store.existing(store)
    res = st.results()
    frames = [st.read_predictions(k).assign(order=i) for i, k in enumerate(res["key"])]
    return pd.concat(frames, ignore_index=True).sort_values(["order", "index"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def shared(endpoint, tmp_path_factory):
    """The photos on disk and in a bucket (uploaded once for the module)."""
    import uuid

    local = photos(tmp_path_factory.mktemp("data") / "photos")
    name = f"sb-data-{uuid.uuid4().hex[:10]}"
    s3fs.S3FileSystem(skip_instance_cache=True).mkdir(name)
    return local, upload(local, name, "lab/photos")


# ---------------------------------------------------------------------------- the same images, the same results
@pytest.mark.parametrize("workers", [0, 2])
def test_a_bucket_folder_evaluates_as_the_local_folder_row_for_row(shared, tmp_path, workers):
    local, uri = shared
    res_l = evaluate(ORACLE32, [f"folder:{local}", f"folder:{local}+gaussian_noise.2"], tmp_path / "l",
                     workers=workers, keep_logits=True)
    res_b = evaluate(ORACLE32, [f"folder:{uri}/", f"folder:{uri}+gaussian_noise.2"], tmp_path / "b",
                     workers=workers, keep_logits=True)
    assert res_b["setting"].tolist() == [f"folder:{uri}", f"folder:{uri}+gaussian_noise.2"]
    pd.testing.assert_frame_equal(res_b[SAME], res_l[SAME])
    assert res_l["accuracy"].iloc[0] == pytest.approx(100 * 16 / 21)   # 21 scored: every 5th drawn wrong
    assert res_b["n_skipped"].tolist() == [1, 1]
    assert [f.partition(":")[0] for f in res_b["skipped_files"].iloc[0]] == [f"{WNIDS[1]}/truncated.png"]
    assert [f.partition(":")[0] for f in res_b["skipped_on_scan"].iloc[0]] == [f"{WNIDS[2]}/notes.txt", "stray.png"]
    assert "folder s3://" in res_b["notes"].iloc[0][0] and "ImageNet classes (wnids)" in res_b["notes"].iloc[0][0]
    rows_l, rows_b = rows(tmp_path / "l"), rows(tmp_path / "b")
    assert len(rows_b) == 2 * 22
    pd.testing.assert_frame_equal(rows_b, rows_l)
    logits = [Store(tmp_path / s).connect().execute("SELECT pass, index, error, logits FROM logits ORDER BY pass, "
                                                    "index").fetchall() for s in "lb"]
    assert len(logits[0]) == 2 * 22 and logits[1] == logits[0]    # the same passes (same ids), the same logits


def test_the_dataset_is_the_local_one_with_every_option(shared):
    local, uri = shared
    a, b = image_folder(local), image_folder(uri)          # no model: the folders are its own 7 classes
    assert (b.ids, b.targets, b.class_names, b.label_space, b.num_classes, b.skipped_on_scan, b.name) == \
           (a.ids, a.targets, a.class_names, a.label_space, a.num_classes, a.skipped_on_scan, a.name)
    a, b = (load_dataset("folder", path=p, classes="imagenet-1k") for p in (local, uri))
    assert (b.ids, b.targets, b.num_classes, b.label_space) == (a.ids, a.targets, 1000, "imagenet-1k")
    a, b = image_folder(local, classes=WNIDS[::-1]), image_folder(uri, classes=WNIDS[::-1])
    assert b.targets == a.targets and b.class_names == a.class_names
    with pytest.raises(LayoutError, match=f"missing {uri}/n99999999; class folder given in classes= is absent"):
        image_folder(uri, classes=["n99999999"])
    # the setting names the URI as given, one spelling; file:// is the local folder
    assert canonical_setting_name(f"folder:{uri}/?classes=imagenet-1k+fog.3") == f"folder:{uri}?classes=imagenet-1k+fog.3"
    assert canonical_setting_name(f"folder:file://{local}/") == f"folder:{local.resolve()}"
    assert get_setting(f"folder:{uri}@classmap:imagenet-to-cifar10").dataset_args == (("path", uri),)
    assert image_folder(f"file://{local}").ids == a.ids
    with pytest.raises(ConfigError, match="only a folder of images is read from a bucket"):
        get_setting(f"manifest:{uri}/m.csv")


def test_the_scan_is_one_listing_and_each_image_one_get(shared, monkeypatch):
    _, uri = shared
    calls: list[str] = []
    real = s3fs.S3FileSystem._call_s3

    async def counted(self, method, *args, **kwargs):
        calls.append(method)
        return await real(self, method, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", counted)
    _fresh_clients()
    ds = image_folder(uri, model_outputs=1000)
    assert calls == ["list_objects_v2"]                  # 7 class folders, 23 objects: one request
    calls.clear()
    decoded = 0
    for i in range(len(ds)):
        try:
            ds.load(i)
            decoded += 1
        except ImageDecodeError as exc:
            assert exc.example_id == f"{WNIDS[1]}/truncated.png"
    assert decoded == len(ds) - 1 == 21 and calls == ["get_object"] * len(ds)
    # pickled (a spawned worker, a Ray task): the URI travels, not the client; the copy opens its own
    copy = pickle.loads(pickle.dumps(ds))
    assert "_live" not in copy.__dict__ and copy.uri == uri
    assert copy.load(0).getpixel((0, 0)) == ds.load(0).getpixel((0, 0)) == colour_of(1)


def test_the_engines_loader_fetches_a_batch_in_one_concurrent_request(shared, monkeypatch):
    """The DataLoader asks the runner's dataset view for a whole batch (``__getitems__``): a bucket
    folder fetches it with one ``fs.cat`` of the batch's paths (concurrent GETs), and the batch is
    what one ``load`` per image gives, the truncated image a skipped example in its place."""
    from shiftbench.engine.runner import _Decoded
    from shiftbench.models import Preprocessing

    _, uri = shared
    ds = image_folder(uri, model_outputs=1000)
    fs = ds._fs()
    batches: list[int] = []
    real = fs.cat                                        # fsspec's sync wrapper: an attribute of the instance

    def cat(path, *args, **kwargs):
        batches.append(len(path) if isinstance(path, list) else 1)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(fs, "cat", cat)
    head, tail = Preprocessing(input_size=16, resize=16).split_transform()
    view = _Decoded(ds, [(head, (16, 16), None)])
    got = view.__getitems__(list(range(len(ds))))
    assert batches == [len(ds)] == [22]                  # one request for the batch, not 22
    for i, (xs, index, error) in enumerate(got):
        assert index == i
        if ds.ids[i] == f"{WNIDS[1]}/truncated.png":
            assert error.startswith("cannot decode") or "truncated" in error, error
        else:
            assert error == "" and xs[0].equal(head(ds.load(i)))
    assert sum(bool(e) for _, _, e in got) == 1


def test_an_object_removed_after_the_scan_is_a_skipped_example(endpoint, bucket, tmp_path):
    uri = upload(photos(tmp_path / "p", n=7), bucket, "p")
    ds = image_folder(uri)
    s3fs.S3FileSystem(skip_instance_cache=True).rm_file(f"{bucket}/p/{ds.ids[0]}")
    with pytest.raises(ImageDecodeError, match=f"file not found: {uri}/{ds.ids[0]}"):
        ds.load(0)


def test_a_memory_uri_is_a_bucket_too(tmp_path):
    import fsspec

    local = photos(tmp_path / "m", n=7)
    fsspec.filesystem("memory").put(f"{local}/", "/sb-test-photos", recursive=True)
    try:
        a, b = image_folder(local), image_folder("memory://sb-test-photos")
        assert (b.ids, b.targets, b.skipped_on_scan) == (a.ids, a.targets, a.skipped_on_scan)
        assert b.load(3).getpixel((0, 0)) == a.load(3).getpixel((0, 0))
    finally:
        fsspec.filesystem("memory").rm("/sb-test-photos", recursive=True)


# ---------------------------------------------------------------------------- one-line errors
def one_line(monkeypatch, capsys, setting: str) -> str:
    code, _, err = run_main(monkeypatch, capsys, "eval", "-m", ORACLE7, "-s", setting, "--workers", "0",
                              "--store", "unused-store")
    assert code != 0 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_a_bucket_that_cannot_be_read_is_one_line(shared, bucket, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _, uri = shared
    err = one_line(monkeypatch, capsys, f"folder:s3://{bucket}/nothing/here")
    assert f"expected s3://{bucket}/nothing/here/<class>/<image>" in err and \
        f"missing s3://{bucket}/nothing/here; nothing under this prefix; check the URI" in err
    err = one_line(monkeypatch, capsys, f"folder:s3://{bucket}-missing/photos")
    assert err.startswith(f"error: s3://{bucket}-missing/photos: the bucket '{bucket}-missing' does not exist")
    assert "check the URI, the credentials and the endpoint" in err
    err = one_line(monkeypatch, capsys, "folder:nope://x")
    assert err.startswith("error: nope://x: unknown URI scheme nope://; an image folder is a local folder or a URI "
                          "of one of file://, memory://, s3://")
    err = one_line(monkeypatch, capsys, f"folder:{uri}/{WNIDS[0]}/000.png")
    assert "it is an object, not a folder" in err
    from moto import settings as moto_settings

    monkeypatch.setattr(moto_settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)   # the server checks every request
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG0")
    _fresh_clients()
    try:
        err = one_line(monkeypatch, capsys, f"folder:{uri}")
    finally:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", CREDENTIALS["AWS_ACCESS_KEY_ID"])
        _fresh_clients()
    assert err.startswith(f"error: {uri}: access denied while trying to list the images under it") and \
        "AWS_ACCESS_KEY_ID" in err


def test_storage_options_and_an_unreachable_endpoint(shared, endpoint, monkeypatch):
    local, uri = shared
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    _fresh_clients()
    assert len(image_folder(uri, storage_options={"endpoint_url": endpoint})) == 22
    nowhere = {"endpoint_url": "http://127.0.0.1:9", "config_kwargs": {"retries": {"max_attempts": 1}}}
    with pytest.raises(StoreError, match=f"^{uri}: cannot reach the storage server while trying to list the images "
                                         r"under it \(.*\); check the endpoint \(AWS_ENDPOINT_URL"):
        image_folder(uri, storage_options=nowhere)
    with pytest.raises(ConfigError, match="storage_options are for a folder in a bucket"):
        image_folder(local, storage_options={"endpoint_url": endpoint})


def test_the_cli_evaluates_a_bucket_folder(shared, tmp_path, monkeypatch, capsys):
    import json

    _, uri = shared
    code, out, err = run_main(monkeypatch, capsys, "eval", "-m", ORACLE32, "-s", f"folder:{uri}", "--workers", "0",
                              "--store", str(tmp_path / "st"), "--json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["setting"] == f"folder:{uri}" and row["n_examples"] == 21 and row["n_skipped"] == 1
    code, out, err = run_main(monkeypatch, capsys, "eval", "-m", ORACLE32, "-s", f"folder:{uri}", "--workers", "0",
                              "--store", str(tmp_path / "st"))
    assert code == 0 and f"note: folder {uri}: 7 sub-folders are ImageNet classes (wnids)" in err, err
