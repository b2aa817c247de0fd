"""tools.versionturns drives two checkouts' workers: both must answer alike before any
round is timed. Speeds are never asserted here."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tools import versionturns

ROOT = Path(__file__).resolve().parent.parent


def quiet(*_) -> None:
    pass


def test_same_checkout_on_both_sides_agrees_and_times_every_round():
    report = versionturns.run("dense", str(ROOT), str(ROOT), n_subs=2000, rounds=2, events=20,
                              log=quiet)
    assert report["agreed"] is True
    assert report["subscriptions"] == 2000 and report["events"] == 20
    assert report["matches_per_event"] > 0
    for side in ("old", "new"):
        checkout = report["checkouts"][side]
        assert checkout["path"] == str(ROOT) and checkout["build_s"] > 0
        assert checkout["pbtree"] == str((ROOT / "pbtree").resolve())
        assert len(report["events_per_s"][side]) == 2
        assert all(rate > 0 for rate in report["events_per_s"][side])
    assert len(report["new_over_old"]) == 2
    assert report["median"] == report["new_over_old"][1]
    assert len(report["python_ms"]) == 2
    table = versionturns.markdown(report)
    assert "\n| 1 | " in table and "\n| 2 | " in table and "\n| 3 | " not in table


def test_checkouts_that_match_differently_are_not_timed(tmp_path):
    """A copy of the engine that drops each event's first match is refused."""
    for package in ("pbtree", "storage"):
        shutil.copytree(ROOT / package, tmp_path / package)
    with open(tmp_path / "pbtree" / "__init__.py", "a") as f:
        f.write("\n_match = Index.match\n"
                "Index.match = lambda self, event: _match(self, event)[1:]\n")
    with pytest.raises(RuntimeError, match="match differently"):
        versionturns.run("dense", str(ROOT), str(tmp_path), n_subs=2000, rounds=1, events=5,
                         log=quiet)


def test_a_directory_without_pbtree_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no pbtree"):
        versionturns.run("dense", str(ROOT), str(tmp_path), n_subs=10, rounds=1, events=1)
