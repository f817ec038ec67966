"""The common timed window from the LoadGen logs' power_begin and power_end."""

from __future__ import annotations

import datetime as dt
import json

from mlperf_mig.telemetry.window import common_window, parse_power_time


def _log(folder, begin: str, end: str) -> None:
    folder.mkdir(parents=True)
    lines = [
        ":::MLLOG " + json.dumps({"key": key, "value": value, "metadata": {}})
        for key, value in (("power_begin", begin), ("power_end", end))
    ]
    (folder / "mlperf_log_detail.txt").write_text("\n".join(lines) + "\n")


def test_power_markers_are_read_as_utc():
    """LoadGen's '12-02-2026 00:52:42.556' is UTC."""
    expected = dt.datetime(2026, 12, 2, 0, 52, 42, 556000, tzinfo=dt.UTC).timestamp()
    assert parse_power_time("12-02-2026 00:52:42.556") == expected


def test_the_window_is_the_latest_begin_to_the_earliest_end(tmp_path):
    """Two instances' timed phases give the part they share."""
    _log(tmp_path / "a", "12-02-2026 00:00:01.000", "12-02-2026 00:00:09.000")
    _log(tmp_path / "b", "12-02-2026 00:00:02.000", "12-02-2026 00:00:08.500")
    window, note = common_window([tmp_path / "a", tmp_path / "b"])
    assert window.duration_s == 6.5 and note is None


def test_phases_that_do_not_overlap_have_no_window(tmp_path):
    """Timed phases one after the other have no common window, and say so."""
    _log(tmp_path / "a", "12-02-2026 00:00:01.000", "12-02-2026 00:00:02.000")
    _log(tmp_path / "b", "12-02-2026 00:00:03.000", "12-02-2026 00:00:04.000")
    window, note = common_window([tmp_path / "a", tmp_path / "b"])
    assert window is None and "did not overlap" in note


def test_an_instance_without_a_log_is_named_in_the_note(tmp_path):
    """A window from some of the logs says how many it rests on."""
    _log(tmp_path / "a", "12-02-2026 00:00:01.000", "12-02-2026 00:00:02.000")
    window, note = common_window([tmp_path / "a", tmp_path / "missing"])
    assert window is not None and "1 of 2" in note


def test_a_garbled_marker_is_no_window(tmp_path):
    """A power marker that is not LoadGen's format gives no window."""
    _log(tmp_path / "a", "yesterday", "12-02-2026 00:00:02.000")
    assert common_window([tmp_path / "a"])[0] is None
