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
from typing import TYPE_CHECKING, Any

from mlperf_mig._cli_args import LAYOUT, RUN, STUDY, add_flags, flag_values, layout_spec
from mlperf_mig.errors import NameParseError

if TYPE_CHECKING:
    from mlperf_mig.runner.results import LayoutResult
    from mlperf_mig.study.sweep import SweepResult

EXIT_OK = 0
EXIT_FAILED = 1
STUDY_LAYOUTS = 8


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
                result.append(layout_spec(part))
    if not result:
        raise NameParseError("--scenarios is empty; pass study layouts such as 1-8 or 1,6,7")
    return result


def _option_flags(parser: argparse.ArgumentParser, *groups: str) -> None:
    """The declared run options' flags (runner/options.py) of the command's groups."""
    from mlperf_mig.runner.options import RUN_OPTIONS

    add_flags(parser, RUN_OPTIONS, groups)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The run options the command line gave, as the Python API's keyword arguments."""
    from mlperf_mig.runner.options import RUN_OPTIONS

    return flag_values(args, RUN_OPTIONS)


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register run, plan, sweep, report and aggregate on the `mlperf-mig` parser."""
    parser = subparsers.add_parser(
        "run", help="run a benchmark on every instance of a MIG layout at once"
    )
    _option_flags(parser, LAYOUT, RUN, STUDY)
    parser.add_argument(
        "--json", action="store_true", help="print results.json (repeats.json) instead of the table"
    )
    parser.set_defaults(handler=_run)

    parser = subparsers.add_parser(
        "plan", help="show what `run` would do, without running anything"
    )
    _option_flags(parser, LAYOUT, RUN)
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
    _option_flags(parser, RUN, STUDY)
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

    result = run(**_options(args))
    print(result.to_json() if args.json else result.table())
    print(f"results: {Path(result.outdir) / result.index_file}", file=sys.stderr)
    return EXIT_OK if result.ok and not _audit_failed(result) else EXIT_FAILED


def _plan(args: argparse.Namespace) -> int:
    from mlperf_mig.api import plan

    the_plan = plan(**_options(args))
    print(json.dumps(the_plan.to_dict(), indent=2) if args.json else the_plan.table())
    return EXIT_OK


def _sweep(args: argparse.Namespace) -> int:
    from mlperf_mig.api import sweep

    result = sweep(_scenarios(args.scenarios), resume=not args.no_resume, **_options(args))
    print(_json(result) if args.json else result.table())
    return EXIT_OK if result.ok and not _audit_failed(result) else EXIT_FAILED


def _audit_failed(result: LayoutResult | SweepResult) -> bool:
    """Whether a compliance audit failed in any run of `result`: a run, its repeats, or every
    layout of a sweep (a failed audit exits 1, as `--help` says)."""
    return any(run.compliance_passed is False for run in result.runs)


def _json(result: LayoutResult | SweepResult) -> str:
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
