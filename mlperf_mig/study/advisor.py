"""The layout advisor: predict every valid MIG layout of a GPU from per-profile measurements.

Measurements come from earlier runs (a sweep folder, a repeated run, a run): each profile's
throughput and p99 latency alone (a layout of one instance, or an isolation run) and inside
full layouts (every compute slice of the GPU in use, so the neighbours' interference is
included). A layout's predicted total is the sum over its instances of their profile's rate:
the rate inside full layouts where one was measured, alone otherwise, and, for a profile never
measured, the rate of a measured profile with the same compute slices (labelled "inferred").
The uncertainty of a total is the half-widths of its instances' 95% intervals added up (the
instances of one profile share one estimate, so their errors do not cancel), plus, for each
instance whose rate comes from lone runs (alone, or inferred from a profile measured alone), the
largest error the advisor's own validation found for predictions from lone runs (each measured
multi-instance layout predicted from the single-profile ones): a number known to be that far off
is not ranked as if it were measured. Layouts are ranked by the low end of that range for the
throughput objective, and the notes name the inputs that were missing and the run that would
measure them. Layouts come from
the registry's enumeration (`valid_layouts`), so every valid layout is considered.

Inputs are layout results (runner/results.py `LayoutResult`: a run, or a repeated run with its
isolation runs), read through that one class, so this module imports neither the sweep nor the
repeats module; the HTML report can use it without an import circle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from mlperf_mig._checks import is_number, is_whole
from mlperf_mig._report import Report
from mlperf_mig._table import text_table
from mlperf_mig.errors import DataFileError, SettingsError
from mlperf_mig.runner.results import (
    EMULATED_LABEL,
    RESULTS_FILE,
    LayoutResult,
    RunResult,
    result_p99_ms,
    result_throughput,
)
from mlperf_mig.runner.stats import Summary, summarize
from mlperf_mig.study.tokens import (
    TOKENS_PER_S,
    generates_tokens,
    instance_tokens_per_s,
)

if TYPE_CHECKING:
    from mlperf_mig.harness.result import InstanceResult
    from mlperf_mig.registry.model import Gpu, Layout

OBJECTIVES = {
    "throughput": "highest predicted total throughput",
    "instances": "most instances (then throughput)",
    "capacity": "highest predicted Server capacity (sum of the instances' capacities)",
    "p99": "lowest predicted worst p99 latency of any instance (then throughput)",
    "samples_per_joule": "most predicted samples per joule (GPU board energy, not wall power; "
    "per-instance power is an estimate)",
    "tokens_per_joule": "most predicted tokens per joule, for a workload that generates tokens "
    "(GPU board energy, not wall power; per-instance power is an estimate)",
}
# the energy objective of each kind of workload, and its label: work per joule in the unit
# layouts are ranked by (samples, or tokens for a workload that generates them)
ENERGY_OBJECTIVES = {"samples_per_joule": "samples/J", "tokens_per_joule": "tokens/J"}


def energy_objective(unit: str) -> str:
    """The energy objective of measurements in `unit`: tokens_per_joule for tokens/s."""
    return "tokens_per_joule" if unit == TOKENS_PER_S else "samples_per_joule"


def energy_label(unit: str) -> str:
    """'tokens/J' for measurements in tokens/s, else 'samples/J'."""
    return ENERGY_OBJECTIVES[energy_objective(unit)]


def energy_note(unit: str) -> str:
    """What the predicted work per joule is, in the label of `unit`'s workload."""
    return (
        f"{energy_label(unit)} predicted = predicted total ({unit}) / (the GPU's idle power + each "
        "instance's estimated power above idle, from its share of the board energy in the "
        "measured runs); GPU board energy, not wall power (CPU package energy for emulated runs)"
    )


def check_energy_objective(objective: str, unit: str, benchmark: str) -> None:
    """An energy objective must be the one of `benchmark`'s kind (its measurements in `unit`):
    samples_per_joule for a workload that answers samples, tokens_per_joule for one that
    generates tokens; else one line naming the right one."""
    wanted = energy_objective(unit)
    if objective in ENERGY_OBJECTIVES and objective != wanted:
        kind = "generates tokens" if unit == TOKENS_PER_S else "generates no tokens"
        raise SettingsError(
            f"objective {objective!r} ranks {ENERGY_OBJECTIVES[objective]}, but {benchmark} "
            f"{kind} (its layouts are predicted in {unit}): pass objective {wanted!r} "
            f"(--objective {wanted})"
        )


