"""The common timed window of a run, from the LoadGen logs themselves.

LoadGen writes `power_begin` and `power_end` into every detail log: the wall-clock instants (UTC,
"MM-DD-YYYY HH:MM:SS.mmm") at which its timed phase began and ended, the markers MLPerf Power
uses to cut the power analyser's log to the measurement. The window common to the instances is
the latest begin to the earliest end: the time all of them were under load.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from pathlib import Path

from mlperf_mig.errors import MlperfMigError
from mlperf_mig.telemetry.summary import Window

log = logging.getLogger(__name__)

DETAIL_LOG = "mlperf_log_detail.txt"
_FORMAT = "%m-%d-%Y %H:%M:%S.%f"
LOADGEN_SOURCE = (
    "LoadGen power_begin/power_end, common to every instance (latest begin, earliest end)"
)


def parse_power_time(text: object) -> float | None:
    """Seconds since 1970 of a LoadGen power marker ("12-02-2026 00:52:42.556", UTC); None if not one."""
    if not isinstance(text, str):
        return None
    try:
        moment = dt.datetime.strptime(text.strip(), _FORMAT)
    except ValueError:
        return None
    return moment.replace(tzinfo=dt.UTC).timestamp()


def timed_span(log_folder: Path) -> tuple[float, float] | None:
    """The (begin, end) of the timed phase in the detail log of `log_folder`, or None."""
    from mlperf_mig.harness.logs import parse_detail_log

    log_file = log_folder / DETAIL_LOG
    if log_file.is_symlink() or not log_file.is_file():
        return None
    try:
        records = parse_detail_log(log_file)
    except MlperfMigError:
        return None
    begin, end = (
        parse_power_time(records.get("power_begin")),
        parse_power_time(records.get("power_end")),
    )
    if begin is None or end is None or end < begin:
        return None
    return begin, end


def common_window(log_folders: Sequence[Path]) -> tuple[Window | None, str | None]:
    """The window all the logs' timed phases share; or None and why not."""
    spans = [timed_span(folder) for folder in log_folders]
    found = [s for s in spans if s is not None]
    if not found:
        return None, "no LoadGen log with power_begin/power_end: no timed window to summarise over"
    start, end = max(s[0] for s in found), min(s[1] for s in found)
    if end <= start:
        return None, "the instances' timed phases did not overlap: no common timed window"
    note = None
    if len(found) < len(spans):
        note = f"timed window from {len(found)} of {len(spans)} instance logs (the others did not finish)"
    return Window(start_unix_s=start, end_unix_s=end, source=LOADGEN_SOURCE), note
