"""Sub-commands of the public face: run, plan, sweep, report, aggregate.

They sit above runner/, study/ and cluster/ (as mlperf_mig/api.py does), so they import all three.

Thin over the notebook API. Progress goes to stderr, the final table to stdout. Exit codes:
0 every worker finished, 1 a worker crashed, raised or hung, or a compliance audit failed (its
row says which), 2 bad input
(one line, from mlperf_mig.cli), 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mlperf_mig._cli_args import add_settings_option, decimal_number, parse_overrides, whole_number
from mlperf_mig.errors import NameParseError

EXIT_OK = 0
EXIT_FAILED = 1
STUDY_LAYOUTS = 8


def _scenario(text: str) -> int | str:
    """A study layout number stays an int; anything else is a layout string or system ID."""
    stripped = text.strip()
    digits = stripped[1:] if stripped[:1] in ("+", "-") else stripped
    return int(stripped) if digits.isascii() and digits.isdigit() else stripped  # not "²", "٣"


def _scenarios(values: list[str]) -> list[int | str]:
    """'1-8', '1,3,7' and layout strings, in order; a range covers study layouts 1-8 only."""
    result: list[int | str] = []
    for value in values:
        for part in value.split(","):
            low, dash, high = part.partition("-")
            if dash and (low + high).isascii() and low.isdigit() and high.isdigit():
                if int(low) > int(high):
                    raise NameParseError(
                        f"--scenarios range {part!r} runs backwards; write it low to high, e.g. "
                        f"{high}-{low}"
                    )
                if not 1 <= int(low) <= int(high) <= STUDY_LAYOUTS:
                    raise NameParseError(
                        f"--scenarios range {part!r} goes beyond the study's MIG layouts "
                        f"1-{STUDY_LAYOUTS}; pass a range within 1-{STUDY_LAYOUTS}, or layout strings"
                    )
                result.extend(range(int(low), int(high) + 1))
            elif part:
                result.append(_scenario(part))
    if not result:
        raise NameParseError("--scenarios is empty; pass study layouts such as 1-8 or 1,6,7")
    return result


def _run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--benchmark", default="resnet50", help="resnet50 or bert (default resnet50)"
    )
    parser.add_argument(
        "--loadgen-scenario",
        default="Offline",
        help="MLPerf LoadGen scenario: Offline, Server, SingleStream, MultiStream (default Offline)",
    )
    parser.add_argument(
        "--mode",
        default="independent",
        choices=("independent", "unified"),
        help="independent: one LoadGen per instance (summed); unified: one LoadGen for the layout",
    )
    parser.add_argument(
        "--backend", default="auto", help="auto, tensorrt, onnxruntime or null (default auto)"
    )
    parser.add_argument("--preset", default="quick", help="quick or submission (default quick)")
    parser.add_argument(
        "--variant", default="full", choices=("full", "tiny"), help="model size (default full)"
    )
    parser.add_argument(
        "--precision", default=None, help="fp32, fp16 or int8 (default: the backend's)"
    )
    parser.add_argument(
        "--gpu", default=None, help="GPU to emulate without a GPU (default A100-SXM4-80GB)"
    )
    parser.add_argument(
        "--shared",
        action="store_true",
        help="on a GPU without MIG, let the instances time-share it (labelled shared)",
    )
    parser.add_argument(
        "--emulate", action="store_true", help="emulate partitions on the CPU even with a GPU"
    )
    parser.add_argument("--no-accuracy", action="store_true", help="skip the accuracy run")
    parser.add_argument(
        "--compliance",
        action="store_true",
        help="then run the compliance audits (TEST01, TEST04 for resnet50); a failed audit exits 1",
    )
    parser.add_argument(
        "--no-telemetry",
        action="store_true",
        help="do not sample GPU power, energy and each instance's activity during the run "
        "(default: sampled at 10 Hz into results.json and telemetry.csv)",
    )
    add_settings_option(parser)
    parser.add_argument("--user-conf", default=None, help="a user.conf file with LoadGen settings")
    parser.add_argument(
        "--dataset", default=None, help="ImageNet val folder or SQuAD dev json (default synthetic)"
    )
    parser.add_argument("--vocab", default=None, help="vocab.txt for SQuAD")
    parser.add_argument(
        "--model", default=None, help="an ONNX model file instead of the generated graph"
    )
    parser.add_argument(
        "--timeout",
        type=decimal_number,
        default=None,
        help="seconds before a worker counts as hung",
    )
    parser.add_argument(
        "--outdir", default=None, help="output folder (default: a new timestamped folder here)"
    )
    parser.add_argument(
        "--worker-entry", default=None, help=argparse.SUPPRESS
    )  # tests inject faults
    parser.add_argument(
        "--cluster",
        default=None,
        metavar="ADDR",
        help="run the instances on a Ray cluster: auto, HOST:PORT, ray://HOST:PORT, or "
        "local:N (N throwaway nodes on this machine); needs mlperf-mig[cluster]",
    )
    parser.add_argument(
        "--gpu-group",
        default=None,
        metavar="NODES",
        help="with --cluster on vGPUs: comma-separated nodes (address, host or node ID) "
        "whose vGPUs are slices of one GPU (the run says the grouping was declared)",
    )
    parser.add_argument(
        "--gpus",
        default=None,
        type=_gpu_selection,
        metavar="all|0,3",
        help="put the layout on each of these GPUs at once (all, or indices); with "
        "--cluster, all means every GPU of every node",
    )
    parser.add_argument(
        "--layout",
        action="append",
        default=[],
        type=_gpu_layout,
        metavar="GPU=LAYOUT",
        help="a GPU's own layout, e.g. 1=3g.40gb+4g.40gb (repeatable; the others carry --scenario)",
    )
    parser.add_argument(
        "--gpu-count",
        type=_count_of_gpus,
        default=None,
        metavar="N",
        help="without a GPU: emulate N GPUs of --gpu, each on its share of the CPUs "
        "(on a cluster: per node, with --gpus all)",
    )
    parser.add_argument(
        "--nvml-state",
        default=None,
        metavar="FILE",
        help="use a recorded NVML state (from `mlperf-mig detect --record FILE`) instead of this machine's GPUs",
    )


def _gpu_selection(text: str) -> str | list[int]:
    """--gpus: 'all' or comma-separated GPU indices in ASCII digits."""
    parts = [p.strip() for p in text.split(",")]
    if text.strip() == "all":
        return "all"
    if not all(p.isascii() and p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not 'all' or GPU indices such as 0,3 (digits 0-9, comma-separated)"
        )
    return [int(p) for p in parts]


def _gpu_layout(text: str) -> tuple[int, int | str]:
    """--layout GPU=LAYOUT: a GPU index and that GPU's layout (a study number or a layout)."""
    index, sep, layout = text.partition("=")
    if not (sep and index.strip().isascii() and index.strip().isdigit() and layout.strip()):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not GPU=LAYOUT; pass a GPU index and its layout, e.g. 1=3g.40gb+4g.40gb or 0=8"
        )
    return int(index), _scenario(layout)


