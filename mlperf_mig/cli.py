"""The `mlperf-mig` command: a thin shell over the Python API.

Each pillar contributes its sub-commands through an `add_commands(subparsers)` function in its
own `cli` module; this module only assembles them, configures logging and turns library errors
into one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from mlperf_mig.errors import MlperfMigError

COMMAND_MODULES = (
    "mlperf_mig.registry.cli",
    "mlperf_mig.engines.cli",
    "mlperf_mig.harness.cli",
    "mlperf_mig.run_cli",
    "mlperf_mig.submission.cli",
    "mlperf_mig.cluster.cli",
    "mlperf_mig.doctor.cli",
    "mlperf_mig.study_cli",
)

EXIT_USAGE = 2


class OneLineParser(argparse.ArgumentParser):
    """Argument errors as one line naming the fix, not a usage block; sub-parsers inherit it."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="mlperf-mig",
        description="Run MLPerf Inference (ResNet50, BERT, Llama 3.1 8B) on NVIDIA MIG partitions and compare layouts.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).add_commands(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        code = int(args.handler(args) or 0)
        sys.stdout.flush()  # a full device fails here, not silently at exit
        return code
    except MlperfMigError as exc:
        print(f"mlperf-mig: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        print(f"mlperf-mig: interrupted ({signal.Signals(signum).name})", file=sys.stderr)
        return 128 + signum
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        if exc.filename is not None or exc.errno not in (errno.ENOSPC, errno.EIO, errno.EDQUOT):
            raise
        os.dup2(
            os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno()
        )  # drop what cannot be written
        print(f"mlperf-mig: error: cannot write the output: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