EMULATED_ADVICE = (
    "emulated advice: predicted from CPU partitions standing in for MIG slices, not from a GPU"
)


@attrs.frozen(kw_only=True)
class ProfileMeasure:
    """What was measured of one profile: throughput and p99 (ms) samples, alone (single-instance
    layouts, `alone`; isolation runs, `isolated`) and inside full layouts; Server capacity."""

    profile: str
    alone: tuple[float, ...] = ()
    isolated: tuple[float, ...] = ()
    in_layout: tuple[float, ...] = ()
    p99_alone: tuple[float, ...] = ()
    p99_in_layout: tuple[float, ...] = ()
    capacity: float | None = None
    # watts above the GPU's idle power, an estimate from the instance's share of the board energy
    power_alone: tuple[float, ...] = ()
    power_in_layout: tuple[float, ...] = ()


@attrs.frozen(kw_only=True)
class Measurements:
    """Per-profile measurements of one benchmark on one GPU (or its emulation)."""

    gpu: str
    benchmark: str
    loadgen_scenario: str
    unit: str
    emulated: bool
    profiles: Mapping[str, ProfileMeasure]
    labels: tuple[str, ...] = ()
    measured: Mapping[str, tuple[float, ...]] = attrs.field(factory=dict)  # layout -> totals
    scenarios: Mapping[str, int] = attrs.field(factory=dict)  # layout -> study scenario
    idle_power_w: tuple[float, ...] = ()  # the GPU's idle power before each run with telemetry


# The largest rate or latency the advisor takes: no accelerator serves 1e12 samples/s and no p99
# lasts 1e12 ms (31 years); sums and variances of values below it stay finite.
MEASURE_LIMIT = 1e12


def _measure(value: object, source: str, field: str, limit: float = MEASURE_LIMIT) -> float | None:
    """`value` read from `source` as a measurement: a finite number from 0 to `limit`.

    Results are files people copy and edit: a NaN, an infinity, a negative rate or 1e308 would
    be ranked silently (or overflow a sum), so each is refused with one line naming the field.
    """
    return None if value is None else _number(value, source, field, limit)


def _number(value: object, source: str, field: str, limit: float = MEASURE_LIMIT) -> float:
    """`value` read from `source` as a measurement that must be there (see `_measure`)."""
    if not is_number(value, 0, limit) or not isinstance(value, int | float):
        raise DataFileError(
            f"{source!r}: {field} is {value!r}, not a measurement the advisor can rank (a finite "
            f"number from 0 to {limit:g}); the file was edited or damaged: fix that field "
            "or run that layout again"
        )
    return float(value)


def _p99_ms(result: InstanceResult | None, source: str, field: str) -> float | None:
    if result is None:
        return None
    _measure(
        result.latency_ns.get("99.00"), source, f"{field}.latency_ns.99.00", MEASURE_LIMIT * 1e6
    )
    return result_p99_ms(result)


def _checked_run(run: RunResult) -> list[tuple[str, float | None, float | None]]:
    """(profile, rate, p99 ms) of each instance of `run`, each value checked, and the layout's
    LoadGen throughput (unified) checked too. The rate is samples/s, or tokens/s for a workload
    that generates tokens (what its layouts are ranked by)."""
    source = str(Path(run.outdir) / RESULTS_FILE)
    _measure(result_throughput(run.layout_result), source, "layout_result.throughput")
    tokens = generates_tokens(run)
    return [
        (
            instance.profile,
            _measure(
                instance_tokens_per_s(run, instance) if tokens else instance.throughput,
                source,
                f"instances[{k}].performance.{'tokens' if tokens else 'throughput'}",
            ),
            _p99_ms(instance.performance, source, f"instances[{k}].performance"),
        )
        for k, instance in enumerate(run.instances)
    ]


