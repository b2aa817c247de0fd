"""Outputs that appear only when complete (pbtree.outputs): commit, and two outputs
committed together (swap, then finish or undo), on the real file system."""

from __future__ import annotations

import os

import pytest

import pbtree
from pbtree.outputs import OverlapError, Staging, check_apart, commit_with


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


def test_two_outputs_commit_together(tmp_path, monkeypatch):
    """commit_with: both new outputs appear; when the main one cannot move in, the second
    target is as it was; an interruption while old targets are dropped leaves both new."""
    main, extra = tmp_path / "matches", tmp_path / "rejects"
    commit_with(_stage(main, "m1", False), _stage(extra, "r1", False))
    assert _tree(tmp_path) == {"matches/part": "m1", "rejects/part": "r1"}
    failing = _stage(main, "m2", force=True)
    failing.force = False  # its target exists: the swap refuses, after the rejects moved
    second = _stage(extra, "r2", force=True)
    with pytest.raises(pbtree.IndexExistsError):
        commit_with(failing, second)
    failing.discard()
    assert _tree(tmp_path) == {"matches/part": "m1", "rejects/part": "r1"}

    def interrupted(self):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(Staging, "finish", interrupted)
        with pytest.raises(KeyboardInterrupt):
            commit_with(_stage(main, "m3", True), _stage(extra, "r3", True))
    assert {k: v for k, v in _tree(tmp_path).items() if not k.startswith(".")} == {
        "matches/part": "m3", "rejects/part": "r3"}


@pytest.mark.parametrize(("first", "second"), [("out", "out"), ("out", "out/bad"),
                                               ("out/x", "out"), ("a/../out", "out")])
def test_paths_of_a_job_must_be_apart(tmp_path, first, second):
    with pytest.raises(OverlapError, match="must be apart"):
        check_apart({"the output": str(tmp_path / first), "the rejects": str(tmp_path / second)})
    check_apart({"the output": str(tmp_path / "out"), "the rejects": str(tmp_path / "out2"),
                 "the input": str(tmp_path / "in.parquet"), "unused": None})
