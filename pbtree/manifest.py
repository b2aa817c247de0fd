"""An index directory's layout: its ``manifest.json`` and ``shard-NNNN/`` directories.

``manifest.json`` records the format version, the shard count and the node size, and is
written last, atomically; ``check_layout`` refuses a shard count or node size no index may
have.
"""

from __future__ import annotations

import json
import os
import tempfile

from pbtree.errors import CorruptIndexError, FormatVersionError, NotAnIndexError, PbtreeError
from pbtree.outputs import as_created, fsync_dir
from storage.lists import MAX_NODE_BYTES, MIN_NODE_BYTES

MANIFEST = "manifest.json"
FORMAT_NAME = "pbtree"
FORMAT_VERSION = 1


def shard_dir(path: str, shard: int) -> str:
    """The directory of shard number ``shard`` in the index at ``path``."""
    return os.path.join(path, f"shard-{shard:04d}")


def write_manifest(path: str, manifest: dict) -> None:
    """Write manifest.json atomically (temporary file, fsync, rename, fsync of the
    directory)."""
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", dir=path)
    as_created(fd, 0o666)
    with os.fdopen(fd, "w") as out:
        json.dump(manifest, out, indent=2, sort_keys=True)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, os.path.join(path, MANIFEST))
    fsync_dir(path)  # the rename, and the names of the shard directories made before it


def read_manifest(path: str) -> dict:
    """The manifest of an index directory, or a clear error why there is none."""
    if not os.path.isdir(path):
        if os.path.exists(path):
            raise NotAnIndexError(f"{path}: is a file, not an index directory")
        raise NotAnIndexError(f"{path}: no such index directory")
    try:
        with open(os.path.join(path, MANIFEST), encoding="utf-8") as src:
            manifest = json.load(src)
    except FileNotFoundError:
        raise NotAnIndexError(f"{path}: not a pbtree index (no {MANIFEST})") from None
    except (ValueError, RecursionError) as exc:  # JSON, UTF-8, a number of 4,300+ digits
        raise CorruptIndexError(f"{path}: {MANIFEST} is damaged ({exc})") from None
    except IsADirectoryError:
        raise CorruptIndexError(f"{path}: {MANIFEST} is a directory, not a file") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise NotAnIndexError(f"{path}: {MANIFEST} is not a pbtree manifest")
    version = manifest.get("version")
    if not isinstance(version, int) or version < 1:
        raise CorruptIndexError(f"{path}: {MANIFEST} has no valid format version")
    if version > FORMAT_VERSION:
        raise FormatVersionError(
            f"{path}: index format version {version} is newer than this pbtree "
            f"(reads up to {FORMAT_VERSION}); upgrade pbtree")
    shards = manifest.get("shards")
    if not isinstance(shards, int) or shards < 1:
        raise CorruptIndexError(f"{path}: {MANIFEST} has no valid shard count")
    node_bytes = manifest.get("node_bytes")
    if not isinstance(node_bytes, int) or not MIN_NODE_BYTES <= node_bytes <= MAX_NODE_BYTES:
        raise CorruptIndexError(f"{path}: {MANIFEST} has no valid list node size")
    return manifest


def new_manifest(shards: int, node_bytes: int, **build: object) -> dict:
    """The manifest of a new index; ``build`` says how it was made."""
    return {"format": FORMAT_NAME, "version": FORMAT_VERSION, "shards": shards,
            "node_bytes": node_bytes, "build": build}


def check_positive(name: str, value: object, what: str = "integer") -> None:
    """PbtreeError unless ``value`` is an int of at least 1 (bools are not counts)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise PbtreeError(f"{name} must be a positive {what}, not {value!r}")


def check_layout(shards: int, node_bytes: int) -> None:
    """PbtreeError unless ``shards`` is a count and ``node_bytes`` a node size an index may
    have."""
    check_positive("shards", shards)
    if not isinstance(node_bytes, int) or not MIN_NODE_BYTES <= node_bytes <= MAX_NODE_BYTES:
        raise PbtreeError(
            f"node_bytes must be an integer from {MIN_NODE_BYTES} to {MAX_NODE_BYTES}, "
            f"not {node_bytes!r}")