def _run_total(run: RunResult) -> float | None:
    """What a run's layout is ranked by: its total samples/s, or tokens/s for a generative
    workload (the sum of the instances', or the unified LoadGen's)."""
    return run.tokens_per_second if generates_tokens(run) else run.total_throughput


def _instance_powers(run: RunResult) -> tuple[float | None, list[float | None]]:
    """The GPU's idle power before `run` and each instance's estimated power above it (W): the
    board energy over the timed window less idle power, split as the run's telemetry split it
    (by activity x slices), or by compute slices where no activity was measured."""
    telemetry = run.telemetry
    window = None if telemetry is None else telemetry.window
    if (
        telemetry is None
        or window is None
        or telemetry.energy_j is None
        or telemetry.idle_power_w is None
        or window.duration_s <= 0
    ):
        return None, [None] * len(run.instances)
    source = str(Path(run.outdir) / RESULTS_FILE)
    energy = _number(telemetry.energy_j, source, "telemetry.layout.energy_j")
    idle = _number(telemetry.idle_power_w, source, "telemetry.layout.idle_power_w")
    above = max(0.0, energy / window.duration_s - idle)
    shares = [
        None if (t := telemetry.instance(i.name)) is None else t.energy_share_j
        for i in run.instances
    ]
    known = [s for s in shares if s is not None]
    if len(known) == len(shares) and sum(known) > 0:
        weights = [float(s) for s in known]
    else:
        weights = [float(i.compute_slices) for i in run.instances]
    total = sum(weights)
    return idle, [above * w / total if total > 0 else None for w in weights]


def measurements_from(
    layouts: Sequence[LayoutResult],
    compute_slices: int,
    capacities: Mapping[str, float] | None = None,
) -> Measurements:
    """Measurements from runs and repeated runs (one entry per layout, as a sweep has them);
    `compute_slices` is the GPU's, to tell full layouts; `capacities`: profile -> Server QPS."""
    if not layouts:
        raise SettingsError(
            "the advisor got no runs; pass a folder written by mlperf-mig run or sweep"
        )
    samples: dict[str, dict[str, list[float]]] = {}

    def add(profile: str, key: str, value: float | None) -> None:
        if value is not None:
            samples.setdefault(profile, {}).setdefault(key, []).append(float(value))

    measured: dict[str, tuple[float, ...]] = {}
    scenarios: dict[str, int] = {}
    idle_powers: list[float] = []
    labels: list[str] = []
    for layout in layouts:
        runs = [r for r in layout.runs if r.ok]
        if not runs:
            continue
        values = {id(run): _checked_run(run) for run in runs}
        # every run's labels, the alone runs' too: a target reused by repeat 2 alone is said
        for run in [*runs, *layout.alone_runs()]:
            labels += [label for label in run.labels() if label not in labels]
        reused = layout.reused_targets()
        if reused:
            labels.append(
                f"{runs[0].layout}: {len(reused)} instance run(s) used a target calibrated by an "
                f"earlier run, not their own ({', '.join(reused[:8])}"
                f"{', ...' if len(reused) > 8 else ''}): their numbers repeat that target"
            )
        totals = [_run_total(r) for r in runs]
        measured[runs[0].layout] = tuple(t for t in totals if t is not None)
        if runs[0].scenario is not None:
            scenarios[runs[0].layout] = runs[0].scenario
        full = sum(i.compute_slices for i in runs[0].instances) == compute_slices
        for run in runs:
            one = len(run.instances) == 1
            idle, powers = _instance_powers(run)
            if idle is not None:
                idle_powers.append(idle)
            for (profile, throughput, p99), power in zip(values[id(run)], powers):
                if one:
                    add(profile, "alone", throughput)
                    add(profile, "p99_alone", p99)
                    add(profile, "power_alone", power)
                elif full:
                    add(profile, "in_layout", throughput)
                    add(profile, "p99_in_layout", p99)
                    add(profile, "power_in_layout", power)
        for profile, alone_runs in layout.alone.items():
            for run in alone_runs:
                if run.ok and run.instances:
                    _, throughput, p99 = _checked_run(run)[0]
                    add(profile, "isolated", throughput)
                    add(profile, "p99_alone", p99)
    first = layouts[0].first
    checked = {
        name: _measure(value, "the sweep's capacities (sweep.json)", f"capacities[{name!r}]")
        for name, value in dict(capacities or {}).items()
    }
    profiles = {
        name: ProfileMeasure(
            profile=name, capacity=checked.get(name), **{k: tuple(v) for k, v in values.items()}
        )
        for name, values in samples.items()
    }
    return Measurements(
        gpu=first.gpu,
        benchmark=first.benchmark,
        loadgen_scenario=first.loadgen_scenario,
        unit=TOKENS_PER_S if generates_tokens(first) else first.throughput_unit,
        emulated=first.emulated,
        profiles=profiles,
        labels=tuple(labels),
        measured=measured,
        scenarios=scenarios,
        idle_power_w=tuple(idle_powers),
    )


