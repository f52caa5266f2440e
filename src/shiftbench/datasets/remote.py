"""Image folders in a bucket: ``folder:s3://bucket/prefix`` (any fsspec URI: ``gs://``, ``az://``,
``memory://``), read as a local class folder is read.

The layout and its rules are those of :func:`~shiftbench.datasets.image_folder`:
``<prefix>/<class>/**/<image>``, the same image extensions, dot-names ignored, other objects in a
class folder listed in ``skipped_on_scan``, ids the object's path relative to the prefix (POSIX),
classes in sorted order (or declared, ``?classes=imagenet-1k``, or detected as ImageNet classes).
The same images evaluated from a local folder and from a bucket therefore give the same ids,
targets, order and results.

What it costs: the scan is **one recursive listing** of the prefix (:meth:`BucketFolder.listing`:
``fs.find``, e.g. S3 ``ListObjectsV2``, paginated by 1,000 keys) and nothing per class folder or
per object; loading an image is **one GET** of its bytes (``fs.cat_file``), decoded by the same
safe decoder as a local file (:func:`~shiftbench.datasets.base.decode_image`: a truncated object,
a bomb or a non-image is an :class:`~shiftbench.datasets.base.ImageDecodeError`, a skipped
example). The filesystem is opened through the results store's layer
(:func:`shiftbench.store.fs.open_fs`: credentials and endpoint found the standard way), and a
dataset carries only its URI and ``storage_options``: a DataLoader worker (forked or spawned) or a
Ray task opens its own client on first use, never a live client copied from another process.
A bucket that cannot be read is one line naming the URI and what to check
(:func:`shiftbench.store.fs.explain`).
"""
from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from shiftbench.datasets._scan import Examples, LayoutError, is_image_name
from shiftbench.datasets.base import FileDataset, ImageDecodeError, Target, decode_image
from shiftbench.datasets.folders import FolderDataset, _with_notes
from shiftbench.errors import ConfigError, DataError

#: what the class-folder scan says of an object in a key with an empty part (``a//b.png``): no
#: local folder can hold it, so it has no id a local copy would share
EMPTY_PART = "its key has an empty part (//), which no local folder can hold"


def _open(uri: str, storage_options: Mapping[str, Any] | None) -> Any:
    """``(fsspec filesystem, its path of the prefix)`` for ``uri``; an unknown scheme or a missing
    filesystem package is the store's one-line message (:func:`shiftbench.store.fs.open_fs`),
    worded for images."""
    from shiftbench.store.fs import open_fs  # deferred: only a bucket's folder needs the store's fs layer

    try:
        fs = open_fs(uri, storage_options)
    except ConfigError as exc:
        text = (str(exc).replace("; a store is a folder or a URI of one of", "; an image folder is a local folder "
                                 "or a URI of one of")
                .replace(": a store at ", ": images at "))
        raise ConfigError(text) from exc
    return fs.fsspec, fs.root


def _failure(exc: BaseException, uri: str, doing: str) -> Exception:
    """The one-line error of a bucket failure while ``doing`` (:func:`shiftbench.store.fs.explain`),
    or a :class:`DataError` naming the URI when the failure is not one it recognises."""
    from shiftbench.store.fs import explain  # deferred: see _open

    detail = " ".join(str(exc).split())[:200]
    if isinstance(exc, FileNotFoundError) and "bucket" in detail.lower():
        bucket = uri.split("://", 1)[-1].split("/", 1)[0]
        return DataError(f"{uri}: the bucket {bucket!r} does not exist (or is not visible with these credentials) "
                         f"while trying to {doing}; check the URI, the credentials and the endpoint "
                         "(AWS_ENDPOINT_URL, AWS_PROFILE)")
    return explain(exc, uri, doing) or DataError(
        f"{uri}: failed to {doing} ({type(exc).__name__}: {detail}); check the URI, the credentials and the endpoint")


