"""Canonical names of settings over user folders: one folder, one setting, whatever the spelling.

A ``folder:<path>`` setting is named by the folder it reads, so its name (and the key of its
results) must not depend on how the path was typed. :func:`canonical_setting_name` makes the path
absolute, with ``.``/``..``, a trailing ``/``, ``~`` and symlinks resolved; ``?options``, a
``+shift`` and an ``@classmap:`` suffix are kept. ``shiftbench eval`` (``EvalRequest.build``)
names every setting this way, and the commands that look a setting up in a store canonicalise
the name they are given (relative to the working directory) the same way.

Standard library only: the CLI's option declarations (:mod:`shiftbench.cli_options`) use it.
"""
from __future__ import annotations

from pathlib import Path

#: other spellings of the reference settings, renamed when a user's table is merged onto a
#: reference testbed that lacks the spelling itself (the merge says so in ``Testbed.notes``);
#: the CLI reads them wherever it takes a setting name (``--x imagenet --y imagenetv2``)
SETTING_ALIASES: dict[str, str] = {
    "imagenetv2": "imagenetv2-matched-frequency-format-val",
    "imagenet-v2": "imagenetv2-matched-frequency-format-val",
    "imagenetv2-mf": "imagenetv2-matched-frequency-format-val",
    "imagenetv2-matched-frequency-format-val-top1": "imagenetv2-matched-frequency-format-val",
    "imagenet-val": "val",
    "imagenet": "val",
    "objectnet": "objectnet-1.0-beta",
    "sketch": "imagenet-sketch",
}


#: Custom settings whose path :func:`canonical_setting_name` makes absolute.
CANONICAL_PREFIXES = ("folder",)


def split_query(path: str) -> tuple[str, list[tuple[str, str]]]:
    """``DIR?classes=imagenet-1k&x=y`` -> ``("DIR", [("classes", "imagenet-1k"), ("x", "y")])``;
    a ``?`` not followed by ``key=value`` pairs is part of the path (no options)."""
    head, sep, query = path.rpartition("?")
    pairs = [p.partition("=") for p in query.split("&")] if sep else []
    if not head or not pairs or not all(k and eq for k, eq, _ in pairs):
        return path, []
    return head, [(k, v) for k, _, v in pairs]


def is_data_uri(path: object) -> bool:
    """``path`` names data by a URI (``s3://bucket/prefix``, ``gs://...``, ``memory://...``; not
    ``file://``, which names a local path: :func:`local_uri_path`) rather than a local path."""
    return isinstance(path, str) and "://" in path and not path.startswith("\\\\") and \
        path.split("://", 1)[0].lower() != "file"


def local_uri_path(path: str | Path) -> str | Path:
    """The local path a ``file://`` URI names (``file:///data/x`` -> ``/data/x``); anything else unchanged."""
    if isinstance(path, str) and path.split("://", 1)[0].lower() == "file" and "://" in path:
        return path.split("://", 1)[1] or "/"
    return path


def canonical_uri(uri: str) -> str:
    """A data URI as one spelling: the scheme in lower case, no trailing ``/``
    (``S3://b/p/`` and ``s3://b/p`` are one folder)."""
    scheme, _, rest = uri.partition("://")
    return f"{scheme.lower()}://{rest.rstrip('/')}"


def resolve_user_path(path: str | Path, data_root: str | Path = ".") -> Path:
    """A user-given path: as is if absolute or existing relative to the working directory,
    else relative to ``data_root`` if it exists there (how a ``folder:`` dataset is found)."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    under = Path(data_root).expanduser() / p
    return under if under.exists() else p


def setting_alias(name: str) -> str:
    """The reference spelling of ``name`` when it is one of :data:`SETTING_ALIASES`
    (``imagenetv2`` -> ``imagenetv2-matched-frequency-format-val``), else ``name``."""
    return SETTING_ALIASES.get(name, name)


def canonical_setting_name(name: str, data_root: str | Path = ".") -> str:
    """``name`` with the path of a ``folder:`` setting made canonical: the folder the dataset
    will be read from (:func:`resolve_user_path`), absolute, symlinks resolved; a bucket's folder
    (``folder:s3://bucket/prefix``) keeps its URI (:func:`canonical_uri`), and ``file://`` names the
    local folder; other names unchanged. Nothing is read but the file system's names.

    >>> canonical_setting_name("val")
    'val'
    >>> canonical_setting_name("folder:/no/such/./photos/?classes=imagenet-1k+fog.3")
    'folder:/no/such/photos?classes=imagenet-1k+fog.3'
    >>> canonical_setting_name("folder:s3://lab/images/+fog.3")
    'folder:s3://lab/images+fog.3'
    """
    if "@classmap:" in name and "+" not in name.rpartition("@classmap:")[2]:
        base, _, ref = name.rpartition("@classmap:")
        return f"{canonical_setting_name(base, data_root)}@classmap:{ref}"
    if "+" in name:
        base, _, shift_text = name.rpartition("+")
        return f"{canonical_setting_name(base, data_root)}+{shift_text}"
    prefix, _, rest = name.partition(":")
    if prefix not in CANONICAL_PREFIXES or not rest:
        return name
    path, options = split_query(rest)
    # a bucket's folder is named by its URI (never made a local path); file:// names a local folder
    where = canonical_uri(path) if is_data_uri(path) else \
        resolve_user_path(local_uri_path(path), data_root).resolve().as_posix()
    return f"{prefix}:{where}" + ("?" + "&".join(f"{k}={v}" for k, v in options) if options else "")