@attrs.frozen(kw_only=True)
class Rate:
    """The estimate of one profile used by a prediction, and where it came from."""

    summary: Summary
    p99: Summary | None
    source: str  # "in layout", "alone", or "inferred from <profile> (...)"


@attrs.frozen(kw_only=True)
class Prediction:
    layout: str
    instances: int
    total: float
    half: float | None
    worst_p99_ms: float | None
    capacity: float | None
    sources: tuple[str, ...]
    layout_obj: Layout = attrs.field(eq=False, repr=False)
    # work per joule, in the measurements' unit (samples, or tokens): an estimate (energy_note);
    # None without energy data
    per_joule: float | None = None
    lone_inputs: tuple[str, ...] = ()  # profiles whose rate comes from lone runs only
    lone_half: float = 0.0  # the part of `half` from the validation's error for lone runs

    @property
    def low(self) -> float:
        """The low end of the predicted total (its rank under the throughput objective)."""
        return self.total - (self.half or 0.0)

    def row(self, rank: int, energy: str = "samples/J") -> dict[str, Any]:
        """The table's row; `energy`: the label of `per_joule` (samples/J or tokens/J)."""
        return {
            "rank": rank,
            "layout": self.layout,
            "instances": self.instances,
            "predicted total": f"{self.total:,.2f}"
            + ("" if self.half is None else f" ± {self.half:,.2f}"),
            "worst p99 ms": self.worst_p99_ms,
            "capacity": self.capacity,
            energy: self.per_joule,
            "from": "; ".join(self.sources),
        }


