"""Writing the MLPerf submission tree from run folders (`write_submission`).

Layout (checker v6.x, reference/mlperf.md section 3):

    <outdir>/<division>/<submitter>/systems/<system>.json
    <outdir>/<division>/<submitter>/src/README.md
    <outdir>/<division>/<submitter>/results/<system>/<benchmark>/<scenario>/
        performance/run_1/{mlperf_log_summary.txt, mlperf_log_detail.txt}
        accuracy/{mlperf_log_summary.txt, mlperf_log_detail.txt, mlperf_log_accuracy.json, accuracy.txt}
        measurements.json, user.conf, README.md
        TEST01/{verify_accuracy.txt, verify_performance.txt, performance/run_1/, accuracy/}
        TEST04/{verify_performance.txt, performance/run_1/}      (ResNet50)

The compliance audits (TEST01, TEST04) of a run with `compliance=True` are written where the
checker reads them; the closed division refuses a result without every required audit passed at
the official duration, and the open division includes the audits that passed.

A unified-mode run (one LoadGen for the layout) is one result of one system; an independent-mode
run is one system per instance (the profile in the system name), because summing independent
LoadGen runs is not an MLPerf result. Everything is checked first; any problem, including every
missing system-description value, is reported in one SubmissionError before a file is written.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from mlperf_mig._io import (
    atomic_write_json,
    atomic_write_text,
    current_umask,
    ensure_writable_dir,
    inside,
    read_json,
    refuse_links_below,
    safe_name,
    write_failed,
)
from mlperf_mig._version import __version__
from mlperf_mig.engines.backends import find_backend
from mlperf_mig.errors import MlperfMigError, SubmissionError, UntrustedPathError
from mlperf_mig.registry.catalog import default_catalog
from mlperf_mig.runner.results import InstanceRun, RunResult, result_error
from mlperf_mig.submission import accuracy, readme, rules
from mlperf_mig.submission.check import (
    error_problems,
    performance_problems,
    system_description_problems,
)
from mlperf_mig.submission.hostinfo import GpuFacts, HostFacts
from mlperf_mig.submission.logs import DetailLog

if TYPE_CHECKING:
    from mlperf_mig.harness.compliance import AuditVerdict
    from mlperf_mig.harness.result import AccuracyReport, InstanceResult
from mlperf_mig.submission.sysdesc import (
    NOT_REPORTED,
    Accelerator,
    HostDescription,
    describe_system,
    load_host_descriptions,
    load_overrides,
    mark_not_reported,
)

log = logging.getLogger(__name__)

BERT_FOLDERS = ("bert-99", "bert-99.9")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@attrs.frozen(kw_only=True)
class ResultSource:
    """One result folder to write: which run, which instance (None: the whole layout)."""

    run_dir: Path
    run: RunResult
    instance: InstanceRun | None
    system: str
    benchmark_folder: str

    @property
    def folder(self) -> Path:
        """The instance's (or the layout's) folder inside the run folder."""
        return self.run_dir / (self.instance.name if self.instance else "layout")

    @property
    def performance(self) -> InstanceResult | None:
        return self.instance.performance if self.instance else self.run.layout_result

    @property
    def accuracy(self) -> InstanceResult | None:
        return self.instance.accuracy if self.instance else self.run.layout_accuracy

    def result(self, mode: str) -> InstanceResult:
        """The performance or accuracy result, for the steps after _source_problems (which
        refuses a source without one): a miss here is a bug, said as one."""
        result = self.performance if mode == "performance" else self.accuracy
        if result is None:
            raise SubmissionError(f"{self.label()}: no {mode} result past the checks")
        return result

    @property
    def scenario(self) -> str:
        return self.run.loadgen_scenario

    def logs(self, mode: str) -> Path:
        """Where the LoadGen logs of `mode` are: the run-folder convention, else the recorded path
        when it lies inside the run folder (a path outside it is never read)."""
        conventional = self.folder / mode
        result = self.performance if mode == "performance" else self.accuracy
        recorded = self.inside_run(result.log_dir) if result is not None else None
        if not conventional.is_dir() and recorded is not None and recorded.is_dir():
            return recorded
        return conventional

    def inside_run(self, recorded: object) -> Path | None:
        """A path recorded in results.json, if it names a place inside this run folder (the run
        may have been moved since: then the recorded path is elsewhere and not used)."""
        if not isinstance(recorded, str) or not recorded:
            return None
        try:
            relative = Path(os.path.abspath(recorded)).relative_to(
                Path(os.path.abspath(self.run_dir))
            )
        except ValueError:
            return None
        return inside(self.run_dir, relative, "a recorded log folder") if relative.parts else None

    def outside_note(self, field: str, recorded: object) -> str:
        """Why a recorded path was not used: it lies outside the run folder (said, never read)."""
        if not isinstance(recorded, str) or not recorded or self.inside_run(recorded) is not None:
            return ""
        return (
            f" (results.json's {field} {recorded!r} is outside the run folder and is not read: "
            "a run folder is read only inside itself)"
        )

    def settings(self) -> dict[str, Any]:
        """The run's LoadGen setting overrides, as its plan.json records them ({} without one)."""
        try:
            plan = read_json(self.run_dir / "plan.json", "results")
        except (OSError, ValueError):
            return {}
        overrides = plan.get("overrides") if isinstance(plan, dict) else None
        return dict(overrides) if isinstance(overrides, dict) else {}

    def label(self) -> str:
        what = f"instance {self.instance.name}" if self.instance else "layout"
        return f"{self.run_dir} ({what})"

    @property
    def audits(self) -> dict[str, Any]:
        """The compliance verdicts of the result, by audit."""
        verdicts = self.instance.compliance if self.instance else self.run.layout_compliance
        return {v.audit: v for v in verdicts}

    def audit_logs(self, audit: str) -> Path:
        """Where an audit's logs and verify files are: the run-folder convention, else the recorded path."""
        conventional = self.folder / audit
        verdict = self.audits.get(audit)
        recorded = self.inside_run(verdict.log_dir) if verdict is not None else None
        if not conventional.is_dir() and recorded is not None and recorded.is_dir():
            return recorded
        return conventional


