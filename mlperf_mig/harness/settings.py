"""LoadGen settings: presets as data, user overrides, a generated user.conf, and its read-back.

LoadGen's user.conf parser has traps (reference/mlperf.md section 1, traps 2-4): `key=value`
without spaces and unknown keys are silently ignored, a trailing comment rejects the whole file,
unknown model names fall back to wildcard defaults, and the Server `target_latency` is parsed as
an integer. So the harness never hands LoadGen a file it did not write: it resolves every source
(preset, per-profile target, the user's user.conf, keyword overrides) into one mapping, checks it
here, writes it as `model.Scenario.key = value` lines, checks FromConfig's return code and reads
every value back from the TestSettings object.

Whatever the source of a value (preset, target table, user.conf, override, capacity cache,
calibration), the merged values pass one range check (`check_ranges`) before LoadGen sees them:
LoadGen builds every query of a test before it issues the first, so a target of 0 (an endless
schedule) or one that asks for more queries than this machine's memory holds would exhaust it.
"""

from __future__ import annotations

import logging
import math
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from mlperf_mig._checks import is_number
from mlperf_mig._paths import data_dir, optional_path_text
from mlperf_mig.errors import DataFileError, SettingsError
from mlperf_mig.workloads import Workload, workloads
from mlperf_mig.workloads.generation import MIN_NEW_TOKENS
from mlperf_mig.workloads.workload import INTERACTIVE

logger = logging.getLogger(__name__)

# mlperf_loadgen ships no type information; these names say which of its objects a signature takes.
LoadGenModule = Any  # the mlperf_loadgen module (imported where a test runs, never at module top)
LoadGenTestSettings = Any  # an lg.TestSettings

LOADGEN_SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")
# What a user may ask a run for: LoadGen's scenarios, and MLPerf's Interactive (a Server test
# under the workload's interactive conf model name; Workload.run_as)
MLPERF_SCENARIOS = (*LOADGEN_SCENARIOS, INTERACTIVE)
PRESETS = ("quick", "submission")
TARGET_KEYS = {
    "Offline": "target_qps",
    "Server": "target_qps",
    "SingleStream": "target_latency",
    "MultiStream": "target_latency",
}
OFFICIAL_MIN_DURATION_MS = 600_000  # mlperf.conf's min duration, where no setting changes it


@attrs.frozen(kw_only=True)
class ConfKey:
    """A user.conf key: the TestSettings attribute it sets, the unit factor and the value type."""

    attribute: str
    scale: float = 1.0
    integer: bool = True


_COMMON_KEYS = {
    "min_duration": ConfKey(attribute="min_duration_ms"),
    "max_duration": ConfKey(attribute="max_duration_ms"),
    "min_query_count": ConfKey(attribute="min_query_count"),
    "max_query_count": ConfKey(attribute="max_query_count"),
    "performance_sample_count_override": ConfKey(attribute="performance_sample_count_override"),
    "accuracy_sample_count_override": ConfKey(attribute="accuracy_sample_count_override"),
}
_SCENARIO_KEYS = {
    "Offline": {"target_qps": ConfKey(attribute="offline_expected_qps", integer=False)},
    "Server": {
        "target_qps": ConfKey(attribute="server_target_qps", integer=False),
        # LoadGen parses the Server latency with strtoull: 0.5 ms would silently become 0.
        "target_latency": ConfKey(attribute="server_target_latency_ns", scale=1e6),
        "target_latency_percentile": ConfKey(
            attribute="server_target_latency_percentile", scale=0.01, integer=False
        ),
    },
    "SingleStream": {
        "target_latency": ConfKey(
            attribute="single_stream_expected_latency_ns", scale=1e6, integer=False
        ),
        "target_latency_percentile": ConfKey(
            attribute="single_stream_target_latency_percentile", scale=0.01, integer=False
        ),
    },
    "MultiStream": {
        "target_latency": ConfKey(
            attribute="multi_stream_expected_latency_ns", scale=1e6, integer=False
        ),
        "samples_per_query": ConfKey(attribute="multi_stream_samples_per_query"),
        "target_latency_percentile": ConfKey(
            attribute="multi_stream_target_latency_percentile", scale=0.01, integer=False
        ),
    },
}