class Estimator:
    """Each profile's rate for predictions: inside full layouts where measured (unless
    `alone_only`), alone otherwise, or inferred from a profile with the same compute slices."""

    def __init__(
        self,
        measurements: Measurements,
        gpu: Gpu,
        *,
        alone_only: bool = False,
        lone_error: float | None = None,
    ) -> None:
        self._m = measurements
        self._gpu = gpu
        self._alone_only = alone_only
        self._lone_error = lone_error  # the validation's largest relative error for lone runs
        self._cache: dict[str, Rate | None] = {}

    def _own(self, name: str) -> Rate | None:
        measure = self._m.profiles.get(name)
        if measure is None:
            return None
        alone = measure.alone if self._alone_only else measure.alone + measure.isolated
        if measure.in_layout and not self._alone_only:
            rates, p99s, source = measure.in_layout, measure.p99_in_layout, "in layout"
        else:
            rates, p99s, source = alone, measure.p99_alone, "alone"
        summary = summarize(rates)  # None: no rate measured
        return (
            None if summary is None else Rate(summary=summary, p99=summarize(p99s), source=source)
        )

    def rate(self, name: str) -> Rate | None:
        if name not in self._cache:
            rate = self._own(name)
            if rate is None:
                profile = self._gpu.profile(name)
                for other in self._gpu.profiles:
                    if other.name != name and other.compute_slices == profile.compute_slices:
                        found = self._own(other.name)
                        if found is not None:
                            rate = attrs.evolve(found, source=f"as {other.name} ({found.source})")
                            break
            self._cache[name] = rate
        return self._cache[name]

    def power(self, name: str) -> float | None:
        """A profile's estimated power above idle (W): in full layouts where measured, else alone."""
        measure = self._m.profiles.get(name)
        if measure is None:
            return None
        values = measure.power_in_layout or measure.power_alone
        return sum(values) / len(values) if values else None

    def per_joule(self, layout: Layout, total: float) -> float | None:
        """Predicted total over the GPU's idle power plus each instance's power above idle: work
        per joule in the measurements' unit (samples or tokens)."""
        idle = self._m.idle_power_w
        powers = [self.power(p.name) for p in layout.profiles]
        known = [p for p in powers if p is not None]
        if not idle or len(known) < len(powers):
            return None
        watts = sum(idle) / len(idle) + sum(known)
        return total / watts if watts > 0 else None

    def predict(self, layout: Layout) -> Prediction | str:
        """The prediction of `layout`, or why there is none."""
        rates = []
        for profile in layout.profiles:
            rate = self.rate(profile.name)
            if rate is None:
                return f"no measurement of {profile.name} or of a profile with its compute slices"
            rates.append((profile.name, rate))
        halves = [r.summary.half for _, r in rates]
        # a lone run of a profile that fills the GPU (7g) is a measured full layout
        whole = {p.name for p in layout.profiles if p.compute_slices >= self._gpu.compute_slices}
        lone = [
            (n, r)
            for n, r in rates
            if n not in whole and r.source != "in layout" and not r.source.endswith("(in layout)")
        ]
        lone_half = sum(r.summary.mean for _, r in lone) * (self._lone_error or 0.0)
        p99s = [r.p99.mean for _, r in rates if r.p99 is not None]
        capacities = [
            self._m.profiles[n].capacity if n in self._m.profiles else None for n, _ in rates
        ]
        sources = tuple(dict.fromkeys(f"{n}: {r.source}" for n, r in rates))
        total = sum(r.summary.mean for _, r in rates)
        return Prediction(
            layout=str(layout),
            instances=len(rates),
            total=total,
            per_joule=self.per_joule(layout, total),
            half=_sum_of_all(halves, lone_half),
            lone_inputs=tuple(dict.fromkeys(n for n, _ in lone)),
            lone_half=lone_half,
            worst_p99_ms=max(p99s) if len(p99s) == len(rates) else None,
            capacity=_sum_of_all(capacities),
            sources=sources,
            layout_obj=layout,
        )


def _sum_of_all(values: Sequence[float | None], start: float = 0.0) -> float | None:
    """`start` plus the sum of `values`; None if any of them is None."""
    known = [v for v in values if v is not None]
    return None if len(known) < len(values) else sum(known) + start


@attrs.frozen(kw_only=True)
class Constraints:
    min_instances: int | None = None
    max_instances: int | None = None
    profiles_allowed: tuple[str, ...] | None = None
    max_p99_ms: float | None = None

    def text(self) -> str:
        parts = [
            f"{k}={v if not isinstance(v, tuple) else ','.join(v)}"
            for k, v in attrs.asdict(self).items()
            if v is not None
        ]
        return ", ".join(parts) or "none"

    def allows(self, prediction: Prediction) -> bool:
        if self.min_instances is not None and prediction.instances < self.min_instances:
            return False
        if self.max_instances is not None and prediction.instances > self.max_instances:
            return False
        if self.profiles_allowed is not None and any(
            p.name not in self.profiles_allowed for p in prediction.layout_obj.profiles
        ):
            return False
        if self.max_p99_ms is not None:
            return (
                prediction.worst_p99_ms is not None and prediction.worst_p99_ms <= self.max_p99_ms
            )
        return True


def _count(name: str, value: object) -> int | None:
    if value is None:
        return None
    if not is_whole(value, 1) or not isinstance(value, int):  # is_whole narrows nothing
        raise SettingsError(f"{name} must be a whole number of at least 1 (or None), got {value!r}")
    return value


