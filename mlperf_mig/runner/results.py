"""Results of a run as data: per-instance records, the run record, tables and aggregation;
and `LayoutResult`, the one type of what was measured of a layout (a run is one with one run).

The aggregate of an independent run is the SUM of the instances' throughput (Offline samples/s,
Server scheduled QPS). Summing independent LoadGen runs is an engineering metric and not an
MLPerf result (LoadGen operates with a single SUT; mlcommons/inference issue 1252), and every
table says so. A unified run has one LoadGen for the whole layout; its log is the MLPerf-format
result. Emulated runs (CPU partitions standing in for MIG slices) are labelled in every table.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from mlperf_mig._io import atomic_write_json, finite_number, read_json, safe_name
from mlperf_mig._report import Report
from mlperf_mig._table import cell_text
from mlperf_mig.errors import OutputDirError, SettingsError, UntrustedPathError
from mlperf_mig.runner.stats import Change, Summary, relative_change, summarize

if TYPE_CHECKING:
    from mlperf_mig.harness.compliance import AuditVerdict
    from mlperf_mig.harness.result import InstanceResult
    from mlperf_mig.telemetry import RunTelemetry

log = logging.getLogger(__name__)

RESULTS_FILE = "results.json"
SCHEMA = 2  # 2: "target" (mig, vgpu, shared, emulated) became "partitioning"
INSTANCE_STATUSES = ("ok", "raised", "crashed", "hung", "interrupted", "not run")
SUM_LABEL = "sum of independent LoadGen runs: engineering metric, not an MLPerf result"
UNIFIED_LABEL = "one LoadGen for the whole layout (MLPerf-format log)"
EMULATED_LABEL = "emulated: CPU partitions standing in for MIG slices, not a GPU measurement"
SHARED_LABEL = "shared: instances time-share one GPU without MIG isolation"
VGPU_LABEL = "vGPU: a MIG-backed vGPU inside a VM (one MIG instance of its parent GPU)"
SHORTFALL = 0.8  # an emulated instance that used less than this part of its CPU budget is named
BY_DESIGN_WORD = "no (quick preset)"
BY_DESIGN_LABEL = (
    f"valid '{BY_DESIGN_WORD}': by design, not a failure: the quick preset keeps mlperf.conf's "
    "600 s min_duration in the log but sizes the Offline query to a few seconds, so LoadGen marks "
    "the run INVALID (min duration not met); the throughput is measured all the same; "
    "preset='submission' runs the full 600 s"
)


def _result_from(data: Mapping[str, Any] | None) -> InstanceResult | None:
    if data is None:
        return None
    from mlperf_mig.harness import InstanceResult

    return InstanceResult.from_dict(dict(data))


def _result_to(result: InstanceResult | None) -> dict[str, Any] | None:
    return None if result is None else result.to_dict()


def result_throughput(result: InstanceResult | None) -> float | None:
    return None if result is None else result.throughput


def result_error(*results: InstanceResult | None) -> str | None:
    """The first error of the harness results given: a test that ran to the end but failed (a
    sample that could not be loaded, a backend that raised) completed its samples without data."""
    return next((r.error for r in results if r is not None and r.error is not None), None)


def result_valid(result: InstanceResult | None) -> bool | None:
    return None if result is None else bool(result.valid)


def validity_word(result: InstanceResult | None) -> str | None:
    """'yes', 'NO', or BY_DESIGN_WORD for a short quick-preset Offline run (None: no result)."""
    if result is None:
        return None
    if result.valid:
        return "yes"
    return BY_DESIGN_WORD if result.invalid_by_design else "NO"


def accuracy_cell(result: InstanceResult | None) -> str | None:
    """An accuracy run's metric, value, verdict and the number of samples they rest on."""
    report = None if result is None else result.accuracy
    if report is None:
        return None
    value = "-" if report.value is None else f"{report.value:.2f}"
    verdict = "" if report.passed is None else (" PASS" if report.passed else " FAIL")
    return f"{report.metric} {value}{verdict} ({report.basis})"


def _verdicts_from(data: Sequence[Mapping[str, Any]] | None) -> tuple[AuditVerdict, ...]:
    from mlperf_mig.harness.compliance import AuditVerdict

    return tuple(AuditVerdict.from_dict(v) for v in data or ())


def _verdict_tuple(verdicts: Iterable[AuditVerdict]) -> tuple[AuditVerdict, ...]:
    # a named converter: AuditVerdict is imported for the checker only, so tuple[AuditVerdict, ...]
    # cannot be written where the class body runs
    return tuple(verdicts)


def compliance_cell(verdicts: Sequence[AuditVerdict]) -> str | None:
    """Each audit's verdict: 'TEST01 PASS (+0.4%); TEST04 FAIL: <why>' (None: no audits)."""
    return "; ".join(v.summary() for v in verdicts) or None


def result_p99_ms(result: InstanceResult | None) -> float | None:
    if result is None:
        return None
    p99 = result.latency_ns.get("99.00")
    return None if p99 is None else p99 / 1e6


def scenario_words(scenario: str) -> str:
    """A run's scenario as titles show it: 'Server (LoadGen scenario)', or for MLPerf's
    Interactive, which LoadGen runs as Server, 'Interactive (MLPerf scenario, LoadGen Server)'."""
    from mlperf_mig.harness.settings import LOADGEN_SCENARIOS

    if scenario in LOADGEN_SCENARIOS:
        return f"{scenario} (LoadGen scenario)"
    return f"{scenario} (MLPerf scenario, LoadGen Server)"


TOKEN_COLUMNS = ("tokens/s", "p90 ms", "TTFT p99 ms", "TPOT p99 ms")