def conf_keys(loadgen_scenario: str) -> dict[str, ConfKey]:
    """Return the user.conf keys that apply to `loadgen_scenario`."""
    return {**_COMMON_KEYS, **_SCENARIO_KEYS[loadgen_scenario]}


def _all_key_names() -> list[str]:
    names = set(_COMMON_KEYS)
    for keys in _SCENARIO_KEYS.values():
        names.update(keys)
    return sorted(names)


def normalize_loadgen_scenario(name: str) -> str:
    """Return the canonical LoadGen scenario name ('offline' -> 'Offline')."""
    for scenario in LOADGEN_SCENARIOS:
        if name.strip().lower() == scenario.lower():
            return scenario
    raise SettingsError(
        f"unknown LoadGen scenario {name!r}; expected one of {', '.join(LOADGEN_SCENARIOS)} "
        "(the MIG layout is chosen with scenario=1-8, not here)"
    )


def normalize_scenario(name: str) -> str:
    """The canonical name of the MLPerf scenario a user asks for ('interactive' ->
    'Interactive'): one of LoadGen's, or Interactive, which the workload runs as a Server test."""
    for scenario in MLPERF_SCENARIOS:
        if name.strip().lower() == scenario.lower():
            return scenario
    raise SettingsError(
        f"unknown LoadGen scenario {name!r}; expected one of {', '.join(MLPERF_SCENARIOS)} "
        "(the MIG layout is chosen with scenario=1-8, not here)"
    )


def _convert_overrides(
    value: Mapping[str, float] | tuple[tuple[str, float], ...] | None,
) -> tuple[tuple[str, float], ...]:
    items = value.items() if isinstance(value, Mapping) else (value or ())
    return tuple(sorted((str(k), v) for k, v in items))


def _check_preset(instance: object, attribute: attrs.Attribute, value: str) -> None:
    if value not in PRESETS:
        raise SettingsError(f"unknown preset {value!r}; expected one of {', '.join(PRESETS)}")


@attrs.frozen(kw_only=True)
class SettingsSpec:
    """Which LoadGen settings a run uses: a preset, keyword overrides and an optional user.conf.

    `overrides` maps user.conf keys (`min_duration`, `target_qps`, `target_latency`,
    `performance_sample_count_override`, ...) to values in user.conf units (ms for durations
    and latencies). `profile` ("2g.20gb", "7g", or None for CPU) picks the per-profile target.
    """

    preset: str = attrs.field(default="quick", validator=_check_preset)
    overrides: tuple[tuple[str, float], ...] = attrs.field(
        factory=tuple, converter=_convert_overrides
    )
    user_conf: str | None = attrs.field(default=None, converter=optional_path_text)
    profile: str | None = None
    # where the target among `overrides` came from when the user did not set it (the capacity
    # cache's file and entry); None: an override is the user's
    target_from: str | None = None

    def override_dict(self) -> dict[str, float]:
        return dict(self.overrides)


CALIBRATED = ("calibration", "cached calibration")  # target sources of a measured target


@attrs.frozen(kw_only=True)
class ResolvedSettings:
    """The user.conf values of one run (model and LoadGen scenario fixed) and their origin."""

    benchmark: str
    conf_model: str
    loadgen_scenario: str
    values: dict[str, float]
    # "override", "capacity cache", "user.conf", "profile <key>", "calibration" or
    # "cached calibration" (harness/reuse.py: measured by an earlier run with the same inputs)
    target_source: str

    def conf_text(self) -> str:
        """The user.conf text: one `model.Scenario.key = value` line per value, no comments."""
        lines = [
            f"{self.conf_model}.{self.loadgen_scenario}.{key} = {_format_value(key, value, self.loadgen_scenario)}"
            for key, value in self.values.items()
        ]
        return "\n".join(lines) + "\n"


