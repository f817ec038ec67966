"""Server capacity of one MIG profile: the highest target QPS that stays within the latency limits.

A bracketing search over short Server runs of one instance of the profile (the rest of the GPU
idle): from a starting target (a quarter of a short Offline run's throughput, halved while it
fails, or `low_qps`, where a failure ends the search) the target doubles while a probe passes and
is then bisected (geometric means) until the bracket is within `tolerance`. A probe passes when
LoadGen logged no error and the p99 latencies the run is held to are within their limits: a
sample's p99 within the benchmark's Server bound, or, for a workload that generates tokens, p99
time to first token (TTFT) and time per output token (TPOT) within the limits LoadGen logged for
that test (Server 2000/100 ms for llama3.1-8b; MLPerf's Interactive, a Server test under the
interactive conf model name, 500/30 ms: both read from the run, never assumed). A short probe
cannot satisfy LoadGen's early-stopping and duration rules, so its own verdict is not used. The
answer is then confirmed by one run of the chosen length (`confirm_ms`, default the preset's)
judged by LoadGen's full verdict and the same limits; if that run fails the target steps down by
the tolerance and is confirmed again (twice at most). A probe
that fails is run again at the same target: a short probe's p99 moves with the machine's load, and
when the repeat passes the probe is inconclusive (with the spread of the two p99s), counted as a
failure so that the answer stays on the safe side, and labelled. A search
that cannot close the bracket or confirm its answer returns a labelled partial answer. A complete
result is cached (study/capacity_cache.py) so that later Server runs use it as their target; a
partial one never replaces a cached entry, and a cache write that fails leaves the answer in the
result (and says why it was not cached).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

import attrs

from mlperf_mig._checks import is_number, is_whole
from mlperf_mig._cli_args import Flag, decimal_number, whole_number
from mlperf_mig._table import text_table
from mlperf_mig.errors import OutputDirError, SettingsError
from mlperf_mig.harness.result import MIN_DURATION_REASON
from mlperf_mig.runner.audits import relative_spread
from mlperf_mig.runner.capacity_store import cache_file, store_capacity
from mlperf_mig.runner.options import (
    check_outdir,
    check_progress,
    declared_options,
    option,
    options_doc,
    run_options,
)
from mlperf_mig.runner.results import EMULATED_LABEL, LayoutResult, RunResult, result_p99_ms
from mlperf_mig.study.capacity_cache import plan_key
from mlperf_mig.study.measure import Measure

if TYPE_CHECKING:
    from mlperf_mig.harness.result import InstanceResult

log = logging.getLogger(__name__)

PathArg = str | os.PathLike[str]
CONFIRM_TRIES = 3
SHORT_RUN_REASONS = (
    "early stopping condition not met",
    MIN_DURATION_REASON,
    "min query count not met",
)
# LoadGen's TTFT and TPOT early-stopping verdicts, as harness/result.py words them
SHORT_RUN_PREFIXES = ("TTFT early stopping:", "TPOT early stopping:")
START_HALVINGS = 4


def _qps(value: float | None) -> str:
    """A target as messages write it: 4 significant digits ('50', '1235'), whole from 10,000
    ('60,000', never '6e+04')."""
    if value is None:
        return "-"
    return f"{value:.4g}" if value < 9999.5 else f"{value:,.0f}"  # .4g writes 1e+04 from there


def _short_run_reason(reason: str) -> bool:
    """Whether `reason` is one that a quick preset's short run cannot avoid: duration, query
    count, early stopping (TTFT's and TPOT's too). The limits themselves are judged from the p99s."""
    return reason in SHORT_RUN_REASONS or reason.startswith(SHORT_RUN_PREFIXES)


@attrs.frozen(kw_only=True)
class LatencyLimit:
    """One p99 latency a Server run is held to, and its limit (ms), as the run logged them: a
    sample's latency (`what` "") against the benchmark's bound, or a token workload's time to
    first token ("TTFT") or time per output token ("TPOT") against LoadGen's limit."""

    what: str
    p99_ms: float | None
    limit_ms: float | None  # None: the run's log holds none

    @property
    def name(self) -> str:
        """'p99', 'TTFT p99' or 'TPOT p99'."""
        return f"{self.what} p99".strip()

    @property
    def limit_name(self) -> str:
        """'bound' (a sample's latency), 'TTFT limit' or 'TPOT limit'."""
        return f"{self.what} limit" if self.what else "bound"

    @property
    def within(self) -> bool:
        return (
            self.p99_ms is not None and self.limit_ms is not None and self.p99_ms <= self.limit_ms
        )

    def text(self) -> str:
        """'TTFT p99 2,412.00 ms over its 2000 ms limit', within it, or what is missing."""
        if self.p99_ms is None:
            return f"no {self.name} measured"
        word = "limit" if self.what else "bound"
        if self.limit_ms is None:
            return f"{self.name} {self.p99_ms:,.2f} ms, no {self.limit_name} in the run's log"
        side = "within" if self.within else "over"
        return f"{self.name} {self.p99_ms:,.2f} ms {side} its {self.limit_ms:g} ms {word}"