@attrs.frozen(kw_only=True)
class SubmissionTree:
    """What write_submission wrote."""

    root: Path
    submitter_dir: Path
    systems: tuple[str, ...]
    results: tuple[Path, ...]


def write_submission(
    run_dirs: Sequence[str | os.PathLike[str]],
    *,
    division: str,
    submitter: str,
    outdir: str | os.PathLike[str],
    overrides: str | os.PathLike[str] | None = None,
    hosts: Sequence[str | os.PathLike[str]] = (),
    bert_folder: str = "bert-99",
    version: str = rules.DEFAULT_VERSION,
) -> SubmissionTree:
    """Write the submission tree of `run_dirs` under `outdir`; see the module docstring."""
    _check_arguments(run_dirs, division, submitter, bert_folder, version)
    _check_existing_tree(Path(outdir), division, submitter)
    override_fields = load_overrides(overrides)
    host_descriptions = load_host_descriptions(hosts)
    runs, problems = _load_runs(run_dirs)
    sources = [s for run_dir, run in runs for s in _sources(run_dir, run, bert_folder)]
    problems += _duplicate_problems(sources)
    problems += _earlier_result_problems(Path(outdir) / division / submitter, sources)
    for source in sources:
        problems += _source_problems(source, division, version)
    descriptions, description_problems = _system_descriptions(
        sources, division, submitter, override_fields, host_descriptions
    )
    problems += description_problems
    if problems:
        raise SubmissionError(
            f"cannot write the {division} submission ({len(problems)} problem(s), nothing written): "
            + "; ".join(problems)
            + _short_run_hint(problems, sources)
        )
    return _write(Path(outdir), division, submitter, sources, descriptions)