def _count_of_gpus(text: str) -> int:
    """--gpu-count: a whole number in ASCII digits (RunOptions checks its range, in one line)."""
    try:
        return whole_number(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number in digits 0-9; pass how many GPUs to emulate, e.g. 8"
        ) from None


def _layouts(pairs: list[tuple[int, int | str]]) -> dict[int, int | str] | None:
    """The --layout options as a mapping; a GPU named twice is refused."""
    layouts: dict[int, int | str] = {}
    for index, layout in pairs:
        if index in layouts:
            raise NameParseError(f"--layout names GPU {index} twice; give each GPU one layout")
        layouts[index] = layout
    return layouts or None


def _positive(text: str) -> int:
    """--repeats: a whole number in ASCII digits (RunOptions checks its range, in one line)."""
    try:
        return whole_number(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number in digits 0-9; pass how often each layout runs, e.g. 3"
        ) from None


def _study_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--repeats",
        type=_positive,
        default=1,
        metavar="N",
        help="run each layout N times (each repeat its own folder); tables show "
        "means with 95%% confidence intervals (default 1; the study used 3)",
    )
    parser.add_argument(
        "--isolation",
        action="store_true",
        help="also run each distinct profile of the layout alone and report each "
        "instance's interference against it",
    )


def _options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "benchmark": args.benchmark,
        "loadgen_scenario": args.loadgen_scenario,
        "mode": args.mode,
        "backend": args.backend,
        "preset": args.preset,
        "gpu": args.gpu,
        "outdir": args.outdir,
        "variant": args.variant,
        "precision": args.precision,
        "shared": args.shared,
        "emulate": args.emulate,
        "accuracy": not args.no_accuracy,
        "compliance": args.compliance,
        "telemetry": not args.no_telemetry,
        "settings": parse_overrides(args.set),
        "user_conf": args.user_conf,
        "dataset": args.dataset,
        "vocab": args.vocab,
        "model_path": args.model,
        "timeout_s": args.timeout,
        "nvml_source": _nvml_source(args.nvml_state),
        "worker_entry": args.worker_entry,
        "cluster": args.cluster,
        "gpu_group": args.gpu_group,
        "gpus": args.gpus,
        "layouts": _layouts(args.layout),
        "gpu_count": args.gpu_count,
    }


