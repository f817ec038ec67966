"""What a run will do, decided before anything runs: the RunPlan.

`make_plan` resolves the layout and where each instance runs (placement/), which engines to
build (one per distinct profile on GPUs, one for all emulated instances), the LoadGen settings,
the output folder and the deadlines. It starts no process and writes nothing; `mlperf_mig.plan`
returns it and `mlperf_mig.run` executes it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from mlperf_mig._io import check_text_file
from mlperf_mig._report import Report
from mlperf_mig.errors import (
    ModelFileError,
    PrecisionError,
    SettingsError,
    WorkloadError,
)
from mlperf_mig.placement.choose import place
from mlperf_mig.placement.deployment import Deployment, InstanceSlot, without_cpu_budgets
from mlperf_mig.placement.host import fit_host
from mlperf_mig.runner.options import RunOptions, check_setting
from mlperf_mig.runner.results import EMULATED_LABEL, SHARED_LABEL, scenario_words
from mlperf_mig.runner.supervisor import Timeouts
from mlperf_mig.workloads import Workload

if TYPE_CHECKING:
    from mlperf_mig.registry.nvml_state import NvmlModule

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 900.0


@attrs.frozen(kw_only=True)
class EngineRequest:
    """One engine to build, in a worker on the device of the first instance that uses it."""

    key: str  # profile name on GPUs, "cpu" for emulated partitions, "gpu" for a shared GPU
    benchmark: Workload
    backend: str
    precision: str | None
    variant: str
    model_path: str | None
    gpu: str | None
    mig_profile: str | None
    loadgen_scenario: str
    cache_dir: str | None
    env: dict[str, str] = attrs.field(factory=dict)
    cpus: tuple[int, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data (the workload by name), as plan.json holds it."""
        return {**attrs.asdict(self), "benchmark": self.benchmark.name}

    def spec_options(self) -> dict[str, Any]:
        """The keyword arguments of `resolve_spec` that this request fixes."""
        return attrs.asdict(
            self, filter=lambda a, _: a.name not in ("key", "benchmark", "env", "cpus")
        )


