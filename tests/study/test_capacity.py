"""Server capacity: the bracketing search on a service whose capacity is known, the cache, errors."""

from __future__ import annotations

import inspect
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mlperf_mig import api, cli
from mlperf_mig.api import capacity
from mlperf_mig.errors import SettingsError
from mlperf_mig.runner.capacity_store import store_capacity
from mlperf_mig.runner.options import RUN_OPTIONS, RunOptions
from mlperf_mig.runner.plan import make_plan
from mlperf_mig.study.capacity import SEARCH_OPTIONS
from mlperf_mig.study.capacity_cache import plan_key, with_cached_capacity

BOUND_NS = 15_000_000


class KnownService:
    """Stands in for `run`: a Server run whose p99 is within the 15 ms bound up to `qps` QPS."""

    def __init__(self, qps: float) -> None:
        self.qps = qps
        self.targets: list[float] = []

    def __call__(
        self,
        scenario: Any,
        *,
        loadgen_scenario: str,
        outdir: Path,
        settings: dict[str, float] | None = None,
        **_: Any,
    ) -> Any:
        target = settings["target_qps"]  # type: ignore[index]
        self.targets.append(target)
        p99 = int(BOUND_NS * target / self.qps)
        performance = SimpleNamespace(
            latency_ns={"99.00": p99},
            effective_settings={"target_latency_ns": BOUND_NS},
            error=None,
            invalid_reasons=() if p99 <= BOUND_NS else ("Reduce target QPS to improve latency.",),
            tokens=None,
        )
        instance = SimpleNamespace(performance=performance, error=None)
        return SimpleNamespace(
            ok=True,
            all_valid=p99 <= BOUND_NS,
            instances=[instance],
            outdir=str(outdir),
            loadgen_scenario=loadgen_scenario,
        )


def _search(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, service: KnownService, **kwargs: Any
) -> Any:
    monkeypatch.setattr(api, "run", service)
    return capacity(
        "resnet50",
        "1g.10gb",
        backend="null",
        preset="submission",
        outdir=tmp_path / "search",
        cache_dir=tmp_path / "cache",
        **kwargs,
    )