def _format_value(key: str, value: float, loadgen_scenario: str) -> str:
    if conf_keys(loadgen_scenario)[key].integer:
        return str(int(value))
    return repr(float(value))


def _check_value(key: str, value: object, loadgen_scenario: str, origin: str) -> float:
    keys = conf_keys(loadgen_scenario)
    if key == MAX_TOKENS:
        raise SettingsError(
            f"{origin}: max_tokens is not a LoadGen setting; pass it with --set max_tokens=N"
        )
    if key not in keys:
        if key in _all_key_names():
            raise SettingsError(
                f"{origin}: {key!r} does not apply to the {loadgen_scenario} LoadGen scenario; "
                f"keys for it: {', '.join(sorted(keys))}"
            )
        raise SettingsError(
            f"{origin}: unknown LoadGen setting {key!r} (LoadGen would ignore it silently); "
            f"known keys: {', '.join(_all_key_names())}"
        )
    if not is_number(value):
        raise SettingsError(f"{origin}: {key} must be a finite number, got {value!r}")
    if value < 0:
        raise SettingsError(f"{origin}: {key} must not be negative, got {value!r}")
    if keys[key].integer and value != int(value):
        raise SettingsError(
            f"{origin}: {key} must be a whole number for {loadgen_scenario} "
            f"(LoadGen truncates {value!r} to {int(value)}); got {value!r}"
        )
    return value


# --- presets and targets (data files) ----------------------------------------------------------
def _shown_settings_path(path: Path) -> str:
    """A shipped settings file as `harness/<name>.toml`, another (a workload's own) whole."""
    return f"harness/{path.name}" if path.parent == data_dir("harness") else str(path)


def load_settings_data(benchmark: Workload) -> dict[str, Any]:
    """Return the parsed settings file of the workload (`harness/<name>.toml`)."""
    path = benchmark.settings_path()
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise DataFileError(f"cannot read harness settings {str(path)!r}: {exc}") from None


def preset_values(data: Mapping[str, Any], preset: str, loadgen_scenario: str) -> dict[str, float]:
    """Return the preset's values for one LoadGen scenario ('all' first, then the scenario)."""
    table = data.get("presets", {}).get(preset)
    if table is None:
        raise DataFileError(f"harness settings have no preset {preset!r}")
    values = {**table.get("all", {}), **table.get(loadgen_scenario, {})}
    return {
        key: _check_value(key, value, loadgen_scenario, f"preset {preset!r}")
        for key, value in values.items()
    }


def preset_calibrates(data: Mapping[str, Any], preset: str) -> bool:
    return bool(data["presets"][preset].get("calibrate", False))


def profile_key(profile: str | None) -> str:
    """'2g.20gb' -> '2g'; None or 'cpu' -> 'cpu'; a whole GPU is '7g'."""
    if profile is None or profile.lower() == "cpu":
        return "cpu"
    return profile.lower().split(".")[0].split("+")[0]


def profile_target(data: Mapping[str, Any], loadgen_scenario: str, profile: str | None) -> float:
    """Return the per-profile target (QPS, or latency in ms) of the data file."""
    key = profile_key(profile)
    table = data.get("targets", {}).get(loadgen_scenario, {})
    if key not in table:
        raise SettingsError(
            f"no {loadgen_scenario} target for profile {profile!r} (key {key!r}); known: "
            f"{', '.join(table)}; pass {TARGET_KEYS[loadgen_scenario]} as an override"
        )
    return float(table[key])


