"""MLPerf's Interactive scenario of llama3.1-8b: a LoadGen Server test under the conf model name
llama3_1-8b-interactive (p99 TTFT 500 ms, TPOT 30 ms), reported as Interactive and filed in an
Interactive/ folder; refused in one line for the workloads MLPerf does not run in it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import mlperf_mig
from mlperf_mig.api import check_baseline
from mlperf_mig.errors import SettingsError, WorkloadError
from mlperf_mig.harness.settings import SettingsSpec, read_user_conf, resolve_settings
from mlperf_mig.submission import check, rules
from mlperf_mig.workloads import get_workload

QUICK_NULL: dict[str, Any] = {"backend": "null", "progress": False, "telemetry": False}
INTERACTIVE_CONF = "llama3_1-8b-interactive"


def _records(detail: Path) -> dict[str, Any]:
    """Every `key: value` record of a LoadGen detail log."""
    records = {}
    for line in detail.read_text().splitlines():
        if line.startswith(":::MLLOG"):
            record = json.loads(line.removeprefix(":::MLLOG "))
            records[record["key"]] = record["value"]
    return records


def test_interactive_is_a_server_test_of_the_interactive_variant() -> None:
    llama = get_workload("llama3.1-8b")
    variant, loadgen_scenario = llama.run_as("Interactive")
    assert loadgen_scenario == "Server"
    assert variant.name == "llama3.1-8b"
    assert variant.conf_model_name == INTERACTIVE_CONF
    assert variant.token_limits_ms() == (500.0, 30.0)
    assert variant.mlperf_scenario("Server") == "Interactive"
    assert llama.run_as("Server") == (llama, "Server")
    assert llama.mlperf_scenario("Server") == "Server"


@pytest.mark.parametrize("benchmark", ["llama3.1-8b-edge", "resnet50", "bert"])
def test_interactive_of_a_workload_without_it_is_refused(benchmark: str) -> None:
    with pytest.raises(WorkloadError, match=f"{benchmark} is not run in the Interactive scenario"):
        mlperf_mig.plan("1g.10gb", benchmark=benchmark, loadgen_scenario="Interactive")


@pytest.mark.parametrize("benchmark", ["llama3.1-8b-edge", "resnet50"])
def test_the_cli_refuses_interactive_in_one_line_with_exit_2(benchmark: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mlperf_mig", "plan", "--scenario", "1g.10gb", "--benchmark",
         benchmark, "--loadgen-scenario", "Interactive", "--backend", "null"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1
    assert f"{benchmark} is not run in the Interactive scenario" in lines[0]


def test_multistream_of_llama_is_still_refused() -> None:
    with pytest.raises(WorkloadError, match="runs it in Offline, Server, Interactive"):
        mlperf_mig.plan("1g.10gb", benchmark="llama3.1-8b", loadgen_scenario="MultiStream")


def test_the_plan_runs_loadgen_server_and_says_interactive() -> None:
    plan = mlperf_mig.plan(
        "1g.10gb", benchmark="llama3.1-8b", loadgen_scenario="interactive", backend="null"
    )
    assert plan.loadgen_scenario == "Server"
    assert plan.mlperf_scenario == "Interactive"
    assert plan.benchmark.conf_model_name == INTERACTIVE_CONF
    assert "llama3.1-8b Interactive (MLPerf scenario, LoadGen Server)" in plan.title()
    assert any(
        "under the conf model name llama3_1-8b-interactive, held to p99 TTFT 500 ms and TPOT "
        "30 ms" in note
        for note in plan.notes()
    )
    assert plan.to_dict()["loadgen_scenario"] == "Interactive"


def test_server_and_interactive_plans_are_not_comparable_runs() -> None:
    """Runs of equal settings keys are compared (sweeps, baselines): the limits differ."""
    server, interactive = (
        mlperf_mig.plan("1g.10gb", benchmark="llama3.1-8b", loadgen_scenario=s, backend="null")
        for s in ("Server", "Interactive")
    )
    assert server.settings_key != interactive.settings_key


def test_settings_are_written_under_the_interactive_conf_name() -> None:
    variant, loadgen_scenario = get_workload("llama3.1-8b").run_as("Interactive")
    resolved = resolve_settings(
        SettingsSpec(overrides={"target_qps": 3}), variant, loadgen_scenario
    )
    lines = resolved.conf_text().splitlines()
    assert lines and all(line.startswith(f"{INTERACTIVE_CONF}.Server.") for line in lines)
    assert f"{INTERACTIVE_CONF}.Server.target_qps = 3.0" in lines


def test_loadgen_takes_the_interactive_limits_from_its_conf_name(tmp_path: Path) -> None:
    """LoadGen's built-in mlperf.conf (read at the first FromConfig of a process only, hence a
    process of its own) holds the Interactive limits under llama3_1-8b-interactive."""
    code = (
        "import sys, mlperf_loadgen as lg\n"
        "from mlperf_mig.harness.settings import SettingsSpec, load_test_settings, resolve_settings\n"
        "from mlperf_mig.workloads import get_workload\n"
        "bench, scenario = get_workload('llama3.1-8b').run_as('Interactive')\n"
        "resolved = resolve_settings(SettingsSpec(overrides={'target_qps': 3}), bench, scenario)\n"
        f"conf = {str(tmp_path / 'user.conf')!r}\n"
        "open(conf, 'w').write(resolved.conf_text())\n"
        "s = load_test_settings(conf, resolved, lg)\n"
        "print(s.ttft_latency, s.tpot_latency, s.use_token_latencies, s.scenario)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["500000000", "30000000", "True", "TestScenario.Server"]


def test_a_user_conf_reads_the_interactive_server_lines(tmp_path: Path) -> None:
    conf = tmp_path / "user.conf"
    conf.write_text(
        f"{INTERACTIVE_CONF}.Server.target_qps = 4\nllama3_1-8b.Server.target_qps = 9\n"
    )
    assert read_user_conf(conf, INTERACTIVE_CONF, "Server") == {"target_qps": 4}


def test_a_user_conf_line_of_an_interactive_loadgen_scenario_is_refused(tmp_path: Path) -> None:
    """LoadGen would ignore `model.Interactive.key` lines without a word."""
    conf = tmp_path / "user.conf"
    conf.write_text("llama3_1-8b.Interactive.target_qps = 4\n")
    with pytest.raises(SettingsError, match="LoadGen has no Interactive scenario") as caught:
        read_user_conf(conf, INTERACTIVE_CONF, "Server")
    assert "\n" not in str(caught.value)


def test_closed_llama_needs_server_or_interactive_besides_offline(tmp_path: Path) -> None:
    """The checker's loader: Offline is required, and one of Interactive or Server."""
    description = {"system_type": "datacenter"}

    def findings(present: list[str]) -> list[str]:
        return [
            m for _, m in check._required_scenarios(tmp_path, "llama3.1-8b", present, description)
        ]

    assert findings(["Offline", "Interactive"]) == []
    assert findings(["Offline", "Server"]) == []
    assert findings(["Offline", "Interactive", "Server"]) == []
    assert findings(["Offline"]) == [
        "closed division needs the scenarios (one of) Interactive or Server as well"
    ]
    assert any("SingleStream is not a closed-division scenario" in f for f in findings(
        ["Offline", "Interactive", "SingleStream"]
    ))  # fmt: skip


