"""`mlperf-mig harness`: one LoadGen test of one instance in this process, without MIG."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlperf_mig._cli_args import add_settings_option, parse_overrides, whole_number
from mlperf_mig.workloads import workload_names

if TYPE_CHECKING:
    from mlperf_mig.engines import EngineSpec
    from mlperf_mig.harness.compliance import AuditVerdict
    from mlperf_mig.harness.result import InstanceResult
    from mlperf_mig.harness.task import InstanceTask

logger = logging.getLogger(__name__)

_COUNT_MAX = 2**63 - 1  # LoadGen keeps sample counts in 64-bit integers
# Next to a test's logs: the settings `harness` ran it with, which an audit must share.
RECORD = "harness.json"
RECORD_SCHEMA = 1
# What TEST01's accuracy run must share with the audit, whose answers it compares: the model and
# its samples (its LoadGen settings differ by design).
_ANSWER_KEYS = (
    "benchmark", "loadgen_scenario", "backend", "precision", "variant", "model", "dataset",
    "vocab", "sample_count",
)  # fmt: skip


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    from mlperf_mig.engines.backends import AUTO, backend_names

    parser = subparsers.add_parser(
        "harness",
        help="run one LoadGen test on this machine (one instance, no MIG) and print the result",
        description=(
            "Run one MLPerf LoadGen test of a workload in this process: settings from a "
            "preset, a user.conf and --set overrides; MLPerf logs under OUTDIR/<mode>/; the "
            "result parsed from mlperf_log_detail.txt."
        ),
    )
    parser.add_argument("--benchmark", required=True, help=", ".join(workload_names()))
    parser.add_argument(
        "--loadgen-scenario",
        required=True,
        help="Offline, Server, SingleStream, MultiStream or Interactive (llama3.1-8b: a Server "
        "test under llama3_1-8b-interactive); the MLPerf scenario, not a MIG layout",
    )
    parser.add_argument(
        "--backend",
        default="onnxruntime",
        help=f"{', '.join(backend_names())} or {AUTO} (default onnxruntime)",
    )
    parser.add_argument("--preset", default="quick", help="quick or submission (default quick)")
    parser.add_argument("--outdir", required=True, help="folder for the logs and the user.conf")
    parser.add_argument(
        "--mode",
        default="performance",
        choices=("performance", "accuracy"),
        help="LoadGen's PerformanceOnly or AccuracyOnly test (default performance)",
    )
    parser.add_argument(
        "--audit",
        default=None,
        choices=("TEST01", "TEST04"),
        help="run this compliance audit (a performance test with its audit.config) and verify it "
        "against the performance and accuracy runs already in OUTDIR, with the performance run's "
        "settings (others are refused); exit 1 if it fails",
    )
    parser.add_argument(
        "--replace-audit",
        action="store_true",
        help="with --audit: replace a passing audit already in OUTDIR/<audit>/ (refused without it)",
    )
    parser.add_argument("--variant", default="full", choices=("full", "tiny"), help="model size")
    parser.add_argument(
        "--precision", default=None, help="fp32, fp16 or int8 (default: the backend's)"
    )
    parser.add_argument(
        "--model", default=None, help="an ONNX model file instead of the generated graph"
    )
    parser.add_argument(
        "--threads",
        type=whole_number,
        default=None,
        help="CPU threads of the backend (at most the CPUs)",
    )
    parser.add_argument("--user-conf", default=None, help="a user.conf with LoadGen settings")
    add_settings_option(parser)
    parser.add_argument(
        "--dataset", default=None, help="ImageNet val folder or SQuAD dev json (default synthetic)"
    )
    parser.add_argument("--vocab", default=None, help="vocab.txt for SQuAD (default: next to it)")
    parser.add_argument(
        "--sample-count",
        type=whole_number,
        default=None,
        help="use the first N samples of the dataset",
    )
    parser.add_argument(
        "--profile", default=None, help="MIG profile whose target to use, e.g. 2g.20gb"
    )
    parser.add_argument("--cache-dir", default=None, help="model and engine cache folder")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=_run)


def _engine(args: argparse.Namespace) -> EngineSpec | None:
    from mlperf_mig.engines import resolve_spec
    from mlperf_mig.engines.backends import AUTO, backend_class, backend_names

    if args.backend != AUTO and not backend_class(args.backend).runs_model:
        if args.precision is not None or args.model is not None or args.threads is not None:
            from mlperf_mig.errors import SettingsError

            model_ones = [n for n in backend_names() if backend_class(n).runs_model]
            raise SettingsError(
                f"--backend {args.backend} runs no model, so --precision, --model and --threads "
                f"would be ignored; drop them or pick --backend {', '.join(model_ones)} or {AUTO}"
            )
        return None

    return resolve_spec(
        args.benchmark,
        backend=args.backend,
        precision=args.precision,
        variant=args.variant,
        model_path=args.model,
        loadgen_scenario=args.loadgen_scenario,
        cache_dir=args.cache_dir,
    )


def _check_audit_references(audit: str, outdir: str) -> None:
    """An audit is verified against the runs it audits: they must be in OUTDIR already."""
    from mlperf_mig._io import inside
    from mlperf_mig.errors import SettingsError

    needed = _audited_modes(audit)
    missing = [
        m for m in needed
        if not inside(outdir, f"{m}/mlperf_log_detail.txt", f"the {m} run's detail log").is_file()
    ]  # fmt: skip
    if missing:
        raise SettingsError(
            f"--audit {audit} is verified against the {' and '.join(needed)} run(s) in "
            f"{outdir!r}, which lacks {', '.join(missing)}/; run `mlperf-mig harness --mode "
            f"{missing[0]}` with the same --outdir and settings first"
        )


def _audited_modes(audit: str) -> tuple[str, ...]:
    return ("performance", "accuracy") if audit == "TEST01" else ("performance",)


def _requested(args: argparse.Namespace, engine: EngineSpec | None) -> dict[str, Any]:
    """The settings of this test as plain JSON data: what an audit must share with the runs it
    audits (the backend and precision as resolved, the model by its SHA-256)."""
    from mlperf_mig.harness.settings import normalize_loadgen_scenario

    user_conf = None
    if args.user_conf is not None:
        user_conf = Path(args.user_conf).read_text(encoding="utf-8")
    requested = {
        "benchmark": args.benchmark.name,
        "loadgen_scenario": normalize_loadgen_scenario(args.loadgen_scenario),
        "backend": args.backend if engine is None else engine.backend,
        "precision": None if engine is None else engine.precision,
        "variant": args.variant,
        "model": None if engine is None else engine.model,
        "preset": args.preset,
        "settings": dict(sorted(parse_overrides(args.set).items())),
        "user_conf": user_conf,
        "profile": args.profile,
        "dataset": None if args.dataset is None else os.path.abspath(args.dataset),
        "vocab": None if args.vocab is None else os.path.abspath(args.vocab),
        "sample_count": args.sample_count,
        "threads": args.threads,
    }
    return json.loads(json.dumps(requested))  # as it reads back from a record


def _check_audit(args: argparse.Namespace, requested: dict[str, Any]) -> dict[str, float]:
    """Refuse an audit whose settings differ from the runs it audits (their records in OUTDIR),
    or that would overwrite a passing audit without --replace-audit; return the values the
    performance run resolved (its measured target included), which the audit runs with."""
    from mlperf_mig.errors import SettingsError

    audit, outdir = args.audit, args.outdir
    records = {
        mode: _read_record(outdir, mode, audit, requested["loadgen_scenario"])
        for mode in _audited_modes(audit)
    }
    differing = []
    for mode, record in records.items():
        keys = requested if mode == "performance" else _ANSWER_KEYS
        theirs = record["requested"]
        differing += [
            f"{key} {_shown(key, requested.get(key))} (the {mode} run's: {_shown(key, theirs.get(key))})"
            for key in keys
            if requested.get(key) != theirs.get(key)
        ]
    if differing:
        raise SettingsError(
            f"--audit {audit} must run with the settings of the runs it audits in {outdir!r}, "
            f"but {'; '.join(differing)}; pass the options those runs had, or run them again "
            "with these"
        )
    _refuse_passing_audit(audit, outdir, replace=args.replace_audit)
    return records["performance"]["resolved"]


def _shown(key: str, value: object) -> str:
    if key == "user_conf" and isinstance(value, str):
        return f"a user.conf of {len(value.splitlines())} lines"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _read_record(outdir: str, mode: str, audit: str, loadgen_scenario: str) -> dict[str, Any]:
    """The settings record of the `mode` run in `outdir`, validated (it is read back from a
    folder that may have been copied or edited): its resolved values are user.conf keys of
    `loadgen_scenario` with finite, non-negative numbers."""
    from mlperf_mig._io import inside, read_small_text
    from mlperf_mig.errors import SettingsError
    from mlperf_mig.harness.settings import conf_keys

    path = inside(outdir, f"{mode}/{RECORD}", f"the {mode} run's settings record")
    fix = f"run `mlperf-mig harness --mode {mode}` with the same --outdir and settings again"
    if not os.path.lexists(path):
        raise SettingsError(
            f"--audit {audit} checks its settings against the {mode} run in {outdir!r}, which has "
            f"no {mode}/{RECORD} (the settings `mlperf-mig harness` ran it with; another command "
            f"or an older release made it); {fix}"
        )
    try:
        data = json.loads(read_small_text(path))
    except SettingsError as exc:
        raise SettingsError(f"{str(path)!r} is {exc}, not a settings record; {fix}") from None
    except (ValueError, RecursionError):
        data = None
    resolved = data.get("resolved") if isinstance(data, dict) else None
    if (
        not isinstance(data, dict)
        or data.get("schema") != RECORD_SCHEMA
        or not isinstance(data.get("requested"), dict)
        or not isinstance(resolved, dict)
        or not all(k in conf_keys(loadgen_scenario) and _number(v) for k, v in resolved.items())
    ):
        raise SettingsError(
            f"{str(path)!r} is not a settings record of schema {RECORD_SCHEMA} (an object with "
            f"'requested' settings and 'resolved' {loadgen_scenario} user.conf keys with finite, "
            f"non-negative numbers); it was edited or damaged: {fix}"
        )
    return data


def _number(value: object) -> bool:
    """A finite, non-negative JSON number (not a bool)."""
    from mlperf_mig._io import finite_number

    return finite_number(value) and value >= 0


def _refuse_passing_audit(audit: str, outdir: str, *, replace: bool) -> None:
    """Refuse to overwrite a passing audit in OUTDIR/<audit>/ unless told (--replace-audit)."""
    from mlperf_mig._io import inside
    from mlperf_mig.errors import OutputDirError
    from mlperf_mig.harness.compliance import recorded_pass

    folder = inside(outdir, audit, "the audit's folder")
    if not folder.is_dir() or not recorded_pass(folder, audit):
        return
    if not replace:
        raise OutputDirError(
            f"{str(folder)!r} already holds a passing {audit} audit, which this one would "
            "overwrite; pass --replace-audit to replace it, or give the audit another --outdir "
            "(with its own performance and accuracy runs)"
        )
    logger.warning("replacing the passing %s audit in %s (--replace-audit)", audit, folder)


def _write_record(task: InstanceTask, requested: dict[str, Any], result: InstanceResult) -> None:
    """Write the test's settings record next to its logs: what it was asked for and the values
    it resolved (read back from the user.conf it has just written)."""
    from mlperf_mig._io import atomic_write_json
    from mlperf_mig.harness.settings import read_user_conf

    model = task.benchmark.conf_model_name
    resolved = read_user_conf(result.user_conf, model, task.loadgen_scenario)
    record = {"schema": RECORD_SCHEMA, "requested": requested, "resolved": resolved}
    atomic_write_json(task.log_dir / RECORD, record)


def _check_input(args: argparse.Namespace) -> None:
    """Refuse what LoadGen or the machine cannot take before the model loads: counts beyond
    LoadGen's range, more threads than CPUs, unreadable user.conf or dataset, a bad outdir."""
    from mlperf_mig._io import check_output_path, check_text_file
    from mlperf_mig.errors import SettingsError

    if args.sample_count is not None and args.sample_count > _COUNT_MAX:
        raise SettingsError(
            f"--sample-count {args.sample_count} is beyond LoadGen's 64-bit range; pass at most "
            "the samples of the dataset"
        )
    if args.audit is not None:
        _check_audit_references(args.audit, args.outdir)
    elif args.replace_audit:
        raise SettingsError("--replace-audit replaces an audit: it needs --audit TEST01 or TEST04")
    cpus = len(os.sched_getaffinity(0))
    if args.threads is not None and not 1 <= args.threads <= cpus:
        raise SettingsError(
            f"--threads {args.threads} is not 1 to {cpus}, the CPUs this process may use; more "
            "threads than CPUs only contend"
        )
    check_output_path("--outdir", args.outdir)
    if args.user_conf is not None:
        check_text_file(args.user_conf, "user.conf")
    if args.dataset is not None:
        args.benchmark.check_dataset(args.dataset, args.vocab)


