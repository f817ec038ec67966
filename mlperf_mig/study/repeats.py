"""Repeated runs of one layout, and its isolation runs: `RepeatedRun`.

`run(..., repeats=3)` runs the layout three times, each repeat a complete run in its own folder
(`<run>/repeat-1/`, ... with its own results.json, plan.json, logs and folder lock), and
`isolation=True` also runs each distinct profile of the layout alone: the layout's plan with
only the first instance of that profile kept, on the same device (MIG instance or CPUs), the
rest of the GPU idle (`<run>/alone-<profile>/repeat-k/`). A repeat whose results.json is already
there with the same settings is reused (resume works per repeat). `<run>/repeats.json` lists the
folders, relative to the study's own folder, so a study can be copied or moved and resumed or
reported where it is; the statistics (runner/stats.py) are computed from the runs' own
results.json, so they can never disagree with them. Every field read back from repeats.json is
checked (runs/alone/resumed are folders inside the study, no symlink on the way) and a wrong one
is refused with one line naming the file and the field.

Interference of an instance is its throughput (or p99 latency) inside the layout relative to its
profile's alone run. On emulated CPU partitions that measures how the CPU's cores, caches and
memory bandwidth are shared, not a GPU, and every table says so.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import attrs

from mlperf_mig import registry
from mlperf_mig._io import (
    LOCK_FILE,
    atomic_write_json,
    claim_folder,
    finite_number,
    inside,
    read_json,
    safe_name,
)
from mlperf_mig.errors import (
    DataFileError,
    MlperfMigError,
    OutputDirError,
    SettingsError,
    UntrustedPathError,
)
from mlperf_mig.runner.execute import sibling_indexes, skipped_sibling
from mlperf_mig.runner.plan import RunPlan
from mlperf_mig.runner.results import (
    PER_GPU_COLUMN,
    RESULTS_FILE,
    LayoutResult,
    RunResult,
    gpu_subtotals_text,
    token_cells,
)
from mlperf_mig.runner.stats import (
    CHANGE_NOTE,
    CONFIDENCE,
    FEW_REPEATS_NOTE,
    MIN_REPEATS,
    Change,
    Summary,
    summarize,
)
from mlperf_mig.study.chart import measured_value
from mlperf_mig.study.overall import OverallProgress
from mlperf_mig.study.report_html import write_report
from mlperf_mig.study.tokens import (
    TOKENS_PER_J,
    TOKENS_PER_S,
    generates_tokens,
    gpu_tokens_per_s,
    instance_token_cells,
    instance_tokens_per_s,
    run_token_values,
    token_columns,
)

log = logging.getLogger(__name__)

REPEATS_FILE = "repeats.json"
SWEEP_FILE = "sweep.json"
# The file at the top of a folder that says what the folder holds; `report` reads one of them.
FOLDER_KINDS = {
    RESULTS_FILE: "a single run",
    REPEATS_FILE: "a study (run --repeats or --isolation)",
    SWEEP_FILE: "a sweep",
}
SCHEMA = 2  # 2: "target" became "partitioning"
# the sweep table's column of the instance runs that used a target an earlier run calibrated
REUSED_COLUMN = "reused targets"
ISOLATION_EMULATED_LABEL = (
    "isolation on emulated CPU partitions measures how the CPU's cores, caches and memory "
    "bandwidth are shared, not MIG isolation on a GPU"
)
ISOLATION_LABEL = (
    "interference: an instance inside the layout against its profile run alone on the same "
    "device, the rest of the GPU idle (negative throughput and positive p99 = slowed by neighbours)"
)

Executor = Callable[[RunPlan], RunResult]
_Stat = TypeVar("_Stat", Summary | None, Change | None)


def repeat_folder(index: int) -> str:
    """`repeat-1`, `repeat-2`, ... (numbered from 1)."""
    return f"repeat-{index}"


def alone_folder(profile: str) -> str:
    return f"alone-{profile}"


def refuse_other_kinds(folder: str | os.PathLike[str], keep: str, what: str) -> None:
    """Refuse to write `what` (whose index is `keep`) into a folder that holds another kind of
    result: a run written into a study's folder would hide the study from report and advise.
    A lock file planted there as a symlink is refused too (claiming would write through it)."""
    base = Path(folder)
    inside(base, LOCK_FILE, "the folder's lock")
    for name, kind in FOLDER_KINDS.items():
        if name != keep and ((base / name).exists() or (base / name).is_symlink()):
            raise OutputDirError(
                f"{str(base)!r} holds {kind} ({name}); {what} written into it would hide it from "
                "report and advise: pass a new output folder (a study or sweep is resumed by its "
                "own command with the same --outdir)"
            )


def resumable(folder: Path, plan: RunPlan) -> RunResult | None:
    """The finished run in `folder` when it was made with the same settings and layout, as
    the run of that folder (wherever the folder was when it ran)."""
    results = inside(folder, RESULTS_FILE, "a repeat's results")
    if not results.is_file():
        return None
    try:
        previous = RunResult.load(results)
    except UntrustedPathError:
        raise
    except MlperfMigError as exc:
        log.warning("not resuming %s: %s", folder, exc)
        return None
    same = previous.settings_key == plan.settings_key and previous.layout == plan.layout
    return attrs.evolve(previous, outdir=str(folder)) if same and previous.ok else None


def check_study_folders(root: Path, jobs: Sequence[tuple[str | None, RunPlan]]) -> None:
    """Before anything runs: every repeat's folder is a plain folder inside the study (a
    symlinked repeat would be read and written through) and holds no other kind of result."""
    for _, job in jobs:
        sub = inside(root, os.path.relpath(job.outdir, root), "a repeat's folder")
        inside(sub, RESULTS_FILE, "a repeat's results")
        refuse_other_kinds(sub, RESULTS_FILE, "a repeat")


# --- repeats.json and sweep.json read back ----------------------------------------------------
_MISSING = object()


@attrs.frozen
class IndexFile:
    """An index (repeats.json, sweep.json) read back from a folder the project does not trust:
    every field is checked on the way and a wrong one is refused with one line naming the file
    and the field. Folders it names must lie inside its own folder."""

    folder: Path
    path: Path
    data: Mapping[str, Any]

    @classmethod
    def read(cls, folder: str | os.PathLike[str], name: str, written_by: str) -> IndexFile:
        base = Path(folder)
        path = inside(base, name, "the index")
        try:
            data = read_json(path, "index", fix=f"pass a folder written by {written_by}")
        except FileNotFoundError:
            raise OutputDirError(
                f"{str(base)!r} holds no {name}; pass a folder written by {written_by}"
            ) from None
        if not isinstance(data, dict):
            raise DataFileError(
                f"{str(path)!r} holds a JSON {type(data).__name__}, not an object; pass a folder "
                f"written by {written_by}"
            )
        return cls(base, path, data)

    def wrong(self, field: str, value: object, expected: str) -> DataFileError:
        return DataFileError(
            f"{str(self.path)!r}: {field} is {_shown(value)}, expected {expected}; the file was "
            "edited or is not one this tool wrote: fix that field or write the folder again"
        )

    def strings(self, field: str) -> list[str]:
        """A list of strings (labels such as `resumed`)."""
        value = self.data.get(field, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.wrong(field, value, "a list of strings")
        return value

    def numbers(self, field: str) -> list[float]:
        value = self.data.get(field, [])
        if not isinstance(value, list) or not all(finite_number(v) for v in value):
            raise self.wrong(field, value, "a list of finite numbers")
        return [float(v) for v in value]

    def flag(self, field: str) -> bool:
        value = self.data.get(field, False)
        if not isinstance(value, bool):
            raise self.wrong(field, value, "true or false")
        return value

    def text(self, field: str) -> str | None:
        value = self.data.get(field)
        if value is not None and not isinstance(value, str):
            raise self.wrong(field, value, "a string or null")
        return value

    def mapping(self, field: str) -> dict[str, Any]:
        value = self.data.get(field, {})
        if not isinstance(value, dict):
            raise self.wrong(field, value, "an object")
        return value

    def folders(self, field: str, *, required: bool = True) -> list[Path]:
        """The folders a field lists, each inside this index's folder (a missing or empty list
        is refused when `required`)."""
        return self.folder_list(
            field, self.data.get(field, _MISSING if required else []), required=required
        )

    def folder_list(self, field: str, value: object, *, required: bool = True) -> list[Path]:
        if not isinstance(value, list):
            shown = "missing" if value is _MISSING else value
            raise self.wrong(field, shown, "a list of folders relative to the index's folder")
        if required and not value:
            raise self.wrong(field, value, "at least one folder")
        # each run is read once: a folder listed again (10^6 times in a crafted index) is refused
        # before any is read, instead of reading one file a million times
        seen: set[str] = set()
        for item in value:
            normal = os.path.normpath(item) if isinstance(item, str) and item else repr(item)
            if normal in seen:
                raise self.wrong(field, value, f"each folder once ({item!r} is listed again)")
            seen.add(normal)
        return [self.inside(field, v) for v in value]

    def inside(self, field: str, value: object) -> Path:
        """`value` as a path inside the index's folder. The absolute form (hand-written, or old)
        is accepted only where it already lies inside this folder; anything else that leaves it
        ('..', another folder) is refused: a copied index must never read its original."""
        what = f"{field} in {str(self.path)!r}"
        if not isinstance(value, str) or not value:
            raise self.wrong(field, value, "a folder name relative to the index's folder")
        relative = _within(self.folder, value)
        if relative is None:
            raise UntrustedPathError(
                f"{what}: {value!r} is outside {str(self.folder)!r}; an index names folders "
                "inside its own. If this folder was copied or moved, run its study or sweep "
                "again with --outdir set to it (finished runs are reused, the index is written anew)"
            )
        return inside(self.folder, relative, what)

    def run(self, field: str, folder: Path) -> RunResult:
        """The run in `folder` (checked by `inside`), as the run of that folder."""
        results = self.inside(
            field, os.path.join(os.path.relpath(folder, self.folder), RESULTS_FILE)
        )
        return attrs.evolve(RunResult.load(results), outdir=str(folder))


def _within(folder: Path, value: str) -> str | None:
    """`value` relative to `folder`: itself when relative and not climbing out, the part below
    the folder when absolute and inside it (lexically, or below its real path), else None."""
    path = Path(value)
    if not path.is_absolute():
        return value if ".." not in path.parts else None
    normal = Path(os.path.normpath(value))
    for base in (Path(os.path.abspath(folder)), Path(os.path.realpath(folder))):
        if normal != base and normal.is_relative_to(base):
            return str(normal.relative_to(base))
    return None


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def relative_to(root: str | os.PathLike[str], path: str | os.PathLike[str], what: str) -> str:
    """`path` relative to `root` for an index; a folder outside it is a bug, never written."""
    relative = os.path.relpath(path, root)
    if relative == ".." or relative.startswith(f"..{os.sep}") or os.path.isabs(relative):
        raise OutputDirError(
            f"{what} {str(path)!r} lies outside {str(root)!r}; an index names only folders inside "
            "its own (nothing was written)"
        )
    return relative


def alone_plan(plan: RunPlan, profile: str, outdir: Path) -> RunPlan:
    """`plan` with only its first instance of `profile` kept, on the same device: that profile
    alone, the rest of the GPU idle. Every other option is the layout's, unchanged."""
    slot = next(s for s in plan.slots if s.profile == profile)
    # over several GPUs: alone on its own GPU, the deployment of that one GPU (placement/fleet.py)
    part = next((p for p in plan.deployment.parts if p.holds(slot)), plan.deployment.parts[0])
    layout = registry.parse_layout(part.layout.gpu, [profile])
    gpus = (attrs.evolve(part, layout=layout, scenario=None),) if plan.deployment.gpus else ()
    deployment = attrs.evolve(
        plan.deployment,
        layout=layout,
        scenario=None,
        slots=(slot,),
        gpus=gpus,
        partitioning=part.partitioning,
        gpu_index=part.index if plan.deployment.gpus else plan.deployment.gpu_index,
    )
    key = plan.engine_of[slot.name]
    return attrs.evolve(
        plan,
        deployment=deployment,
        outdir=str(outdir),
        engines=tuple(e for e in plan.engines if e.key == key),
        engine_of={slot.name: key},
    )


