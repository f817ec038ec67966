"""`mlperf-mig doctor [--record DIR] [--json] [--include-ids]`: read-only checks of this machine."""

from __future__ import annotations

import argparse
import json

EXIT_OK = 0
EXIT_SMOKE_FAILED = 1  # a smoke test failed or a GPU is lost


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register `doctor` on the `mlperf-mig` parser."""
    parser = subparsers.add_parser(
        "doctor",
        help="check what works here (driver, MIG, catalog, backends, a smoke test); changes nothing",
        description=(
            "Read-only checks of this machine: driver, CUDA and NVML versions; each GPU's MIG "
            "modes and live profiles reconciled with the catalog; the vGPU a VM sees; the "
            "backends and the command that fixes what is missing; a smoke test per device. A "
            "lost GPU (GPU_IS_LOST, UNKNOWN, NOT_FOUND) is reported and the rest checked. "
            "Exit 1 when a GPU is lost or a smoke test fails, else 0."
        ),
    )
    parser.add_argument(
        "--record",
        metavar="DIR",
        default=None,
        help="write a bundle (NVML state in the replay format, the report) to attach to a bug report",
    )
    parser.add_argument(
        "--include-ids",
        action="store_true",
        help="keep GPU/MIG UUIDs in the bundle (replaced by placeholders otherwise)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--replay",
        metavar="FILE",
        default=None,
        help="check a recorded NVML state (detect --record, doctor --record) instead of this machine",
    )
    parser.add_argument("--no-smoke", action="store_true", help="skip the smoke test")
    parser.set_defaults(handler=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    from mlperf_mig.doctor.report import diagnose, write_bundle
    from mlperf_mig.errors import OutputDirError
    from mlperf_mig.telemetry.replay import RecordedTelemetry

    if args.record is not None and not args.record.strip():
        raise OutputDirError("--record needs a folder name, got ''; pass one such as doctor-bundle")
    if args.include_ids and args.record is None:
        raise OutputDirError(
            "--include-ids only changes what --record writes; add --record DIR or drop --include-ids"
        )
    if args.replay is not None and not args.replay.strip():
        raise OutputDirError(
            "--replay needs a file name, got ''; pass a recorded state such as state.json"
        )
    source = (
        RecordedTelemetry.from_file(args.replay) if args.replay else None
    )  # telemetry too, where recorded
    report = diagnose(source, smoke=not args.no_smoke)
    if args.record is not None:
        folder = write_bundle(report, args.record, include_ids=args.include_ids)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.text())
    if args.record is not None and not args.json:
        print(
            f"bundle written to {folder} (attach it to a bug report; nvml-state.json replays "
            "as a tests/registry/fixtures/ case)"
        )
    return EXIT_OK if report.ok else EXIT_SMOKE_FAILED