def _short_run_hint(problems: list[str], sources: list[ResultSource]) -> str:
    """For runs too short for the checker (e.g. the quick preset): the settings that pass it."""
    if not sources or not any(
        "min_duration is" in p or "performance_sample_count is" in p for p in problems
    ):
        return ""
    others = sorted({s.scenario for s in sources if s.scenario != "Offline"})
    if others:
        # Only an Offline query can end early: a 600 s minimum holds the other scenarios 600 s.
        return (
            f" (hint: the checker needs a 600 s minimum duration and the official performance "
            f"sample count in every division; a {', '.join(others)} run with them lasts 600 s: "
            "mlperf-mig run ... --preset submission)"
        )
    model = rules.benchmark_folders()[sources[0].benchmark_folder]
    flags = " ".join(f"--set {k}={v}" for k, v in rules.short_run_settings(model).items())
    return f" (hint: an open-division Offline run the checker accepts takes seconds with: mlperf-mig run ... {flags})"


def _check_arguments(
    run_dirs: Sequence[Any], division: str, submitter: str, bert_folder: str, version: str
) -> None:
    if division not in rules.WRITABLE_DIVISIONS:
        raise SubmissionError(
            f"division {division!r} is not one of {', '.join(rules.WRITABLE_DIVISIONS)}"
        )
    if not isinstance(submitter, str) or not _SAFE_NAME.fullmatch(submitter):
        raise SubmissionError(
            f"submitter {submitter!r} must be a folder name (letters, digits, '.', '_', '-')"
        )
    if bert_folder not in BERT_FOLDERS:
        raise SubmissionError(
            f"BERT result folder {bert_folder!r} is not one of {', '.join(BERT_FOLDERS)}"
        )
    if version not in rules.SEEDS:
        raise SubmissionError(
            f"unknown checker version {version!r}; expected one of {', '.join(rules.known_versions())}"
        )
    if not run_dirs:
        raise SubmissionError("no run folder given; pass the folders written by mlperf-mig run")


def _check_existing_tree(root: Path, division: str, submitter: str) -> None:
    """An existing tree is written into only where no symlink leads out of it: a linked
    `results/` (or any link below the submitter's folder) would be written through."""
    if root.is_symlink():
        raise SubmissionError(
            f"submission folder {str(root)!r} is a symbolic link; pass the folder itself"
        )
    try:
        submitter_dir = inside(root, Path(division) / submitter, "the submitter's folder")
        if submitter_dir.exists():
            refuse_links_below(submitter_dir, "the submission tree")
    except UntrustedPathError as exc:
        raise SubmissionError(f"cannot write into the existing tree: {exc}") from None


def _load_runs(
    run_dirs: Sequence[str | os.PathLike[str]],
) -> tuple[list[tuple[Path, RunResult]], list[str]]:
    runs, problems = [], []
    for run_dir in map(Path, run_dirs):
        try:
            # A run folder is copied from: a link in it would bring in a file from anywhere.
            refuse_links_below(run_dir, "the run folder")
            runs.append((run_dir, RunResult.load(run_dir)))
        except MlperfMigError as exc:
            problems.append(str(exc))
    return runs, problems


def _sources(run_dir: Path, run: RunResult, bert_folder: str) -> list[ResultSource]:
    folders = readme.workload_of(run).submission_names  # bert: the user picks the accuracy level
    benchmark_folder = bert_folder if bert_folder in folders else folders[0]
    if run.mode == "unified":
        return [
            ResultSource(
                run_dir=run_dir,
                run=run,
                instance=None,
                system=system_folder_name(run, None),
                benchmark_folder=benchmark_folder,
            )
        ]
    return [
        ResultSource(
            run_dir=run_dir,
            run=run,
            instance=instance,
            system=system_folder_name(run, instance),
            benchmark_folder=benchmark_folder,
        )
        for instance in run.instances
    ]