def distinct_profiles(plan: RunPlan) -> list[str]:
    """The layout's profiles in order, each once; none when the layout has one instance (that
    instance is already alone)."""
    if len(plan.slots) < 2:
        return []
    return list(dict.fromkeys(slot.profile for slot in plan.slots))


def study_plans(plan: RunPlan, repeats: int, isolation: bool) -> list[tuple[str | None, RunPlan]]:
    """(profile run alone or None for a repeat of the layout, plan) of every run of a study:
    the repeats, then the alone runs."""
    root = Path(plan.outdir)
    jobs: list[tuple[str | None, RunPlan]] = [
        (None, attrs.evolve(plan, outdir=str(root / repeat_folder(k))))
        for k in range(1, repeats + 1)
    ]
    if isolation:
        for profile in distinct_profiles(plan):
            for k in range(1, repeats + 1):
                folder = root / alone_folder(profile) / repeat_folder(k)
                jobs.append((profile, alone_plan(plan, profile, folder)))
    return jobs


def run_study(
    plan: RunPlan,
    *,
    repeats: int,
    isolation: bool,
    execute: Executor,
    bar: OverallProgress | None = None,
    resume: bool = True,
    baseline: LayoutResult | None = None,
) -> RepeatedRun:
    """Run (or resume) every repeat and alone run of `plan` and write repeats.json. The folder
    of a single run or a sweep is refused, and so is a symlinked repeat folder, before
    anything runs."""
    root = Path(plan.outdir)
    runs: list[RunResult] = []
    alone: dict[str, list[RunResult]] = {}
    resumed: list[str] = []
    jobs = study_plans(plan, repeats, isolation)
    refuse_other_kinds(root, REPEATS_FILE, "a study")
    check_study_folders(root, jobs)
    with claim_folder(root, refuse=RESULTS_FILE, what="a single run"):
        refuse_other_kinds(root, REPEATS_FILE, "a study")
        for profile, job in jobs:
            sub = Path(job.outdir)
            previous = resumable(sub, job) if resume else None
            if previous is not None:
                resumed.append(os.path.relpath(sub, root))
                result = previous
                if bar is not None:
                    bar.skip(job)
            else:
                label = f"{plan.layout} {os.path.relpath(sub, root)}"
                with claim_folder(sub, refuse=None):
                    result = bar.run(label, job, execute) if bar is not None else execute(job)
            if profile is None:
                runs.append(result)
            else:
                alone.setdefault(profile, []).append(result)
        study = RepeatedRun(
            outdir=str(root),
            runs=runs,
            alone={p: tuple(r) for p, r in alone.items()},
            isolation=isolation,
            resumed=resumed,
        )
        study = study.with_baseline(baseline)
        study.save()
    return study