def check_constraints(
    gpu: Gpu,
    *,
    min_instances: object = None,
    max_instances: object = None,
    profiles_allowed: object = None,
    max_p99_ms: object = None,
) -> Constraints:
    """The constraints, each checked: counts, profile names of `gpu`, a positive latency."""
    allowed = None
    if profiles_allowed is not None:
        names = (
            profiles_allowed.split(",") if isinstance(profiles_allowed, str) else profiles_allowed
        )
        if not isinstance(names, Iterable) or not all(
            isinstance(n, str) and n.strip() for n in names
        ):
            raise SettingsError(
                f"profiles_allowed must list MIG profile names such as '2g.20gb,1g.10gb', got {profiles_allowed!r}"
            )
        allowed = tuple(
            gpu.profile(n.strip()).name for n in names
        )  # UnknownProfileError names the known ones
    if max_p99_ms is not None and not (
        is_number(max_p99_ms) and isinstance(max_p99_ms, int | float) and max_p99_ms > 0
    ):
        raise SettingsError(
            f"max_p99_ms must be a positive number of milliseconds (or None), got {max_p99_ms!r}"
        )
    return Constraints(
        min_instances=_count("min_instances", min_instances),
        max_instances=_count("max_instances", max_instances),
        profiles_allowed=allowed,
        max_p99_ms=None if max_p99_ms is None else float(max_p99_ms),
    )


RankKey = Callable[[Prediction], tuple[float | str | None, ...]]  # sorts best first


def _rank_key(objective: str) -> RankKey:
    """Best first; among equals, layouts predicted from fewer inferred profiles first."""

    def inferred(p: Prediction) -> int:
        return sum(" as " in s for s in p.sources)

    if objective == "throughput":
        return lambda p: (-p.low, -p.total, inferred(p), p.layout)
    if objective == "instances":
        return lambda p: (-p.instances, -p.total, inferred(p), p.layout)
    if objective == "capacity":
        return lambda p: (-(p.capacity or 0.0), inferred(p), p.layout)
    if objective in ENERGY_OBJECTIVES:
        return lambda p: (-(p.per_joule or 0.0), -p.total, inferred(p), p.layout)
    return lambda p: (p.worst_p99_ms, -p.total, inferred(p), p.layout)