def _ms(ns: float | None) -> float | None:
    """Nanoseconds as milliseconds; None (and LoadGen's 0, "no limit") as None."""
    return ns / 1e6 if ns else None


def _limits(result: InstanceResult | None) -> tuple[LatencyLimit, ...]:
    """The p99 latencies a Server run is held to, with the limits its log holds: a token
    workload's TTFT and TPOT (the Server or Interactive limits of that test), any other
    workload's sample latency against its target latency."""
    if result is None:
        return ()
    tokens = result.tokens
    if tokens is None:
        bound = _ms(result.effective_settings.get("target_latency_ns"))
        return (LatencyLimit(what="", p99_ms=result_p99_ms(result), limit_ms=bound),)
    return (
        LatencyLimit(
            what="TTFT", p99_ms=_ms(tokens.ttft_ns.get("99.00")), limit_ms=_ms(tokens.ttft_limit_ns)
        ),
        LatencyLimit(
            what="TPOT", p99_ms=_ms(tokens.tpot_ns.get("99.00")), limit_ms=_ms(tokens.tpot_limit_ns)
        ),
    )


@attrs.frozen(kw_only=True)
class Probe:
    """One Server run of the search."""

    target_qps: float
    passed: bool
    p99_ms: float | None  # a sample's p99 latency, shown for every workload
    limits: tuple[LatencyLimit, ...]  # what the run was judged by
    reasons: tuple[str, ...]
    folder: str
    tokens_per_s: float | None = None  # completed tokens/s (a workload that generates tokens)
    confirm: bool = False
    # a failing probe whose repeat passed: the machine's noise decides it, not the target;
    # counted as a failure (the capacity stays on the safe side), `spread` of the two p99s of
    # the latency that failed it (`spread_of`)
    inconclusive: bool = False
    spread: float | None = None
    spread_of: str = "p99"

    @property
    def generates_tokens(self) -> bool:
        """Whether the run was judged by token latencies (TTFT, TPOT)."""
        return any(limit.what for limit in self.limits)

    def over(self) -> LatencyLimit | None:
        """The first measured latency over its limit (None: none was)."""
        return next((x for x in self.limits if x.p99_ms is not None and not x.within), None)

    def latency(self, name: str) -> float | None:
        """The p99 (ms) of the latency called `name` ('p99', 'TTFT p99', 'TPOT p99')."""
        return next((x.p99_ms for x in self.limits if x.name == name), None)

    def summary(self) -> str:
        """Every latency against its limit, then any other reason: what decided the probe."""
        texts = [limit.text() for limit in self.limits]
        return "; ".join([*texts, *(r for r in self.reasons if r not in texts)])

    def row(self) -> dict[str, Any]:
        verdict = "pass" if self.passed else "fail"
        if self.inconclusive:
            verdict = "inconclusive" + (
                "" if self.spread is None else f" ({self.spread_of} spread {self.spread:.0%})"
            )
        row: dict[str, Any] = {
            "run": "confirm" if self.confirm else "probe",
            "target QPS": self.target_qps,
            "tokens/s": self.tokens_per_s,
            "p99 ms": self.p99_ms,
        }
        for limit in self.limits:
            row[f"{limit.name} ms"] = limit.p99_ms
            row[f"{limit.limit_name} ms"] = limit.limit_ms
        return row | {"verdict": verdict, "why": "; ".join(self.reasons) or None}


