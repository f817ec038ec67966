"""The capacity search as a procedure, against a deterministic stand-in Server.

The stand-in's p99 latency jumps past the 15 ms bound above a known QPS (the knee). The search
must find the knee within its tolerance, keep its bracket (every passed target below every failed
one, each new probe inside the bracket) at every step, stop exactly when the bracket's ratio is
1 + tolerance or less, and give each LoadGen test its own settings: probes `probe_ms` (a failing
probe's repeat too), the confirming run `confirm_ms`, the target each was meant to have. A probe
that fails and then passes when repeated is inconclusive and counted as a failure.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import mlperf_mig.api
from mlperf_mig.study import capacity as capacity_module
from mlperf_mig.workloads.resnet50 import RESNET50

BOUND_NS = 15_000_000


class StandInServer:
    """`run` of mlperf_mig.api for the search: Offline measures `offline_qps`; a Server
    run at or under `knee` QPS has a p99 of 5 ms, above it 50 ms. Every call is recorded."""

    def __init__(
        self,
        knee: float,
        offline_qps: float = 4000.0,
        confirm_fails_above: float | None = None,
        fails_once_at: tuple[float, ...] = (),
    ) -> None:
        self.knee = knee
        self.offline_qps = offline_qps
        self.confirm_fails_above = confirm_fails_above
        self.fails_once_at = set(fails_once_at)  # noise: the first run at these targets fails
        self.calls: list[dict[str, Any]] = []

    def __call__(self, profiles: list[str], *, loadgen_scenario: str, outdir: Path, settings: dict | None = None,
                 **common: Any) -> SimpleNamespace:  # fmt: skip
        settings = dict(settings or {})
        self.calls.append(
            {"scenario": loadgen_scenario, "folder": Path(outdir).name, "settings": settings}
        )
        if loadgen_scenario == "Offline":
            return SimpleNamespace(total_throughput=self.offline_qps, outdir=str(outdir))
        target = settings["target_qps"]
        within = target <= self.knee and target not in self.fails_once_at
        self.fails_once_at.discard(target)
        confirm = Path(outdir).name.startswith("confirm")
        valid = within and not (
            confirm and self.confirm_fails_above is not None and target > self.confirm_fails_above
        )
        performance = SimpleNamespace(
            latency_ns={"50.00": 1e6, "90.00": 2e6, "99.00": 5e6 if within else 50e6, "99.90": 60e6},
            effective_settings={"target_latency_ns": BOUND_NS}, error=None,
            invalid_reasons=() if valid else ("99th percentile latency over the bound",),
            tokens=None,
        )  # fmt: skip
        instance = SimpleNamespace(performance=performance, error=None)
        return SimpleNamespace(
            instances=[instance], ok=True, all_valid=valid, outdir=str(outdir),
            loadgen_scenario=loadgen_scenario,
        )  # fmt: skip

    def server_calls(self) -> list[dict[str, Any]]:
        return [c for c in self.calls if c["scenario"] == "Server"]


@pytest.fixture(name="stand_in")
def fixture_stand_in(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Installs a stand-in Server (`stand_in(knee, ...)`) in place of real runs."""

    def install(knee: float, **kwargs: Any) -> StandInServer:
        server = StandInServer(knee, **kwargs)
        monkeypatch.setattr("mlperf_mig.api.run", server)
        the_plan = SimpleNamespace(benchmark=RESNET50, gpu="A100-SXM4-80GB", backend="null",
                                   deployment=SimpleNamespace(emulated=True),
                                   loadgen_scenario="Server")  # fmt: skip
        monkeypatch.setattr("mlperf_mig.api.plan", lambda *args, **kwargs: the_plan)
        monkeypatch.setattr(capacity_module, "plan_key", lambda plan, profile: "stand-in")
        return server

    return install


def _search(tmp_path: Path, **kwargs: Any) -> capacity_module.CapacityResult:
    return mlperf_mig.api.capacity(
        "resnet50", "1g.10gb", outdir=tmp_path / "cap", store=False, **kwargs
    )


def test_the_knee_is_found_within_the_tolerance(stand_in: Any, tmp_path: Path) -> None:
    """Knee 1,234.5 QPS, tolerance 10%: the answer is at most the knee and within 10% of it,
    the bracket closed, the answer confirmed."""
    server = stand_in(1234.5)
    result = _search(tmp_path, tolerance=0.1)
    assert result.bracket_closed and result.confirmed
    assert 1234.5 / 1.1 <= result.qps <= 1234.5
    assert result.failed_qps > 1234.5 and result.failed_qps / result.passed_qps <= 1.1
    assert server.server_calls()[0]["settings"]["target_qps"] == pytest.approx(
        1000.0
    )  # Offline / 4


