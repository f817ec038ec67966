"""`mlperf-mig submission`: write a submission tree from run folders, or check one.

    mlperf-mig submission --division open --submitter ORG --outdir DIR RUN_DIR...
    mlperf-mig submission check DIR

argparse cannot mix a sub-command with free positional run folders, so the first positional
word `check` selects the checker (a run folder named "check" is passed as ./check).
"""

from __future__ import annotations

import argparse
import sys

from mlperf_mig.errors import SubmissionError
from mlperf_mig.submission import rules

EXIT_PROBLEMS = 2


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "submission",
        help="write an MLPerf submission tree from run folders, or check one",
        description=(
            "Write <outdir>/<division>/<submitter>/{systems,src,results} from run folders "
            "(`mlperf-mig submission --division open --submitter ORG --outdir DIR RUN_DIR...`), "
            "or check a tree (`mlperf-mig submission check DIR`)."
        ),
    )
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="RUN_DIR | check DIR",
        help="run folders written by `mlperf-mig run`, or the word check and a submission folder",
    )
    parser.add_argument("--division", help="closed or open")
    parser.add_argument("--submitter", help="organisation name (the submitter folder)")
    parser.add_argument("--outdir", help="root of the submission tree to write")
    parser.add_argument(
        "--overrides", help="JSON file of system-description fields detection cannot read"
    )
    parser.add_argument(
        "--hosts", action="append", default=[], help="extra host-description file or folder"
    )
    parser.add_argument(
        "--bert-folder", default="bert-99", help="result folder of BERT runs: bert-99 or bert-99.9"
    )
    parser.add_argument(
        "--version",
        default=rules.DEFAULT_VERSION,
        help=f"submission checker version (default {rules.DEFAULT_VERSION}, for LoadGen 6.0.x)",
    )
    parser.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    if args.paths[:1] == ["check"]:
        return _check(args)
    return _write(args)


def _check(args: argparse.Namespace) -> int:
    from mlperf_mig.submission.check import check_submission

    if len(args.paths) != 2:
        raise SubmissionError(
            "`submission check` takes exactly one folder: mlperf-mig submission check DIR"
        )
    writer_options = [
        f"--{n}" for n in ("division", "submitter", "outdir", "overrides") if getattr(args, n)
    ]
    if writer_options:
        raise SubmissionError(f"`submission check` does not take {', '.join(writer_options)}")
    problems = check_submission(args.paths[1], version=args.version)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problem(s) found", file=sys.stderr)
        return EXIT_PROBLEMS
    print(f"{args.paths[1]}: no problems found (checker {args.version} rules known to mlperf-mig)")
    return 0


def _write(args: argparse.Namespace) -> int:
    from mlperf_mig.submission.writer import write_submission

    missing = [f"--{n}" for n in ("division", "submitter", "outdir") if not getattr(args, n)]
    if missing:
        raise SubmissionError(
            f"writing a submission needs {', '.join(missing)}: mlperf-mig submission --division "
            "open --submitter ORG --outdir DIR RUN_DIR..."
        )
    tree = write_submission(
        args.paths,
        division=args.division,
        submitter=args.submitter,
        outdir=args.outdir,
        overrides=args.overrides,
        hosts=args.hosts,
        bert_folder=args.bert_folder,
        version=args.version,
    )
    print(
        f"wrote {len(tree.results)} result(s) of {len(tree.systems)} system(s) to {tree.submitter_dir}"
    )
    for system in tree.systems:
        print(f"  {system}")
    return 0
