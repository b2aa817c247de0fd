"""Outputs that appear only when complete (pbtree.staging): commit, and two outputs
committed together (swap, then finish or undo), on the real file system."""

from __future__ import annotations

import os

import pytest

import pbtree
from pbtree.staging import Staging


def _tree(path) -> dict[str, str]:
    """Every file under ``path`` (relative name -> text), hidden ones included."""
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            with open(full) as src:
                out[os.path.relpath(full, path)] = src.read()
    return out


def _stage(target, text: str, force: bool) -> Staging:
    staging = Staging(str(target), force)
    with open(os.path.join(staging.path, "part"), "w") as out:
        out.write(text)
    return staging


def test_commit_places_the_output_and_replaces_only_with_force(tmp_path):
    target = tmp_path / "out"
    _stage(target, "one", force=False).commit()
    assert _tree(tmp_path) == {"out/part": "one"}
    with pytest.raises(pbtree.IndexExistsError, match="--force"):
        Staging(str(target), force=False)
    _stage(target, "two", force=True).commit()
    assert _tree(tmp_path) == {"out/part": "two"}


@pytest.mark.parametrize("old", [None, "previous"])
def test_swap_then_undo_or_finish(tmp_path, old):
    """After swap the new output is at the target; undo puts back exactly what was there
    before (or nothing), finish keeps the new one; neither leaves hidden directories."""
    target = tmp_path / "out"
    if old is not None:
        _stage(target, old, force=False).commit()
    before = _tree(tmp_path)
    staging = _stage(target, "new", force=True)
    staging.swap()
    assert _tree(target) == {"part": "new"}
    staging.undo()
    staging.discard()
    assert _tree(tmp_path) == before and os.listdir(tmp_path) == (["out"] if old else [])
    staging = _stage(target, "newer", force=True)
    staging.swap()
    staging.finish()
    assert _tree(tmp_path) == {"out/part": "newer"} and os.listdir(tmp_path) == ["out"]


def test_discard_leaves_the_target_as_it_was(tmp_path):
    target = tmp_path / "out"
    _stage(target, "kept", force=False).commit()
    _stage(target, "dropped", force=True).discard()
    assert _tree(tmp_path) == {"out/part": "kept"} and os.listdir(tmp_path) == ["out"]