@attrs.frozen(kw_only=True)
class CapacityResult:
    """The Server capacity of one profile, the runs it rests on, and whether it is complete."""

    benchmark: str
    profile: str
    gpu: str
    emulated: bool
    backend: str
    preset: str
    qps: float
    confirmed: bool
    bracket_closed: bool
    probes: tuple[Probe, ...]
    outdir: str
    key: str
    passed_qps: float | None = None  # the highest probe target that passed
    failed_qps: float | None = None  # the lowest probe target that failed
    cache_note: str | None = None  # whether the answer was cached, once that was tried
    # the scenario searched: Server, or MLPerf's Interactive (LoadGen's Server, tighter limits)
    loadgen_scenario: str = "Server"
    # a token workload's completed tokens/s in the run at the answer (the last confirming run)
    tokens_per_s: float | None = None

    @property
    def partial(self) -> bool:
        return not (self.confirmed and self.bracket_closed)

    @property
    def generates_tokens(self) -> bool:
        """Whether the runs were judged by token latencies (TTFT and TPOT)."""
        return any(p.generates_tokens for p in self.probes)

    def _judged_by(self) -> str:
        """'the TTFT and TPOT limits' of a token workload's test, else 'the latency bound'."""
        return "the TTFT and TPOT limits" if self.generates_tokens else "the latency bound"

    def limits_text(self) -> str | None:
        """'p99 TTFT <= 2000 ms and TPOT <= 100 ms', the limits the last run was held to as its
        log holds them (a token workload's; None for others)."""
        last = next((p for p in reversed(self.probes) if p.generates_tokens), None)
        if last is None:
            return None
        held = [
            f"{x.what} <= {'?' if x.limit_ms is None else f'{x.limit_ms:g}'} ms"
            for x in last.limits
        ]
        return f"p99 {' and '.join(held)}"

    def labels(self) -> list[str]:
        labels = []
        if not self.bracket_closed and self.failed_qps is None:
            labels.append(
                f"PARTIAL: every probe passed, up to {_qps(self.passed_qps)} QPS; the capacity is at "
                "least this (raise max_steps)"
            )
        elif not self.bracket_closed:
            labels.append(
                f"PARTIAL: the probes ran out before the bracket was narrowed: {_qps(self.passed_qps)} "
                f"QPS passed, {_qps(self.failed_qps)} QPS failed, wider than the tolerance; the capacity "
                "lies between them (raise max_steps or tolerance)"
            )
        if not self.confirmed:
            labels.append(
                f"PARTIAL: the confirming run was INVALID or over {self._judged_by()} at every step "
                "down; not confirmed"
            )
        limits = self.limits_text()
        if limits is not None:
            labels.append(
                f"{self.loadgen_scenario} test of a token workload: each run is judged by {limits} "
                "(the limits LoadGen logged for this test), the confirming run by LoadGen's verdict "
                "too; tokens/s: completed tokens per second"
            )
        if self.confirmed and self.preset != "submission":
            labels.append(
                f"confirmed by {self._judged_by()}: a quick-preset run is too short for LoadGen's "
                "early-stopping and duration rules (preset='submission' confirms with LoadGen's "
                "full verdict)"
            )
        noisy = [p for p in self.probes if p.inconclusive]
        if noisy:
            spreads = [p.spread for p in noisy if p.spread is not None]
            spread = f", spread of the failing p99 up to {max(spreads):.0%}" if spreads else ""
            labels.append(
                f"{len(noisy)} probe(s) inconclusive: failed, then passed when repeated at the same "
                f"target{spread}: the machine's noise, not the target, decided them; counted as "
                "failures, so the capacity is on the safe side (a quieter machine gives a tighter one)"
            )
        if self.emulated:
            labels.append(EMULATED_LABEL)
        return labels

    def title(self) -> str:
        where = f"{self.gpu} [emulated]" if self.emulated else self.gpu
        tokens = (
            "" if self.tokens_per_s is None else f", {self.tokens_per_s:,.1f} completed tokens/s"
        )
        return (
            f"{self.loadgen_scenario} capacity of {self.profile} on {where}, {self.benchmark}, "
            f"backend {self.backend}: {self.qps:,.1f} QPS{tokens}"
        )

    def columns(self) -> list[str]:
        """The probe table's columns: a sample's p99 and its bound, or for a token workload its
        tokens/s, a sample's p99, and TTFT's and TPOT's p99 each with its limit."""
        measured = next((p for p in self.probes if p.limits), None)
        limits = [] if measured is None else measured.limits
        judged = [c for x in limits for c in (f"{x.name} ms", f"{x.limit_name} ms")]
        if self.generates_tokens:
            judged = ["tokens/s", "p99 ms", *judged]
        return ["run", "target QPS", *(judged or ["p99 ms", "bound ms"]), "verdict", "why"]

    def table(self) -> str:
        return "\n".join(
            [
                self.title(),
                text_table([p.row() for p in self.probes], self.columns()),
                *(f"note: {label}" for label in self.labels()),
                *([self.cache_note] if self.cache_note else []),
            ]
        )

    def store(self, cache_dir: PathArg | None = None) -> CapacityResult:
        """This result once the cache was tried: a complete answer is stored under its key, a
        partial one never is; a write that fails is a warning in `cache_note`, never an error."""
        if self.partial:
            note = "not cached: a partial search never replaces a cached capacity"
        else:
            entry = {
                "qps": self.qps,
                "bracket_closed": self.bracket_closed,
                "folder": self.outdir,
                "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            }
            try:
                path = store_capacity(self.key, entry, cache_dir)
            except OutputDirError as exc:
                note = f"warning: not cached ({exc}); the answer above stands"
                log.warning("capacity %s: %s", self.profile, note)
            else:
                note = (
                    f"cached as {self.key!r} in {str(path)!r}; later {self.loadgen_scenario} runs "
                    f"of {self.profile} layouts use it as their target"
                )
        return attrs.evolve(self, cache_note=note)

    def __str__(self) -> str:
        return self.table()

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        data["labels"] = self.labels()
        return data


def _one_run(result: LayoutResult) -> RunResult:
    """A search's run: it passes no repeats and no isolation, so the layout result is one run."""
    return cast(RunResult, result)


def _probe(run: RunResult, target: float, *, confirm: bool, quick: bool) -> Probe:
    instance = run.instances[0]
    result = instance.performance
    limits = _limits(result)
    errors = () if result is None else (result.error,) if result.error else ()
    within = run.ok and not errors and bool(limits) and all(x.within for x in limits)
    reasons: tuple[str, ...] = errors or (
        () if within else tuple(x.text() for x in limits if not x.within) or ("no latency",)
    )
    passed = within
    if confirm:
        logged = () if result is None else tuple(result.invalid_reasons)
        short = all(_short_run_reason(r) for r in logged)
        # LoadGen's full verdict and the limits, except that a quick preset's run is too short
        # for LoadGen's early-stopping and duration rules: there the limits alone decide (labelled)
        passed = within and ((run.ok and run.all_valid) or (short and quick))
        reasons = logged + tuple(r for r in reasons if r not in logged)
    if not run.ok:
        reasons = (instance.error or "the run failed",)
    tokens = None if result is None else result.tokens
    return Probe(
        target_qps=target,
        passed=passed,
        p99_ms=result_p99_ms(result),
        limits=limits,
        reasons=reasons,
        folder=run.outdir,
        tokens_per_s=None if tokens is None else tokens.tokens_per_second,
        confirm=confirm,
    )


def _positive(*, whole: bool = False, optional: bool = False) -> Callable[..., None]:
    """The check of a positive number (a whole one with `whole`; None too with `optional`)."""

    def check(instance: object, attribute: attrs.Attribute, value: object) -> None:
        if value is None and optional:
            return
        checked = is_whole(value) if whole else is_number(value)
        if not checked or not isinstance(value, int | float) or value <= 0:  # narrowed for <=
            raise SettingsError(
                f"{attribute.name} must be a positive {'whole ' if whole else ''}number, got "
                f"{value!r}"
            )

    return check


@attrs.frozen(kw_only=True)
class SearchOptions:
    """The search's own options, each declared once (its check, doc and `capacity` flag); the
    run options it passes on to every run are checked by RunOptions."""

    low_qps: float | None = option(
        None,
        check=_positive(optional=True),
        doc="the first target; a probe that fails there is an error (no lower target is tried). "
        "Default: a quarter of a short Offline run's throughput.",
        flag=Flag(
            name="--low-qps",
            type=decimal_number,
            metavar="QPS",
            help="first target; a failure there is an error (default: a quarter of an Offline run)",
        ),
    )
    probe_ms: int | None = option(
        2000,
        check=_positive(whole=True, optional=True),
        accepts="int",
        doc="min_duration of each probe (None: the preset's).",
        flag=Flag(
            name="--probe-ms", type=whole_number, help="min_duration of each probe (default 2000)"
        ),
    )
    confirm_ms: int | None = option(
        None,
        check=_positive(whole=True, optional=True),
        doc="min_duration of the confirming run (default: the preset's).",
        flag=Flag(
            name="--confirm-ms",
            type=whole_number,
            help="min_duration of the confirming run (default: the preset's)",
        ),
    )
    tolerance: float = option(
        0.1,
        check=_positive(),
        doc="the bracket's relative width at which bisection stops.",
        flag=Flag(
            name="--tolerance",
            type=decimal_number,
            help="bracket width at which to stop (default 0.1)",
        ),
    )
    max_steps: int = option(
        12,
        check=_positive(whole=True),
        doc="the most probes the search runs.",
        flag=Flag(name="--max-steps", type=whole_number, help="most probes (default 12)"),
    )


SEARCH_OPTIONS = declared_options(SearchOptions)
# the run options of `capacity` that each of its runs takes as they are
_PASSED_ON = ("benchmark", "gpu", "backend", "precision", "preset", "variant", "emulate")


@attrs.define
class _Search:
    """One search under way: its options, where its runs go, and the probes so far."""

    profile: str
    loadgen_scenario: str  # Server, or MLPerf's Interactive (a Server test, tighter limits)
    options: SearchOptions
    root: Path
    common: dict[str, Any]  # the run options every run of the search takes
    extra: dict[str, float]  # the caller's LoadGen settings, under the search's own
    measure: Measure  # the public run and plan, handed in by the face
    probes: list[Probe] = attrs.Factory(list)
    # the scenario as the runs report it ('Server', 'Interactive'), once one ran
    reported_scenario: str | None = None

    @property
    def scenario_name(self) -> str:
        """The scenario searched, as the runs report it (else as the caller wrote it)."""
        return self.reported_scenario or self.loadgen_scenario

    @classmethod
    def of(cls, values: dict[str, Any]) -> _Search:
        """The search of `capacity`'s arguments, each checked before any run starts."""
        from mlperf_mig.runner.plan import default_outdir

        options = SearchOptions(**{o.name: values[o.name] for o in SEARCH_OPTIONS})
        outdir, cache_dir = values["outdir"], values["cache_dir"]
        check_outdir("outdir (--outdir)", outdir)
        cache_file(cache_dir)  # an empty cache folder name is refused before any run
        common = {name: values[name] for name in _PASSED_ON}
        common |= {"accuracy": False, "cache_dir": cache_dir, "progress": values["progress"]}
        run_options({**common, "settings": values["settings"]})  # checked as `run` checks them
        check_progress(values["progress"])
        _check_server_test(values, common)
        return cls(
            profile=values["profile"],
            loadgen_scenario=values["loadgen_scenario"],
            options=options,
            root=Path(outdir) if outdir is not None else default_outdir("capacity"),
            common=common,
            extra=dict(values["settings"] or {}),
            measure=values["measure"],
        )

    @property
    def steps_left(self) -> bool:
        return len(self.probes) < self.options.max_steps

    def _once(self, target: float, folder: str, duration: int | None, *, confirm: bool) -> Probe:
        duration_setting = {"min_duration": duration} if duration else {}
        overrides = {**self.extra, "target_qps": target, **duration_setting}
        result = self.measure.run(
            [self.profile],
            loadgen_scenario=self.loadgen_scenario,
            outdir=self.root / folder,
            settings=overrides,
            **self.common,
        )
        quick = self.common["preset"] != "submission"
        run = _one_run(result)
        self.reported_scenario = run.loadgen_scenario
        return _probe(run, target, confirm=confirm, quick=quick)

    def server(self, target: float, folder: str, duration: int | None, *, confirm: bool) -> Probe:
        """One Server run at `target`, recorded; a probe failed by a latency over its limit is
        run again once."""
        probe = self._once(target, folder, duration, confirm=confirm)
        if not confirm and not probe.passed and probe.over() is not None:
            # a short probe's p99s move with the machine's load: a failure is measured again
            # before the search relies on it, and two that disagree are inconclusive
            again = self._once(target, f"{folder}-again", duration, confirm=False)
            if again.passed:
                probe = _inconclusive(probe, again)
        self.probes.append(probe)
        verdict = "pass" if probe.passed else "fail"
        log.info("capacity %s: %s %.4g QPS -> %s", self.profile, folder, target, verdict)
        return probe

    def probe(self, target: float) -> Probe:
        """The next probe of the search, at `target`."""
        folder = f"probe-{len(self.probes) + 1}"
        return self.server(target, folder, self.options.probe_ms, confirm=False)


def _check_server_test(values: Mapping[str, Any], common: Mapping[str, Any]) -> None:
    """`loadgen_scenario` runs LoadGen's Server test (Server, or MLPerf's Interactive where the
    workload has it), else one line; the plan also checks the profile, GPU and workload."""
    from mlperf_mig.workloads import get_workload

    scenario = values["loadgen_scenario"]
    workload = get_workload(values["benchmark"])
    if "Server" not in workload.loadgen_scenarios:
        raise SettingsError(
            f"capacity searches a Server target QPS, and MLPerf runs {workload} in "
            f"{', '.join(workload.loadgen_scenarios)} only: it has no Server test to search "
            "(`mlperf-mig run` measures those scenarios)"
        )
    planned = {k: v for k, v in common.items() if k != "progress"}
    # a target of its own, so that the check takes no cached target (a bad cache entry is what
    # a new search replaces)
    settings = {**dict(values["settings"] or {}), "target_qps": values["low_qps"] or 1.0}
    the_plan = values["measure"].plan(
        [values["profile"]], loadgen_scenario=scenario, settings=settings, **planned
    )
    if the_plan.loadgen_scenario != "Server":
        raise SettingsError(
            f"capacity searches a Server target QPS: loadgen_scenario {scenario!r} runs LoadGen's "
            f"{the_plan.loadgen_scenario} test, which has no target QPS; pass Server (--loadgen-"
            "scenario Server), or MLPerf's Interactive where the workload has it"
        )


def _inconclusive(probe: Probe, again: Probe) -> Probe:
    """A failed probe whose repeat passed: counted as a failure, with the spread of the two p99s
    of the latency that failed it."""
    over = probe.over()
    name = "p99" if over is None else over.name
    return attrs.evolve(
        probe,
        inconclusive=True,
        spread=relative_spread([probe.latency(name), again.latency(name)]),
        spread_of=name,
        reasons=(
            *probe.reasons,
            f"passed when repeated ({name} {again.latency(name) or 0.0:,.2f} ms, {again.folder})",
        ),
    )


def _start_target(search: _Search) -> float:
    """The first target: the caller's low_qps, or a quarter of a short Offline run's throughput."""
    if search.options.low_qps is not None:
        return float(search.options.low_qps)
    outdir = search.root / "offline"
    offline = _one_run(
        search.measure.run(
            [search.profile], loadgen_scenario="Offline", outdir=outdir, **search.common
        )
    )
    if offline.total_throughput is None:
        raise SettingsError(
            f"the Offline run that sizes the search on {search.profile} measured nothing "
            f"({offline.outdir}); pass low_qps"
        )
    return offline.total_throughput / 4


def _start(search: _Search, start: float) -> tuple[float, float | None]:
    """(a target that passed, the lowest that failed or None) from the first probes.

    A derived start may be too high: it is halved (a few times) while it fails. A start given by
    the caller is the lowest target they accept, so a failure there ends the search.
    """
    halvings = 0 if search.options.low_qps is not None else START_HALVINGS
    high = None
    while not (first := search.probe(start)).passed:
        if halvings == 0 or not search.steps_left:
            raise SettingsError(
                f"capacity search: the lowest target, {_qps(start)} QPS, already fails the "
                f"{search.scenario_name} test on {search.profile} ({first.summary()}); pass a "
                "lower low_qps (--low-qps)"
            )
        high, start, halvings = start, start / 2, halvings - 1
    return start, high


def _bracket(search: _Search, low: float, high: float | None) -> tuple[float, float | None]:
    """The bracket once the target doubled from `low` until a probe failed (or the steps ran
    out: then `high` is still None)."""
    while search.steps_left and high is None:
        target = low * 2
        if search.probe(target).passed:
            low = target
        else:
            high = target
    return low, high


def _bisect(search: _Search, low: float, high: float | None) -> tuple[float, float | None]:
    """The bracket narrowed by geometric means until it is within the tolerance (or the steps
    ran out)."""
    tolerance = search.options.tolerance
    while high is not None and high / low > 1 + tolerance and search.steps_left:
        target = math.sqrt(low * high)
        if search.probe(target).passed:
            low = target
        else:
            high = target
    return low, high


def _confirm(search: _Search, qps: float) -> tuple[float, bool]:
    """(the answer, whether a run of the confirming length passed at it): a confirming run that
    fails steps the target down by the tolerance, CONFIRM_TRIES runs at most."""
    for k in range(1, CONFIRM_TRIES + 1):
        if search.server(qps, f"confirm-{k}", search.options.confirm_ms, confirm=True).passed:
            return qps, True
        if k < CONFIRM_TRIES:
            qps /= 1 + search.options.tolerance
    return qps, False


def _result(
    search: _Search, qps: float, confirmed: bool, low: float, high: float | None
) -> CapacityResult:
    """The search's answer, keyed by the plan of its last run."""
    # the key's plan, with the settings of the last run (so that it takes no cached target: a bad
    # cache entry is what a new search replaces, and it must not refuse the answer)
    confirm_ms = search.options.confirm_ms
    last = {
        **search.extra,
        "target_qps": qps,
        **({"min_duration": confirm_ms} if confirm_ms else {}),
    }
    common = {k: v for k, v in search.common.items() if k != "progress"}
    the_plan = search.measure.plan(
        [search.profile], loadgen_scenario=search.loadgen_scenario, settings=last, **common
    )
    return CapacityResult(
        benchmark=the_plan.benchmark.name,
        profile=search.profile,
        gpu=the_plan.gpu,
        emulated=the_plan.deployment.emulated,
        backend=the_plan.backend,
        preset=search.common["preset"],
        qps=qps,
        confirmed=confirmed,
        bracket_closed=high is not None and high / low <= 1 + search.options.tolerance,
        probes=tuple(search.probes),
        outdir=str(search.root),
        key=plan_key(the_plan, search.profile),
        passed_qps=low,
        failed_qps=high,
        loadgen_scenario=search.scenario_name,
        tokens_per_s=search.probes[-1].tokens_per_s,
    )


def capacity(
    benchmark: str = "resnet50",
    profile: str = "1g.10gb",
    gpu: str | None = None,
    *,
    backend: str = "auto",
    precision: str | None = None,
    preset: str = "quick",
    variant: str = "full",
    emulate: bool = False,
    loadgen_scenario: str = "Server",
    low_qps: float | None = None,
    probe_ms: int = 2000,
    confirm_ms: int | None = None,
    tolerance: float = 0.1,
    max_steps: int = 12,
    settings: Mapping[str, float] | None = None,
    outdir: PathArg | None = None,
    cache_dir: PathArg | None = None,
    progress: bool | TextIO = False,
    store: bool = True,
    measure: Measure,
) -> CapacityResult:
    """The highest Server target QPS of one instance of `profile` that stays within the
    benchmark's latency limits (the module describes the search): a sample's p99 within the
    Server bound, or a token workload's p99 TTFT and TPOT within the limits of its test.
    `loadgen_scenario`: Server, or MLPerf's Interactive where the workload has it (a Server test
    under tighter TTFT and TPOT limits). `settings`: further LoadGen settings for every run. Runs go to `outdir`/probe-<k>/ and confirm-<k>/. A complete answer is
    cached in the engine cache (`store=False`: not yet; `CapacityResult.store` does it, as the CLI
    does once it has printed the answer); the result's `cache_note` says whether it was.
    """
    search = _Search.of(locals())
    low, high = _bisect(search, *_bracket(search, *_start(search, _start_target(search))))
    qps, confirmed = _confirm(search, low)
    result = _result(search, qps, confirmed, low, high)
    return result.store(cache_dir) if store else result


capacity.__doc__ = f"{capacity.__doc__}{options_doc(SEARCH_OPTIONS)}\n"