def _run(args: argparse.Namespace) -> int:
    from mlperf_mig.harness import InstanceTask, SettingsSpec, run_instance
    from mlperf_mig.harness.settings import normalize_scenario
    from mlperf_mig.workloads import get_workload

    # resolved once: from here on the workload (Interactive: its variant's LoadGen Server test)
    args.benchmark, args.loadgen_scenario = get_workload(args.benchmark).run_as(
        normalize_scenario(args.loadgen_scenario)
    )
    _check_input(args)
    engine = _engine(args)
    requested = _requested(args, engine)
    overrides = parse_overrides(args.set)
    user_conf = args.user_conf
    if args.audit is not None:
        # the performance run's values (its measured target too), as the runner's audits run
        overrides, user_conf = _check_audit(args, requested), None
    task = InstanceTask(
        benchmark=args.benchmark,
        loadgen_scenario=args.loadgen_scenario,
        outdir=args.outdir,
        mode=args.mode,
        audit=args.audit,
        engine=engine,
        cache_dir=args.cache_dir,
        threads=args.threads,
        settings=SettingsSpec(
            preset=args.preset,
            overrides=overrides,
            user_conf=user_conf,
            profile=args.profile,
        ),
        dataset=args.dataset,
        vocab=args.vocab,
        sample_count=args.sample_count,
    )
    result = run_instance(task)
    _write_record(task, requested, result)
    verdict = None if task.audit is None or result.failed else _verify(task, task.audit)
    data = result.to_dict() | ({"compliance": verdict.to_dict()} if verdict else {})
    print(json.dumps(data, indent=2) if args.json else summary(result, verdict))
    return 1 if result.failed or (verdict is not None and not verdict.passed) else 0


