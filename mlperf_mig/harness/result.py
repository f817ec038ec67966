"""What one LoadGen test produced: InstanceResult (plain data, to_dict / from_dict)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

import attrs

from mlperf_mig.engines.backend import DeviceReport

MIN_DURATION_REASON = "min duration not met"
LOADGEN_OFFLINE_ADVICE = (
    "Increase expected QPS so the loadgen pre-generates a larger (coalesced) query."
)
QUICK_OFFLINE_REASON = (
    "min duration not met, by design of the quick preset: its Offline query holds a few seconds "
    "of work under mlperf.conf's 600 s minimum (preset='submission' runs the full 600 s)"
)


@attrs.frozen(kw_only=True)
class AccuracyReport:
    """Accuracy of an AccuracyOnly run, computed from mlperf_log_accuracy.json in our code.

    `meaningful` is False with synthetic weights or data: then `passed` is None and `note` says
    why, because a number from random weights or random inputs says nothing about the model.
    """

    metric: str  # "top1" (percent) or "f1" (percent)
    value: float | None  # None with synthetic data: there is no ground truth to compare with
    target: float
    meaningful: bool
    passed: bool | None
    sample_count: int
    extra: dict[str, float] = attrs.field(factory=dict)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AccuracyReport:
        return cls(**data)

    @property
    def basis(self) -> str:
        """What the value rests on: '64 samples', or '64 questions' for SQuAD F1 (which, as in
        the reference, averages over all the dataset's questions: '64 questions, 20 logged' when
        the log answers only some)."""
        unit = "question" if self.metric == "f1" else "sample"
        text = f"{self.sample_count} {unit}{'' if self.sample_count == 1 else 's'}"
        logged = self.extra.get("questions_logged")
        if logged is not None and logged < self.sample_count:
            text += f", {int(logged)} logged"
        return text

    def summary(self) -> str:
        """One line for tables: metric, value, target, verdict, and how many samples it rests on."""
        if self.value is None:
            return f"{self.metric} - on {self.basis} ({self.note})"
        text = f"{self.metric} {self.value:.3f} on {self.basis} (target {self.target:.3f})"
        if self.meaningful:
            return f"{text}: {'PASS' if self.passed else 'FAIL'}"
        return f"{text}: {self.note}"


@attrs.frozen(kw_only=True)
class TokenLatencies:
    """What a generative workload's test measured of its tokens, from LoadGen's detail log:
    tokens/s (Offline: generated; the other scenarios: completed), time to first token and time
    per output token (ns: percentiles "50.00".."99.90" and min/mean/max), and the p99 limits the
    run was held to (Server and Interactive; None without one)."""

    tokens_per_second: float | None
    ttft_ns: dict[str, int] = attrs.field(factory=dict)
    tpot_ns: dict[str, int] = attrs.field(factory=dict)
    ttft_limit_ns: int | None = None
    tpot_limit_ns: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TokenLatencies:
        return cls(**data)

    def verdict(self, which: str) -> bool | None:
        """p99 TTFT or TPOT ("ttft", "tpot") within its limit; None when there is no limit or
        no p99."""
        limit = self.ttft_limit_ns if which == "ttft" else self.tpot_limit_ns
        p99 = (self.ttft_ns if which == "ttft" else self.tpot_ns).get("99.00")
        if limit is None or p99 is None:
            return None
        return p99 <= limit


_FIRST_TOKEN = re.compile(r"^result_first_token_(\d+\.\d+_percentile|min|mean|max)_latency_ns$")
_PER_TOKEN = re.compile(
    r"^result_(?:time_per_output_token_(\d+\.\d+)_percentile_ns|time_to_output_token_(min|mean|max))$"
)


def token_latencies(records: Mapping[str, Any], loadgen_scenario: str) -> TokenLatencies | None:
    """The token figures of a detail log; None for a test without token latencies."""
    if records.get("requested_use_token_latencies") is not True:
        return None
    ttft: dict[str, int] = {}
    tpot: dict[str, int] = {}
    for key, value in records.items():
        first = _FIRST_TOKEN.match(key)
        if first:
            ttft[first.group(1).removesuffix("_percentile")] = int(value)
            continue
        per_token = _PER_TOKEN.match(key)
        if per_token:
            tpot[per_token.group(1) or per_token.group(2)] = int(value)
    rate_key = (
        "result_tokens_per_second"
        if loadgen_scenario == "Offline"
        else "result_completed_tokens_per_second"
    )
    server = loadgen_scenario == "Server"
    return TokenLatencies(
        tokens_per_second=_float(records.get(rate_key)),
        ttft_ns=ttft,
        tpot_ns=tpot,
        ttft_limit_ns=_int(records.get("requested_server_ttft_latency")) if server else None,
        tpot_limit_ns=_int(records.get("requested_server_tpot_latency")) if server else None,
    )


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@attrs.frozen(kw_only=True)
class InstanceResult:
    """The outcome of one LoadGen test in one process, parsed from mlperf_log_detail.txt.

    `throughput` is samples/s for Offline, the scheduled samples/s (= QPS) for Server, and derived
    from the metric latency for the stream scenarios; `throughput_unit` says which. `valid` is
    LoadGen's verdict, and False whenever the backend failed on any sample. `invalid_by_design`
    is True when the only reason for INVALID is the quick preset's short Offline query.
    """

    benchmark: str
    loadgen_scenario: str
    mode: str
    valid: bool
    validity: str  # LoadGen's result_validity; "" for accuracy runs, which have none
    invalid_reasons: tuple[str, ...] = attrs.field(converter=tuple[str, ...])
    throughput: float | None
    throughput_unit: str
    latency_ns: dict[str, int]
    effective_settings: dict[str, Any]
    device: DeviceReport
    log_dir: str
    user_conf: str
    target_source: str
    samples_completed: int
    failed_samples: int
    error: str | None
    synthetic_data: bool
    accuracy: AccuracyReport | None
    wall_s: float
    invalid_by_design: bool = False
    tokens: TokenLatencies | None = None  # a generative workload's token figures

    @property
    def failed(self) -> bool:
        return self.error is not None

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self, recurse=False)
        data["invalid_reasons"] = list(self.invalid_reasons)
        data["device"] = self.device.to_dict()
        data["accuracy"] = self.accuracy.to_dict() if self.accuracy else None
        if self.tokens is None:  # a workload that generates no tokens writes no token figures
            del data["tokens"]
        else:
            data["tokens"] = self.tokens.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InstanceResult:
        fields = dict(data)
        fields["device"] = DeviceReport(**fields["device"])
        if fields.get("accuracy") is not None:
            fields["accuracy"] = AccuracyReport.from_dict(fields["accuracy"])
        if fields.get("tokens") is not None:
            fields["tokens"] = TokenLatencies.from_dict(fields["tokens"])
        return cls(**fields)


_PERCENTILE = re.compile(r"^result_(\d+\.\d+)_percentile(_per_query)?_latency_ns$")


def latencies(records: Mapping[str, Any], loadgen_scenario: str) -> dict[str, int]:
    """Latency percentiles and min/mean/max (ns); MultiStream reports per-query latencies."""
    per_query = loadgen_scenario == "MultiStream"
    result: dict[str, int] = {}
    for key, value in records.items():
        match = _PERCENTILE.match(key)
        if match and bool(match.group(2)) == per_query:
            result[match.group(1)] = int(value)
    infix = "_query" if per_query else ""
    for name in ("min", "mean", "max"):
        value = records.get(f"result_{name}{infix}_latency_ns")
        if value is not None:
            result[name] = int(value)
    return result


def throughput(records: Mapping[str, Any], loadgen_scenario: str) -> tuple[float | None, str]:
    """The scenario's throughput and its unit."""
    if loadgen_scenario == "Offline":
        return _float(records.get("result_samples_per_second")), "samples/s"
    if loadgen_scenario == "Server":
        return _float(records.get("result_scheduled_samples_per_sec")), "scheduled samples/s"
    if loadgen_scenario == "SingleStream":
        p90 = records.get("result_90.00_percentile_latency_ns")
        return (1e9 / p90 if p90 else None), "samples/s (1 / p90 latency)"
    per_query = int(records.get("effective_samples_per_query") or 8)
    p99 = records.get("result_99.00_percentile_per_query_latency_ns")
    return (per_query * 1e9 / p99 if p99 else None), f"samples/s ({per_query} / p99 query latency)"