@attrs.frozen(kw_only=True)
class Advice(Report):
    """The ranking of every valid layout under the constraints, and the winner's config."""

    gpu: str
    benchmark: str
    loadgen_scenario: str
    unit: str
    objective: str
    constraints: Constraints
    considered: int  # the registry's count of valid layouts
    predicted: int
    ranking: tuple[Prediction, ...]
    skipped: Mapping[str, str]  # layout -> why it could not be predicted
    placements: tuple[str, ...]
    mig_parted: str
    labels: tuple[str, ...]
    validation: tuple[dict[str, Any], ...] = ()
    top: int = 5
    settle: tuple[str, ...] = ()  # the runs that would measure the winner's missing inputs
    lone_error: float | None = None  # the validation's largest relative error for lone runs

    @property
    def winner(self) -> Prediction:
        return self.ranking[0]

    @property
    def energy_label(self) -> str:
        """The label of the predicted work per joule: samples/J, or tokens/J for a workload that
        generates tokens."""
        return energy_label(self.unit)

    def rows(self) -> list[dict[str, Any]]:
        return [p.row(k, self.energy_label) for k, p in enumerate(self.ranking[: self.top], 1)]

    def columns(self) -> list[str]:
        columns = ["rank", "layout", "instances", "predicted total", "worst p99 ms"]
        if self.objective == "capacity":
            columns.append("capacity")
        if self.objective in ENERGY_OBJECTIVES:
            columns.append(self.energy_label)
        return [*columns, "from"]

    def title(self) -> str:
        return (
            f"advisor: {self.benchmark} {self.loadgen_scenario} (LoadGen scenario) on {self.gpu}, "
            f"objective {self.objective} ({OBJECTIVES[self.objective]}), constraints: {self.constraints.text()}"
        )

    def notes(self) -> list[str]:
        notes = [
            f"{self.considered} valid layouts of {self.gpu} considered (the registry's enumeration), "
            f"{self.predicted} predicted, {len(self.ranking)} meet the constraints; throughput in {self.unit}",
            "predicted total ± the instances' 95% half-widths added up; 'in layout': the profile's "
            "rate inside full layouts (interference included), 'alone': its rate alone, 'as P': not "
            "measured, inferred from profile P with the same compute slices",
            f"winner's placements: {', '.join(self.placements)}",
        ]
        if self.lone_error is not None:
            errors = [row["relative_error"] for row in self.validation]
            notes.append(
                f"predictions from lone runs were {min(errors):+.0%} to {max(errors):+.0%} off in the "
                f"validation below: an instance whose rate comes from lone runs adds {self.lone_error:.0%} "
                "of its rate to the ± range, and layouts rank by the low end of that range"
            )
        if self.winner.lone_inputs:
            known = (
                ""
                if self.lone_error is not None
                else (
                    " (no validation measured how far off that is: measure a multi-instance layout)"
                )
            )
            notes.append(
                f"the winner rests on lone runs for {', '.join(self.winner.lone_inputs)}{known}; "
                + ("; ".join(self.settle) if self.settle else "no valid full layout holds them")
            )
        if self.skipped:
            notes.append(
                f"{len(self.skipped)} layout(s) not predicted: {next(iter(self.skipped.values()))}"
            )
        if self.objective in ENERGY_OBJECTIVES:
            notes.append(energy_note(self.unit))
        return notes + [f"note: {label}" for label in self.labels]

    def validation_rows(self) -> list[dict[str, Any]]:
        return list(self.validation)

    VALIDATION_COLUMNS = ("MIG scenario", "layout", "predicted", "measured", "error")

    def validation_text(self) -> list[str]:
        if not self.validation:
            return [
                "validation: no multi-instance layout was measured next to single-profile layouts"
            ]
        return [
            "validation: multi-instance layouts predicted from the single-profile layouts alone "
            "(no interference), against their measured mean totals:",
            text_table(self.validation_rows(), self.VALIDATION_COLUMNS),
        ]

    def table(self) -> str:
        """The report's table and notes, then the validation and the winner's mig-parted config."""
        return "\n".join(
            [
                super().table(),
                *self.validation_text(),
                "mig-parted config of the winner:",
                self.mig_parted.rstrip(),
            ]
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "benchmark": self.benchmark,
            "objective": self.objective,
            "unit": self.unit,
            "constraints": attrs.asdict(self.constraints),
            "considered": self.considered,
            "predicted": self.predicted,
            "ranking": [
                p.row(k, self.energy_label) | {"total": p.total, "half": p.half}
                for k, p in enumerate(self.ranking, 1)
            ],
            "placements": list(self.placements),
            "mig_parted": self.mig_parted,
            "labels": list(self.labels),
            "validation": list(self.validation),
        }


def _settling_runs(gpu: Gpu, winner: Prediction) -> list[str]:
    """For each profile the winner takes from lone runs, a run that measures it inside a full
    layout: the winner itself when it fills the GPU, else a full layout that holds the profile."""
    from mlperf_mig import registry

    if not winner.lone_inputs:
        return []
    full = list(registry.maximal_layouts(gpu))
    runs = []
    if (
        winner.layout_obj in full
        or sum(p.compute_slices for p in winner.layout_obj.profiles) == gpu.compute_slices
    ):
        runs.append(
            f"`mlperf-mig run --scenario {winner.layout}` measures them in the winner itself"
        )
        return runs
    for name in winner.lone_inputs:
        holding = next(
            (layout for layout in full if any(p.name == name for p in layout.profiles)), None
        )
        if holding is not None:
            runs.append(f"`mlperf-mig run --scenario {holding}` measures {name} in a full layout")
    return runs


def validate(measurements: Measurements, gpu: Gpu) -> tuple[dict[str, Any], ...]:
    """Each measured multi-instance layout predicted from single-profile layouts alone, against
    its measured mean total; the error in percent."""
    from mlperf_mig import registry

    estimator = Estimator(measurements, gpu, alone_only=True)
    rows = []
    for text, totals in measurements.measured.items():
        layout = registry.parse_layout(gpu, text)
        if len(layout.profiles) < 2 or not totals:
            continue
        prediction = estimator.predict(layout)
        if isinstance(prediction, str):
            continue
        measured = sum(totals) / len(totals)
        rows.append(
            {
                "MIG scenario": measurements.scenarios.get(text),
                "layout": text,
                "predicted": prediction.total,
                "measured": measured,
                "error": f"{prediction.total / measured - 1:+.1%}",
                "relative_error": prediction.total / measured - 1,
            }
        )
    return tuple(rows)