def _verify(task: InstanceTask, audit: str) -> AuditVerdict:
    """The audit's verdict against the performance and accuracy runs in the task's folder."""
    from mlperf_mig.harness import datasets
    from mlperf_mig.harness.compliance import verify_audit

    return verify_audit(
        audit,
        task.outdir,
        benchmark=task.benchmark,
        loadgen_scenario=task.loadgen_scenario,
        short=task.settings.preset != "submission",
        open_source=lambda: datasets.open_source(task),
        end_ids=() if task.engine is None else task.benchmark.end_token_ids(task.engine.variant),
    )


def summary(result: InstanceResult, verdict: AuditVerdict | None = None) -> str:
    """The result (and an audit's verdict) as a short two-column table."""
    from mlperf_mig._table import text_table

    device = result.device
    rows = [
        {"field": "run", "value": f"{result.benchmark} {result.loadgen_scenario} {result.mode}"},
        {"field": "device", "value": f"{device.backend} {device.provider} {device.device}"},
    ]
    if result.mode == "performance":
        validity = result.validity
        if result.invalid_by_design:
            validity += " (by design of the quick preset, not a failure; see the reason)"
        rows.append({"field": "validity", "value": validity})
        if result.throughput is not None:
            rows.append(
                {
                    "field": "throughput",
                    "value": f"{result.throughput:,.2f} {result.throughput_unit}",
                }
            )
        for percentile in ("50.00", "90.00", "99.00"):
            if percentile in result.latency_ns:
                ms = result.latency_ns[percentile] / 1e6
                rows.append({"field": f"latency p{percentile[:2]}", "value": f"{ms:,.3f} ms"})
    if result.accuracy is not None:
        rows.append({"field": "accuracy", "value": result.accuracy.summary()})
    if verdict is not None:
        rows.append({"field": "compliance", "value": verdict.summary()})
    rows.append({"field": "target from", "value": result.target_source})
    rows.extend({"field": "reason", "value": reason} for reason in result.invalid_reasons)
    rows.append({"field": "logs", "value": result.log_dir})
    return text_table(rows, ["field", "value"])