def test_search_finds_a_known_capacity(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Doubling from 10 QPS then bisecting ends within 10% below the true 100 QPS, confirmed."""
    result = _search(monkeypatch, tmp_path, KnownService(100.0), low_qps=10.0)
    assert 100 / 1.1 <= result.qps <= 100.0
    assert result.confirmed and result.bracket_closed and not result.partial
    assert [p.confirm for p in result.probes][-1] is True


def test_found_capacity_is_cached_under_the_plan_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The confirmed answer goes to <cache>/capacity.json under the run settings' key."""
    result = _search(monkeypatch, tmp_path, KnownService(100.0), low_qps=10.0)
    text = (tmp_path / "cache" / "capacity.json").read_text()
    assert result.key in text and "1g.10gb|resnet50|null" in result.key


def test_every_probe_passing_is_a_labelled_partial_answer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No failing probe within max_steps: the answer is a lower bound, and says so."""
    result = _search(monkeypatch, tmp_path, KnownService(1e12), low_qps=10.0, max_steps=3)
    assert result.partial and not result.bracket_closed
    assert any("PARTIAL" in label for label in result.labels())


def test_lowest_target_failing_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A given low_qps that already breaks the latency bound ends the search with one line."""
    with pytest.raises(SettingsError, match="the lowest target, 50 QPS, already fails") as caught:
        _search(monkeypatch, tmp_path, KnownService(10.0), low_qps=50.0)
    assert "\n" not in str(caught.value)


def test_bad_low_qps_on_the_cli_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """`capacity --low-qps 0`: one line, exit 2, nothing runs."""
    assert cli.main(["capacity", "--backend", "null", "--low-qps", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "low_qps must be a positive number" in err


def test_cached_capacity_is_a_later_server_runs_target(tmp_path: Path) -> None:
    """A Server run of 2x1g.10gb without its own target uses 1g.10gb's cached capacity."""
    options = RunOptions(
        scenario="2x1g.10gb", loadgen_scenario="Server", backend="null", cache_dir=str(tmp_path)
    )
    plan = make_plan(options)
    store_capacity(plan_key(plan, "1g.10gb"), {"qps": 123.0}, tmp_path)
    _, planned = with_cached_capacity(options, plan)
    assert dict(planned.overrides)["target_qps"] == 123.0


def test_mixed_layout_keeps_its_own_targets(tmp_path: Path) -> None:
    """A mixed layout needs a target per profile: the cached capacity is not applied."""
    options = RunOptions(
        scenario="2g.20gb+1g.10gb",
        loadgen_scenario="Server",
        backend="null",
        cache_dir=str(tmp_path),
    )
    plan = make_plan(options)
    store_capacity(plan_key(plan, "1g.10gb"), {"qps": 123.0}, tmp_path)
    _, planned = with_cached_capacity(options, plan)
    assert "target_qps" not in dict(planned.overrides)


def test_running_out_after_failing_probes_says_what_happened(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Doubling 10-80 QPS passes, 160 fails, no step left to bisect: the label names the bracket,
    not 'every probe passed'."""
    result = _search(monkeypatch, tmp_path, KnownService(100.0), low_qps=10.0, max_steps=5)
    assert result.partial and not result.bracket_closed
    assert (result.passed_qps, result.failed_qps) == (80.0, 160.0)
    labels = " ".join(result.labels())
    assert "80 QPS passed, 160 QPS failed" in labels and "every probe passed" not in labels


def test_every_probe_passing_says_how_far(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """With no failing probe the label says every probe passed, up to the last target."""
    result = _search(monkeypatch, tmp_path, KnownService(1e12), low_qps=10.0, max_steps=3)
    assert result.failed_qps is None
    assert any("every probe passed, up to 40 QPS" in label for label in result.labels())


def test_empty_outdir_is_refused_and_nothing_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`capacity --outdir ''` is one line and exit 2; nothing is written in the current folder."""
    service = KnownService(100.0)
    monkeypatch.setattr(api, "run", service)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["capacity", "--backend", "null", "--low-qps", "10", "--outdir", ""]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "outdir (--outdir) is empty" in err
    assert service.targets == [] and list(tmp_path.iterdir()) == []


class NoisyService(KnownService):
    """A KnownService whose first run at `noisy_target` comes out three times slower (a load spike)."""

    def __init__(self, qps: float, noisy_target: float) -> None:
        super().__init__(qps)
        self.noisy_target = noisy_target

    def __call__(self, scenario: Any, **kwargs: Any) -> Any:
        result = super().__call__(scenario, **kwargs)
        if self.targets.count(self.noisy_target) == 1 and self.targets[-1] == self.noisy_target:
            performance = result.instances[0].performance
            performance.latency_ns = {"99.00": 3 * performance.latency_ns["99.00"]}
            result.all_valid = False
        return result


def test_a_failing_probe_is_measured_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A probe that fails once at 40 QPS and passes when repeated is inconclusive, counted as a failure, with its spread, and labelled."""
    service = NoisyService(100.0, noisy_target=40.0)
    result = _search(monkeypatch, tmp_path, service, low_qps=10.0)
    noisy = [p for p in result.probes if p.inconclusive]
    assert len(noisy) == 1 and noisy[0].target_qps == 40.0 and not noisy[0].passed
    assert noisy[0].spread == pytest.approx(2.0, rel=1e-3)
    assert service.targets.count(40.0) == 2
    assert any("inconclusive" in label for label in result.labels())


def test_a_probe_failing_twice_stays_failed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Above the true capacity a probe fails again when repeated: a plain failure, not inconclusive."""
    result = _search(monkeypatch, tmp_path, KnownService(100.0), low_qps=10.0)
    failed = [p for p in result.probes if not p.passed and not p.confirm]
    assert failed and not any(p.inconclusive for p in failed)


@pytest.mark.parametrize(
    ("name", "value"),
    [("tolerance", None), ("max_steps", 2.0), ("probe_ms", True), ("low_qps", float("inf"))],
)
def test_search_options_are_checked_before_any_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, value: Any
) -> None:
    """A search option of the wrong type or range is one line naming it; nothing runs."""
    service = KnownService(100.0)
    with pytest.raises(SettingsError, match=f"{name} must be a positive") as caught:
        _search(monkeypatch, tmp_path, service, **{name: value})
    assert "\n" not in str(caught.value) and service.targets == []


def test_capacity_parameters_are_the_declared_options() -> None:
    """capacity's search options and the run options it passes on take the declared type and
    default (the LoadGen scenario's default is Server: the search runs Server tests), and its
    docstring lists the search options."""
    parameters = inspect.signature(capacity).parameters
    own_default = {"outdir", "loadgen_scenario"}
    passed_on = [o for o in RUN_OPTIONS if o.name in parameters and o.name not in own_default]
    for declared in (*SEARCH_OPTIONS, *passed_on):
        parameter = parameters[declared.name]
        assert (parameter.annotation, parameter.default) == (declared.accepts, declared.default)
    scenario = parameters["loadgen_scenario"]
    assert (scenario.annotation, scenario.default) == ("str", "Server")
    assert all(f"{o.name}:" in (capacity.__doc__ or "") for o in SEARCH_OPTIONS)


def test_run_options_are_checked_before_any_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A run option of the wrong type (here variant=3) is refused as `run` refuses it, before
    the Offline run that sizes the search."""
    service = KnownService(100.0)
    with pytest.raises(SettingsError, match="variant must be a non-empty string"):
        _search(monkeypatch, tmp_path, service, variant=3)
    assert service.targets == [] and not (tmp_path / "search").exists()