def token_cells(result: InstanceResult | None) -> dict[str, float | None]:
    """A generative workload's cells: tokens/s, the p90 sample latency (SingleStream's metric),
    p99 time to first token and time per output token (ms); {} for other workloads."""
    if result is None or result.tokens is None:
        return {}
    tokens = result.tokens
    p90 = result.latency_ns.get("90.00") if result.loadgen_scenario == "SingleStream" else None
    ttft, tpot = tokens.ttft_ns.get("99.00"), tokens.tpot_ns.get("99.00")
    return {
        "tokens/s": tokens.tokens_per_second,
        "p90 ms": None if p90 is None else p90 / 1e6,
        "TTFT p99 ms": None if ttft is None else ttft / 1e6,
        "TPOT p99 ms": None if tpot is None else tpot / 1e6,
    }


def token_verdicts(name: str, result: InstanceResult | None) -> str | None:
    """'i0: TTFT 812.0 ms <= 2000 ms PASS, TPOT 31.0 ms <= 100 ms PASS' for a run held to token
    limits (Server); None otherwise."""
    if result is None or result.tokens is None:
        return None
    tokens, parts = result.tokens, []
    for which, limit, values in (
        ("TTFT", tokens.ttft_limit_ns, tokens.ttft_ns),
        ("TPOT", tokens.tpot_limit_ns, tokens.tpot_ns),
    ):
        verdict = tokens.verdict(which.lower())
        if verdict is None or limit is None:
            continue
        parts.append(
            f"{which} {values['99.00'] / 1e6:.1f} ms <= {limit / 1e6:.0f} ms "
            f"{'PASS' if verdict else 'FAIL'}"
        )
    return f"{name}: {', '.join(parts)}" if parts else None


@attrs.frozen(kw_only=True)
class InstanceRun:
    """One instance of a run: where it ran, how its worker ended, and its LoadGen results.

    In unified mode `performance` and `accuracy` are None (the layout has one LoadGen result in
    RunResult.layout_result) and `dispatched_samples` says how many samples this instance served.
    """

    name: str
    index: int
    profile: str
    compute_slices: int
    device: str
    cpus: tuple[int, ...] | None = attrs.field(
        default=None, converter=attrs.converters.optional(tuple[int, ...])
    )
    threads: int | None = None
    host: str = ""
    node: str | None = None  # the Ray node of a cluster run
    status: str = attrs.field(default="not run", validator=attrs.validators.in_(INSTANCE_STATUSES))
    error: str | None = None
    traceback: str | None = None
    log_tail: str | None = None
    accuracy_status: str | None = None
    accuracy_error: str | None = None
    performance: InstanceResult | None = None
    accuracy: InstanceResult | None = None  # of the accuracy run
    dispatched_samples: int | None = None
    compliance: tuple[AuditVerdict, ...] = attrs.field(default=(), converter=_verdict_tuple)
    # emulated: the CPU time it was given (CPU-seconds per second) and how that was enforced
    # ("whole CPUs", "cgroup quota", "duty cycle"; emulation/cpu_budget.py)
    cpu_share: float | None = None
    cpu_budget: str | None = None
    cpu_used: float | None = None  # CPU-seconds per second its performance run used
    gpu_index: int | None = None  # the GPU it was a slice of (on its node); results.json `gpus`

    @property
    def ok(self) -> bool:
        statuses_ok = self.status == "ok" and self.accuracy_status in (None, "ok")
        return statuses_ok and result_error(self.performance, self.accuracy) is None

    @property
    def throughput(self) -> float | None:
        return result_throughput(self.performance)

    @property
    def valid(self) -> bool | None:
        return result_valid(self.performance)

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self, recurse=False)
        data["cpus"] = None if self.cpus is None else list(self.cpus)
        data["performance"] = _result_to(self.performance)
        data["accuracy"] = _result_to(self.accuracy)
        data["compliance"] = [v.to_dict() for v in self.compliance]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InstanceRun:
        fields = dict(data)
        fields["performance"] = _result_from(fields.get("performance"))
        fields["accuracy"] = _result_from(fields.get("accuracy"))
        fields["compliance"] = _verdicts_from(fields.get("compliance"))
        for key in ("cpu_share", "cpu_used"):
            share = fields.get(key)
            if share is not None and not (finite_number(share) and 0 <= share < 1e6):
                raise UntrustedPathError(
                    f"instance {fields.get('name')!r}: {key} {share!r} is not a number of CPUs; write the run again"
                )
        return cls(**fields)

    def row(self) -> dict[str, Any]:
        """The instance's row of the per-instance table."""
        return {
            "instance": self.name,
            "gpu": self.gpu_index,
            "profile": self.profile,
            "device": self.device
            if self.cpu_share is None
            else f"{self.device} ({self.cpu_share:.3g} CPU)",
            "host": self.host,
            "status": self.status if self.status != "ok" else _status_word(self),
            "valid": validity_word(self.performance),
            "throughput": self.throughput,
            "node": self.node[:8] if self.node else None,
            "samples served": self.dispatched_samples,
            "p99 ms": result_p99_ms(self.performance),
            **token_cells(self.performance),
            "accuracy": accuracy_cell(self.accuracy),
            "compliance": compliance_cell(self.compliance),
            "error": self.error
            or self.accuracy_error
            or result_error(self.performance, self.accuracy),
        }