class BucketFolder:
    """A class folder under a URI, from one recursive listing (what :func:`image_folder` reads
    of a folder: its class folders, the images and other objects in each, and the stray images
    beside them)."""

    def __init__(self, uri: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.root = uri.rstrip("/")
        self.storage_options = dict(storage_options or {})
        self.fs, self.path = _open(self.root, self.storage_options)
        self.path = self.path.rstrip("/")
        self.name = posixpath.basename(self.root.split("://", 1)[1]) or "folder"
        self._classes: dict[str, list[tuple[str, str]]] | None = None
        self._top: list[str] = []
        self._odd: list[tuple[str, str]] = []
        self._is_object = False

    def where(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def listing(self) -> dict[str, list[tuple[str, str]]]:
        """``{class folder: [(id, fs path), ...]}`` from one ``fs.find`` of the prefix (hidden
        names left out, as a local scan leaves dot-files out)."""
        if self._classes is not None:
            return self._classes
        self.fs.invalidate_cache(self.path)   # a listing cached by an earlier scan may be stale
        try:
            found = self.fs.find(self.path, withdirs=True, detail=True)
        except Exception as exc:  # noqa: BLE001 - every failure of the filesystem becomes one line
            raise _failure(exc, self.root, "list the images under it") from exc
        base = self.path + "/"
        classes: dict[str, list[tuple[str, str]]] = {}
        for path in sorted(found):
            info = found[path]
            if path.rstrip("/") == self.path:
                self._is_object = self._is_object or (info.get("type") != "directory" and not path.endswith("/"))
                continue
            if not path.startswith(base):
                continue
            rel = path[len(base):]
            folder_marker = info.get("type") == "directory" or rel.endswith("/")
            parts = rel.rstrip("/").split("/")
            if any(p.startswith(".") for p in parts if p):
                continue
            if "" in parts:
                if not folder_marker:
                    self._odd.append((rel, EMPTY_PART))
                continue
            if folder_marker:
                if len(parts) == 1:   # a class folder, possibly empty (a folder-marker object)
                    classes.setdefault(parts[0], [])
                continue
            if len(parts) == 1:
                self._top.append(parts[0])
            else:
                classes.setdefault(parts[0], []).append((rel, path))
        self._classes = classes
        return classes

    def require(self, name: str, expected: str) -> None:
        """A :class:`LayoutError` when nothing is under the prefix, or it names one object."""
        classes = self.listing()
        if self._is_object and not classes:
            raise LayoutError(name, expected, self.root, "it is an object, not a folder (a prefix)")
        if not classes and not self._top and not self._odd:
            raise LayoutError(name, expected, self.root, "nothing under this prefix; check the URI (the images go "
                                                         "in <prefix>/<class>/<image>)")

    def subdirs(self) -> list[str]:
        return sorted(self.listing())

    def stray(self, present: set[str]) -> list[tuple[str, str]]:
        """Images directly under the prefix (outside any class folder), for ``skipped_on_scan``."""
        return sorted((n, "image outside any class folder") for n in self._top if n not in present
                      and is_image_name(n))

    def scan(self, folder_targets: Mapping[str, Target]) -> Examples:
        """The images of each class folder with its target; ids ``<folder>/<sub path>``, other
        objects listed as skipped, as :func:`~shiftbench.datasets._scan.walk_images` does."""
        out = Examples(skipped=[(i, why) for i, why in self._odd if i.split("/", 1)[0] in folder_targets])
        classes = self.listing()
        for folder, target in folder_targets.items():
            for id_, path in classes.get(folder, []):
                if is_image_name(id_):
                    out.add(id_, target, path)  # type: ignore[arg-type] - a path in the bucket, not on disk
                else:
                    ext = posixpath.splitext(posixpath.basename(id_))[1]
                    out.skipped.append((id_, f"not an image file (extension {ext or 'none'!r})"))
        return out

    def finish(self, ds: FileDataset, notes: tuple[str, ...]) -> BucketFolderDataset:
        out = _with_notes(ds, notes, BucketFolderDataset, uri=self.root, storage_options=self.storage_options)
        out.__dict__.update(_live=self.fs, _pid=os.getpid())   # the scan's client, for this process only
        return out


@dataclass
class BucketFolderDataset(FolderDataset):
    """A class folder under a URI: ``paths[i]`` is the object's path in its filesystem and
    ``load(i)`` is one GET of its bytes. Pickled (a spawned DataLoader worker, a Ray task) it
    carries its URI and ``storage_options`` only; a process that did not open the filesystem
    itself (a forked worker included) opens its own on first use."""

    uri: str = ""
    storage_options: dict[str, Any] = field(default_factory=dict)

    def _fs(self) -> Any:
        live = self.__dict__.get("_live")
        if live is None or self.__dict__.get("_pid") != os.getpid():
            live, _ = _open(self.uri, self.storage_options)
            self.__dict__.update(_live=live, _pid=os.getpid())
        return live

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_live", "_pid")}

    def load(self, i: int) -> Image.Image:
        try:
            data = self._fs().cat_file(self.paths[i])
        except Exception as exc:  # noqa: BLE001 - a missing object is a skipped example, the rest stops the run
            raise self._read_error(i, exc) from exc
        return decode_image(data, self.ids[i], self.crop)

    def load_many(self, indices: Sequence[int]) -> list[Image.Image | ImageDecodeError]:
        """The images at ``indices`` fetched at once: one ``fs.cat`` of their paths, which an
        asynchronous filesystem (s3fs, gcsfs, adlfs) sends as concurrent GETs, so a batch costs
        about one round trip instead of one per image; then each decoded as :meth:`load` does."""
        idx = list(indices)
        paths = [self.paths[i] for i in idx]
        try:
            got = self._fs().cat(paths, on_error="return") if paths else {}
        except Exception as exc:  # noqa: BLE001 - the request itself failed: the bucket, not an image
            raise _failure(exc, self.uri, f"read {len(paths)} images") from exc
        out: list[Image.Image | ImageDecodeError] = []
        for i, path in zip(idx, paths):
            data = got.get(path, FileNotFoundError(path)) if isinstance(got, dict) else got
            try:
                if isinstance(data, BaseException):
                    raise self._read_error(i, data) from data
                out.append(decode_image(data, self.ids[i], self.crop))
            except ImageDecodeError as exc:
                out.append(exc)
        return out

    def _read_error(self, i: int, exc: BaseException) -> Exception:
        """What a failed GET of example ``i`` is: a missing object is an :class:`ImageDecodeError`
        (a skipped example, as a file deleted after the scan); a missing bucket, refused
        credentials or an unreachable endpoint is the one-line failure that stops the run."""
        if isinstance(exc, FileNotFoundError) and "bucket" not in str(exc).lower():
            return ImageDecodeError(self.ids[i], f"file not found: {self.uri}/{self.ids[i]}")
        return _failure(exc, self.uri, f"read {self.ids[i]}")
