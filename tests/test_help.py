"""What `help(pbtree)` shows a user: the overview's example works, and every public name
and Index method says what it does."""

from __future__ import annotations

import doctest
import inspect

import pbtree


def test_the_overview_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = doctest.testmod(pbtree, raise_on_error=True)
    assert result.attempted >= 6
    assert (tmp_path / "alerts.pbt" / "manifest.json").exists()


def test_every_public_name_is_exported_and_documented():
    public = {name for name, obj in vars(pbtree).items()
              if not name.startswith("_") and not inspect.ismodule(obj)}
    assert set(pbtree.__all__) == public
    assert all(inspect.getdoc(getattr(pbtree, name)) for name in pbtree.__all__)


def test_every_index_method_a_user_calls_is_documented():
    methods = [name for name, _ in inspect.getmembers(pbtree.Index, inspect.isfunction)
               if not name.startswith("_")]
    assert {"subscribe", "match", "match_many", "close"} <= set(methods)
    assert [name for name in methods if not inspect.getdoc(getattr(pbtree.Index, name))] == []