def _check_names(fields: Mapping[str, Any], source: str) -> None:
    """The values of a results.json that become folder names (a submission's scenario folder, an
    instance's logs) are checked like user input: a file copied from elsewhere may say anything."""
    from mlperf_mig.harness.settings import MLPERF_SCENARIOS
    from mlperf_mig.workloads import workload_names

    allowed = {
        "benchmark": workload_names(),
        "loadgen_scenario": MLPERF_SCENARIOS,
        "mode": ("independent", "unified"),
        "partitioning": ("mig", "vgpu", "shared", "emulated"),
    }
    for field, values in allowed.items():
        value = fields.get(field, fields.get("target") if field == "partitioning" else None)
        if value not in values:
            raise UntrustedPathError(
                f"{source!r}: {field} {value!r} is not one of {', '.join(values)}; the file was "
                "edited or is not one this tool wrote: fix that field or write the run again"
            )
    instances = fields.get("instances")
    if not isinstance(instances, (list, tuple)) or not all(
        isinstance(i, Mapping) for i in instances
    ):
        raise UntrustedPathError(
            f"{source!r}: instances is not a list of instances; write the run again"
        )
    for instance in instances:
        safe_name(instance.get("name"), "instance name", source)


_GPU_FIELDS = ("index", "name", "layout", "partitioning", "node", "host", "instances")


@attrs.frozen(kw_only=True)
class RunGpu:
    """One GPU of a run: its index (on its node), model, layout, partitioning, node, host and
    the names of its instances. `served_samples` and `subtotal` are measured: None in
    `RunResult.gpus`, filled in by `RunResult.gpu_rows()` (and results.json) from the instances."""

    index: int
    name: str
    layout: str
    partitioning: str | None = None
    node: str | None = None
    host: str | None = None
    instances: tuple[str, ...] = attrs.field(default=(), converter=tuple[str, ...])
    served_samples: int | None = None  # unified mode: the samples its instances served
    subtotal: float | None = None
    # a generative workload's tokens/s, shared out as `subtotal` is; None without tokens, or
    # where one of its instances measured none
    tokens_per_second: float | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunGpu:
        """The GPU of a `gpus` entry (plan.json's or results.json's), its measured fields left
        out: they are recomputed from the instances."""
        return cls(**{name: data[name] for name in _GPU_FIELDS if name in data})

    def to_dict(self) -> dict[str, Any]:
        """The entry of results.json `gpus` (the same keys, in the same order, as plan.json's
        and then the measured ones; tokens_per_second only for a generative workload)."""
        data = {**attrs.asdict(self, recurse=False), "instances": list(self.instances)}
        if data["tokens_per_second"] is None:
            del data["tokens_per_second"]
        return data


def _own_tokens_per_second(instance: InstanceRun) -> float | None:
    """An instance's tokens/s from its own LoadGen (independent mode); None without one."""
    own = instance.performance
    return None if own is None or own.tokens is None else own.tokens.tokens_per_second


def _share(total: float | None, served: int, served_all: int) -> float | None:
    """A GPU's part of a unified layout's `total`: in proportion to the samples it served."""
    return None if total is None or not served_all else total * served / served_all


def _sum_of_all(values: Sequence[float | None]) -> float | None:
    """The sum, or None when there is nothing to sum or one value is missing (a partial sum
    would read as the whole's)."""
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def _run_gpus(entries: Iterable[RunGpu | Mapping[str, Any]]) -> tuple[RunGpu, ...]:
    """`RunResult.gpus` from records or from plan.json-style dicts (placement/fleet.py)."""
    return tuple(e if isinstance(e, RunGpu) else RunGpu.from_dict(e) for e in entries)


def _gpus_from(data: object, source: str) -> tuple[RunGpu, ...]:
    """The `gpus` of a results.json, checked: what each entry says of its GPU and instances."""
    if not isinstance(data, (list, tuple)):
        raise UntrustedPathError(f"{source!r}: gpus is not a list of GPUs; write the run again")
    gpus = []
    for entry in data:
        ok = (
            isinstance(entry, Mapping)
            and isinstance(entry.get("index"), int)
            and not isinstance(entry.get("index"), bool)
            and isinstance(entry.get("name"), str)
            and isinstance(entry.get("layout"), str)
            and isinstance(entry.get("instances"), list)
            and all(isinstance(n, str) for n in entry["instances"])
            and all(
                isinstance(entry.get(k), (str, type(None)))
                for k in ("partitioning", "node", "host")
            )
        )
        if not ok:
            raise UntrustedPathError(
                f"{source!r}: gpus entry {entry!r} needs an index, a name, a layout and a list of "
                "instance names (partitioning, node and host: texts or null); write the run again"
            )
        gpus.append(RunGpu.from_dict(entry))
    return tuple(gpus)


def _telemetry_from(data: object, source: str) -> RunTelemetry | None:
    if data is None:
        return None
    from mlperf_mig.telemetry import RunTelemetry

    return RunTelemetry.from_dict(data, source)


def _status_word(instance: InstanceRun) -> str:
    return (
        "failed"
        if result_error(instance.performance, instance.accuracy)
        else _accuracy_word(instance)
    )


def _accuracy_word(instance: InstanceRun) -> str:
    if instance.accuracy_status in (None, "ok"):
        return "ok"
    return f"ok (accuracy run {instance.accuracy_status})"