# --- user.conf files given by the user ---------------------------------------------------------
def read_user_conf(
    path: str | os.PathLike[str], conf_model: str, loadgen_scenario: str
) -> dict[str, float]:
    """Return the values of a user.conf that apply to this model and LoadGen scenario.

    Lines LoadGen would silently ignore or that would make it reject the file raise
    SettingsError naming the line. Exact `model.Scenario.key` lines beat wildcard ones, as in
    LoadGen.
    """
    conf = Path(path)
    try:
        text = conf.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(f"cannot read user.conf {str(conf)!r}: {exc.strerror or exc}") from None
    ranked: dict[str, tuple[int, float]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        parsed = _parse_conf_line(line, f"{conf}:{number}")
        if parsed is None:
            continue
        model, scenario, key, value = parsed
        if model not in (conf_model, "*") or scenario not in (loadgen_scenario, "*"):
            continue
        origin = f"{conf}:{number}"
        rank = (model != "*") * 2 + (scenario != "*")
        if key in ranked and ranked[key][0] > rank:
            continue
        ranked[key] = (rank, _check_value(key, value, loadgen_scenario, origin))
    return {key: value for key, (_, value) in ranked.items()}


def _parse_conf_line(line: str, origin: str) -> tuple[str, str, str, float] | None:
    tokens = line.split()
    if not tokens or tokens[0].startswith("#"):
        return None
    if len(tokens) != 3 or tokens[1] != "=":
        if any("#" in t for t in tokens[1:]):
            raise SettingsError(
                f"{origin}: trailing comment {line.strip()!r}; LoadGen rejects the whole file "
                "(return code -22): put comments on their own line"
            )
        raise SettingsError(
            f"{origin}: {line.strip()!r} is not 'model.Scenario.key = value' with spaces around "
            "'='; LoadGen silently ignores such lines"
        )
    parts = tokens[0].split(".")
    if len(parts) != 3:
        raise SettingsError(f"{origin}: key {tokens[0]!r} is not 'model.Scenario.key'")
    model, scenario, key = parts
    conf_models = tuple(name for w in workloads() for name in w.conf_model_names())
    if model not in (*conf_models, "*"):
        raise SettingsError(
            f"{origin}: model {model!r} is not one LoadGen knows here (it would fall back to "
            f"wildcard defaults); use one of {', '.join(conf_models)} or '*'"
        )
    if scenario == INTERACTIVE:
        raise SettingsError(
            f"{origin}: LoadGen has no Interactive scenario (it would ignore the line); an "
            "Interactive run reads the Server lines of the interactive model name, e.g. "
            "llama3_1-8b-interactive.Server.target_qps"
        )
    if scenario not in (*LOADGEN_SCENARIOS, "*"):
        raise SettingsError(
            f"{origin}: LoadGen scenario {scenario!r} unknown; use one of "
            f"{', '.join(LOADGEN_SCENARIOS)} or '*'"
        )
    try:
        value = float(tokens[2])
    except ValueError:
        raise SettingsError(f"{origin}: value {tokens[2]!r} is not a number") from None
    return model, scenario, key, int(value) if value.is_integer() else value


# --- resolution --------------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class MergedSettings:
    """A test's settings read once: the preset, the user.conf and the overrides, with the choice
    of the target (QPS or latency) left to `resolve`, which may get a measured one."""

    benchmark: Workload
    loadgen_scenario: str
    spec: SettingsSpec
    data: Mapping[str, Any]
    preset_values: Mapping[str, float]
    from_file: Mapping[str, float]
    overrides: Mapping[str, float]
    # a generative workload's new tokens per request (`--set max_tokens=N`); None: its longest
    max_tokens: int | None = None

    @property
    def new_tokens(self) -> int:
        """The most tokens a request generates (a generative workload's)."""
        return self.max_tokens if self.max_tokens is not None else self.benchmark.response.shape[0]

    def _origins(self, target_source: str) -> dict[str, Origin]:
        """Where each value of `resolve` came from, and how to change it."""
        target_key = TARGET_KEYS[self.loadgen_scenario]
        data_file = _shown_settings_path(self.benchmark.settings_path())
        origins = {
            key: Origin(
                f"preset {self.spec.preset!r} of {data_file}", f"pass --set {key}=... to replace it"
            )
            for key in self.preset_values
        }
        origins.update(
            (key, Origin(f"user.conf {self.spec.user_conf!r} ({key} line)", "edit that line"))
            for key in self.from_file
        )
        origins.update(
            (key, Origin(f"setting {key} (--set / settings=)", f"pass another {key}"))
            for key in self.overrides
        )
        if target_source == "capacity cache":
            origins[target_key] = Origin(
                str(self.spec.target_from),
                "run `mlperf-mig capacity` for this profile again, or pass --set target_qps=...",
            )
        elif target_source == "calibration":
            origins[target_key] = Origin(
                "the target measured by calibration (the quick preset's warm-up)",
                f"pass --set {target_key}=...",
            )
        elif target_source == "cached calibration":
            origins[target_key] = Origin(
                "the target an earlier run measured by calibration, from the cache folder's "
                "calibration/",
                f"pass --set {target_key}=..., or delete that folder to measure again",
            )
        elif target_source.startswith("profile "):
            origins[target_key] = Origin(
                f"the {self.loadgen_scenario} target of {target_source} in {data_file}",
                f"pass --set {target_key}=...",
            )
        return origins

    @property
    def values(self) -> dict[str, float]:
        """Every value but the target's (unless the user.conf or an override sets it)."""
        return {**self.preset_values, **self.from_file, **self.overrides}

    @property
    def calibrates(self) -> bool:
        """True when the preset measures the target and neither an override nor user.conf sets it."""
        target_key = TARGET_KEYS[self.loadgen_scenario]
        return (
            preset_calibrates(self.data, self.spec.preset)
            and target_key not in self.overrides
            and target_key not in self.from_file
        )

    def resolve(
        self, calibrated_target: float | None = None, *, cached: bool = False
    ) -> ResolvedSettings:
        """The user.conf values: preset, target, user.conf and overrides, in that order of
        precedence; `calibrated_target` stands for the profile's target where nothing sets one
        (`cached`: an earlier run measured it, harness/reuse.py)."""
        values = dict(self.preset_values)
        loadgen_scenario = self.loadgen_scenario
        target_key = TARGET_KEYS[loadgen_scenario]
        if target_key in self.overrides:
            source = "capacity cache" if self.spec.target_from else "override"
        elif target_key in self.from_file:
            source = "user.conf"
        elif calibrated_target is not None:
            source = "cached calibration" if cached else "calibration"
        else:
            values[target_key] = profile_target(self.data, loadgen_scenario, self.spec.profile)
            source = f"profile {profile_key(self.spec.profile)}"
        values.update(self.from_file)
        values.update(self.overrides)
        if source in CALIBRATED:
            assert calibrated_target is not None
            if loadgen_scenario == "Offline":
                calibrated_target *= offline_query_fraction(self.data, self.spec.preset, values)
            values[target_key] = _rounded_target(target_key, calibrated_target, loadgen_scenario)
        check_ranges(values, loadgen_scenario, self._origins(source))
        return ResolvedSettings(
            benchmark=self.benchmark.name,
            conf_model=self.benchmark.conf_model_name,
            loadgen_scenario=loadgen_scenario,
            values=values,
            target_source=source,
        )


def merge_settings(
    spec: SettingsSpec, benchmark: Workload, loadgen_scenario: str, *, whole_dataset: bool = False
) -> MergedSettings:
    """Read a test's settings once (the settings data, the user.conf) and check the overrides.

    `whole_dataset`: the samples are a real dataset, whose accuracy run scores every sample;
    the preset's accuracy sample count (the quick preset's 64, for synthetic samples) is dropped,
    while a user.conf or override may still set one.
    """
    data = load_settings_data(benchmark)
    values = preset_values(data, spec.preset, loadgen_scenario)
    if whole_dataset:
        values.pop("accuracy_sample_count_override", None)
    from_file = (
        read_user_conf(spec.user_conf, benchmark.conf_model_name, loadgen_scenario)
        if spec.user_conf
        else {}
    )
    raw = spec.override_dict()
    max_tokens = raw.pop(MAX_TOKENS, None)
    overrides = {
        key: _check_value(key, value, loadgen_scenario, "override") for key, value in raw.items()
    }
    return MergedSettings(
        benchmark=benchmark,
        loadgen_scenario=loadgen_scenario,
        spec=spec,
        data=data,
        preset_values=values,
        from_file=from_file,
        overrides=overrides,
        max_tokens=None if max_tokens is None else checked_max_tokens(benchmark, max_tokens),
    )


MAX_TOKENS = "max_tokens"  # not a LoadGen key: the generator's limit of new tokens per request


def checked_max_tokens(benchmark: Workload, value: object) -> int:
    """`--set max_tokens=N` of a generative workload: a whole number from MIN_NEW_TOKENS to the
    workload's longest output (MLPerf's 128 for llama3.1-8b)."""
    if not benchmark.generates_tokens:
        raise SettingsError(
            f"override: max_tokens limits generated tokens; {benchmark.name} generates none "
            "(drop --set max_tokens)"
        )
    longest = benchmark.response.shape[0]
    if not is_number(value) or value != int(value) or not MIN_NEW_TOKENS <= value <= longest:
        raise SettingsError(
            f"override: max_tokens must be a whole number from {MIN_NEW_TOKENS} (LoadGen's "
            f"time per output token needs 2 tokens) to {longest} (the {benchmark.name} "
            f"benchmark's limit); got {value!r}"
        )
    return int(value)


def resolve_settings(
    spec: SettingsSpec,
    benchmark: Workload,
    loadgen_scenario: str,
    *,
    calibrated_target: float | None = None,
    whole_dataset: bool = False,
) -> ResolvedSettings:
    """Merge preset, target, user.conf and overrides (in that order of precedence); see
    `merge_settings` and `MergedSettings.resolve`."""
    merged = merge_settings(spec, benchmark, loadgen_scenario, whole_dataset=whole_dataset)
    return merged.resolve(calibrated_target)


def _min_duration_s(values: Mapping[str, float]) -> float:
    return float(values.get("min_duration", OFFICIAL_MIN_DURATION_MS)) / 1000.0


def offline_query_fraction(
    data: Mapping[str, Any], preset: str, values: Mapping[str, float]
) -> float:
    """How much of min_duration the preset's Offline query lasts (1.0: all of it).

    The quick preset keeps mlperf.conf's 600 s minimum and sample count in the log, so that a
    quick run can go into an open-division submission tree, but sizes its single Offline query
    to about `offline_query_s` seconds of work: LoadGen then marks it INVALID for its duration,
    which is the truth about a short run, and the throughput is still measured.
    """
    query_s = data["presets"][preset].get("offline_query_s")
    if query_s is None:
        return 1.0
    return min(1.0, float(query_s) / _min_duration_s(values))


def expected_test_seconds(
    benchmark: Workload, loadgen_scenario: str, preset: str, overrides: Mapping[str, float]
) -> float:
    """About how long the timed part of a LoadGen test lasts under these settings."""
    data = load_settings_data(benchmark)
    values = {**preset_values(data, preset, loadgen_scenario), **overrides}
    seconds = _min_duration_s(values)
    if loadgen_scenario == "Offline":
        seconds *= offline_query_fraction(data, preset, values)
    return seconds


def _rounded_target(key: str, value: float, loadgen_scenario: str) -> float:
    if conf_keys(loadgen_scenario)[key].integer:
        return max(1, round(value))
    return float(f"{value:.4g}")


def needs_calibration(spec: SettingsSpec, benchmark: Workload, loadgen_scenario: str) -> bool:
    """True when the preset measures the target and neither an override nor user.conf sets it."""
    return merge_settings(spec, benchmark, loadgen_scenario).calibrates


# --- the range check ---------------------------------------------------------------------------
LOADGEN_INT_MAX = 2**63 - 1  # LoadGen keeps durations and latencies as int64 nanoseconds
NS_PER_MS = 1_000_000
# What one sample of a generated query costs while LoadGen holds the whole test's queries
# (measured with LoadGen 6.0.17 and a Python SUT: 316 B a Server query, 417 B an Offline sample).
BYTES_PER_QUEUED_SAMPLE = 420
QUEUE_MEMORY_SHARE = 0.5  # of this machine's memory, for the queries of one LoadGen test
OFFLINE_SLACK = 1.1  # LoadGen's kSlack: its Offline query holds 1.1 x min_duration of samples
GENERATED_DURATIONS = 2  # outside Server LoadGen generates queries for twice min_duration


@attrs.frozen
class Origin:
    """Where a setting came from (a preset, a file, the user, a cache) and how to change it."""

    what: str
    fix: str


def machine_memory_bytes() -> int:
    """This machine's memory, or the memory limit of the control group it runs in if lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text.isascii() and text.isdigit():
            total = min(total, int(text))
    return total


def queued_samples(values: Mapping[str, float], loadgen_scenario: str) -> tuple[float, str]:
    """How many samples LoadGen generates (and holds) before it issues the first query of a
    performance test, and which term decides it: "target" or "min_query_count".

    Server: max(min_query_count, target_qps x min_duration); Offline: one query of
    max(min_query_count, 1.1 x min_duration x target_qps) samples; SingleStream and MultiStream:
    max(min_query_count, 2 x min_duration / target_latency) queries (of samples_per_query).
    """
    duration_s = _min_duration_s(values)
    count = float(values.get("min_query_count", 1))
    target = values.get(TARGET_KEYS[loadgen_scenario])
    if target is None or target <= 0:
        by_target = 0.0
    elif loadgen_scenario == "Server":
        by_target = target * duration_s
    elif loadgen_scenario == "Offline":
        by_target = OFFLINE_SLACK * duration_s * target
    else:
        by_target = GENERATED_DURATIONS * duration_s * 1000.0 / target
    per_query = (
        float(values.get("samples_per_query", 8)) if loadgen_scenario == "MultiStream" else 1.0
    )
    decided_by = "target" if by_target >= count else "min_query_count"
    return max(count, by_target) * per_query, decided_by


def _origin_of(origins: Mapping[str, Origin], key: str) -> Origin:
    if key in origins:
        return origins[key]
    if key == "min_duration":
        return Origin("mlperf.conf's default of 600000 ms", "pass --set min_duration=...")
    return Origin(f"LoadGen setting {key}", f"pass --set {key}=...")


def check_ranges(
    values: Mapping[str, float], loadgen_scenario: str, origins: Mapping[str, Origin]
) -> None:
    """Refuse settings LoadGen cannot run within this machine, naming where they came from.

    Targets must be positive (a Server target of 0 is an endless Poisson schedule: LoadGen
    generates queries until memory runs out); a Server target must schedule a query at least
    once per min_duration (or per second, if that is shorter), else LoadGen waits far past the
    run's end; latency percentiles lie strictly between 0 and 100 (LoadGen indexes its sorted
    latencies with them); durations and latencies fit LoadGen's int64 nanoseconds; and the
    queries LoadGen builds before issuing the first must fit in half this machine's memory.
    """

    def refuse(key: str, problem: str) -> SettingsError:
        origin = _origin_of(origins, key)
        return SettingsError(f"{origin.what}: {key} = {values[key]!r} {problem}; {origin.fix}")

    target_key = TARGET_KEYS[loadgen_scenario]
    for key, value in values.items():
        if key in ("target_qps", "target_latency") and value <= 0:
            why = (
                "never ends LoadGen's Poisson schedule (it would generate queries until memory runs out)"
                if key == "target_qps" and loadgen_scenario == "Server"
                else "is not a usable target (LoadGen sizes the test's queries from it)"
            )
            raise refuse(key, f"{why}: it must be positive")
        if key == "target_latency_percentile" and not 0 < value < 100:
            raise refuse(
                key,
                "must lie strictly between 0 and 100 (LoadGen indexes its sorted latencies with it)",
            )
        if key == "samples_per_query" and value < 1:
            raise refuse(key, "must be at least 1")
        if (
            key in ("min_duration", "max_duration", "target_latency")
            and value * NS_PER_MS > LOADGEN_INT_MAX
        ):
            raise refuse(
                key,
                f"ms is beyond LoadGen's 64-bit range (it keeps nanoseconds): pass at most {LOADGEN_INT_MAX // NS_PER_MS} ms",
            )
    duration_s = _min_duration_s(values)
    if loadgen_scenario == "Server" and target_key in values:
        slowest = 1.0 / max(duration_s, 1.0)
        if values[target_key] < slowest:
            duration = _origin_of(origins, "min_duration").what
            raise refuse(
                target_key,
                f"schedules a Server query every {1 / values[target_key]:.3g} s on average, fewer than "
                f"one per min_duration ({duration_s:g} s, {duration}) or per second; LoadGen would "
                f"wait for queries long after the run should end: it must be at least {slowest:.3g}",
            )
    samples, decided_by = queued_samples(values, loadgen_scenario)
    memory = machine_memory_bytes()
    most = memory * QUEUE_MEMORY_SHARE / BYTES_PER_QUEUED_SAMPLE
    if samples > most:
        key = target_key if decided_by == "target" and target_key in values else "min_query_count"
        duration = _origin_of(origins, "min_duration").what
        change = f"raise {key}" if key == "target_latency" else f"lower {key}"
        raise refuse(
            key,
            f"with min_duration {duration_s * 1000:g} ms ({duration}) makes LoadGen build "
            f"{samples:.3g} samples of queries before it issues the first (about "
            f"{samples * BYTES_PER_QUEUED_SAMPLE / 2**30:.3g} GiB at {BYTES_PER_QUEUED_SAMPLE} B "
            f"each); half of this machine's {memory / 2**30:.1f} GiB holds at most {most:.3g}: "
            f"{change} or lower min_duration",
        )


def check_concurrent_queues(samples: float, tests: int) -> None:
    """Refuse a layout whose `tests` LoadGens, each within bounds alone, would together build
    more queued samples before their first query than half this machine's memory holds."""
    memory = machine_memory_bytes()
    most = memory * QUEUE_MEMORY_SHARE / BYTES_PER_QUEUED_SAMPLE
    if samples > most:
        raise SettingsError(
            f"the {tests} instances' LoadGen tests run at once on this machine and together build "
            f"{samples:.3g} samples of queries before their first (about "
            f"{samples * BYTES_PER_QUEUED_SAMPLE / 2**30:.3g} GiB at {BYTES_PER_QUEUED_SAMPLE} B "
            f"each); half of this machine's {memory / 2**30:.1f} GiB holds at most {most:.3g}: "
            "lower target_qps (or min_query_count) or min_duration, or run the instances across "
            "nodes with --cluster"
        )


