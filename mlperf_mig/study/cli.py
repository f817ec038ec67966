"""The advise sub-command: which valid MIG layout to create, from measurements on disk."""

from __future__ import annotations

import argparse
import json

EXIT_OK = 0


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register `advise` on the `mlperf-mig` parser."""
    parser = subparsers.add_parser(
        "advise", help="rank every valid MIG layout of the GPU from per-profile measurements"
    )
    parser.add_argument("--from", dest="from_dir", default=None, metavar="DIR",
                        help="a sweep (or run) folder to read measurements from; without it the "
                        "study's layouts 1-8 are measured first")
    parser.add_argument("--benchmark", default=None, help="resnet50 or bert (default: the folder's)")
    parser.add_argument("--gpu", default=None, help="the GPU (default: the folder's)")
    parser.add_argument("--objective", default="throughput",
                        choices=("throughput", "instances", "capacity", "p99"))
    parser.add_argument("--min-instances", type=int, default=None, metavar="N")
    parser.add_argument("--max-instances", type=int, default=None, metavar="N")
    parser.add_argument("--profiles-allowed", default=None, metavar="P,P",
                        help="only layouts made of these MIG profiles, e.g. 2g.20gb,1g.10gb")
    parser.add_argument("--max-p99-ms", type=float, default=None, metavar="MS")
    parser.add_argument("--top", type=int, default=5, help="layouts shown (default 5)")
    parser.add_argument("--outdir", default=None, help="sweep folder when measuring first")
    parser.add_argument("--variant", default="full", choices=("full", "tiny"))
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--json", action="store_true", help="print the advice as JSON")
    parser.set_defaults(handler=_advise)


def _advise(args: argparse.Namespace) -> int:
    from mlperf_mig.study.api import advise

    advice = advise(
        args.benchmark, args.gpu, args.objective, from_dir=args.from_dir,
        min_instances=args.min_instances, max_instances=args.max_instances,
        profiles_allowed=args.profiles_allowed, max_p99_ms=args.max_p99_ms, top=args.top,
        outdir=args.outdir, variant=args.variant, backend=args.backend,
    )
    print(json.dumps(advice.to_dict(), indent=2) if args.json else advice.table())
    return EXIT_OK