class LayoutResult(Report):
    """What was measured of one MIG layout: its runs (one, or one per repeat) and, with
    isolation, each profile's runs alone. `mlperf_mig.run` returns one, a sweep holds one per
    layout, and the charts, the HTML report and the advisor read any of them through this class.

    A lone run (`RunResult`) is a layout result with one run, itself; a repeated run
    (study/repeats.py `RepeatedRun`) holds its repeats' RunResults. What is computed over the
    runs (totals, means, 95% intervals, the change against MIG scenario 1, interference) is
    computed here, the same way for both; each kind is a `Report` with its own table.
    """

    __slots__ = ()

    index_file: ClassVar[str]  # the file at the top of its folder (results.json, repeats.json)
    # what every kind has: its folder and the settings its runs share
    outdir: str
    gpu: str
    layout: str
    scenario: int | None
    partitioning: str
    benchmark: str
    settings_key: str

    @property
    def runs(self) -> tuple[RunResult, ...]:
        """The runs of the layout: itself for a lone run, the repeats of a repeated one."""
        raise NotImplementedError

    @property
    def alone(self) -> Mapping[str, tuple[RunResult, ...]]:
        """Each profile's runs alone (isolation); none for a lone run."""
        return {}

    @property
    def isolation(self) -> bool:
        return False

    @property
    def baseline_totals(self) -> tuple[float, ...]:
        """The totals of MIG scenario 1 this layout is compared with (none: not compared)."""
        raise NotImplementedError

    @property
    def ok(self) -> bool:
        raise NotImplementedError

    @property
    def first(self) -> RunResult:
        return self.runs[0]

    @property
    def repeats(self) -> int:
        return len(self.runs)

    @property
    def layouts(self) -> tuple[LayoutResult, ...]:
        """The layouts of this report (as a sweep has them): this one."""
        return (self,)

    @property
    def capacities(self) -> Mapping[str, float]:
        """Server capacities per profile measured beside the layouts (a sweep's); none here."""
        return {}

    def alone_runs(self) -> list[RunResult]:
        return [run for runs in self.alone.values() for run in runs]

    def reused_targets(self) -> list[str]:
        """The instance runs ('repeat-2/i0', 'alone-1g.10gb/repeat-1/i0') whose LoadGen target
        an earlier run calibrated (harness/reuse.py) instead of their own measurement."""
        found = []
        for run in [*self.runs, *self.alone_runs()]:
            where = os.path.relpath(run.outdir, self.outdir)
            named = [
                ("layout", run.layout_result),
                *((i.name, i.performance) for i in run.instances),
            ]
            for name, result in named:
                if result is not None and result.target_source == "cached calibration":
                    found.append(name if where == "." else f"{where}/{name}")
        return found

    # --- over the runs -------------------------------------------------------------------------
    @property
    def totals(self) -> list[float]:
        return [r.total_throughput for r in self.runs if r.total_throughput is not None]

    @property
    def total(self) -> Summary | None:
        """The total throughput over the runs (a single value for one run)."""
        return summarize(self.totals)

    @property
    def change(self) -> Change | None:
        """The change of the total against MIG scenario 1, with its interval from 3 runs."""
        if self.scenario == 1 or not self.baseline_totals:
            return None
        return relative_change(self.totals, self.baseline_totals)

    def instance_values(self, index: int, what: str) -> list[float]:
        """Instance `index`'s throughput or p99 (ms) over the runs."""
        values = [_value(r.instances[index], what) for r in self.runs if index < len(r.instances)]
        return [v for v in values if v is not None]

    def alone_values(self, profile: str, what: str) -> list[float]:
        values = [_value(r.instances[0], what) for r in self.alone.get(profile, ()) if r.instances]
        return [v for v in values if v is not None]

    def interference(self, index: int, what: str) -> Change | None:
        """Instance `index` inside the layout against its profile alone (None: not measured)."""
        profile = self.first.instances[index].profile
        if profile not in self.alone:
            return None
        return relative_change(self.instance_values(index, what), self.alone_values(profile, what))

    def gpu_subtotals(self, position: int) -> Summary | None:
        """The subtotal of the run's `position`-th GPU over the runs that finished."""
        values: list[float] = []
        for run in self.runs:
            rows = run.gpu_rows()
            subtotal = rows[position].subtotal if run.ok and position < len(rows) else None
            if subtotal is not None:
                values.append(subtotal)
        return summarize(values)

    def gpu_runs(self) -> Sequence[LayoutResult]:
        """The layout as one layout result per GPU (its instances, its layout), for what reads
        layouts of one GPU (the advisor)."""
        raise NotImplementedError

    def summary_row(self) -> dict[str, Any]:
        """The layout's row in tables of several layouts (sweeps)."""
        raise NotImplementedError

    def rows(self) -> list[dict[str, Any]]:
        return self.instance_rows()

    def instance_rows(self) -> list[dict[str, Any]]:
        """The per-instance table's rows, the total last."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """What its `index_file` holds."""
        raise NotImplementedError

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"


def _value(instance: InstanceRun, what: str) -> float | None:
    return instance.throughput if what == "throughput" else result_p99_ms(instance.performance)


@attrs.frozen(kw_only=True)
class RunResult(LayoutResult):
    """One run of one layout: the settings, every instance and the aggregate. As a
    LayoutResult it is a layout measured once: its `runs` are itself."""

    index_file: ClassVar[str] = RESULTS_FILE

    gpu: str
    layout: str
    system_id: str
    scenario: int | None
    partitioning: str  # "mig", "vgpu", "shared" or "emulated"
    mode: str  # "independent" or "unified"
    benchmark: str
    loadgen_scenario: str
    backend: str
    device: str
    precision: str
    variant: str
    preset: str
    synthetic_weights: bool
    synthetic_data: bool
    outdir: str
    settings_key: str
    started_at: str
    duration_s: float
    instances: tuple[InstanceRun, ...] = attrs.field(converter=tuple[InstanceRun, ...])
    layout_result: InstanceResult | None = None  # unified mode: the layout's one LoadGen result
    layout_accuracy: InstanceResult | None = None
    layout_status: str | None = None  # unified mode: how the LoadGen coordinator ended
    layout_error: str | None = None
    baseline_throughput: float | None = None
    baseline_source: str | None = None
    interrupted: bool = False
    hosts: tuple[str, ...] = attrs.field(default=(), converter=tuple[str, ...])
    # a run across Ray nodes: {"cluster", "nodes", "grouping", "start_skew_ms"}; None: one host
    cluster: dict[str, Any] | None = None
    # unified mode: the layout's compliance audits (independent mode: each InstanceRun's)
    layout_compliance: tuple[AuditVerdict, ...] = attrs.field(default=(), converter=_verdict_tuple)
    # the GPUs of the run: index, name, layout, partitioning, node, host, instances (names);
    # results.json adds each one's subtotal (see gpu_rows)
    gpus: tuple[RunGpu, ...] = attrs.field(default=(), converter=_run_gpus)
    # what fitting the instances into the host's memory changed (fewer samples per LoadGen)
    host_notes: tuple[str, ...] = attrs.field(default=(), converter=tuple[str, ...])
    # emulated: how the CPU budgets were enforced and where a proportion could not be kept
    emulation_notes: tuple[str, ...] = attrs.field(default=(), converter=tuple[str, ...])
    # what the sampler recorded (mlperf_mig/telemetry); None: telemetry=False or an older run
    telemetry: RunTelemetry | None = None

    # --- as a layout result ---------------------------------------------------------------------
    @property
    def runs(self) -> tuple[RunResult, ...]:
        return (self,)

    @property
    def baseline_totals(self) -> tuple[float, ...]:
        return (self.baseline_throughput,) if self.baseline_throughput else ()

    # --- aggregate -----------------------------------------------------------------------------
    @property
    def emulated(self) -> bool:
        return self.partitioning == "emulated"

    @property
    def throughput_unit(self) -> str:
        results = [self.layout_result, *(i.performance for i in self.instances)]
        units = [r.throughput_unit for r in results if r is not None]
        if units:
            return units[0]
        server = self.loadgen_scenario in ("Server", "Interactive")
        return "scheduled samples/s" if server else "samples/s"

    @property
    def total_throughput(self) -> float | None:
        """Unified: the layout's LoadGen result. Independent: the SUM over instances that ran."""
        if self.mode == "unified":
            return result_throughput(self.layout_result)
        values = [i.throughput for i in self.instances if i.throughput is not None]
        return sum(values) if values else None

    @property
    def all_valid(self) -> bool:
        """Every instance ran to the end and every LoadGen result is VALID."""
        if self.interrupted or not all(i.ok for i in self.instances):
            return False
        if self.mode == "unified":
            return self.layout_status == "ok" and bool(result_valid(self.layout_result))
        return all(i.valid for i in self.instances)

    @property
    def ok(self) -> bool:
        """Every worker ended normally (validity aside)."""
        statuses_ok = all(i.ok for i in self.instances) and not self.interrupted
        layout_ok = (
            self.layout_status == "ok"
            and result_error(self.layout_result, self.layout_accuracy) is None
        )
        return statuses_ok and (self.mode != "unified" or layout_ok)

    @property
    def invalid_by_design(self) -> bool:
        """Every worker finished and every INVALID result is a quick preset's short Offline run."""
        if not self.ok or self.all_valid:
            return False
        results = (
            [self.layout_result]
            if self.mode == "unified"
            else [i.performance for i in self.instances]
        )
        return all(r is not None and (r.valid or r.invalid_by_design) for r in results)

    @property
    def audits(self) -> tuple[AuditVerdict, ...]:
        """Every compliance verdict of the run (the layout's, then each instance's)."""
        return (*self.layout_compliance, *(v for i in self.instances for v in i.compliance))

    @property
    def compliance_passed(self) -> bool | None:
        """Whether every compliance audit passed: False when one failed, None when none ran or
        a short one was inconclusive (its noise exceeded its band) and none failed."""
        audits = self.audits
        if any(not v.passed and not v.inconclusive for v in audits):
            return False
        return None if not audits or any(v.inconclusive for v in audits) else True

    def _all_valid_word(self) -> str:
        if self.all_valid:
            return "yes"
        return BY_DESIGN_WORD if self.invalid_by_design else "NO"

    @property
    def metric_label(self) -> str:
        return SUM_LABEL if self.mode == "independent" else UNIFIED_LABEL

    @property
    def change_vs_baseline(self) -> float | None:
        """Relative change of the total throughput against scenario 1 (0.21 = +21%)."""
        total = self.total_throughput
        if total is None or not self.baseline_throughput:
            return None
        return total / self.baseline_throughput - 1.0

    @property
    def samples_per_joule(self) -> float | None:
        """Total throughput over the layout's mean power in the common timed window (GPU board
        energy, not wall power; the CPU package's for emulated runs where readable); None where
        no energy was measured."""
        return (
            None
            if self.telemetry is None
            else self.telemetry.samples_per_joule(self.total_throughput)
        )

    @property
    def tokens_per_second(self) -> float | None:
        """A generative workload's total tokens/s (Offline: generated; else completed): the
        unified LoadGen's, or the sum of the instances' own. None for a workload that answers
        samples, and where an instance measured none (a sum of some would read as the layout's)."""
        layout = self.layout_result
        if layout is not None and layout.tokens is not None:
            return layout.tokens.tokens_per_second
        return _sum_of_all([_own_tokens_per_second(i) for i in self.instances])

    @property
    def tokens_per_joule(self) -> float | None:
        """A generative workload's total tokens/s over the layout's mean power in the common
        timed window (as `samples_per_joule`); None without tokens or energy."""
        return None if self.telemetry is None else self.telemetry.per_joule(self.tokens_per_second)

    def utilisation(self, name: str) -> float | None:
        """Mean activity of instance `name` over the timed window, in % (see telemetry notes)."""
        found = None if self.telemetry is None else self.telemetry.instance(name)
        return None if found is None else found.util_mean_pct

    @property
    def multi_gpu(self) -> bool:
        """Whether the run's instances were slices of several GPUs."""
        return len(self.gpus) > 1

    def gpu_rows(self) -> list[RunGpu]:
        """Each GPU with its subtotal: independent, the sum of its instances' throughput;
        unified, the layout's result in proportion to the samples its instances served."""
        rows = []
        total, total_tokens = self.total_throughput, self.tokens_per_second
        served_all = sum(i.dispatched_samples or 0 for i in self.instances)
        for gpu in self.gpus:
            members = [i for i in self.instances if i.name in gpu.instances]
            if self.mode == "unified":
                served = sum(i.dispatched_samples or 0 for i in members)
                rows.append(
                    attrs.evolve(
                        gpu,
                        served_samples=served,
                        subtotal=_share(total, served, served_all),
                        tokens_per_second=_share(total_tokens, served, served_all),
                    )
                )
            else:
                values = [i.throughput for i in members if i.throughput is not None]
                rows.append(
                    attrs.evolve(
                        gpu,
                        served_samples=None,
                        subtotal=sum(values) if values else None,
                        tokens_per_second=_sum_of_all([_own_tokens_per_second(i) for i in members]),
                    )
                )
        return rows

    def gpu_runs(self) -> list[RunResult]:
        """An independent run of a whole system as one run per GPU (its instances, its layout),
        for what reads layouts of one GPU (the advisor); [self] for a layout on one GPU."""
        if not self.multi_gpu:
            return [self]
        if self.mode == "unified":
            raise SettingsError(
                f"{self.outdir!r} is a unified run of {len(self.gpus)} GPUs: one LoadGen result for "
                "all of them, none per GPU; run the system in independent mode to measure each GPU"
            )
        return [
            attrs.evolve(
                self,
                gpu=gpu.name,
                layout=gpu.layout,
                partitioning=gpu.partitioning or self.partitioning,
                instances=[i for i in self.instances if i.name in gpu.instances],
                gpus=(gpu,),
                outdir=f"{self.outdir} (GPU {gpu.index})",
                cluster=None,
            )
            for gpu in self.gpus
        ]

    def labels(self) -> list[str]:
        """The labels every report of this run carries."""
        labels = [self.metric_label]
        if self.emulated:
            labels.append(EMULATED_LABEL)
            labels.extend(self.emulation_notes)
            labels.extend(self._budget_shortfalls())
        if self.partitioning == "shared":
            labels.append(SHARED_LABEL)
        if self.partitioning == "vgpu":
            labels.append(VGPU_LABEL)
        if self.invalid_by_design:
            labels.append(BY_DESIGN_LABEL)
        labels.extend(self._invalid_notes())
        if self.synthetic_weights or self.synthetic_data:
            labels.append("synthetic weights/data: accuracy is not meaningful")
        if any(v.short for v in self.audits):
            labels.append(
                "compliance '(short)': quick-preset audits, shorter than the official 10-minute "
                "runs; preset='submission' runs them in full"
            )
        if any(
            i.performance and i.performance.target_source == "capacity cache"
            for i in self.instances
        ):
            labels.append(
                "Server target from the capacity cache (mlperf-mig capacity); --set target_qps overrides it"
            )
        measured = [self.layout_result, *(i.performance for i in self.instances)]
        if any(r is not None and r.target_source == "cached calibration" for r in measured):
            labels.append(
                "target from a cached calibration: measured by an earlier run with the same engine, "
                "settings and CPUs (the cache folder's calibration/; delete it to measure again)"
            )
        labels.extend(self.host_notes)
        if self.multi_gpu and self.mode == "unified":
            labels.append(
                "per-GPU subtotals of a unified run: the system's one result shared out by the "
                "samples each GPU's instances served"
            )
        if self.interrupted:
            labels.append("INTERRUPTED: incomplete")
        return labels

    def _invalid_notes(self) -> list[str]:
        """Why each INVALID LoadGen result is invalid, in LoadGen's words (a quick preset's short
        Offline run is explained once, by BY_DESIGN_LABEL)."""
        results = [("layout", self.layout_result)] + [
            (i.name, i.performance) for i in self.instances
        ]
        return [
            f"{name} valid NO: "
            + ("; ".join(r.invalid_reasons) or "LoadGen gave no reason (see its detail log)")
            for name, r in results
            if r is not None and not r.valid and not r.invalid_by_design
        ]

    def _budget_shortfalls(self) -> list[str]:
        """Emulated instances that used clearly less CPU than their budget: the machine was busy,
        so their throughput is low by about as much and the slice proportions are not kept."""
        short = [
            i
            for i in self.instances
            if i.cpu_share and i.cpu_used is not None and i.cpu_used < SHORTFALL * i.cpu_share
        ]
        if not short:
            return []
        return [
            "proportion not kept: "
            + ", ".join(
                f"{i.name} used {i.cpu_used:.2f} of its {i.cpu_share:.3g} CPU" for i in short
            )
            + " (other processes held the CPUs); run on a quieter machine or give fewer CPUs (cpus=)"
        ]

    def title(self) -> str:
        what = f"study scenario {self.scenario}: " if self.scenario is not None else ""
        where = f"{len(self.gpus)} GPUs ({self.gpu})" if self.multi_gpu else self.gpu
        where = f"{where} [emulated]" if self.emulated else where
        return (
            f"{self.benchmark} {scenario_words(self.loadgen_scenario)}, {what}MIG layout "
            f"{self.layout} on {where}, {self.mode} mode, backend {self.backend} ({self.device})"
        )

    def summary_row(self) -> dict[str, Any]:
        """One row for tables of several layouts (sweeps)."""
        change = self.change_vs_baseline
        return {
            "MIG scenario": self.scenario,
            "layout": self.layout,
            "partitioning": self.partitioning,
            "instances": len(self.instances),
            "total": self.total_throughput,
            "unit": self.throughput_unit,
            "all valid": self._all_valid_word(),
            "vs MIG scenario 1": None if change is None else f"x{1 + change:.3f}",
            "samples/J": self.samples_per_joule,
            "per GPU": gpu_subtotals_text(self.gpu_rows()) if self.multi_gpu else None,
        }

    def instance_rows(self) -> list[dict[str, Any]]:
        rows = [i.row() for i in self.instances]
        if self.multi_gpu:  # each GPU's instances, then its subtotal
            rows = []
            gpus = self.gpu_rows()
            nodes = list(dict.fromkeys(g.node for g in gpus))
            for gpu in gpus:
                rows += [i.row() for i in self.instances if i.name in gpu.instances]
                where = f"n{nodes.index(gpu.node)}-" if len(nodes) > 1 else ""
                rows.append(
                    {
                        "instance": f"{where}GPU {gpu.index} subtotal",
                        "gpu": gpu.index,
                        "host": gpu.host or "",
                        "profile": gpu.layout,
                        "throughput": gpu.subtotal,
                        "samples served": gpu.served_samples,
                        **(
                            {}
                            if gpu.tokens_per_second is None
                            else {"tokens/s": gpu.tokens_per_second}
                        ),
                    }
                )
        total_name = "layout (unified)" if self.mode == "unified" else "total (sum)"
        rows.append(
            {
                "instance": total_name,
                "status": "ok" if self.ok else "FAILED",
                "valid": self._all_valid_word(),
                "throughput": self.total_throughput,
                "p99 ms": result_p99_ms(self.layout_result),
                **self._total_token_cells(),
                "accuracy": accuracy_cell(self.layout_accuracy),
                "compliance": compliance_cell(self.layout_compliance),
                "error": self.layout_error
                or result_error(self.layout_result, self.layout_accuracy),
                "samples/J": self.samples_per_joule,
                **({} if self.tokens_per_joule is None else {"tokens/J": self.tokens_per_joule}),
            }
        )
        return self._with_telemetry(rows)

    def _total_token_cells(self) -> dict[str, float | None]:
        """The total row's token cells: `tokens_per_second`, with the unified LoadGen's
        latencies (a sum of the instances' latencies means nothing); {} without tokens."""
        if self.layout_result is not None and self.layout_result.tokens is not None:
            return token_cells(self.layout_result)
        total = self.tokens_per_second
        return {} if total is None else {"tokens/s": total}

    def token_notes(self) -> list[str]:
        """The TTFT/TPOT verdicts of runs held to token limits (Server, Interactive)."""
        verdicts = [token_verdicts(i.name, i.performance) for i in self.instances]
        verdicts.append(token_verdicts("layout (unified)", self.layout_result))
        found = [v for v in verdicts if v]
        return [f"{self.loadgen_scenario} token limits (p99): {'; '.join(found)}"] if found else []

    def _with_telemetry(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each instance's mean activity (`util %`) and each GPU subtotal's samples/J."""
        if self.telemetry is None:
            return rows
        names = {i.name for i in self.instances}
        for row in rows:
            if row.get("instance") in names:
                row["util %"] = self.utilisation(row["instance"])
            elif "gpu" in row and row.get("throughput") is not None:
                gpu = next((g for g in self.telemetry.gpus if g.index == row["gpu"]), None)
                window = self.telemetry.window
                if (
                    gpu is not None
                    and gpu.energy_j
                    and window is not None
                    and window.duration_s > 0
                ):
                    row["samples/J"] = row["throughput"] * window.duration_s / gpu.energy_j
                    if row.get("tokens/s") is not None:
                        row["tokens/J"] = row["tokens/s"] * window.duration_s / gpu.energy_j
        return rows

    def columns(self) -> list[str]:
        columns = ["instance", "profile", "device", "status", "valid", "throughput", "p99 ms"]
        if self.multi_gpu:
            columns.insert(1, "gpu")
        if self.cluster is not None:
            columns[1:1] = ["host", "node"]
        if self.mode == "unified":
            columns.insert(columns.index("p99 ms"), "samples served")
        rows = self.instance_rows()
        if self.telemetry is not None:
            columns.insert(columns.index("p99 ms"), "util %")
        for column in reversed(TOKEN_COLUMNS):
            if any(r.get(column) is not None for r in rows):
                columns.insert(columns.index("p99 ms") + 1, column)
        if any(r.get("samples/J") is not None for r in rows):
            columns.insert(columns.index("p99 ms"), "samples/J")
        if any(r.get("tokens/J") is not None for r in rows):
            columns.insert(columns.index("p99 ms"), "tokens/J")
        if any(r.get("accuracy") for r in rows):
            columns.append("accuracy")
        if any(r.get("compliance") for r in rows):
            columns.append("compliance")
        if any(r.get("error") for r in rows):
            columns.append("error")
        return columns

    def notes(self) -> list[str]:
        lines = [f"throughput in {self.throughput_unit}"]
        change = self.change_vs_baseline
        if change is not None:
            lines.append(
                f"change against MIG scenario 1 ({self.baseline_source}): x{1 + change:.3f} "
                "(ratio of the totals of one run each: the noise it rests on is not measured, so "
                "it is not called significant; repeats=3 measures it)"
            )
        return (
            lines
            + self.token_notes()
            + [f"note: {label}" for label in self.labels()]
            + self._cluster_notes()
            + self._telemetry_notes()
        )

    def _instance_telemetry(self, name: str) -> dict[str, Any]:
        """An instance's telemetry columns for to_pandas (empty without telemetry)."""
        found = None if self.telemetry is None else self.telemetry.instance(name)
        if found is None:
            return {}
        return {
            "util %": found.util_mean_pct,
            "util p95 %": found.util_p95_pct,
            "memory peak MiB": found.memory_peak_mib,
            "energy share J (estimate)": found.energy_share_j,
        }

    def _telemetry_notes(self) -> list[str]:
        """What util % and samples/J are, each GPU's energy and throttling, what was not measured."""
        t = self.telemetry
        if t is None:
            return []
        from mlperf_mig.telemetry.report import telemetry_lines

        lines = telemetry_lines(
            t,
            self.samples_per_joule,
            tokens_per_s=self.tokens_per_second,
            instance_tokens_per_s={
                i.name: token_cells(i.performance).get("tokens/s") for i in self.instances
            },
        )
        return [f"telemetry: {line}" for line in lines]

    def _cluster_notes(self) -> list[str]:
        """Where a cluster run's instances ran and how far apart their LoadGen tests started."""
        if self.cluster is None:
            return []
        c = self.cluster
        what = (
            f"{len(self.gpus)} GPUs" if self.multi_gpu else "one GPU"
        )  # a whole system: every GPU of every node
        lines = [
            f"note: ran on Ray cluster {c['cluster']} over {len(c['nodes'])} node(s); the instances "
            f"are slices of {what} by {c['grouping']} grouping"
        ]
        if c.get("start_skew_ms") is not None:
            lines.append(
                f"note: start skew across instances {c['start_skew_ms']:.1f} ms (the nodes' clocks)"
            )
        return lines

    # --- data ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self, recurse=False)
        data["instances"] = [i.to_dict() for i in self.instances]
        data["hosts"] = list(self.hosts)
        data["layout_result"] = _result_to(self.layout_result)
        data["layout_accuracy"] = _result_to(self.layout_accuracy)
        data["layout_compliance"] = [v.to_dict() for v in self.layout_compliance]
        data["gpus"] = [gpu.to_dict() for gpu in self.gpu_rows()]
        data["telemetry"] = None if self.telemetry is None else self.telemetry.to_dict()
        return {
            "schema": SCHEMA,
            **data,
            "aggregate": {
                "total_throughput": self.total_throughput,
                "unit": self.throughput_unit,
                "all_valid": self.all_valid,
                "change_vs_baseline": self.change_vs_baseline,
                "compliance_passed": self.compliance_passed,
                "samples_per_joule": self.samples_per_joule,
                "energy_label": None if self.telemetry is None else self.telemetry.energy_label,
                "labels": self.labels(),
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = RESULTS_FILE) -> RunResult:
        fields = {k: v for k, v in data.items() if k not in ("schema", "aggregate")}
        _check_names(fields, source)
        if "target" in fields:  # schema 1 named the partitioning "target"
            fields["partitioning"] = fields.pop("target")
        fields["instances"] = [InstanceRun.from_dict(i) for i in fields["instances"]]
        fields["layout_result"] = _result_from(fields.get("layout_result"))
        fields["layout_accuracy"] = _result_from(fields.get("layout_accuracy"))
        fields["layout_compliance"] = _verdicts_from(fields.get("layout_compliance"))
        fields["gpus"] = _gpus_from(fields.get("gpus", ()), source)
        notes = fields.get("host_notes", ())
        if not isinstance(notes, (list, tuple)) or not all(isinstance(n, str) for n in notes):
            raise UntrustedPathError(
                f"{source!r}: host_notes is not a list of texts; write the run again"
            )
        fields["telemetry"] = _telemetry_from(fields.get("telemetry"), source)
        notes = fields.get("emulation_notes", ())
        if not isinstance(notes, (list, tuple)) or not all(isinstance(n, str) for n in notes):
            raise UntrustedPathError(
                f"{source!r}: emulation_notes is not a list of texts; write the run again"
            )
        return cls(**fields)

    @classmethod
    def from_json(cls, text: str, source: str = RESULTS_FILE) -> RunResult:
        return cls.from_dict(json.loads(text), source)

    def save(self, folder: str | Path | None = None) -> Path:
        """Write results.json atomically into `folder` (default: the run's outdir)."""
        return atomic_write_json(Path(folder or self.outdir) / RESULTS_FILE, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunResult:
        """Read a run from its folder or its results.json."""
        file = Path(path)
        if file.is_dir():
            file = file / RESULTS_FILE
        try:
            data = read_json(
                file,
                "results",
                error=OutputDirError,
                fix="pass a run folder written by mlperf-mig run",
            )
            return cls.from_dict(data, str(file))
        except UntrustedPathError:
            raise
        except FileNotFoundError:
            raise OutputDirError(
                f"{str(file)!r} does not exist; pass a run folder written by mlperf-mig run"
            ) from None
        except (
            ValueError,
            KeyError,
            TypeError,
            AttributeError,
        ) as exc:  # JSON, missing or malformed fields
            reason = exc.args[0] if exc.args else exc  # attrs validators add more arguments
            raise OutputDirError(
                f"{str(file)!r} is not a results file of mlperf-mig ({reason})"
            ) from None

    def frame_rows(self) -> list[dict[str, Any]]:
        """to_pandas: one row per instance with the run's settings as columns. (`to_html()` is
        the run's table and notes as one page; the report with figures is `mlperf-mig report
        DIR --html FILE`, which also reads repeats and sweeps.)"""
        run_columns = {
            "gpu": self.gpu,
            "layout": self.layout,
            "scenario": self.scenario,
            "partitioning": self.partitioning,
            "mode": self.mode,
            "benchmark": self.benchmark,
            "loadgen_scenario": self.loadgen_scenario,
            "backend": self.backend,
            "total_throughput": self.total_throughput,
            "all_valid": self.all_valid,
            "samples_per_joule": self.samples_per_joule,
        }
        return [
            {**run_columns, **i.row(), **self._instance_telemetry(i.name)} for i in self.instances
        ]


PER_GPU_COLUMN = "per GPU"


def gpu_subtotals_text(rows: Sequence[RunGpu]) -> str:
    """Each GPU's subtotal in one cell: 'GPU 0 37,937; GPU 1 36,778' (node prefix on a cluster)."""
    nodes = list(dict.fromkeys(r.node for r in rows))

    def name(row: RunGpu) -> str:
        where = f"n{nodes.index(row.node)}-" if len(nodes) > 1 else ""
        return f"{where}GPU {row.index}"

    return "; ".join(f"{name(r)} {cell_text(r.subtotal)}" for r in rows)