def test_the_bracket_holds_at_every_step(stand_in: Any, tmp_path: Path) -> None:
    """After each probe every passed target lies below every failed one, and once a failure is
    known each new probe lies strictly inside the bracket (it only narrows)."""
    stand_in(777.0, offline_qps=10_000.0)
    result = _search(tmp_path, tolerance=0.05)
    low, high = 0.0, math.inf
    for probe in (p for p in result.probes if not p.confirm):
        assert low < probe.target_qps < high
        if probe.passed:
            low = probe.target_qps
        else:
            high = probe.target_qps
        assert low <= 777.0 < high or high == math.inf
    assert (low, high) == (result.passed_qps, result.failed_qps)


def test_probes_and_confirmation_run_at_their_own_lengths(stand_in: Any, tmp_path: Path) -> None:
    """Each probe's LoadGen test got min_duration = probe_ms and its own target; the confirming
    run got confirm_ms at the answer."""
    server = stand_in(1234.5)
    result = _search(tmp_path, probe_ms=1500, confirm_ms=9000)
    calls = server.server_calls()
    repeats = [c for c in calls if c["folder"].endswith("-again")]
    probes = [c for c in calls if c["folder"].startswith("probe-") and c not in repeats]
    confirms = [c for c in calls if c["folder"].startswith("confirm-")]
    assert len(probes) == sum(not p.confirm for p in result.probes) and len(confirms) == 1
    assert all(c["settings"]["min_duration"] == 1500 for c in probes + repeats)
    assert [c["settings"]["target_qps"] for c in probes] == [
        p.target_qps for p in result.probes if not p.confirm
    ]
    failed = [p.target_qps for p in result.probes if not p.confirm and not p.passed]
    assert sorted(c["settings"]["target_qps"] for c in repeats) == sorted(
        failed
    )  # each re-measured
    assert confirms[0]["settings"] == {"target_qps": result.qps, "min_duration": 9000}


def test_the_confirmation_without_confirm_ms_takes_the_preset_length(
    stand_in: Any, tmp_path: Path
) -> None:
    """Without confirm_ms the confirming run sets no min_duration (the preset's applies)."""
    server = stand_in(1234.5)
    _search(tmp_path, probe_ms=1500)
    confirm = next(c for c in server.server_calls() if c["folder"] == "confirm-1")
    assert "min_duration" not in confirm["settings"]


@pytest.mark.parametrize(("tolerance", "bisections"), [(1.0, 0), (0.999, 1)])
def test_the_search_stops_exactly_at_the_tolerance(
    stand_in: Any, tmp_path: Path, tolerance: float, bisections: int
) -> None:
    """From 1,000 (passes) to 2,000 (fails) the bracket's ratio is 2: a tolerance of 1.0 is met
    exactly (no bisection), 0.999 is not (one bisection, at sqrt(1,000 x 2,000))."""
    stand_in(1500.0)
    result = _search(tmp_path, low_qps=1000.0, tolerance=tolerance)
    targets = [p.target_qps for p in result.probes if not p.confirm]
    assert targets[:2] == [1000.0, 2000.0] and len(targets) == 2 + bisections
    if bisections:
        assert targets[2] == pytest.approx(math.sqrt(2_000_000))
    assert result.bracket_closed


def test_a_failed_confirmation_steps_down_by_the_tolerance(stand_in: Any, tmp_path: Path) -> None:
    """The confirming run fails above 1,000 QPS: the target steps down by 1 + tolerance until
    it is confirmed, and the answer is the confirmed one."""
    server = stand_in(1234.5, confirm_fails_above=1000.0)
    result = _search(tmp_path, tolerance=0.1)
    confirms = [
        c["settings"]["target_qps"]
        for c in server.server_calls()
        if c["folder"].startswith("confirm")
    ]
    assert all(b == pytest.approx(a / 1.1) for a, b in itertools.pairwise(confirms))
    assert result.confirmed and result.qps == confirms[-1] <= 1000.0 < confirms[-2]


def test_a_probe_that_fails_once_is_inconclusive_and_counted_as_a_failure(
    stand_in: Any, tmp_path: Path
) -> None:
    """Noise: the first run at 2,000 QPS fails though the knee is 2,500; its repeat passes. The
    probe is inconclusive, counted as a failure (the bracket's upper end, the answer below it,
    on the safe side), and the result says so."""
    stand_in(2500.0, fails_once_at=(2000.0,))
    result = _search(tmp_path, low_qps=1000.0, tolerance=0.1)
    noisy = [p for p in result.probes if p.inconclusive]
    assert [p.target_qps for p in noisy] == [2000.0] and not noisy[0].passed
    assert result.failed_qps == 2000.0 and result.qps < 2000.0
    assert any("inconclusive" in label for label in result.labels())
