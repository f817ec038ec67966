"""Server capacity of one MIG profile: the highest target QPS that stays within the latency bound.

A bracketing search over short Server runs of one instance of the profile (the rest of the GPU
idle): from a starting target (a quarter of a short Offline run's throughput, halved while it
fails, or `low_qps`, where a failure ends the search) the target doubles while a probe passes and is then bisected (geometric means) until the bracket is
within `tolerance`. A probe passes when its p99 latency is within the benchmark's Server bound
and LoadGen logged no error; a short probe cannot satisfy LoadGen's early-stopping and duration
rules, so its own verdict is not used. The answer is then confirmed by one run of the chosen
length (`confirm_ms`, default the preset's) judged by LoadGen's full verdict; if that run is
INVALID the target steps down by the tolerance and is confirmed again (twice at most). A probe
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
from typing import Any, TextIO, cast

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
from mlperf_mig.runner.results import EMULATED_LABEL, LayoutResult, RunResult
from mlperf_mig.study.capacity_cache import plan_key
from mlperf_mig.study.measure import Measure

log = logging.getLogger(__name__)

PathArg = str | os.PathLike[str]
CONFIRM_TRIES = 3
SHORT_RUN_REASONS = (
    "early stopping condition not met",
    MIN_DURATION_REASON,
    "min query count not met",
)
QUICK_CONFIRM_LABEL = (
    "confirmed by the latency bound: a quick-preset run is too short for LoadGen's early-stopping "
    "and duration rules (preset='submission' confirms with LoadGen's full verdict)"
)
START_HALVINGS = 4


@attrs.frozen(kw_only=True)
class Probe:
    """One Server run of the search."""

    target_qps: float
    passed: bool
    p99_ms: float | None
    bound_ms: float | None
    reasons: tuple[str, ...]
    folder: str
    confirm: bool = False
    # a failing probe whose repeat passed: the machine's noise decides it, not the target;
    # counted as a failure (the capacity stays on the safe side), `spread` of the two p99s
    inconclusive: bool = False
    spread: float | None = None

    def row(self) -> dict[str, Any]:
        verdict = "pass" if self.passed else "fail"
        if self.inconclusive:
            verdict = "inconclusive" + (
                "" if self.spread is None else f" (p99 spread {self.spread:.0%})"
            )
        return {
            "run": "confirm" if self.confirm else "probe",
            "target QPS": self.target_qps,
            "p99 ms": self.p99_ms,
            "bound ms": self.bound_ms,
            "verdict": verdict,
            "why": "; ".join(self.reasons) or None,
        }


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

    @property
    def partial(self) -> bool:
        return not (self.confirmed and self.bracket_closed)

    def labels(self) -> list[str]:
        labels = []
        if not self.bracket_closed and self.failed_qps is None:
            labels.append(
                f"PARTIAL: every probe passed, up to {self.passed_qps:.4g} QPS; the capacity is at "
                "least this (raise max_steps)"
            )
        elif not self.bracket_closed:
            labels.append(
                f"PARTIAL: the probes ran out before the bracket was narrowed: {self.passed_qps:.4g} "
                f"QPS passed, {self.failed_qps:.4g} QPS failed, wider than the tolerance; the capacity "
                "lies between them (raise max_steps or tolerance)"
            )
        if not self.confirmed:
            labels.append(
                "PARTIAL: the confirming run was INVALID at every step down; not confirmed"
            )
        if self.confirmed and self.preset != "submission":
            labels.append(QUICK_CONFIRM_LABEL)
        noisy = [p for p in self.probes if p.inconclusive]
        if noisy:
            spreads = [p.spread for p in noisy if p.spread is not None]
            spread = f", p99 spread up to {max(spreads):.0%}" if spreads else ""
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
        return (
            f"Server capacity of {self.profile} on {where}, {self.benchmark}, backend {self.backend}: "
            f"{self.qps:,.1f} QPS"
        )

    def table(self) -> str:
        columns = ["run", "target QPS", "p99 ms", "bound ms", "verdict", "why"]
        return "\n".join(
            [
                self.title(),
                text_table([p.row() for p in self.probes], columns),
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
                    f"cached as {self.key!r} in {str(path)!r}; later Server runs of {self.profile} "
                    "layouts use it as their target"
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
    from mlperf_mig.runner.results import result_p99_ms

    instance = run.instances[0]
    result = instance.performance
    p99 = result_p99_ms(result)
    bound_ns = None if result is None else result.effective_settings.get("target_latency_ns")
    bound = None if not bound_ns else bound_ns / 1e6
    errors = () if result is None else (result.error,) if result.error else ()
    within = run.ok and not errors and p99 is not None and bound is not None and p99 <= bound
    reasons: tuple[str, ...] = errors or (
        () if within else (f"p99 {p99:.2f} ms over the bound" if p99 is not None else "no latency",)
    )
    passed = within
    if confirm:
        logged = () if result is None else tuple(result.invalid_reasons)
        short = all(r in SHORT_RUN_REASONS for r in logged)
        # the full verdict, except that a quick preset's run is too short for LoadGen's
        # early-stopping and duration rules: there the latency bound alone decides (labelled)
        passed = (run.ok and run.all_valid) or (within and short and quick)
        reasons = logged + tuple(r for r in reasons if r not in logged)
    if not run.ok:
        reasons = (instance.error or "the run failed",)
    return Probe(
        target_qps=target,
        passed=passed,
        p99_ms=p99,
        bound_ms=bound,
        reasons=reasons,
        folder=run.outdir,
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
    options: SearchOptions
    root: Path
    common: dict[str, Any]  # the run options every run of the search takes
    extra: dict[str, float]  # the caller's LoadGen settings, under the search's own
    measure: Measure  # the public run and plan, handed in by the face
    probes: list[Probe] = attrs.Factory(list)

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
        return cls(
            profile=values["profile"],
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
            loadgen_scenario="Server",
            outdir=self.root / folder,
            settings=overrides,
            **self.common,
        )
        quick = self.common["preset"] != "submission"
        return _probe(_one_run(result), target, confirm=confirm, quick=quick)

    def server(self, target: float, folder: str, duration: int | None, *, confirm: bool) -> Probe:
        """One Server run at `target`, recorded; a failed probe is run again once."""
        probe = self._once(target, folder, duration, confirm=confirm)
        if not confirm and not probe.passed and probe.p99_ms is not None:
            # a short probe's p99 moves with the machine's load: a failure is measured again
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


def _inconclusive(probe: Probe, again: Probe) -> Probe:
    """A failed probe whose repeat passed: counted as a failure, with the spread of the two."""
    return attrs.evolve(
        probe,
        inconclusive=True,
        spread=relative_spread([probe.p99_ms, again.p99_ms]),
        reasons=(
            *probe.reasons,
            f"passed when repeated (p99 {again.p99_ms:.2f} ms, {again.folder})",
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
                f"capacity search: the lowest target, {start:.4g} QPS, already fails on "
                f"{search.profile} (p99 {first.p99_ms} ms, bound {first.bound_ms} ms; "
                f"{'; '.join(first.reasons)}); pass a lower low_qps (--low-qps)"
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
        [search.profile], loadgen_scenario="Server", settings=last, **common
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
    benchmark's latency bound (the module describes the search); `settings`: further LoadGen
    settings for every run. Runs go to `outdir`/probe-<k>/ and confirm-<k>/. A complete answer is
    cached in the engine cache (`store=False`: not yet; `CapacityResult.store` does it, as the CLI
    does once it has printed the answer); the result's `cache_note` says whether it was.
    """
    search = _Search.of(locals())
    low, high = _bisect(search, *_bracket(search, *_start(search, _start_target(search))))
    qps, confirmed = _confirm(search, low)
    result = _result(search, qps, confirmed, low, high)
    return result.store(cache_dir) if store else result


capacity.__doc__ = f"{capacity.__doc__}{options_doc(SEARCH_OPTIONS)}\n"