@attrs.frozen(kw_only=True)
class RunPlan(Report):
    """Everything a run needs, resolved; printing it shows what would run and where (its
    report: the title and settings lines, then one row per instance)."""

    notes_first = True

    deployment: Deployment
    benchmark: Workload  # resolved once, from the options; tasks and engine requests carry it
    loadgen_scenario: str
    mode: str
    backend: str
    precision: str | None
    variant: str
    preset: str
    overrides: tuple[tuple[str, float], ...]
    user_conf: str | None
    dataset: str | None
    vocab: str | None
    sample_count: int | None
    batch_size: int | None  # None: the engine recipe's
    model_path: str | None
    cache_dir: str | None
    accuracy: bool
    outdir: str
    engines: tuple[EngineRequest, ...]
    engine_of: dict[str, str]  # instance name -> EngineRequest.key
    worker_entry: str | None  # None: the harness (independent) or unified.serve_instance
    timeouts: Timeouts
    expected_s: float
    compliance: bool = False  # the compliance audits run after the accuracy round
    telemetry: bool = True  # sample GPUs, instances and workers around the performance round
    # the NVML source the plan was made with (a replayed state in tests); the telemetry sampler
    # reads the same one. Not part of plan.json.
    nvml_source: NvmlModule | None = attrs.field(default=None, eq=False, repr=False)
    # where the target among `overrides` came from when the user did not set it (the capacity
    # cache's file and entry); None: the overrides are the user's
    target_from: str | None = None
    # what fitting the instances into this host's memory changed (placement/host.py fit_host)
    host_notes: tuple[str, ...] = ()
    # the accuracy test's estimate (s) and what the estimates rest on (runner/speed.py)
    accuracy_s: float | None = None
    expected_from: str = "the settings alone"
    # whether a worker may use a target an earlier run calibrated (harness/reuse.py): a single
    # run may; the repeats and alone runs of a study each measure their own, or their numbers
    # would be copies of one target (study/repeats.py)
    reuse_targets: bool = True

    @property
    def slots(self) -> tuple[InstanceSlot, ...]:
        return self.deployment.slots

    @property
    def mlperf_scenario(self) -> str:
        """The scenario the run is reported and filed under: `loadgen_scenario`, or Interactive
        for the Server test of a workload's interactive variant."""
        return self.benchmark.mlperf_scenario(self.loadgen_scenario)

    @property
    def layout(self) -> str:
        """The layout; over several GPUs the system's (`8x[7x1g.10gb]`, see placement/deployment.py)."""
        from mlperf_mig.placement.deployment import system_layout

        return system_layout(self.deployment.parts)

    @property
    def gpu(self) -> str:
        """The GPU model (models joined by '+' over GPUs of several models)."""
        from mlperf_mig.placement.deployment import system_gpu

        return system_gpu(self.deployment.parts)

    def settings_profile(self, slot: InstanceSlot) -> str | None:
        """The profile whose LoadGen targets the slot uses: its own on GPUs, the CPU row (None)
        for emulated partitions."""
        return None if self.deployment.emulated else slot.profile

    @property
    def settings_key(self) -> str:
        """Digest of every setting except the layout: runs with equal keys are comparable."""
        fields = {
            "benchmark": self.benchmark.name,
            "loadgen_scenario": self.mlperf_scenario,
            "mode": self.mode,
            "backend": self.backend,
            "precision": self.precision,
            "variant": self.variant,
            "preset": self.preset,
            "overrides": [list(o) for o in self.overrides],
            "user_conf": _file_digest(self.user_conf),
            "dataset": self.dataset,
            "sample_count": self.sample_count,
            "batch_size": self.batch_size,
            "model_path": _file_digest(self.model_path),
            "gpu": self.gpu,
            # a hash input only: named as before the rename, so that earlier runs keep their keys
            "target": self.deployment.partitioning,
            "accuracy": self.accuracy,
            # only when asked for, so that the keys of runs without audits stay as they were
            **({"compliance": True} if self.compliance else {}),
        }
        canonical = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]

    def rows(self) -> list[dict[str, Any]]:
        return [
            {
                "instance": slot.name,
                "gpu": slot.gpu_index,
                "host": slot.host,
                "node": slot.node[:8] if slot.node else None,
                "profile": slot.profile,
                "compute slices": slot.compute_slices,
                "device": slot.device,
                "CPU share": None
                if slot.cpu_share is None
                else f"{slot.cpu_share:.3g} CPU ({slot.cpu_budget})",
                "threads": slot.threads,
                "engine": self.engine_of[slot.name],
                "folder": str(Path(self.outdir) / slot.name),
            }
            for slot in self.slots
        ]

    def columns(self) -> tuple[str, ...]:
        """The plan table's columns: with the host and node of each instance on a cluster."""
        local: tuple[str, ...] = (
            "instance",
            "profile",
            "compute slices",
            "device",
            "threads",
            "engine",
            "folder",
        )
        if self.deployment.emulated:
            local = (*local[:4], "CPU share", *local[4:])
        if self.deployment.multi_gpu:
            local = ("instance", "gpu", *local[1:])
        return local if self.deployment.cluster is None else (local[0], "host", "node", *local[1:])

    def header(self) -> list[str]:
        """The lines above the plan's table: its title and notes."""
        return [self.title(), *self.notes()]

    def title(self) -> str:
        scenario = (
            f"study scenario {self.deployment.scenario}: " if self.deployment.scenario else ""
        )
        parts = self.deployment.parts
        where = f"{len(parts)} GPUs ({self.gpu})" if len(parts) > 1 else self.gpu
        return (
            f"{self.benchmark} {scenario_words(self.mlperf_scenario)}, "
            f"{scenario}MIG layout "
            f"{self.layout} on {where} ({self.deployment.partitioning}), {self.mode} mode, "
            f"{len(self.slots)} instance{'s' if len(self.slots) != 1 else ''}"
        )

    def notes(self) -> list[str]:
        """The settings, the engines, the output folder, then what qualifies the run."""
        lines = [
            f"backend {self.backend}, variant {self.variant}, precision "
            f"{self.precision or 'backend default'}, preset {self.preset}, accuracy run "
            f"{'yes' if self.accuracy else 'no'}{', compliance audits' if self.compliance else ''}, "
            f"about {self.expected_s:.0f} s per LoadGen test"
            + ("" if self.accuracy_s is None else f", {self.accuracy_s:.0f} s per accuracy test")
            + f" (from {self.expected_from}); hang limit {self.timeouts.run_s:.0f} s",
            f"engines to build or reuse: {', '.join(e.key for e in self.engines) or 'none (null backend)'}",
            f"output folder: {self.outdir}",
        ]
        if self.target_from is not None:
            target = dict(self.overrides).get("target_qps")
            lines.append(
                f"note: Server target {target:.4g} QPS per instance from {self.target_from}"
            )
        if self.mlperf_scenario != self.loadgen_scenario:
            lines.append(f"note: {self.scenario_note()}")
        lines.extend(f"note: {note}" for note in self.host_notes)
        if self.deployment.emulated:
            lines.append(f"note: {EMULATED_LABEL}")
            lines.extend(f"note: {note}" for note in self.deployment.notes)
        if self.deployment.partitioning == "shared":
            lines.append(f"note: {SHARED_LABEL}")
        if self.deployment.cluster is not None:
            nodes = len({slot.node for slot in self.slots})
            gpus = len(self.deployment.parts)
            lines.append(
                f"note: on Ray cluster {self.deployment.cluster}, {nodes} node(s); "
                f"{f'{gpus} GPUs' if gpus > 1 else 'one GPU'} by {self.deployment.grouping} grouping"
            )
        return lines

    def scenario_note(self) -> str:
        """How the MLPerf scenario runs in LoadGen (Interactive: a Server test under the
        interactive conf model name, with its limits)."""
        bench = self.benchmark
        limits = bench.token_limits_ms()
        held = f", held to p99 TTFT {limits[0]:g} ms and TPOT {limits[1]:g} ms" if limits else ""
        return (
            f"{self.mlperf_scenario} runs as LoadGen's {self.loadgen_scenario} scenario under the "
            f"conf model name {bench.conf_model_name}{held}"
        )

    def to_dict(self) -> dict[str, Any]:
        from mlperf_mig.placement.deployment import parts_to_dicts

        return {
            "gpu": self.gpu,
            "layout": self.layout,
            "gpus": parts_to_dicts(self.deployment.parts, self.slots),
            "scenario": self.deployment.scenario,
            "partitioning": self.deployment.partitioning,
            "mode": self.mode,
            "benchmark": self.benchmark.name,
            "loadgen_scenario": self.mlperf_scenario,
            "backend": self.backend,
            "precision": self.precision,
            "variant": self.variant,
            "preset": self.preset,
            "overrides": dict(self.overrides),
            "target_from": self.target_from,
            "accuracy": self.accuracy,
            "compliance": self.compliance,
            "telemetry": self.telemetry,
            "reuse_targets": self.reuse_targets,
            "outdir": self.outdir,
            "settings_key": self.settings_key,
            "instances": [
                {**slot.to_dict(), "engine": self.engine_of[slot.name]} for slot in self.slots
            ],
            "engines": [e.to_dict() for e in self.engines],
        }