def _float(value: float | str | None) -> float | None:
    return None if value is None else float(value)


def invalid_reasons(records: Mapping[str, Any]) -> list[str]:
    """LoadGen's reasons for INVALID, in words, plus the errors it logged."""
    reasons = []
    if records.get("result_min_duration_met") is False:
        reasons.append(MIN_DURATION_REASON)
    if records.get("result_min_queries_met") is False:
        reasons.append("min query count not met")
    if records.get("early_stopping_met") is False:
        reasons.append("early stopping condition not met")
    for which in ("ttft", "tpot"):
        text = " ".join(str(records.get(f"early_stopping_{which}_result") or "").split())
        if "unsuccessful" in text:
            reasons.append(f"{which.upper()} early stopping: {text.lstrip('* ')}")
    reason = str(records.get("result_invalid_reason") or "").strip()
    if reason:
        reasons.append(reason)
    # an error LoadGen logs once per sample (an empty completion's) is said once, with its count
    for error, count in Counter(records.get("errors", ())).items():
        reasons.append(error if count == 1 else f"{error} ({count} times)")
    return reasons


def effective_settings(records: Mapping[str, Any]) -> dict[str, Any]:
    """The `effective_*` settings LoadGen ran with, without the prefix."""
    prefix = "effective_"
    return {k[len(prefix) :]: v for k, v in records.items() if k.startswith(prefix)}