def _nvml_source(path: str | None) -> Any:
    if path is None:
        return None
    from mlperf_mig.telemetry.replay import RecordedTelemetry

    return RecordedTelemetry.from_file(path)  # replays telemetry too where the state recorded it


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register run, plan, sweep, report and aggregate on the `mlperf-mig` parser."""
    scenario_help = (
        "the study's MIG layout 1-8, a layout such as 3x2g.20gb+1g.10gb, or a system ID "
        "(default 7; the LoadGen scenario is --loadgen-scenario)"
    )
    parser = subparsers.add_parser(
        "run", help="run a benchmark on every instance of a MIG layout at once"
    )
    parser.add_argument("--scenario", type=_scenario, default=7, help=scenario_help)
    _run_options(parser)
    _study_options(parser)
    parser.add_argument(
        "--json", action="store_true", help="print results.json (repeats.json) instead of the table"
    )
    parser.set_defaults(handler=_run)

    parser = subparsers.add_parser(
        "plan", help="show what `run` would do, without running anything"
    )
    parser.add_argument("--scenario", type=_scenario, default=7, help=scenario_help)
    _run_options(parser)
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.set_defaults(handler=_plan)

    parser = subparsers.add_parser(
        "sweep", help="run several MIG layouts one after the other; table and chart"
    )
    parser.add_argument(
        "--scenarios",
        nargs="+",
        default=["1-8"],
        help="study layouts (1-8, 1,6,7) or layout strings (default 1-8)",
    )
    _run_options(parser)
    _study_options(parser)
    parser.add_argument("--no-resume", action="store_true", help="run every layout again")
    parser.add_argument("--json", action="store_true", help="print sweep.json instead of the table")
    parser.set_defaults(handler=_sweep)

    parser = subparsers.add_parser("report", help="print the results of a run or sweep folder")
    parser.add_argument(
        "folder", metavar="DIR", help="a run folder (results.json) or a sweep folder"
    )
    parser.add_argument("--markdown", action="store_true", help="Markdown instead of a text table")
    parser.add_argument(
        "--html",
        default=None,
        metavar="FILE",
        help="also write one self-contained HTML report (charts embedded) to FILE: a "
        "new name or a regular file (replaced, and said so), never a file the report "
        "reads, a link, a device or a folder",
    )
    parser.add_argument(
        "--html-mkdir",
        action="store_true",
        help="create the missing folders of the --html FILE (otherwise refused)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the folder's results (results.json, repeats.json or sweep.json) as read",
    )
    parser.set_defaults(handler=_report)

    parser = subparsers.add_parser(
        "aggregate",
        help="combine run folders from several hosts (one instance per VM) into one result",
    )
    parser.add_argument("folders", metavar="DIR", nargs="+", help="run folders with results.json")
    parser.add_argument("--outdir", default=None, help="write the combined results.json here")
    parser.add_argument("--markdown", action="store_true", help="Markdown instead of a text table")
    parser.add_argument(
        "--json", action="store_true", help="print the combined results.json instead of the table"
    )
    parser.set_defaults(handler=_aggregate)


def _run(args: argparse.Namespace) -> int:
    from mlperf_mig.api import run

    result = run(args.scenario, repeats=args.repeats, isolation=args.isolation, **_options(args))
    print(result.to_json() if args.json else result.table())
    print(f"results: {Path(result.outdir) / result.index_file}", file=sys.stderr)
    return EXIT_OK if result.ok and not _audit_failed(result) else EXIT_FAILED


def _plan(args: argparse.Namespace) -> int:
    from mlperf_mig.api import plan

    the_plan = plan(args.scenario, **_options(args))
    print(json.dumps(the_plan.to_dict(), indent=2) if args.json else the_plan.table())
    return EXIT_OK


def _sweep(args: argparse.Namespace) -> int:
    from mlperf_mig.api import sweep

    options = _options(args)
    result = sweep(
        _scenarios(args.scenarios),
        resume=not args.no_resume,
        repeats=args.repeats,
        isolation=args.isolation,
        **options,
    )
    print(_json(result) if args.json else result.table())
    return EXIT_OK if result.ok and not _audit_failed(result) else EXIT_FAILED


def _audit_failed(result: Any) -> bool:
    """Whether a compliance audit failed in any run of `result`: a run, its repeats, or every
    layout of a sweep (a failed audit exits 1, as `--help` says)."""
    return any(run.compliance_passed is False for run in result.runs)


def _json(result: Any) -> str:
    """A result (RunResult, RepeatedRun, SweepResult) as the JSON its folder holds; a sweep's
    sweep.json names its layouts' folders, so their results come with it."""
    from mlperf_mig.study.sweep import SweepResult

    data = result.to_dict()
    if isinstance(result, SweepResult):
        data["results"] = [run.to_dict() for run in result.runs]
        data["repeated"] = [study.to_dict() for study in result.studies]
    return json.dumps(data, indent=2)


def _report(args: argparse.Namespace) -> int:
    from mlperf_mig.study.sweep import load_report

    if args.html_mkdir and args.html is None:
        raise NameParseError(
            "--html-mkdir creates the folders of --html FILE; pass --html FILE with it"
        )
    report = load_report(args.folder)
    if args.html is not None:
        from mlperf_mig.study.report_html import write_html

        written = write_html(report, args.html, sources=[args.folder], mkdir=args.html_mkdir)
        if written.replaced:
            print(f"replaced {args.html} (an earlier file there)", file=sys.stderr)
        print(f"HTML report: {args.html}", file=sys.stderr)
    if args.json:
        print(_json(report))
    else:
        print(report.to_markdown() if args.markdown else report.table())
    return EXIT_OK


def _aggregate(args: argparse.Namespace) -> int:
    from mlperf_mig.api import aggregate

    result = aggregate(args.folders, outdir=args.outdir)
    if args.json:
        print(_json(result))
    else:
        print(result.to_markdown() if args.markdown else result.table())
    return EXIT_OK if result.ok else EXIT_FAILED