def system_folder_name(run: RunResult, instance: InstanceRun | None) -> str:
    """'A100-SXM4-80GB-MIG_3x2g.20gb_1x1g.10gb_TRT', per instance '..._MIG_2g.20gb_i0-of-...';
    a whole system 'A100-SXM4-80GB-MIG_56x1g.10gb_TRT' (system_layout_token)."""
    layout = system_layout_token(run)
    kind = "shared" if run.partitioning == "shared" else "MIG"
    partition = (
        layout if instance is None else f"{_token(instance.profile)}_i{instance.index}-of-{layout}"
    )
    backend_cls = find_backend(run.backend)
    backend = (backend_cls and backend_cls.system_token) or _token(run.backend)
    suffix = "_emulated" if run.emulated else ""
    return f"{_token(run.gpu)}-{kind}_{partition}_{backend}{suffix}"


def system_layout_token(run: RunResult) -> str:
    """The layout part of a system's name. One GPU: its layout. GPUs of one model and layout:
    the instances counted over all of them, as NVIDIA named its DGX-A100 result
    (`56x1g.10gb`). Mixed layouts spelled out per group of GPUs
    (`6xGPU-7x1g.10gb_and_2xGPU-4g.40gb_3g.40gb`, with the model when the models differ)."""
    if len(run.gpus) <= 1:
        return _token(run.layout)
    groups = Counter((g.name, g.layout) for g in run.gpus)
    if len(groups) == 1:
        (name, layout), count = next(iter(groups.items()))
        profiles = _profile_counts(name, layout)
        if profiles is not None:
            return "_".join(f"{count * n}x{_token(profile)}" for profile, n in profiles.items())
    models = len({name for name, _ in groups}) > 1
    return "_and_".join(
        f"{count}xGPU-{_token(name) + '-' if models else ''}{_token(layout)}"
        for (name, layout), count in groups.items()
    )


def _profile_counts(gpu: str, layout: str) -> Counter[str] | None:
    """How many instances of each profile `layout` has on `gpu` (largest first); None when
    results.json names a GPU or layout this catalog does not know (the layout is then spelled)."""
    from mlperf_mig.registry import parse_layout

    try:
        return Counter(p.name for p in parse_layout(default_catalog().get(gpu), layout).profiles)
    except MlperfMigError:
        return None


def _token(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "_", text).strip("_")


def _earlier_result_problems(submitter_dir: Path, sources: list[ResultSource]) -> list[str]:
    """Checked before anything is written: a system folder name that is not a plain name, and
    an existing result folder that holds what this tool does not write (it would be replaced)."""
    problems = []
    for source in sources:
        try:
            safe_name(source.system, "system folder name", source.run_dir / "results.json")
        except UntrustedPathError as exc:
            problems.append(str(exc))
            continue
        folder = (
            submitter_dir / "results" / source.system / source.benchmark_folder / source.scenario
        )
        if not folder.exists():
            continue
        if not folder.is_dir():
            problems.append(f"{str(folder)!r} is a file where the result folder goes; move it away")
            continue
        foreign = sorted(p.name for p in folder.iterdir() if p.name not in _RESULT_ENTRIES)
        if foreign or not (folder / "measurements.json").is_file():
            what = (
                f"holds {', '.join(foreign)}, which"
                if foreign
                else "holds no measurements.json, so it"
            )
            problems.append(
                f"{str(folder)!r} {what} mlperf-mig did not write; it is not replaced: move it "
                "away, or write into a new --outdir"
            )
    return problems


# What a result folder of this writer holds: only such a folder is replaced by a rewrite.
_RESULT_ENTRIES = frozenset(
    {"performance", "accuracy", "measurements.json", "user.conf", "README.md", *rules.VERIFY_FILES}
)


def _duplicate_problems(sources: list[ResultSource]) -> list[str]:
    seen: dict[tuple[str, str, str], ResultSource] = {}
    problems = []
    for source in sources:
        key = (source.system, source.benchmark_folder, source.scenario)
        if key in seen:
            problems.append(
                f"{source.label()} and {seen[key].label()} both give {'/'.join(key)}; pass one of them"
            )
        seen[key] = source
    return problems