def _file_digest(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError:
        return path


def default_outdir(kind: str = "run", now: dt.datetime | None = None) -> Path:
    """A new timestamped folder name under the current directory (not created here)."""
    stamp = (now or dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
    base = Path.cwd() / f"mlperf-mig-{kind}-{stamp}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def _engine_requests(
    deployment: Deployment,
    *,
    benchmark: Workload,
    backend: str,
    precision: str | None,
    variant: str,
    model_path: str | None,
    loadgen_scenario: str,
    cache_dir: str | None,
) -> tuple[tuple[EngineRequest, ...], dict[str, str]]:
    """One engine per distinct profile on MIG, one for a shared GPU, one for all CPU partitions."""
    from mlperf_mig.engines import backend_class

    if not backend_class(backend).runs_model:
        return (), {slot.name: "null" for slot in deployment.slots}
    requests: dict[str, EngineRequest] = {}
    engine_of = {}
    part_of = {
        slot.name: next((p for p in deployment.parts if p.holds(slot)), deployment.parts[0])
        for slot in deployment.slots
    }
    models = len({p.name for p in deployment.parts}) > 1  # engines are per GPU model and profile
    for slot in deployment.slots:
        part = part_of[slot.name]
        if part.partitioning in ("mig", "vgpu"):
            key, gpu, profile = slot.profile, part.name, slot.profile
        elif part.partitioning == "shared":
            key, gpu, profile = "gpu", part.name, None
        else:
            key, gpu, profile = "cpu", None, None
        if models and gpu is not None:
            key = f"{gpu}-{key}"
        engine_of[slot.name] = key
        if key not in requests:
            requests[key] = EngineRequest(
                key=key,
                benchmark=benchmark,
                backend=backend,
                precision=precision,
                variant=variant,
                model_path=model_path,
                gpu=gpu,
                mig_profile=profile,
                loadgen_scenario=loadgen_scenario,
                cache_dir=cache_dir,
                env=dict(slot.env),
                cpus=slot.cpus,
            )
    return tuple(requests.values()), engine_of


def expected_seconds(
    benchmark: Workload, loadgen_scenario: str, preset: str, overrides: Mapping[str, float]
) -> float:
    """About how long one instance's LoadGen test lasts (s): what the progress display expects."""
    from mlperf_mig.harness.settings import expected_test_seconds

    return expected_test_seconds(benchmark, loadgen_scenario, preset, overrides)


def make_plan(options: RunOptions) -> RunPlan:
    """What `mlperf_mig.run` would do with `options`: instances, profiles, devices, engines,
    settings and the output folder. Starts nothing and writes nothing; what the options record
    cannot check alone (layouts on the GPU, files, CPUs, settings per profile) is refused here,
    before any worker starts."""
    from mlperf_mig import registry
    from mlperf_mig.engines import backend_class, resolve_backend
    from mlperf_mig.engines.cache import cache_root
    from mlperf_mig.harness.settings import PRESETS, normalize_scenario
    from mlperf_mig.workloads import get_workload

    # the workload is resolved here, once; Interactive is a Server test of its interactive variant
    bench, lg_scenario = get_workload(options.benchmark).run_as(
        normalize_scenario(options.loadgen_scenario)
    )
    if options.preset not in PRESETS:
        raise SettingsError(f"preset {options.preset!r} is not one of {', '.join(PRESETS)}")
    _check_cpus(options.cpus)
    # the cache feeds every worker (engines, samples, targets): one that another user owns or
    # can write is refused here, before anything runs (engines/cache.py)
    cache_root(options.cache_dir)
    catalog = registry.default_catalog()
    deployment = place(options, catalog=catalog, nvml_source=options.nvml_source)
    backend_name = _backend_for(deployment, options.backend, resolve_backend)
    if deployment.emulated and not backend_class(backend_name).runs_model:
        deployment = without_cpu_budgets(deployment, backend_name)
    engines, engine_of = _engine_requests(
        deployment,
        benchmark=bench,
        backend=backend_name,
        precision=options.precision,
        variant=options.variant,
        model_path=options.model_path,
        loadgen_scenario=lg_scenario,
        cache_dir=options.cache_dir,
    )
    if bench.generates_tokens:
        _check_generation_input(bench, options, backend_name)
    _check_engine_input(
        backend=backend_name,
        precision=options.precision,
        variant=options.variant,
        model_path=options.model_path,
        model_folder_ok=bench.generates_tokens,
    )
    _check_run_input(deployment, options, benchmark=bench, loadgen_scenario=lg_scenario)
    fit_notes = (
        memory_fit_notes(deployment, options, bench, lg_scenario)
        if backend_class(backend_name).runs_model
        else ()
    )
    overrides = options.settings
    host_notes: tuple[str, ...] = ()
    if options.cluster is None:  # on a cluster each node holds only its own instances
        overrides, host_notes = _fit_host(deployment, options, backend_name, bench, lg_scenario)
    host_notes = (*fit_notes, *host_notes)
    if options.compliance and not options.accuracy:
        raise SettingsError(
            "compliance=True needs the accuracy run (TEST01 compares its responses with the "
            "accuracy run's); drop accuracy=False / --no-accuracy"
        )
    expected = expected_seconds(bench, lg_scenario, options.preset, dict(overrides))
    timeout_s = options.timeout_s
    run_s = timeout_s if timeout_s is not None else max(600.0, 5 * expected)
    outdir = options.outdir
    plan = RunPlan(
        deployment=deployment,
        benchmark=bench,
        loadgen_scenario=lg_scenario,
        mode=options.mode,
        backend=backend_name,
        precision=options.precision,
        variant=options.variant,
        preset=options.preset,
        overrides=overrides,
        user_conf=options.user_conf,
        dataset=options.dataset,
        vocab=options.vocab,
        sample_count=options.sample_count,
        batch_size=options.batch_size,
        model_path=options.model_path,
        cache_dir=options.cache_dir,
        accuracy=options.accuracy,
        outdir=str(Path(outdir).absolute()) if outdir is not None else str(default_outdir()),
        engines=engines,
        engine_of=engine_of,
        worker_entry=options.worker_entry,
        timeouts=Timeouts(ready_s=timeout_s or READY_TIMEOUT_S, run_s=run_s),
        expected_s=expected,
        compliance=options.compliance,
        telemetry=options.telemetry,
        nvml_source=options.nvml_source,
        host_notes=host_notes,
        reuse_targets=not options.studied,
    )
    return _with_estimates(plan, options.timeout_s)


def memory_fit_notes(
    deployment: Deployment, options: RunOptions, bench: Workload, loadgen_scenario: str
) -> tuple[str, ...]:
    """For a workload that sizes its memory (an LLM): one note per profile of the layout saying
    how its slice holds the model; on real slices a profile that cannot hold it is refused in one
    line naming the profiles of that GPU that can (emulated slices, CPU stand-ins, only note it)."""
    from mlperf_mig.engines.recipes import load_recipe

    notes: list[str] = []
    seen: set[tuple[str, str]] = set()
    parts = deployment.parts
    for part in parts:
        gpu = part.layout.gpu
        for slot in deployment.slots:
            if len(parts) > 1 and slot.gpu_index != part.index:
                continue  # a slice of another GPU of the fleet
            if (gpu.name, slot.profile) in seen:
                continue
            seen.add((gpu.name, slot.profile))
            memory = gpu.profile(slot.profile).memory_gib
            if memory is None:
                notes.append(
                    f"fit: {slot.profile} of {gpu.name}: memory not in the catalog, not sized"
                )
                continue
            batch = options.batch_size or load_recipe(
                bench, options.precision or "fp32"
            ).batch_size(slot.compute_slices, loadgen_scenario)
            fit = bench.memory_fit(
                variant=options.variant, precision=options.precision, batch=batch, memory_gib=memory
            )
            if fit is None:
                return ()
            if not fit.holds and deployment.emulated:
                notes.append(
                    f"fit: a real {slot.profile} slice of {gpu.name} would not hold {bench} "
                    f"{options.variant}: {fit.text()}"
                )
                continue
            if not fit.holds:
                holding = [
                    p.name for p in gpu.profiles
                    if p.memory_gib is not None and bench.memory_fit(
                        variant=options.variant, precision=options.precision, batch=batch,
                        memory_gib=p.memory_gib,
                    ).holds  # type: ignore[union-attr]
                ]  # fmt: skip
                smaller = (
                    "" if options.precision in ("fp8", "int8", "int4") else " or --precision fp8"
                )
                raise WorkloadError(
                    f"{bench} ({options.variant}, {options.precision or 'default precision'}) does "
                    f"not fit a {slot.profile} slice of {gpu.name}: {fit.text()}; profiles that "
                    f"hold it: {', '.join(holding) or 'none'} (or a --batch-size below {batch}"
                    f"{smaller})"
                )
            notes.append(f"fit: {slot.profile} holds {bench} {options.variant}: {fit.text()}")
    return tuple(notes)


def _with_estimates(plan: RunPlan, timeout_s: float | None) -> RunPlan:
    """The plan with its time estimates from the engine's speed here, and the hang limit from
    them (runner/speed.py) unless the user set a timeout."""
    from mlperf_mig.runner.speed import estimates, hang_limit

    performance, accuracy, source = estimates(plan)
    run_s = timeout_s if timeout_s is not None else hang_limit(performance, accuracy)
    return attrs.evolve(
        plan,
        expected_s=performance,
        accuracy_s=accuracy,
        expected_from=source,
        timeouts=attrs.evolve(plan.timeouts, run_s=run_s),
    )


def _fit_host(
    deployment: Deployment,
    options: RunOptions,
    backend: str,
    bench: Workload,
    loadgen_scenario: str,
) -> tuple[tuple[tuple[str, float], ...], tuple[str, ...]]:
    """The overrides and notes of a run that fits this host (placement/host.py fit_host)."""
    from mlperf_mig.engines import backend_class
    from mlperf_mig.harness.settings import SettingsSpec, resolve_settings

    spec = SettingsSpec(
        preset=options.preset,
        overrides=dict(options.settings),
        user_conf=options.user_conf,
        profile=None,
    )
    given = int(
        resolve_settings(spec, bench, loadgen_scenario, calibrated_target=1.0).values.get(
            "performance_sample_count_override", 0
        )
    )
    fewer, note = fit_host(
        deployment,
        runs_model=backend_class(backend).runs_model,
        mode=options.mode,
        benchmark=bench,
        samples=given or bench.performance_sample_count,
        samples_given=given > 0,
        preset=options.preset,
    )
    if fewer is None or note is None:  # fit_host gives both or neither
        return options.settings, ()
    overrides = dict(options.settings)
    overrides["performance_sample_count_override"] = fewer
    return tuple(sorted(overrides.items())), (note,)


def _check_cpus(cpus: tuple[int, ...] | None) -> None:
    """CPUs given for emulated partitions must be CPUs this process may run on."""
    if cpus is None:
        return
    available = os.sched_getaffinity(0)
    missing = sorted(set(cpus) - available)
    if missing:
        raise SettingsError(
            f"cpus {missing} are not CPUs this process may run on ({_cpu_list(available)}); "
            "pass some of those, or leave cpus out"
        )


def _cpu_list(cpus: set[int]) -> str:
    return ", ".join(str(c) for c in sorted(cpus))


def _check_generation_input(bench: Workload, options: RunOptions, backend: str) -> None:
    """A generative workload's model folder (vLLM's: config, weights, tokenizer) and tokenizer
    file (--vocab), each refused in one line before any worker starts; the tokenizer must have
    the model's vocabulary."""
    from mlperf_mig.engines.backends.vllm.model import VllmModel

    vocab_size = None  # the generated model's
    model = options.model_path
    if model is not None and Path(model).is_dir():
        if backend != "vllm":
            raise ModelFileError(
                f"model folder {model!r} is a Hugging Face model, which the vllm backend runs; "
                f"pass --backend vllm (or an ONNX file for --backend {backend})"
            )
        vocab_size = VllmModel.from_dir(model).shape.vocab_size
    if options.vocab is not None:
        bench.check_tokenizer(options.vocab, variant=options.variant, vocab_size=vocab_size)


def _check_engine_input(
    *,
    backend: str,
    precision: str | None,
    variant: str,
    model_path: str | None,
    model_folder_ok: bool = False,
) -> None:
    """Refuse what the engine build would refuse, before the run folder and workers exist, and
    engine options the null backend would ignore."""
    from mlperf_mig.engines import PRECISIONS, VARIANTS

    if precision is not None and precision not in PRECISIONS:
        raise PrecisionError(
            f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}"
        )
    if variant not in VARIANTS:
        raise ModelFileError(
            f"unknown model variant {variant!r}; expected one of {', '.join(VARIANTS)}"
        )
    folder = model_folder_ok and model_path is not None and Path(model_path).is_dir()
    if model_path is not None and not folder and not Path(model_path).is_file():
        raise ModelFileError(
            f"model file {model_path!r} does not exist; pass the path of an ONNX file"
        )
    from mlperf_mig.engines import backend_class

    engine_options = precision is not None or model_path is not None
    if engine_options and backend != "auto" and not backend_class(backend).runs_model:
        raise SettingsError(
            f"the {backend} backend runs no model, so a precision or model file would be ignored; "
            "drop --precision/--model or pick --backend onnxruntime, tensorrt or auto"
        )