# --- LoadGen ---------------------------------------------------------------------------------
def load_test_settings(
    conf_path: str | os.PathLike[str], resolved: ResolvedSettings, lg: LoadGenModule
) -> LoadGenTestSettings:
    """Return LoadGen TestSettings from the generated user.conf, checked value by value.

    Must be the first FromConfig of the process: only that one loads LoadGen's built-in
    mlperf.conf rules (trap 2).
    """
    settings = lg.TestSettings()
    code = settings.FromConfig(os.fspath(conf_path), resolved.conf_model, resolved.loadgen_scenario)
    if code != 0:
        raise SettingsError(
            f"LoadGen rejected user.conf {os.fspath(conf_path)!r} (FromConfig returned {code}); "
            "lines must be 'model.Scenario.key = value' with numeric values and no trailing comments"
        )
    verify_test_settings(settings, resolved)
    settings.scenario = getattr(lg.TestScenario, resolved.loadgen_scenario)
    return settings


def verify_test_settings(settings: LoadGenTestSettings, resolved: ResolvedSettings) -> None:
    """Raise SettingsError when a value in the user.conf did not reach LoadGen's TestSettings."""
    keys = conf_keys(resolved.loadgen_scenario)
    for key, value in resolved.values.items():
        spec = keys[key]
        expected = value * spec.scale
        actual = getattr(settings, spec.attribute)
        if not math.isclose(float(actual), expected, rel_tol=1e-6, abs_tol=1e-9):
            raise SettingsError(
                f"LoadGen did not take {resolved.conf_model}.{resolved.loadgen_scenario}.{key} = "
                f"{value}: TestSettings.{spec.attribute} is {actual}, expected {expected}"
            )