def _source_problems(source: ResultSource, division: str, version: str) -> list[str]:
    prefix = f"{source.label()}: "
    problems = [prefix + p for p in _run_problems(source, division)]
    if source.performance is None:
        return [*problems, prefix + "no performance result (the run did not finish)"]
    model = rules.benchmark_folders()[source.benchmark_folder]
    problems += [prefix + p for p in _log_problems(source, model, division, version)]
    if division == "closed":
        problems += [prefix + p for p in _closed_audit_problems(source, model)]
    return problems


def _closed_audit_problems(source: ResultSource, model: str) -> list[str]:
    """The closed division needs every required audit, passed, at the official duration."""
    problems = []
    for audit in rules.workload_of_model(model).required_audits:
        verdict = source.audits.get(audit)
        if verdict is None:
            problems.append(
                f"the closed division needs compliance audit {audit}, which was not run "
                "(mlperf-mig run ... --compliance --preset submission)"
            )
        elif not verdict.passed:
            problems.append(f"compliance audit {audit} failed: {verdict.reason}")
        elif verdict.short:
            problems.append(
                f"compliance audit {audit} is a short quick-preset audit; the closed division "
                "needs the official duration (--preset submission)"
            )
        else:
            missing = [
                n for n in _audit_files(audit) if not (source.audit_logs(audit) / n).is_file()
            ]
            if missing:
                problems.append(
                    f"compliance audit {audit}: {source.audit_logs(audit)} lacks {', '.join(missing)}"
                )
    return problems


def _audit_files(audit: str) -> tuple[str, ...]:
    extra = ("mlperf_log_accuracy.json",) if audit == "TEST01" else ()
    return (*rules.REQUIRED_PERF_FILES, *rules.VERIFY_FILES[audit], *extra)


def _included_audits(source: ResultSource, model: str) -> list[Any]:
    """The audits written with a result: those that passed (in the open division too); a failed
    one or one whose files are gone is left out, with a warning."""
    included = []
    for audit, verdict in source.audits.items():
        if audit not in rules.workload_of_model(model).required_audits:
            continue
        missing = [n for n in _audit_files(audit) if not (source.audit_logs(audit) / n).is_file()]
        if not verdict.passed or missing:
            why = verdict.summary() if not verdict.passed else f"lacks {', '.join(missing)}"
            log.warning("%s: compliance audit %s left out (%s)", source.label(), audit, why)
            continue
        included.append(verdict)
    return included


def _run_problems(source: ResultSource, division: str) -> list[str]:
    run, instance = source.run, source.instance
    problems = []
    if run.interrupted:
        problems.append("the run was interrupted")
    if (
        instance is not None
        and not instance.ok
        and instance.status == "ok"
        and instance.accuracy_status in (None, "ok")
    ):
        problems.append(f"the test ran to the end but failed: {instance.row()['error']}")
    elif instance is not None and not instance.ok:
        problems.append(
            f"the worker ended with status {instance.status!r}, accuracy run "
            f"{instance.accuracy_status!r} ({instance.row()['error']})"
        )
    if instance is None and not run.ok:
        failed = [f"{i.name} {i.row()['status']}" for i in run.instances if not i.ok]
        layout_error = result_error(run.layout_result, run.layout_accuracy)
        problems.append(
            f"the unified run did not end normally (coordinator {run.layout_status}"
            f"{f', {layout_error}' if layout_error else ''}; instances: {', '.join(failed) or 'ok'})"
        )
    if division == "closed" and (run.synthetic_weights or run.synthetic_data):
        problems.append(
            "closed division refuses runs with synthetic weights or data (accuracy is not "
            "meaningful); pass the official model and dataset, or submit to the open division"
        )
    if source.accuracy is None:
        problems.append("no accuracy run; every result needs accuracy/ (open division too)")
    elif (
        division == "closed"
        and source.accuracy.accuracy
        and source.accuracy.accuracy.passed is False
    ):
        report = source.accuracy.accuracy
        problems.append(
            f"accuracy {report.value} is below the closed-division target {report.target:.3f}"
        )
    return problems