def find_study_baseline(plan: RunPlan) -> LayoutResult | None:
    """A scenario-1 study (repeats.json) or run (results.json) with the same settings in a
    folder next to `plan`'s, the study preferred."""
    root = Path(plan.outdir)
    if plan.deployment.scenario == 1:
        return None
    for name in (REPEATS_FILE, RESULTS_FILE):
        for candidate in sibling_indexes(root, name):
            try:
                other: LayoutResult = (
                    RepeatedRun.load(candidate.parent)
                    if name == REPEATS_FILE
                    else RunResult.load(candidate)
                )
            except MlperfMigError as exc:
                skipped_sibling(candidate, exc)
                continue
            if other.scenario == 1 and other.settings_key == plan.settings_key and other.ok:
                return other
    return None


def _from_first(name: str) -> property:
    """A setting every repeat shares (each repeat runs the same plan), read from the first run."""
    return property(lambda self: getattr(self.first, name), doc=f"The {name} of every repeat.")


@attrs.frozen(kw_only=True)
class RepeatedRun(LayoutResult):
    """The repeats of one layout (each a complete RunResult) and, with isolation, each profile's
    runs alone: a LayoutResult of several runs, whose means, spreads, 95% intervals and
    interference are computed from them."""

    index_file: ClassVar[str] = REPEATS_FILE

    outdir: str
    runs: tuple[RunResult, ...] = attrs.field(converter=tuple[RunResult, ...])
    alone: Mapping[str, tuple[RunResult, ...]] = attrs.field(factory=dict)
    isolation: bool = False
    resumed: tuple[str, ...] = attrs.field(default=(), converter=tuple[str, ...])
    baseline_totals: tuple[float, ...] = attrs.field(default=(), converter=tuple[float, ...])
    baseline_source: str | None = None

    # --- what the repeats share: settings, read from the first --------------------------------
    gpu = _from_first("gpu")
    layout = _from_first("layout")
    scenario = _from_first("scenario")
    partitioning = _from_first("partitioning")
    benchmark = _from_first("benchmark")
    settings_key = _from_first("settings_key")
    emulated = _from_first("emulated")

    @property
    def ok(self) -> bool:
        return all(r.ok for r in [*self.runs, *self.alone_runs()])

    @property
    def all_valid(self) -> bool:
        return all(r.all_valid for r in self.runs)

    def valid_word(self) -> str:
        words = {r.summary_row()["all valid"] for r in self.runs}
        return words.pop() if len(words) == 1 else "NO"

    def gpu_runs(self) -> list[LayoutResult]:
        """[self] for a layout on one GPU; the repeats of a whole system are refused (each
        repeat's folder reads as one run per GPU)."""
        if self.first.multi_gpu:
            raise SettingsError(
                "the folder holds repeated runs of a whole system; advise reads a system's single "
                "runs (each GPU a run of its layout): pass one repeat's folder (repeat-1)"
            )
        return [self]

    # --- statistics ----------------------------------------------------------------------------
    def with_baseline(self, baseline: LayoutResult | None) -> RepeatedRun:
        """The same study with the totals of a scenario-1 run (repeated or not) to compare with."""
        if baseline is None:
            return self
        # the source is a label, kept relative to this folder so that a copy does not name
        # the original's place (a sibling study reads '../scenario-1')
        source = os.path.relpath(baseline.outdir, self.outdir)
        return attrs.evolve(self, baseline_totals=baseline.totals, baseline_source=source)

    # --- no interval over copies of one target ------------------------------------------------
    @property
    def total(self) -> Summary | None:
        return self._measured(LayoutResult.total.fget(self))  # type: ignore[attr-defined]

    @property
    def change(self) -> Change | None:
        return self._measured(LayoutResult.change.fget(self))  # type: ignore[attr-defined]

    def interference(self, index: int, what: str) -> Change | None:
        return self._measured(super().interference(index, what))

    def gpu_subtotals(self, position: int) -> Summary | None:
        return self._measured(super().gpu_subtotals(position))

    def _summarize(self, values: Sequence[float]) -> Summary | None:
        return self._measured(summarize(values))

    def _measured(self, value: _Stat) -> _Stat:
        """`value` without its interval where a run reused a calibrated target (`measured_value`)."""
        return measured_value(self, value)

    def reuse_note(self) -> str | None:
        """Which instance runs used a target an earlier run calibrated, if any."""
        reused = self.reused_targets()
        if not reused:
            return None
        total = sum(len(r.instances) for r in [*self.runs, *self.alone_runs()])
        shown = ", ".join(reused[:8]) + (", ..." if len(reused) > 8 else "")
        return (
            f"REUSED TARGETS: {len(reused)} of {total} instance runs used a target calibrated by "
            f"an earlier run, not one of their own ({shown}): their throughput repeats that "
            f"target, so no {CONFIDENCE:.0%} interval is computed over them (ranges shown); run "
            "the study into a new --outdir to measure every run"
        )

    # --- tables --------------------------------------------------------------------------------
    def labels(self) -> list[str]:
        labels = list(self.first.labels())
        if self.isolation:
            labels.append(ISOLATION_LABEL)
            if self.first.emulated:
                labels.append(ISOLATION_EMULATED_LABEL)
        return labels

    def interval_note(self) -> str:
        if self.reused_targets():
            return (
                f"mean (range: min-max) over {self.repeats} repeat(s); no {CONFIDENCE:.0%} "
                "interval: some runs used a target calibrated by an earlier run (see the note)"
            )
        if self.repeats < MIN_REPEATS:
            return (
                f"mean (range: min-max) over {self.repeats} repeat(s); no {CONFIDENCE:.0%} "
                f"interval below {MIN_REPEATS} repeats"
            )
        return (
            f"mean ± half-width of the {CONFIDENCE:.0%} confidence interval of the mean "
            f"(Student's t) over {self.repeats} repeat(s); min-max is the range of the repeats"
        )

    def title(self) -> str:
        return f"{self.first.title()}, {self.repeats} repeat(s)" + (
            ", with isolation" if self.isolation else ""
        )

    def summary_row(self) -> dict[str, Any]:
        """One row for tables of several layouts (sweeps)."""
        total, change = self.total, self.change
        reused = self._reused_cell()
        return {
            "MIG scenario": self.scenario,
            "layout": self.layout,
            "partitioning": self.partitioning,
            "instances": len(self.first.instances),
            "repeats": self.repeats,
            "total": None if total is None else total.text(),
            "min-max": None if total is None else f"{total.min:,.2f}-{total.max:,.2f}",
            "unit": self.first.throughput_unit,
            "all valid": self.valid_word(),
            "vs MIG scenario 1": None if change is None else change.text(),
            PER_GPU_COLUMN: self._per_gpu_means() if self.first.multi_gpu else None,
            "samples/J": self._summary_text([r.samples_per_joule for r in self.runs if r.ok]),
            **self._token_summaries(run_token_values),
            **({} if reused is None else {REUSED_COLUMN: reused}),
        }

    def _token_summaries(
        self, cells_of: Callable[[RunResult], Mapping[str, float | None]]
    ) -> dict[str, str | None]:
        """Each token figure's mean and 95% interval (min-max below 3) over the runs, the
        figures of a run given by `cells_of`; {} for a workload that generates no tokens."""
        per_run = [cells_of(r) for r in self.runs if r.ok]
        columns = dict.fromkeys(c for cells in per_run for c in cells)
        return {c: self._summary_text([cells.get(c) for cells in per_run]) for c in columns}

    @property
    def generates_tokens(self) -> bool:
        """Whether the runs measured tokens (tokens/s, TTFT, TPOT)."""
        return any(generates_tokens(r) for r in self.runs)

    def _reused_cell(self) -> str | None:
        """'6 of 12' instance runs with a reused target, for a sweep's table; None: none."""
        reused = self.reused_targets()
        if not reused:
            return None
        return f"{len(reused)} of {sum(len(r.instances) for r in [*self.runs, *self.alone_runs()])}"

    def _summary_text(self, values: list[float | None]) -> str | None:
        """Mean and 95% interval (min-max below 3) of the values measured; None: none were."""
        found = self._summarize([v for v in values if v is not None])
        return None if found is None else found.text()

    def _per_gpu_means(self) -> str:
        rows = self.first.gpu_rows()
        means = [self.gpu_subtotals(k) for k in range(len(rows))]
        return gpu_subtotals_text(
            [attrs.evolve(r, subtotal=None if m is None else m.mean) for r, m in zip(rows, means)]
        )

    def instance_rows(self) -> list[dict[str, Any]]:
        rows = []
        for index, instance in enumerate(self.first.instances):
            throughput = self._summarize(self.instance_values(index, "throughput"))
            p99 = self._summarize(self.instance_values(index, "p99"))
            row = {
                "instance": instance.name,
                "profile": instance.profile,
                "device": instance.device,
                "valid": _joined(r.instances[index].row()["valid"] for r in self.runs),
                "throughput": None if throughput is None else throughput.text(),
                "min-max": None
                if throughput is None
                else f"{throughput.min:,.2f}-{throughput.max:,.2f}",
                "p99 ms": None if p99 is None else p99.text(),
                "util %": self._summary_text(
                    [r.utilisation(instance.name) for r in self.runs if r.ok]
                ),
                **self._token_summaries(functools.partial(instance_token_cells, index=index)),
            }
            if self.isolation:
                for what, column in (
                    ("throughput", "vs alone: throughput"),
                    ("p99", "vs alone: p99"),
                ):
                    change = self.interference(index, what)
                    row[column] = (
                        "alone already"
                        if len(self.first.instances) == 1
                        else None
                        if change is None
                        else change.text()
                    )
            rows.append(row)
        if self.first.multi_gpu:  # each GPU's instances, then its subtotal over the repeats
            rows = self._with_gpu_subtotals(rows)
        total = self.total
        rows.append(
            {
                "instance": "layout (unified)" if self.first.mode == "unified" else "total (sum)",
                "valid": self.valid_word(),
                "throughput": None if total is None else total.text(),
                "min-max": None if total is None else f"{total.min:,.2f}-{total.max:,.2f}",
                "samples/J": self._summary_text([r.samples_per_joule for r in self.runs if r.ok]),
                **self._token_summaries(_total_token_cells),
                **self._token_summaries(_tokens_per_joule),
            }
        )
        return rows

    def _with_gpu_subtotals(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The instance rows grouped by GPU, each GPU followed by its subtotal row."""
        by_name = {row["instance"]: row for row in rows}
        grouped = []
        for position, gpu in enumerate(self.first.gpu_rows()):
            grouped += [by_name[name] for name in gpu.instances if name in by_name]
            subtotal = self.gpu_subtotals(position)
            grouped.append(
                {
                    "instance": f"GPU {gpu.index} subtotal",
                    "profile": gpu.layout,
                    "throughput": None if subtotal is None else subtotal.text(),
                    "min-max": None
                    if subtotal is None
                    else f"{subtotal.min:,.2f}-{subtotal.max:,.2f}",
                    **self._token_summaries(functools.partial(_gpu_token_cells, position=position)),
                }
            )
        return grouped

    def columns(self) -> list[str]:
        columns = ["instance", "profile", "device", "valid", "throughput", "min-max", "p99 ms"]
        if any(r.telemetry is not None for r in self.runs):
            columns.append("util %")
        if any(r.samples_per_joule is not None for r in self.runs):
            columns.append("samples/J")
        if any(r.tokens_per_joule is not None for r in self.runs):
            columns.append(TOKENS_PER_J)
        at = columns.index("p99 ms") + 1
        columns[at:at] = token_columns(self.instance_rows())
        if self.isolation:
            columns += ["vs alone: throughput", "vs alone: p99"]
        return columns

    def notes(self) -> list[str]:
        lines = [f"throughput in {self.first.throughput_unit}; {self.interval_note()}"]
        reuse = self.reuse_note()
        if reuse is not None:
            lines.append(reuse)
        change = self.change
        if change is not None:
            lines.append(
                f"change against MIG scenario 1 ({self.baseline_source}): {change.text()} "
                "(ratio of the mean totals)"
            )
        failed = [r.outdir for r in self.runs if not r.ok] + [
            r.outdir for runs in self.alone.values() for r in runs if not r.ok
        ]
        if failed:
            lines.append(f"FAILED runs (their numbers are left out): {', '.join(failed)}")
        measured = [r.telemetry for r in self.runs if r.telemetry is not None]
        if measured:
            lines.append(
                "note: util % and samples/J over the repeats as throughput is; what they measure: "
                + "; ".join(dict.fromkeys(i.util_metric for t in measured for i in t.instances))
                + f"; samples/J from {measured[0].energy_label}"
            )
        if self.generates_tokens:
            lines.append(
                "note: tokens/s (Offline: generated; else completed), TTFT and TPOT p99 (ms) over "
                "the repeats as throughput is"
            )
            lines += [
                f"{Path(r.outdir).name}: {note}"
                for r in self.runs
                if r.ok
                for note in r.token_notes()
            ]
        changes = self.changes()
        if changes:
            lines.append(f"note: {CHANGE_NOTE}")
        if self.few_repeats():
            lines.append(f"note: {FEW_REPEATS_NOTE}")
        return lines + [f"note: {label}" for label in self.labels()]

    def changes(self) -> list[Change]:
        """Every change the tables show: against scenario 1 and, with isolation, against alone."""
        changes = [self.change]
        if self.isolation:
            changes += [
                self.interference(i, what)
                for i in range(len(self.first.instances))
                for what in ("throughput", "p99")
            ]
        return [c for c in changes if c is not None]

    def few_repeats(self) -> bool:
        """Whether a value or change of the tables is shown as a range for too few repeats."""
        if 2 <= self.repeats < MIN_REPEATS:
            return True
        return any(max(c.sizes) >= 2 and not c.shows_interval for c in self.changes())

    def frame_rows(self) -> list[dict[str, Any]]:
        """to_pandas: one row per instance (and the total) as the table shows it, with the layout."""
        return [
            {"layout": self.first.layout, "repeats": self.repeats, **row}
            for row in self.instance_rows()
        ]

    def to_html(self, path: str | os.PathLike[str] | None = None) -> str:
        """One self-contained HTML report of this layout (written to `path` when given)."""
        return write_report(self, path)

    # --- data ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        root = Path(self.outdir)
        total, change = self.total, self.change
        return {
            "schema": SCHEMA,
            "runs": [relative_to(root, r.outdir, "the repeat") for r in self.runs],
            "alone": {
                p: [relative_to(root, r.outdir, "the alone run") for r in runs]
                for p, runs in self.alone.items()
            },
            "isolation": self.isolation,
            "resumed": list(self.resumed),
            "baseline_totals": list(self.baseline_totals),
            "baseline_source": self.baseline_source,
            "summary": {  # for readers of the file; load() recomputes it from the runs
                "total": None if total is None else total.to_dict(),
                "change_vs_baseline": None if change is None else change.to_dict(),
                "instances": [
                    {
                        "throughput": _dict(self._summarize(self.instance_values(i, "throughput"))),
                        "p99_ms": _dict(self._summarize(self.instance_values(i, "p99"))),
                        "interference_throughput": _dict(self.interference(i, "throughput")),
                        "interference_p99": _dict(self.interference(i, "p99")),
                    }
                    for i in range(len(self.first.instances))
                ],
                **self._token_summary_data(),
            },
        }

    def _token_summary_data(self) -> dict[str, Any]:
        """repeats.json's summary of tokens/s (each instance's, the total), for a workload that
        generates tokens; {} otherwise."""
        if not self.generates_tokens:
            return {}

        def tokens_of(values: Iterable[float | None]) -> dict[str, Any] | None:
            return _dict(self._summarize([v for v in values if v is not None]))

        ok = [r for r in self.runs if r.ok]
        return {
            "total_tokens_per_s": tokens_of(r.tokens_per_second for r in ok),
            "instance_tokens_per_s": [
                tokens_of(instance_tokens_per_s(r, r.instances[i]) for r in ok)
                for i in range(len(self.first.instances))
            ],
        }

    def save(self) -> Path:
        return atomic_write_json(Path(self.outdir) / REPEATS_FILE, self.to_dict())

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> RepeatedRun:
        """Read repeats.json and the results.json of every run it lists, each field checked:
        the runs are folders inside this one (no '..', no absolute path elsewhere, no symlink),
        profiles are plain names; a wrong field is refused with one line naming it."""
        path = Path(folder)
        index = IndexFile.read(path, REPEATS_FILE, "mlperf-mig run --repeats or sweep --repeats")
        schema = index.data.get("schema", SCHEMA)
        if schema not in (1, SCHEMA) or isinstance(schema, bool):
            raise index.wrong("schema", schema, f"1 or {SCHEMA} (a newer mlperf-mig wrote it?)")
        runs = index.folders("runs")
        alone = {
            safe_name(profile, "the profile of an alone run", index.path): index.folder_list(
                f"alone[{profile!r}]", folders
            )
            for profile, folders in index.mapping("alone").items()
        }
        isolation = index.flag("isolation")
        resumed = index.strings("resumed")
        baseline_totals = index.numbers("baseline_totals")
        baseline_source = index.text("baseline_source")
        return cls(
            outdir=str(path),
            runs=[index.run("runs", sub) for sub in runs],
            alone={p: tuple(index.run(f"alone[{p!r}]", f) for f in fs) for p, fs in alone.items()},
            isolation=isolation,
            resumed=resumed,
            baseline_totals=baseline_totals,
            baseline_source=baseline_source,
        )


def _total_token_cells(run: RunResult) -> dict[str, float | None]:
    """The total row's token figures of a run: the unified LoadGen's (tokens/s, TTFT, TPOT), or
    the instances' tokens/s added up; {} for a run without tokens."""
    if run.layout_result is not None and run.layout_result.tokens is not None:
        return token_cells(run.layout_result)
    return {TOKENS_PER_S: run.tokens_per_second} if generates_tokens(run) else {}


def _gpu_token_cells(run: RunResult, position: int) -> dict[str, float | None]:
    """A GPU subtotal row's tokens/s of a run (`gpu_tokens_per_s`); {} for a run without tokens."""
    return {TOKENS_PER_S: gpu_tokens_per_s(run, position)} if generates_tokens(run) else {}


def _tokens_per_joule(run: RunResult) -> dict[str, float | None]:
    """A run's tokens/J (the total row's); {} for a run without tokens."""
    return {TOKENS_PER_J: run.tokens_per_joule} if generates_tokens(run) else {}


def _dict(value: Summary | Change | None) -> dict[str, Any] | None:
    return None if value is None else value.to_dict()


def _joined(words: Iterable[object]) -> str:
    distinct = list(dict.fromkeys(str(w) for w in words))
    return distinct[0] if len(distinct) == 1 else "/".join(distinct)
