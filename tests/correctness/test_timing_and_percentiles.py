"""Latency columns read against a stand-in detail log holding LoadGen's full percentile set
(each percentile a different value, per sample and per query), and the start skew of a cluster
round from known release instants: the wrong percentile or instant cannot be picked silently."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from mlperf_mig.harness import parse_detail_log
from mlperf_mig.harness.result import latencies, throughput
from mlperf_mig.runner.results import result_p99_ms
from mlperf_mig.runner.supervisor import WorkerOutcome

# LoadGen's percentiles, each with its own value: per sample N ms, per query 10 x N ms
PERCENTILES = {"50.00": 1, "90.00": 2, "95.00": 3, "97.00": 4, "99.00": 5, "99.90": 6}


def _record(key: str, value: object) -> str:
    return ":::MLLOG " + json.dumps({"key": key, "value": value, "metadata": {"is_error": False}})


@pytest.fixture(name="records")
def fixture_records(tmp_path: Path) -> dict:
    """A detail log with every percentile per sample and per query, min/mean/max of each."""
    lines = [_record("effective_samples_per_query", 8)]
    for name, ms in PERCENTILES.items():
        lines.append(_record(f"result_{name}_percentile_latency_ns", ms * 1_000_000))
        lines.append(_record(f"result_{name}_percentile_per_query_latency_ns", ms * 10_000_000))
    for name, ms in (("min", 0.5), ("mean", 1.5), ("max", 7)):
        lines.append(_record(f"result_{name}_latency_ns", int(ms * 1_000_000)))
        lines.append(_record(f"result_{name}_query_latency_ns", int(ms * 10_000_000)))
    (tmp_path / "mlperf_log_detail.txt").write_text("\n".join(lines) + "\n")
    return parse_detail_log(tmp_path)


@pytest.mark.parametrize("scenario", ["SingleStream", "Server", "Offline"])
def test_every_percentile_is_its_own_per_sample(records: dict, scenario: str) -> None:
    """Per-sample scenarios read each percentile from its own record, not the per-query ones."""
    found = latencies(records, scenario)
    assert {k: found[k] for k in PERCENTILES} == {
        k: ms * 1_000_000 for k, ms in PERCENTILES.items()
    }
    assert (found["min"], found["mean"], found["max"]) == (500_000, 1_500_000, 7_000_000)


def test_multistream_reads_the_per_query_percentiles(records: dict) -> None:
    """MultiStream's latencies are the per-query ones (ten times the per-sample ones here)."""
    found = latencies(records, "MultiStream")
    assert {k: found[k] for k in PERCENTILES} == {
        k: ms * 10_000_000 for k, ms in PERCENTILES.items()
    }
    assert found["mean"] == 15_000_000


@pytest.mark.parametrize(
    ("scenario", "p99_ms"), [("SingleStream", 5.0), ("Server", 5.0), ("MultiStream", 50.0)]
)
def test_the_p99_column_is_the_99th_percentile(records: dict, scenario: str, p99_ms: float) -> None:
    """The tables' "p99 ms" (per instance, and per layout in unified mode, both through
    result_p99_ms) is the 99.00 percentile: not 99.90, 97.00 or 90.00."""
    assert result_p99_ms(SimpleNamespace(latency_ns=latencies(records, scenario))) == p99_ms


def test_single_stream_throughput_is_one_over_p90(records: dict) -> None:
    """SingleStream's throughput is 1 / the 90th percentile latency (2 ms: 500/s)."""
    assert throughput(records, "SingleStream") == (
        pytest.approx(500.0),
        "samples/s (1 / p90 latency)",
    )


def test_multistream_throughput_is_samples_per_query_over_p99_per_query(records: dict) -> None:
    """MultiStream: 8 samples over the 99th percentile query latency (50 ms): 160/s."""
    value, unit = throughput(records, "MultiStream")
    assert value == pytest.approx(160.0) and unit == "samples/s (8 / p99 query latency)"


def _outcome(name: str, started_ns: int | None) -> WorkerOutcome:
    return WorkerOutcome(name=name, status="ok", started_ns=started_ns)


def test_start_skew_is_the_spread_of_the_release_instants() -> None:
    """Releases at +0, +2.5 ms and +1 ms (and one without an instant): the skew is 2.5 ms, the
    latest minus the earliest, in whatever order the outcomes come."""
    from mlperf_mig.cluster.rounds import start_skew_ms

    base = 1_700_000_000_000_000_000
    outcomes = {
        "c": _outcome("c", base + 1_000_000),
        "a": _outcome("a", base + 2_500_000),
        "b": _outcome("b", base),
        "d": _outcome("d", None),
    }
    assert start_skew_ms(outcomes) == 2.5


def test_start_skew_needs_two_instants() -> None:
    """One release instant has no spread: no skew, rather than zero."""
    from mlperf_mig.cluster.rounds import start_skew_ms

    assert start_skew_ms({"a": _outcome("a", 5), "b": _outcome("b", None)}) is None
    assert start_skew_ms({"a": _outcome("a", 5), "b": _outcome("b", 5)}) == 0.0