def _log_problems(source: ResultSource, model: str, division: str, version: str) -> list[str]:
    problems = []
    perf_dir = source.logs("performance")
    missing = [n for n in rules.REQUIRED_PERF_FILES if not (perf_dir / n).is_file()]
    if missing:
        return [
            f"{perf_dir} lacks {', '.join(missing)}"
            + source.outside_note("log_dir", source.result("performance").log_dir)
        ]
    try:
        detail = DetailLog.read(perf_dir / "mlperf_log_detail.txt")
    except SubmissionError as exc:
        return [str(exc)]
    problems += performance_problems(
        detail, model=model, scenario=source.scenario, division=division, version=version
    )
    if source.accuracy is not None:
        problems += _accuracy_log_problems(source.logs("accuracy"))
    if _user_conf(source) is None:
        problems.append(
            f"no user.conf in {source.folder}"
            + source.outside_note("user_conf", source.result("performance").user_conf)
        )
    return problems


def _accuracy_log_problems(acc_dir: Path) -> list[str]:
    acc_files = ("mlperf_log_summary.txt", "mlperf_log_detail.txt", "mlperf_log_accuracy.json")
    missing = [n for n in acc_files if not (acc_dir / n).is_file()]
    if missing:
        return [f"{acc_dir} lacks {', '.join(missing)}"]
    try:
        detail = DetailLog.read(acc_dir / "mlperf_log_detail.txt")
    except SubmissionError as exc:
        return [str(exc)]
    return [f"accuracy log: {e}" for e in error_problems(detail)]