def _check_run_input(
    deployment: Deployment, options: RunOptions, *, benchmark: Workload, loadgen_scenario: str
) -> None:
    """Refuse what every worker would refuse, so that bad input is one line and exit 2 rather
    than a failed run: the user.conf, settings (for each distinct profile), dataset files."""
    from mlperf_mig.harness.settings import (
        SettingsSpec,
        check_concurrent_queues,
        queued_samples,
        resolve_settings,
    )

    bench = benchmark
    if options.user_conf is not None:
        check_text_file(options.user_conf, "user.conf")
    profiles = {None} if deployment.emulated else {slot.profile for slot in deployment.slots}
    queued = 0.0  # samples the layout's LoadGens build at once on this host
    for profile in sorted(profiles, key=str):
        spec = SettingsSpec(
            preset=options.preset,
            overrides=dict(options.settings),
            user_conf=options.user_conf,
            profile=profile,
        )
        resolved = resolve_settings(spec, bench, loadgen_scenario, calibrated_target=1.0)
        for key, value in resolved.values.items():  # a user.conf's values too
            check_setting(key, value)
        sharing = [s for s in deployment.slots if deployment.emulated or s.profile == profile]
        queued += len(sharing) * queued_samples(resolved.values, loadgen_scenario)[0]
    if options.mode == "independent" and deployment.cluster is None and len(deployment.slots) > 1:
        # each instance's LoadGen passed alone; on one host they build their queries together
        check_concurrent_queues(queued, len(deployment.slots))
    if options.dataset is not None:
        bench.check_dataset(options.dataset, options.vocab)


def _backend_for(deployment: Deployment, backend: str, resolve: Callable[..., str]) -> str:
    """The backend name; emulated partitions are CPU partitions, so "auto" means ONNX Runtime
    there and a backend that needs a GPU is refused."""
    return resolve(backend, on_cpu=deployment.emulated)
