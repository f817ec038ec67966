"""The capacity search of a workload that generates tokens: each probe judged by p99 TTFT and
TPOT against the limits the run logged, the answer in QPS and completed tokens/s, the cache."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import attrs
import pytest

import mlperf_mig
from mlperf_mig import api, cli
from mlperf_mig.errors import SettingsError
from mlperf_mig.harness.result import TokenLatencies
from mlperf_mig.runner.capacity_store import read_capacities, store_capacity
from mlperf_mig.runner.options import RunOptions
from mlperf_mig.runner.plan import make_plan
from mlperf_mig.study.capacity_cache import plan_key, with_cached_capacity

MS = 1_000_000  # ns
SERVER_LIMITS = (2000 * MS, 100 * MS)  # what LoadGen logs for llama3_1-8b Server
INTERACTIVE_LIMITS = (500 * MS, 30 * MS)  # and for llama3_1-8b-interactive
TOKENS_PER_QUERY = 100
SHORT_TTFT = (
    "TTFT early stopping: Run unsuccessful. * Processed 300 queries. * Would need to run at "
    "least 159 more queries, with the run being successful if every additional query were "
    "under latency."
)


class TokenService:
    """Stands in for `run` of a token workload's Server test: p99 TTFT and TPOT grow in
    proportion to the target (`ttft_ms_per_qps`, `tpot_ms_per_qps`), held to `limits_ns` (what
    the stand-in's LoadGen logs); each query completes TOKENS_PER_QUERY tokens. A run within the
    limits is VALID, except that a quick run (`short`) is too short for early stopping."""

    def __init__(
        self,
        *,
        ttft_ms_per_qps: float,
        tpot_ms_per_qps: float,
        limits_ns: tuple[int, int] = SERVER_LIMITS,
        short: bool = False,
    ) -> None:
        self.ttft_ms_per_qps = ttft_ms_per_qps
        self.tpot_ms_per_qps = tpot_ms_per_qps
        self.limits_ns = limits_ns
        self.short = short
        self.targets: list[float] = []

    def knee(self) -> float:
        """The highest target within both limits."""
        ttft, tpot = self.limits_ns
        return min(ttft / MS / self.ttft_ms_per_qps, tpot / MS / self.tpot_ms_per_qps)

    def __call__(self, scenario: Any, *, loadgen_scenario: str, outdir: Path,
                 settings: dict[str, float] | None = None, **_: Any) -> Any:  # fmt: skip
        target = settings["target_qps"]  # type: ignore[index]
        self.targets.append(target)
        ttft = int(self.ttft_ms_per_qps * target * MS)
        tpot = int(self.tpot_ms_per_qps * target * MS)
        tokens = TokenLatencies(
            tokens_per_second=target * TOKENS_PER_QUERY,
            ttft_ns={"50.00": ttft // 4, "99.00": ttft},
            tpot_ns={"50.00": tpot // 4, "99.00": tpot},
            ttft_limit_ns=self.limits_ns[0],
            tpot_limit_ns=self.limits_ns[1],
        )
        within = ttft <= self.limits_ns[0] and tpot <= self.limits_ns[1]
        reasons = (
            [] if within else ["TTFT constrain not met: Reduce target QPS to improve latency."]
        )
        if self.short:
            reasons.append(SHORT_TTFT)
        performance = SimpleNamespace(
            latency_ns={"99.00": ttft + 99 * tpot},
            effective_settings={"target_latency_ns": 0},  # LoadGen's, for a token workload
            error=None,
            invalid_reasons=tuple(reasons),
            tokens=tokens,
        )
        instance = SimpleNamespace(performance=performance, error=None)
        return SimpleNamespace(
            ok=True,
            all_valid=not reasons,
            instances=[instance],
            outdir=str(outdir),
            loadgen_scenario=loadgen_scenario,
        )


def _search(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, service: TokenService,
            **kwargs: Any) -> Any:  # fmt: skip
    monkeypatch.setattr(api, "run", service)
    options = {"preset": "submission", "low_qps": 100.0, "tolerance": 0.05, **kwargs}
    return mlperf_mig.capacity(
        "llama3.1-8b",
        "1g.10gb",
        backend="null",
        variant="tiny",
        outdir=tmp_path / "search",
        cache_dir=tmp_path / "cache",
        **options,
    )


@pytest.mark.parametrize(
    ("limits", "decides"), [(SERVER_LIMITS, "TTFT"), (INTERACTIVE_LIMITS, "TTFT")]
)
def test_the_capacity_is_where_ttft_or_tpot_meets_the_runs_limits(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, limits: tuple[int, int], decides: str
) -> None:
    """TTFT reaches its limit first: the answer is within the tolerance below that target, for
    the Server limits and for tighter ones (Interactive's), whichever the run logged."""
    service = TokenService(ttft_ms_per_qps=0.4, tpot_ms_per_qps=0.015, limits_ns=limits)
    result = _search(monkeypatch, tmp_path, service)
    assert service.knee() / 1.05 <= result.qps <= service.knee()
    assert result.confirmed and result.bracket_closed
    failed = [p for p in result.probes if not p.passed]
    assert failed and all(p.over().what == decides for p in failed)
    assert f"{decides} p99" in failed[0].reasons[0]
    assert f"over its {limits[0] / MS:g} ms limit" in failed[0].reasons[0]


def test_tpot_over_its_limit_fails_a_probe_with_ttft_within(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """TPOT reaches 100 ms at 2,000 QPS, TTFT only at 5,000: the answer is TPOT's knee."""
    service = TokenService(ttft_ms_per_qps=0.4, tpot_ms_per_qps=0.05)
    result = _search(monkeypatch, tmp_path, service)
    assert 2000 / 1.05 <= result.qps <= 2000
    failed = [p for p in result.probes if not p.passed]
    assert failed and {p.over().what for p in failed} == {"TPOT"}


def test_the_answer_is_in_qps_and_completed_tokens_per_second(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The title, the JSON and the table give the QPS and the confirming run's completed
    tokens/s, the table TTFT and TPOT each with its limit, and a note the limits as logged."""
    service = TokenService(ttft_ms_per_qps=0.4, tpot_ms_per_qps=0.015)
    result = _search(monkeypatch, tmp_path, service)
    assert result.tokens_per_s == pytest.approx(result.qps * TOKENS_PER_QUERY)
    assert f"{result.qps:,.1f} QPS, {result.tokens_per_s:,.1f} completed tokens/s" in result.title()
    header = result.table().splitlines()[1].split("  ")
    columns = [c.strip() for c in header if c.strip()]
    assert columns[2:8] == [
        "tokens/s", "p99 ms", "TTFT p99 ms", "TTFT limit ms", "TPOT p99 ms", "TPOT limit ms"
    ]  # fmt: skip
    assert "bound ms" not in columns
    assert any("judged by p99 TTFT <= 2000 ms and TPOT <= 100 ms" in x for x in result.labels())
    data = json.loads(json.dumps(result.to_dict()))
    assert data["tokens_per_s"] == result.tokens_per_s and data["loadgen_scenario"] == "Server"
    limits = data["probes"][-1]["limits"]
    assert [(x["what"], x["limit_ms"]) for x in limits] == [("TTFT", 2000.0), ("TPOT", 100.0)]


def test_a_quick_confirmation_takes_ttft_early_stopping_as_a_short_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A quick run cannot meet TTFT early stopping: within the limits it confirms (labelled);
    the submission preset takes LoadGen's verdict and does not."""
    quick = _search(
        monkeypatch,
        tmp_path / "quick",
        TokenService(ttft_ms_per_qps=0.4, tpot_ms_per_qps=0.015, short=True),
        preset="quick",
    )
    assert quick.confirmed
    assert any("confirmed by the TTFT and TPOT limits" in x for x in quick.labels())
    full = _search(
        monkeypatch,
        tmp_path / "full",
        TokenService(ttft_ms_per_qps=0.4, tpot_ms_per_qps=0.015, short=True),
    )
    assert not full.confirmed and SHORT_TTFT in full.probes[-1].reasons


def test_a_confirming_run_over_a_limit_fails_even_when_loadgen_says_valid(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Validity is LoadGen's verdict plus the limits: a VALID confirming run with TPOT over
    its limit is not a confirmation."""
    service = TokenService(ttft_ms_per_qps=0.4, tpot_ms_per_qps=0.015)

    def valid_but_slow(scenario: Any, **kwargs: Any) -> Any:
        run = service(scenario, **kwargs)
        if Path(kwargs["outdir"]).name.startswith("confirm"):
            tokens = run.instances[0].performance.tokens
            slow = attrs.evolve(tokens, tpot_ns={"99.00": 150 * MS})
            run.instances[0].performance.tokens = slow
            run.all_valid = True
        return run

    monkeypatch.setattr(api, "run", valid_but_slow)
    result = mlperf_mig.capacity(
        "llama3.1-8b", "1g.10gb", backend="null", variant="tiny", preset="submission",
        low_qps=100.0, outdir=tmp_path / "search", cache_dir=tmp_path / "cache",
    )  # fmt: skip
    confirms = [p for p in result.probes if p.confirm]
    assert not result.confirmed and not any(p.passed for p in confirms)
    assert "TPOT p99 150.00 ms over its 100 ms limit" in confirms[0].reasons


def test_a_tpot_failure_repeated_is_inconclusive_with_its_spread(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The first run at 800 QPS has TPOT three times over; its repeat passes: inconclusive,
    with the spread of the two TPOT p99s."""
    service = TokenService(ttft_ms_per_qps=0.4, tpot_ms_per_qps=0.015)

    def noisy(scenario: Any, **kwargs: Any) -> Any:
        run = service(scenario, **kwargs)
        if service.targets.count(800.0) == 1 and service.targets[-1] == 800.0:
            tokens = run.instances[0].performance.tokens
            tpot = tokens.tpot_ns["99.00"]
            run.instances[0].performance.tokens = attrs.evolve(tokens, tpot_ns={"99.00": tpot * 10})
        return run

    monkeypatch.setattr(api, "run", noisy)
    result = mlperf_mig.capacity(
        "llama3.1-8b", "1g.10gb", backend="null", variant="tiny", preset="submission",
        low_qps=100.0, outdir=tmp_path / "search", cache_dir=tmp_path / "cache",
    )  # fmt: skip
    noisy_probe = next(p for p in result.probes if p.inconclusive)
    assert noisy_probe.target_qps == 800.0 and noisy_probe.spread_of == "TPOT p99"
    assert noisy_probe.spread == pytest.approx(9.0)
    assert noisy_probe.row()["verdict"] == "inconclusive (TPOT p99 spread 900%)"


def test_lowest_target_failing_ttft_is_one_line_on_the_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`capacity --benchmark llama3.1-8b --low-qps 6000` where TTFT is over its limit there:
    exit 2, one line naming TTFT and TPOT, each with its limit, and the fix."""
    monkeypatch.setattr(api, "run", TokenService(ttft_ms_per_qps=0.4, tpot_ms_per_qps=0.015))
    argv = ["capacity", "--benchmark", "llama3.1-8b", "--backend", "null", "--variant", "tiny",
            "--low-qps", "6000", "--outdir", str(tmp_path / "search")]  # fmt: skip
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "the lowest target, 6000 QPS, already fails the Server test" in err
    assert "TTFT p99 2,400.00 ms over its 2000 ms limit" in err
    assert "TPOT p99 90.00 ms within its 100 ms limit" in err
    assert "bound" not in err and "None" not in err and "pass a lower low_qps" in err


def test_a_run_log_without_token_limits_fails_the_probe_and_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No limit in the log is never read as a pass: the lowest target fails, naming what is
    missing."""
    service = TokenService(ttft_ms_per_qps=0.4, tpot_ms_per_qps=0.015)
    service.limits_ns = (0, 0)  # LoadGen's "none"
    with pytest.raises(SettingsError, match="no TTFT limit in the run's log") as caught:
        _search(monkeypatch, tmp_path, service)
    assert "no TPOT limit in the run's log" in str(caught.value)


def test_only_a_server_test_is_searched(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """loadgen_scenario Offline has no target QPS: one line, nothing runs."""
    service = TokenService(ttft_ms_per_qps=0.4, tpot_ms_per_qps=0.015)
    with pytest.raises(SettingsError, match="capacity searches a Server target QPS") as caught:
        _search(monkeypatch, tmp_path, service, loadgen_scenario="Offline")
    assert "\n" not in str(caught.value) and service.targets == []
    assert not (tmp_path / "search").exists()


def test_a_token_capacity_is_cached_and_a_later_server_runs_target(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The confirmed answer is stored under the llama3.1-8b Server plan's key, and a Server run
    of 2x1g.10gb without a target of its own takes it."""
    result = _search(
        monkeypatch, tmp_path, TokenService(ttft_ms_per_qps=0.4, tpot_ms_per_qps=0.015)
    )
    assert not result.partial
    assert read_capacities(tmp_path / "cache")[result.key]["qps"] == result.qps
    options = RunOptions(scenario="2x1g.10gb", benchmark="llama3.1-8b", loadgen_scenario="Server",
                         backend="null", variant="tiny", preset="submission",
                         cache_dir=str(tmp_path / "cache"))  # fmt: skip
    _, planned = with_cached_capacity(options, make_plan(options))
    assert dict(planned.overrides)["target_qps"] == result.qps


def test_a_server_test_under_another_conf_name_has_its_own_cache_entry(tmp_path: Path) -> None:
    """The Server test under the interactive conf model name (tighter limits) keys its own
    entry; it does not take the Server capacity, and the Server key is as before."""
    options = RunOptions(scenario="2x1g.10gb", benchmark="llama3.1-8b", loadgen_scenario="Server",
                         backend="null", variant="tiny", cache_dir=str(tmp_path))  # fmt: skip
    server = make_plan(options)
    interactive = attrs.evolve(
        server, benchmark=attrs.evolve(server.benchmark, conf_model_name="llama3_1-8b-interactive")
    )
    assert plan_key(server, "1g.10gb").endswith("|null|default|quick|tiny")
    assert plan_key(interactive, "1g.10gb") == (
        plan_key(server, "1g.10gb") + "|conf=llama3_1-8b-interactive"
    )
    store_capacity(plan_key(server, "1g.10gb"), {"qps": 123.0}, tmp_path)
    _, planned = with_cached_capacity(options, interactive)
    assert "target_qps" not in dict(planned.overrides)


@pytest.mark.slow  # runs LoadGen Server tests of the token workload
def test_a_real_search_of_llama_on_the_null_backend_reports_tokens(tmp_path: Path) -> None:
    """Two short probes and a confirming run of llama3.1-8b (null backend, tiny): each is judged
    by the TTFT and TPOT limits its LoadGen logged (2000 and 100 ms), and the answer carries
    completed tokens/s."""
    result = mlperf_mig.capacity(
        "llama3.1-8b", "1g.10gb", backend="null", variant="tiny", low_qps=50.0, probe_ms=500,
        confirm_ms=500, max_steps=2, outdir=tmp_path / "search", cache_dir=tmp_path / "cache",
        settings={"max_tokens": 8},
    )  # fmt: skip
    assert all(p.passed for p in result.probes), result.table()
    for probe in result.probes:
        assert [(x.what, x.limit_ms) for x in probe.limits] == [("TTFT", 2000.0), ("TPOT", 100.0)]
        assert probe.tokens_per_s is not None and probe.tokens_per_s > 0
    assert result.tokens_per_s == result.probes[-1].tokens_per_s
    assert "completed tokens/s" in result.title() and "bound" not in result.table()


def test_a_high_lowest_target_is_written_in_full(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """60,000 QPS reads '60,000 QPS' in the message, never '6e+04'."""
    service = TokenService(ttft_ms_per_qps=0.4, tpot_ms_per_qps=0.015)
    with pytest.raises(SettingsError, match="the lowest target, 60,000 QPS, already fails"):
        _search(monkeypatch, tmp_path, service, low_qps=60000.0, preset="quick")


def test_a_workload_without_a_server_test_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """llama3.1-8b-edge has no Server test: `capacity` says so in one line, exit 2, nothing runs."""
    service = TokenService(ttft_ms_per_qps=0.4, tpot_ms_per_qps=0.015)
    monkeypatch.setattr(api, "run", service)
    argv = ["capacity", "--benchmark", "llama3.1-8b-edge", "--backend", "null", "--variant",
            "tiny", "--outdir", str(tmp_path / "search")]  # fmt: skip
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "llama3.1-8b-edge in SingleStream, Offline only" in err
    assert service.targets == [] and not (tmp_path / "search").exists()