def _user_conf(source: ResultSource) -> Path | None:
    """The run's user.conf: in its folder, else where results.json recorded it inside the run."""
    recorded = source.inside_run(source.result("performance").user_conf)
    for candidate in (source.folder / "user.conf", recorded):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def _system_descriptions(
    sources: list[ResultSource],
    division: str,
    submitter: str,
    overrides: dict[str, Any],
    hosts: list[HostDescription],
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    host = HostFacts.detect()
    by_system: dict[str, list[ResultSource]] = {}
    for source in sources:
        if source.performance is not None:  # else _source_problems has said why already
            by_system.setdefault(source.system, []).append(source)
    descriptions, problems = {}, []
    for system, members in by_system.items():
        first = members[0]
        gpu = None if first.run.partitioning == "emulated" else GpuFacts.detect(first.run.gpu)
        fields, missing = describe_system(
            accelerator=_accelerator(first),
            division=division,
            submitter=submitter,
            system_type=_system_type(members),
            loadgen_version=_loadgen_version(first),
            notes=readme.system_notes(first.run, first.instance),
            host=host,
            gpu=gpu,
            hosts=hosts,
            overrides=overrides,
        )
        if missing and division == "closed":
            problems.append(
                f"system {system}: no value for {', '.join(missing)} (not detectable here; "
                "give them in the overrides file or a host description)"
            )
        elif missing:
            fields = mark_not_reported(fields, missing)
        if not (missing and division == "closed"):
            problems += [
                f"system {system}: {p}"
                for p in system_description_problems(fields, division=division, submitter=submitter)
            ]
        descriptions[system] = fields
    return descriptions, problems


def _system_type(members: list[ResultSource]) -> str:
    """ResNet50 and BERT are edge benchmarks; a Server or Interactive result, or a benchmark of
    the datacenter suite alone (llama3.1-8b), needs the datacenter suite too."""
    datacenter = any(
        m.scenario in ("Server", "Interactive")
        or rules.checker_model(rules.benchmark_folders()[m.benchmark_folder]).scenarios_required(
            "edge"
        )
        is None
        for m in members
    )
    return "datacenter,edge" if datacenter else "edge"


def _loadgen_version(source: ResultSource) -> str:
    try:
        detail = DetailLog.read(source.logs("performance") / "mlperf_log_detail.txt")
    except SubmissionError:
        return "unknown"  # _source_problems reports the unreadable log
    return str(detail.get("loadgen_version", "unknown")).split(" @")[0]


def _accelerator(source: ResultSource) -> Accelerator:
    run, instance = source.run, source.instance
    device = source.result("performance").device
    backend_cls = find_backend(run.backend)
    if backend_cls is not None:
        framework = backend_cls.framework_text(device)
    else:  # a backend this installation does not have: its name stands for the framework
        framework = f"{run.backend} {device.version or ''}".strip()
    cluster_nodes = len(run.cluster["nodes"]) if run.cluster else 1
    return Accelerator(
        gpu=run.gpu,
        partitioning=run.partitioning,
        layout=run.layout,
        instance=None if instance is None else f"{instance.profile}, instance {instance.index}",
        memory_gib=_memory_gib(run.gpu, instance.profile if instance else None),
        framework=framework,
        on_cuda=backend_cls is not None and backend_cls.needs_gpu,
        # independent mode: each instance is its own system on its own node
        nodes=cluster_nodes if instance is None else 1,
        network=instance is None and cluster_nodes > 1,
        gpus_per_node=1 if instance is not None else _gpus_per_node(run),
    )


def _gpus_per_node(run: RunResult) -> int:
    """The most GPUs the run used on one node (1 for a layout on one GPU)."""
    per_node = Counter(g.node for g in run.gpus)
    return max(per_node.values(), default=1)


def _memory_gib(gpu_name: str, profile: str | None) -> float | None:
    """The GPU's (or the profile's) memory in GiB, or None where the catalog does not know it.

    None is honest: the MIG profile table leaves some sizes unknown (the 3g/4g/7g profiles of
    B200 and GH200-144GB), and the system description then says so instead of a guess.
    """
    gpu = default_catalog().find(gpu_name)
    if gpu is None:
        return None
    if profile is None:
        memory = gpu.memory_gib
    else:
        try:
            memory = gpu.profile(profile).memory_gib
        except LookupError:
            return None
    return None if memory is None else float(memory)


def _write(
    outdir: Path,
    division: str,
    submitter: str,
    sources: list[ResultSource],
    descriptions: dict[str, dict[str, Any]],
) -> SubmissionTree:
    root = ensure_writable_dir(outdir)
    submitter_dir = root / division / submitter
    for system, fields in descriptions.items():
        unreported = [k for k in rules.MEANINGFUL_SYSTEM_FIELDS if fields[k] == NOT_REPORTED]
        if unreported:
            log.warning("system %s: %s written as not reported", system, ", ".join(unreported))
        atomic_write_json(submitter_dir / "systems" / f"{system}.json", fields)
    atomic_write_text(submitter_dir / "src" / "README.md", readme.src_readme())
    results = tuple(_write_result(submitter_dir, source, division) for source in sources)
    log.info(
        "wrote %d result(s) of %d system(s) under %s",
        len(results),
        len(descriptions),
        submitter_dir,
    )
    return SubmissionTree(
        root=root, submitter_dir=submitter_dir, systems=tuple(descriptions), results=results
    )


def _write_result(submitter_dir: Path, source: ResultSource, division: str) -> Path:
    """The result folder, written beside its place and moved in once complete: a write that
    fails removes only what it made, and an earlier result stays until the new one is whole."""
    folder = inside(
        submitter_dir,
        Path("results", source.system, source.benchmark_folder, source.scenario),
        "a result folder",
    )
    staging = None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.new-"))
        os.chmod(staging, 0o777 & ~current_umask())  # mkdtemp makes it 0700; a result is shared
        _fill_result(staging, source, division)
        _replace_result(staging, folder)
    except OSError as exc:
        _remove_staging(staging)
        raise write_failed(exc.filename or folder, exc) from None
    except BaseException:
        _remove_staging(staging)
        raise
    return folder


def _remove_staging(staging: Path | None) -> None:
    if staging is not None and staging.is_dir() and not staging.is_symlink():
        shutil.rmtree(staging)  # made by this call, under its own unique name


def _replace_result(staging: Path, folder: Path) -> None:
    """Move the finished result into place; an earlier one (checked before writing to be one this
    tool wrote) is removed only once the new one is there."""
    if not folder.exists():
        os.rename(staging, folder)
        return
    earlier = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.old-"))
    try:
        os.rename(folder, earlier)  # onto the empty folder mkdtemp made: the name is ours alone
    except BaseException:
        earlier.rmdir()
        raise
    try:
        os.rename(staging, folder)
    except BaseException:
        os.rename(earlier, folder)
        raise
    shutil.rmtree(earlier)


def _fill_result(folder: Path, source: ResultSource, division: str) -> None:
    run_1 = folder / "performance" / "run_1"
    run_1.mkdir(parents=True)
    for name in rules.REQUIRED_PERF_FILES:
        shutil.copyfile(source.logs("performance") / name, run_1 / name)
    _write_accuracy(folder / "accuracy", source)
    model = rules.benchmark_folders()[source.benchmark_folder]
    for verdict in _included_audits(source, model):
        _write_audit(folder / verdict.audit, source, verdict, model)
    atomic_write_json(folder / "measurements.json", readme.measurements(source.run))
    atomic_write_text(folder / "user.conf", _user_conf_text(source))
    try:
        performance_log = DetailLog.read(run_1 / "mlperf_log_detail.txt").values
    except SubmissionError:
        performance_log = {}  # checked before anything was written; keep the README anyway
    text = readme.result_readme(
        source.run, source.instance, division, source.settings(), performance_log
    )
    atomic_write_text(folder / "README.md", text)


def _write_accuracy(folder: Path, source: ResultSource) -> None:
    folder.mkdir(parents=True)
    logs = source.logs("accuracy")
    for name in ("mlperf_log_summary.txt", "mlperf_log_detail.txt"):
        shutil.copyfile(logs / name, folder / name)
    model = rules.benchmark_folders()[source.benchmark_folder]
    figures, note = accuracy_figures(model, source.result("accuracy").accuracy)
    accuracy.write_accuracy_files(logs / "mlperf_log_accuracy.json", folder, figures, note)


def _write_audit(dest: Path, source: ResultSource, verdict: AuditVerdict, model: str) -> None:
    """<scenario>/<TEST>/: verify files, performance/run_1/ logs, and TEST01's accuracy/ (the
    audit's accuracy log; the accuracy of both runs on the sampled set where payloads differ)."""
    logs = source.audit_logs(verdict.audit)
    run_1 = dest / "performance" / "run_1"
    run_1.mkdir(parents=True)
    for name in rules.REQUIRED_PERF_FILES:
        shutil.copyfile(logs / name, run_1 / name)
    for name in rules.VERIFY_FILES[verdict.audit]:
        shutil.copyfile(logs / name, dest / name)
    if verdict.audit != "TEST01":
        return
    folder = dest / "accuracy"
    folder.mkdir()
    reports = (verdict.baseline_accuracy, verdict.compliance_accuracy)
    figures, note = accuracy_figures(model, reports[1])
    if reports[1] is None:
        note = (
            "# TEST01: the audit's sampled responses equal the accuracy run's (verify_accuracy.txt)"
        )
    accuracy.write_accuracy_files(logs / "mlperf_log_accuracy.json", folder, figures, note)
    for name, report in zip(("baseline_accuracy.txt", "compliance_accuracy.txt"), reports):
        report_figures, _ = accuracy_figures(model, report)
        if report_figures is not None:
            atomic_write_text(folder / name, report_figures.line() + "\n")


def accuracy_figures(
    model: str, report: AccuracyReport | None
) -> tuple[accuracy.AccuracyFigures | None, str]:
    """The accuracy line's figures from the harness's AccuracyReport, or why there are none."""
    if report is None:
        return None, "# accuracy was not scored by mlperf-mig"
    if not report.meaningful or report.value is None:
        return None, f"# accuracy not reported: {report.note}"
    workload = rules.workload_of_model(model)
    values = workload.accuracy_figures(report.value, report.sample_count, report.extra)
    return accuracy.AccuracyFigures(model=model, values=values), ""


def _user_conf_text(source: ResultSource) -> str:
    path = _user_conf(source)
    text = path.read_text(encoding="utf-8") if path else ""
    if text.strip():
        return text
    return f"# mlperf-mig {__version__}: no user settings; LoadGen's built-in mlperf.conf applied\n"