def check_ranking(objective: object, top: object) -> None:
    """`objective` is one the advisor ranks by and `top` a count of layouts to show."""
    if not isinstance(objective, str) or objective not in OBJECTIVES:
        raise SettingsError(f"objective {objective!r} is not one of {', '.join(OBJECTIVES)}")
    if not is_whole(top, 1):
        raise SettingsError(f"top must be a whole number of at least 1, got {top!r}")


def advise_from(
    measurements: Measurements,
    *,
    objective: str = "throughput",
    constraints: Constraints | None = None,
    top: int = 5,
) -> Advice:
    """Rank every valid layout of the measurements' GPU by `objective` under `constraints`."""
    from mlperf_mig import registry

    check_ranking(objective, top)
    if not any(m.alone or m.isolated for m in measurements.profiles.values()):
        raise SettingsError(
            f"the measurements of {measurements.gpu} hold no single-profile layout (one instance "
            "alone); the advisor predicts from them: run `mlperf-mig sweep --scenarios 1-5` (or with --isolation)"
        )
    gpu = registry.default_catalog().get(measurements.gpu)
    constraints = constraints or Constraints()
    if objective == "capacity" and not any(m.capacity for m in measurements.profiles.values()):
        raise SettingsError(
            "objective 'capacity' needs Server capacity measurements; run `mlperf-mig capacity` "
            "per profile first, or pick objective throughput"
        )
    check_energy_objective(objective, measurements.unit, measurements.benchmark)
    if objective in ENERGY_OBJECTIVES and not (
        measurements.idle_power_w
        and any(m.power_alone or m.power_in_layout for m in measurements.profiles.values())
    ):
        raise SettingsError(
            f"objective {objective!r} needs runs whose telemetry measured energy (GPU board "
            "energy over the timed window and idle power: a GPU with an energy counter, or RAPL "
            "for emulated runs); these runs have none: run with telemetry on such a machine, or "
            "pick objective throughput"
        )
    validation = validate(measurements, gpu)
    lone_error = max((abs(row["relative_error"]) for row in validation), default=None)
    estimator = Estimator(measurements, gpu, lone_error=lone_error)
    layouts = registry.valid_layouts(gpu)
    predictions, skipped = [], {}
    for layout in layouts:
        prediction = estimator.predict(layout)
        if isinstance(prediction, str):
            skipped[str(layout)] = prediction
        else:
            predictions.append(prediction)
    allowed = [p for p in predictions if constraints.allows(p)]
    if objective == "capacity":
        allowed = [p for p in allowed if p.capacity is not None]
    if objective == "p99":
        allowed = [p for p in allowed if p.worst_p99_ms is not None]
    if objective in ENERGY_OBJECTIVES:
        allowed = [p for p in allowed if p.per_joule is not None]
    if not allowed:
        raise SettingsError(
            f"no valid layout of {gpu.name} meets the constraints ({constraints.text()}): "
            f"{len(layouts)} considered, {len(predictions)} predicted; relax a constraint"
        )
    ranking = tuple(sorted(allowed, key=_rank_key(objective)))
    winner = ranking[0].layout_obj
    plan = registry.mig_setup(winner)
    placements = tuple(f"{p.profile.name}@{p.start}" for p in plan.placements)
    labels = list(measurements.labels)
    if measurements.emulated:
        labels = [EMULATED_ADVICE, *(label for label in labels if label != EMULATED_LABEL)]
    return Advice(
        gpu=gpu.name,
        benchmark=measurements.benchmark,
        loadgen_scenario=measurements.loadgen_scenario,
        unit=measurements.unit,
        objective=objective,
        constraints=constraints,
        considered=len(layouts),
        predicted=len(predictions),
        ranking=ranking,
        skipped=skipped,
        placements=placements,
        mig_parted=plan.mig_parted_config(),
        labels=tuple(labels),
        validation=validation,
        settle=tuple(_settling_runs(gpu, ranking[0])),
        lone_error=lone_error,
        top=top,
    )
