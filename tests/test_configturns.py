"""tools.configturns on tiny workloads: the shape of its reports and that both indexes
answer alike, with the second built under its settings (``--build``) and after writes in
turns (``--write``). No timing is asserted: only that every round timed both."""

import json

import pytest

from pbtree import config
from tools import configturns

QUIET = {"log": lambda *_: None}


def _timed(rates: dict, rounds: int) -> bool:
    return set(rates) == {"default", "changed"} and all(
        len(each) == rounds and all(rate > 0 for rate in each) for each in rates.values())


def test_built_under_its_settings_answers_alike():
    """Every tree a PB+tree in the second index (PACKED_NODES=0 while it is built), and
    the same answers; the setting is restored after."""
    before = config.PACKED_NODES
    report = configturns.run("sparse", {"PACKED_NODES": 0}, n_subs=1500, rounds=2, events=20,
                             build=True, **QUIET)
    assert config.PACKED_NODES == before
    assert report["built"] and report["matches"] > 0
    assert _timed(report["events_per_s"], 2) and len(report["default_over_changed"]) == 2
    assert report["median"] == report["default_over_changed"][1]
    assert "subscriptions_per_s" not in report


@pytest.mark.parametrize("changed", [{"MERGE_AT": 50}, {"MERGE_MOST": 0},
                                     {"PACKED_NODES": 0, "FOLD_AT": 100}])
def test_write_path_in_turns(changed):
    """New subscriptions in batches, a fold, then matching, each round for both indexes;
    their answers after the writes (ids mapped back) agree."""
    report = configturns.run("dense", changed, n_subs=1000, rounds=3, events=30, write=300,
                             batch=120, **QUIET)
    assert report["built"] and report["written_per_round"] == 300 and report["batch"] == 120
    assert _timed(report["subscriptions_per_s"], 3) and _timed(report["events_per_s"], 3)
    assert len(report["write_default_over_changed"]) == 3
    assert report["write_median"] == pytest.approx(
        sorted(report["write_default_over_changed"][1:])[0] / 2
        + sorted(report["write_default_over_changed"][1:])[1] / 2)
    assert report["matches"] > 0


def test_command_writes_json(tmp_path, capsys):
    out = tmp_path / "report.json"
    assert configturns.main(["dense", "--subs", "300", "--rounds", "1", "--events", "5",
                             "--write", "50", "--batch", "20", "--set", "MERGE_MOST=0",
                             "--json", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved == json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert saved["changed"] == {"MERGE_MOST": 0} and saved["write_median"] > 0


def test_unknown_setting_refused():
    with pytest.raises(SystemExit, match="no NO_SUCH"):
        configturns.run("dense", {"NO_SUCH": 1}, n_subs=100, rounds=1, events=5, write=10)