def test_an_interactive_folder_holds_server_logs() -> None:
    assert rules.log_scenario("Interactive") == "Server"
    assert rules.log_scenario("Offline") == "Offline"
    assert "Interactive" in rules.SCENARIOS


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["independent", "unified"])
def test_an_interactive_run_reports_interactive_with_its_limits(tmp_path: Path, mode: str) -> None:
    result = mlperf_mig.run(
        "2g.20gb+1g.10gb", benchmark="llama3.1-8b", loadgen_scenario="Interactive", mode=mode,
        outdir=tmp_path / "run", settings={"max_tokens": 4, "min_duration": 300},
        accuracy=False, **QUICK_NULL,
    )  # fmt: skip
    assert result.ok
    assert result.loadgen_scenario == "Interactive"
    runs = (
        [result.layout_result] if mode == "unified" else [i.performance for i in result.instances]
    )
    for run in runs:
        assert run is not None and run.loadgen_scenario == "Interactive"
        assert run.tokens is not None
        assert (run.tokens.ttft_limit_ns, run.tokens.tpot_limit_ns) == (500_000_000, 30_000_000)
        records = _records(Path(run.log_dir) / "mlperf_log_detail.txt")
        assert records["effective_scenario"] == "Server"
        assert records["requested_server_ttft_latency"] == 500_000_000
        assert Path(run.user_conf).read_text().startswith(f"{INTERACTIVE_CONF}.Server.")
    table = result.table()
    assert "llama3.1-8b Interactive (MLPerf scenario, LoadGen Server)" in table
    assert "Interactive token limits (p99):" in table
    assert "<= 500 ms" in table and "<= 30 ms" in table
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["loadgen_scenario"] == "Interactive"
    assert mlperf_mig.RunResult.load(tmp_path / "run").loadgen_scenario == "Interactive"
    # a baseline is a run of the same scenario: Interactive's, not Server's
    plans = {
        s: mlperf_mig.plan("1g.10gb", benchmark="llama3.1-8b", loadgen_scenario=s, backend="null")
        for s in ("Interactive", "Server")
    }
    assert check_baseline(result, plans["Interactive"]) is result
    with pytest.raises(SettingsError, match=r"baseline is llama3\.1-8b Interactive but this run"):
        check_baseline(result, plans["Server"])


@pytest.mark.slow
def test_an_interactive_run_of_the_tiny_model(tmp_path: Path) -> None:
    result = mlperf_mig.run(
        "1g.10gb", benchmark="llama3.1-8b", loadgen_scenario="Interactive",
        backend="onnxruntime", variant="tiny", outdir=tmp_path / "run",
        settings={"max_tokens": 4, "min_duration": 300}, accuracy=False, progress=False,
        telemetry=False,
    )  # fmt: skip
    performance = result.instances[0].performance
    assert performance is not None and performance.tokens is not None
    assert performance.loadgen_scenario == "Interactive"
    assert performance.tokens.tokens_per_second > 0
    assert performance.tokens.ttft_limit_ns == 500_000_000
