"""The advise and capacity sub-commands: which valid MIG layout to create; a profile's Server
capacity."""

from __future__ import annotations

import argparse
import json
import sys

from mlperf_mig._cli_args import decimal_number, whole_number

EXIT_OK = 0


def _benchmark_help(default: str) -> str:
    """'resnet50, bert, llama3.1-8b or llama3.1-8b-edge (default ...)': the workload table's."""
    from mlperf_mig.workloads import workload_names_text

    return f"{workload_names_text()} (default {default})"


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register `advise` and `capacity` on the `mlperf-mig` parser."""
    from mlperf_mig.study.advisor import OBJECTIVES

    _capacity_command(subparsers)
    parser = subparsers.add_parser(
        "advise", help="rank every valid MIG layout of the GPU from per-profile measurements"
    )
    parser.add_argument(
        "--from",
        dest="from_dir",
        default=None,
        metavar="DIR",
        help="a sweep (or run) folder to read measurements from; without it the "
        "study's layouts 1-8 are measured first",
    )
    parser.add_argument("--benchmark", default=None, help=_benchmark_help("the folder's"))
    parser.add_argument("--gpu", default=None, help="the GPU (default: the folder's)")
    parser.add_argument(
        "--objective",
        default="throughput",
        choices=tuple(OBJECTIVES),
        help="what to rank by (samples_per_joule, or tokens_per_joule for an LLM: GPU board energy "
        "from the runs' telemetry, not wall power)",
    )
    parser.add_argument(
        "--min-instances",
        type=whole_number,
        default=None,
        metavar="N",
        help="only layouts of at least N instances",
    )
    parser.add_argument(
        "--max-instances",
        type=whole_number,
        default=None,
        metavar="N",
        help="only layouts of at most N instances",
    )
    parser.add_argument(
        "--profiles-allowed",
        default=None,
        metavar="P,P",
        help="only layouts made of these MIG profiles, e.g. 2g.20gb,1g.10gb",
    )
    parser.add_argument(
        "--max-p99-ms",
        type=decimal_number,
        default=None,
        metavar="MS",
        help="only layouts whose predicted p99 latency is at most MS milliseconds",
    )
    parser.add_argument("--top", type=whole_number, default=5, help="layouts shown (default 5)")
    parser.add_argument("--outdir", default=None, help="sweep folder when measuring first")
    parser.add_argument(
        "--variant",
        default="full",
        choices=("full", "tiny"),
        help="model size when measuring first: full (official shapes) or tiny (seconds on a CPU)",
    )
    parser.add_argument(
        "--backend",
        default="auto",
        help="backend when measuring first: auto, tensorrt, onnxruntime or null (default auto)",
    )
    parser.add_argument("--json", action="store_true", help="print the advice as JSON")
    parser.set_defaults(handler=_advise)


def _advise(args: argparse.Namespace) -> int:
    from mlperf_mig.api import advise

    advice = advise(
        args.benchmark,
        args.gpu,
        args.objective,
        from_dir=args.from_dir,
        min_instances=args.min_instances,
        max_instances=args.max_instances,
        profiles_allowed=args.profiles_allowed,
        max_p99_ms=args.max_p99_ms,
        top=args.top,
        outdir=args.outdir,
        variant=args.variant,
        backend=args.backend,
    )
    print(json.dumps(advice.to_dict(), indent=2) if args.json else advice.table())
    return EXIT_OK


def _capacity_command(subparsers: argparse._SubParsersAction) -> None:
    from mlperf_mig._cli_args import RUN, add_flags, add_settings_option
    from mlperf_mig.study.capacity import SEARCH_OPTIONS

    parser = subparsers.add_parser(
        "capacity",
        help="the highest Server target QPS of one instance of a profile within the latency "
        "limits (a sample's p99 bound; an LLM's TTFT and TPOT limits)",
    )
    parser.add_argument("--benchmark", default="resnet50", help=_benchmark_help("resnet50"))
    parser.add_argument(
        "--loadgen-scenario",
        default="Server",
        help="the Server test searched: Server, or MLPerf's Interactive where the workload has it "
        "(a Server test under tighter TTFT and TPOT limits) (default Server)",
    )
    parser.add_argument("--profile", default="1g.10gb", help="the MIG profile (default 1g.10gb)")
    parser.add_argument(
        "--gpu", default=None, help="GPU to emulate without a GPU (default A100-SXM4-80GB)"
    )
    parser.add_argument(
        "--backend",
        default="auto",
        help="auto, tensorrt, onnxruntime or null (default auto: TensorRT on a GPU, else ONNX Runtime)",
    )
    parser.add_argument(
        "--precision",
        default=None,
        help="engine precision, e.g. fp16 or int8 (default: the backend's)",
    )
    parser.add_argument(
        "--preset",
        default="quick",
        help="quick (short runs) or submission (LoadGen's official rules) (default quick)",
    )
    parser.add_argument(
        "--variant",
        default="full",
        choices=("full", "tiny"),
        help="full (official shapes) or tiny (seconds on a CPU) (default full)",
    )
    parser.add_argument(
        "--emulate", action="store_true", help="emulate partitions on the CPU even with a GPU"
    )
    add_flags(parser, SEARCH_OPTIONS, (RUN,))
    add_settings_option(parser)
    parser.add_argument("--outdir", default=None, help="folder of the search's runs")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=_capacity)


def _capacity(args: argparse.Namespace) -> int:
    from mlperf_mig._cli_args import flag_values, parse_overrides
    from mlperf_mig.api import capacity
    from mlperf_mig.study.capacity import SEARCH_OPTIONS

    result = capacity(
        args.benchmark,
        args.profile,
        args.gpu,
        backend=args.backend,
        precision=args.precision,
        preset=args.preset,
        variant=args.variant,
        emulate=args.emulate,
        loadgen_scenario=args.loadgen_scenario,
        **flag_values(args, SEARCH_OPTIONS),
        settings=parse_overrides(args.set),
        outdir=args.outdir,
        progress=False,
        store=False,
    )
    # the answer first: a cache write that fails (or hangs on a lock) must not lose it
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.table(), flush=True)
    print(result.store().cache_note, file=sys.stderr if args.json else sys.stdout)
    return EXIT_OK if not result.partial else 1
