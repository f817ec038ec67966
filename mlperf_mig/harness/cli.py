"""`mlperf-mig harness`: one LoadGen test of one instance in this process, without MIG."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from mlperf_mig._cli_args import add_settings_option, parse_overrides

_COUNT_MAX = 2**63 - 1  # LoadGen keeps sample counts in 64-bit integers


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    from mlperf_mig.engines.backends import AUTO, backend_names

    parser = subparsers.add_parser(
        "harness",
        help="run one LoadGen test on this machine (one instance, no MIG) and print the result",
        description=(
            "Run one MLPerf LoadGen test of ResNet50 or BERT in this process: settings from a "
            "preset, a user.conf and --set overrides; MLPerf logs under OUTDIR/<mode>/; the "
            "result parsed from mlperf_log_detail.txt."
        ),
    )
    parser.add_argument("--benchmark", required=True, help="resnet50 or bert")
    parser.add_argument(
        "--loadgen-scenario",
        required=True,
        help="Offline, Server, SingleStream or MultiStream (the MLPerf scenario, not a MIG layout)",
    )
    parser.add_argument(
        "--backend",
        default="onnxruntime",
        help=f"{', '.join(backend_names())} or {AUTO} (default onnxruntime)",
    )
    parser.add_argument("--preset", default="quick", help="quick or submission (default quick)")
    parser.add_argument("--outdir", required=True, help="folder for the logs and the user.conf")
    parser.add_argument("--mode", default="performance", choices=("performance", "accuracy"))
    parser.add_argument(
        "--audit",
        default=None,
        choices=("TEST01", "TEST04"),
        help="run this compliance audit (a performance test with its audit.config) and verify it "
        "against the performance and accuracy runs already in OUTDIR (same settings); exit 1 if it fails",
    )
    parser.add_argument("--variant", default="full", choices=("full", "tiny"), help="model size")
    parser.add_argument(
        "--precision", default=None, help="fp32, fp16 or int8 (default: the backend's)"
    )
    parser.add_argument(
        "--model", default=None, help="an ONNX model file instead of the generated graph"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="CPU threads of the backend (at most the CPUs)"
    )
    parser.add_argument("--user-conf", default=None, help="a user.conf with LoadGen settings")
    add_settings_option(parser)
    parser.add_argument(
        "--dataset", default=None, help="ImageNet val folder or SQuAD dev json (default synthetic)"
    )
    parser.add_argument("--vocab", default=None, help="vocab.txt for SQuAD (default: next to it)")
    parser.add_argument(
        "--sample-count", type=int, default=None, help="use the first N samples of the dataset"
    )
    parser.add_argument(
        "--profile", default=None, help="MIG profile whose target to use, e.g. 2g.20gb"
    )
    parser.add_argument("--cache-dir", default=None, help="model and engine cache folder")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=_run)


def _engine(args: argparse.Namespace) -> Any:
    from mlperf_mig.engines import EngineSpec
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

    return EngineSpec.create(
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
    from pathlib import Path

    from mlperf_mig.errors import SettingsError

    needed = ("performance", "accuracy") if audit == "TEST01" else ("performance",)
    missing = [m for m in needed if not (Path(outdir) / m / "mlperf_log_detail.txt").is_file()]
    if missing:
        raise SettingsError(
            f"--audit {audit} is verified against the {' and '.join(needed)} run(s) in "
            f"{outdir!r}, which lacks {', '.join(missing)}/; run `mlperf-mig harness --mode "
            f"{missing[0]}` with the same --outdir and settings first"
        )


def _check_input(args: argparse.Namespace) -> None:
    """Refuse what LoadGen or the machine cannot take before the model loads: counts beyond
    LoadGen's range, more threads than CPUs, unreadable user.conf or dataset, a bad outdir."""
    from mlperf_mig._io import check_output_path, check_text_file
    from mlperf_mig.benchmark import get_benchmark
    from mlperf_mig.errors import SettingsError
    from mlperf_mig.harness.datasets import check_dataset

    if args.sample_count is not None and args.sample_count > _COUNT_MAX:
        raise SettingsError(
            f"--sample-count {args.sample_count} is beyond LoadGen's 64-bit range; pass at most "
            "the samples of the dataset"
        )
    if args.audit is not None:
        _check_audit_references(args.audit, args.outdir)
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
        check_dataset(get_benchmark(args.benchmark), args.dataset, args.vocab)


def _run(args: argparse.Namespace) -> int:
    from mlperf_mig.harness import InstanceTask, SettingsSpec, run_instance

    _check_input(args)
    task = InstanceTask(
        benchmark=args.benchmark,
        loadgen_scenario=args.loadgen_scenario,
        outdir=args.outdir,
        mode=args.mode,
        audit=args.audit,
        engine=_engine(args),
        cache_dir=args.cache_dir,
        threads=args.threads,
        settings=SettingsSpec(
            preset=args.preset,
            overrides=parse_overrides(args.set),
            user_conf=args.user_conf,
            profile=args.profile,
        ),
        dataset=args.dataset,
        vocab=args.vocab,
        sample_count=args.sample_count,
    )
    result = run_instance(task)
    verdict = None if task.audit is None or result.failed else _verify(task)
    data = result.to_dict() | ({"compliance": verdict.to_dict()} if verdict else {})
    print(json.dumps(data, indent=2) if args.json else summary(result, verdict))
    return 1 if result.failed or (verdict is not None and not verdict.passed) else 0


def _verify(task: Any) -> Any:
    """The audit's verdict against the performance and accuracy runs in the task's folder."""
    from mlperf_mig.benchmark import get_benchmark
    from mlperf_mig.harness import datasets
    from mlperf_mig.harness.compliance import verify_audit

    return verify_audit(
        task.audit,
        task.outdir,
        benchmark=task.benchmark,
        loadgen_scenario=task.loadgen_scenario,
        short=task.settings.preset != "submission",
        open_source=lambda: datasets.open_source(task, get_benchmark(task.benchmark)),
    )


def summary(result: Any, verdict: Any = None) -> str:
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
