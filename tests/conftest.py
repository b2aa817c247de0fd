import os
import sys

import pytest
from hypothesis import settings

from pbtree import config

sys.path.insert(0, os.path.dirname(__file__))

# Multi-process stress tests and fuzzers live in stress_test_*.py and fuzz_*.py; collect
# them with the default suite (files named on the command line are collected anyway).
EXTRA_TEST_FILES = ("stress_test_", "fuzz_")

# No example has a deadline: a loaded machine may pause any of them for longer than 200 ms.
settings.register_profile("pbtree", deadline=None)
settings.load_profile("pbtree")


def pytest_collect_file(file_path, parent):
    if (file_path.suffix == ".py" and file_path.name.startswith(EXTRA_TEST_FILES)
            and not parent.session.isinitpath(file_path)):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


@pytest.fixture
def pbtrees(monkeypatch):
    """Every tree stored as a PB+tree, none packed: for tests of leaf items and lists."""
    monkeypatch.setattr(config, "PACKED_NODES", 0)


@pytest.fixture
def kept_snapshots(monkeypatch):
    """The idle-snapshot watcher (``pbtree.idle``) releases no snapshot: for tests of how
    pinned snapshots are kept and renewed across steps that a loaded machine may make
    take seconds."""
    monkeypatch.setattr(config, "IDLE_SECONDS", float("inf"))
    monkeypatch.setattr(config, "BEHIND_IDLE_SECONDS", float("inf"))
