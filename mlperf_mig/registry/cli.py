"""Sub-commands of the registry: gpus, layouts, scenarios, check, mig-setup, detect.

Thin over the Python API: tables for people by default, `--json` for programs. Library errors
propagate to `mlperf_mig.cli.main`, which prints them as one line and exits 2.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlperf_mig._cli_args import whole_number
from mlperf_mig._table import text_table
from mlperf_mig._text import printable

if TYPE_CHECKING:
    from mlperf_mig.registry.catalog import Catalog
    from mlperf_mig.registry.discovery import GpuState, MigDevice, VgpuDevice

EXIT_OK = 0
_NVML_INDEX_MAX = 2**32 - 1  # NVML numbers GPUs with an unsigned int


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register the registry's sub-commands on the `mlperf-mig` parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON for programs")
    common.add_argument(
        "--systems-path",
        action="append",
        default=[],
        metavar="PATH",
        help="extra folder (or file) of GPU data files; repeatable; see also MLPERF_MIG_SYSTEMS_PATH",
    )

    parser = subparsers.add_parser(
        "gpus", parents=[common], help="list the MIG-capable GPUs the registry knows"
    )
    parser.set_defaults(handler=_gpus)

    parser = subparsers.add_parser(
        "layouts", parents=[common], help="list the valid MIG layouts of a GPU"
    )
    parser.add_argument("gpu", metavar="GPU", help="GPU name or alias, e.g. A100-80GB")
    parser.add_argument(
        "--maximal", action="store_true", help="only layouts that cannot take another instance"
    )
    parser.set_defaults(handler=_layouts)

    parser = subparsers.add_parser(
        "scenarios",
        parents=[common],
        help="the seed study's eight MIG layouts (study scenarios 1-8, not LoadGen scenarios)",
    )
    parser.add_argument(
        "--gpu", metavar="GPU", help="translate the layouts to this GPU by slice shape"
    )
    parser.set_defaults(handler=_scenarios)

    parser = subparsers.add_parser(
        "check",
        parents=[common],
        help="check that a layout fits a GPU and show its placements (exit 2 with the reason if not)",
    )
    parser.add_argument(
        "gpu",
        metavar="GPU",
        help="GPU name or alias (A100-80GB), or a whole system ID such as "
        "A100-SXM-80GB_MIG_1x4g.40gb+1x2g.20gb+1x1g.10gb",
    )
    parser.add_argument(
        "layout", metavar="LAYOUT", nargs="?", help="layout such as 3x2g.20gb+1g.10gb"
    )
    parser.set_defaults(handler=_check)

    parser = subparsers.add_parser(
        "mig-setup",
        parents=[common],
        help="print how to create a layout (mig-parted config or nvidia-smi steps); changes nothing",
    )
    parser.add_argument("gpu", metavar="GPU", help="GPU name or alias, e.g. A100-80GB")
    parser.add_argument("layout", metavar="LAYOUT", help="layout such as 3x2g.20gb+1g.10gb")
    parser.add_argument(
        "--format",
        choices=("mig-parted", "steps"),
        default="steps",
        help="output form (default: steps)",
    )
    parser.add_argument(
        "--gpu-index",
        type=whole_number,
        default=0,
        metavar="N",
        help="index of the GPU to set up (default 0)",
    )
    parser.set_defaults(handler=_mig_setup)

    parser = subparsers.add_parser(
        "detect", parents=[common], help="show the GPUs and live MIG devices (read-only)"
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--replay", metavar="FILE", help="read a recorded NVML state instead of the driver"
    )
    source.add_argument(
        "--record", metavar="FILE", help="also write the live NVML state to FILE (a test fixture)"
    )
    parser.set_defaults(handler=_detect)


def _catalog(args: argparse.Namespace) -> Catalog:
    from mlperf_mig.registry.catalog import default_catalog, load_catalog

    return load_catalog(args.systems_path) if args.systems_path else default_catalog()


def _print_json(data: object) -> int:
    print(json.dumps(data, indent=2))
    return EXIT_OK


def _gpus(args: argparse.Namespace) -> int:
    catalog = _catalog(args)
    if args.json:
        return _print_json([gpu.to_dict() for gpu in catalog])
    rows = [
        {
            "gpu": gpu.name,
            "aliases": ", ".join(gpu.aliases),
            "slices (compute/memory)": f"{gpu.compute_slices}/{gpu.memory_slices}",
            "profiles": " ".join(p.name for p in gpu.profiles),
            "provenance": gpu.provenance,
            "inferred profiles": sum(1 for p in gpu.profiles if p.inferred_fields) or None,
        }
        for gpu in catalog
    ]
    print(text_table(rows, list(rows[0])))
    print(
        "provenance: documented (NVIDIA documents), nvidia-smi (a real printout), nvidia-code "
        "(NVIDIA's code), inferred; each field's source: `mlperf-mig gpus --json` (sources, "
        "field_sources, inferred_fields)"
    )
    return EXIT_OK


def _layouts(args: argparse.Namespace) -> int:
    from mlperf_mig.registry.solver import maximal_layouts, solve_placements, valid_layouts

    gpu = _catalog(args).get(args.gpu)
    layouts = maximal_layouts(gpu) if args.maximal else valid_layouts(gpu)
    entries = [(layout, solve_placements(layout)) for layout in layouts]
    if args.json:
        return _print_json(
            [
                {**layout.to_dict(), "placements": [p.to_dict() for p in placements]}
                for layout, placements in entries
            ]
        )
    rows = [
        {
            "layout": str(layout),
            "instances": len(layout.profiles),
            "compute": f"{layout.compute_slices}/{gpu.compute_slices}",
            "memory": f"{layout.memory_slices}/{gpu.memory_slices}",
            "placements": " ".join(str(p) for p in placements),
        }
        for layout, placements in entries
    ]
    kind = "maximal" if args.maximal else "valid"
    print(text_table(rows, list(rows[0])))
    print(f"{len(rows)} {kind} layouts on {gpu.name}")
    return EXIT_OK


def _scenarios(args: argparse.Namespace) -> int:
    from mlperf_mig.errors import LayoutError
    from mlperf_mig.registry.study import study_layout, study_scenarios

    catalog = _catalog(args)
    gpu = catalog.get(args.gpu) if args.gpu is not None else None
    rows = []
    for scenario in study_scenarios(catalog):
        target = gpu or scenario.layout.gpu
        try:
            layout, note = study_layout(scenario.scenario, target, catalog), ""
        except LayoutError as exc:
            layout, note = None, str(exc)
        rows.append(
            {
                "scenario": scenario.scenario,
                "gpu": target.name,
                "layout": str(layout) if layout else None,
                "seed layout (A100 80GB)": str(scenario.layout),
                "seed vGPU types": " + ".join(scenario.vgpu_types),
                "note": note or None,
            }
        )
    if args.json:
        return _print_json(rows)
    print("study scenario = one MIG layout of the seed study (not a LoadGen scenario)")
    columns = ["scenario", "gpu", "layout", "seed layout (A100 80GB)", "seed vGPU types"]
    print(text_table(rows, columns))
    for row in rows:
        if row["note"]:
            print(f"scenario {row['scenario']}: {row['note']}")
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    from mlperf_mig.registry.names import parse_layout, parse_system_id, system_id
    from mlperf_mig.registry.solver import solve_placements

    catalog = _catalog(args)
    if args.layout is None:
        layout = parse_system_id(args.gpu, catalog)
    else:
        layout = parse_layout(catalog.get(args.gpu), args.layout, catalog)
    placements = solve_placements(layout)
    if args.json:
        return _print_json(
            {
                **layout.to_dict(),
                "valid": True,
                "system_id": system_id(layout),
                "placements": [p.to_dict() for p in placements],
            }
        )
    print(f"valid: {layout} on {layout.gpu.name} ({system_id(layout)})")
    rows = [
        {
            "instance": i,
            "profile": p.profile.name,
            "profile id": p.profile.profile_id,
            "start": p.start,
            "memory slices": p.memory_range,
            "compute slices": p.profile.compute_slices,
        }
        for i, p in enumerate(placements)
    ]
    print(text_table(rows, list(rows[0])))
    return EXIT_OK


def _mig_setup(args: argparse.Namespace) -> int:
    from mlperf_mig.registry.mig_setup import mig_setup
    from mlperf_mig.registry.names import parse_layout

    if args.gpu_index > _NVML_INDEX_MAX:
        from mlperf_mig.errors import NameParseError

        raise NameParseError(
            f"--gpu-index {args.gpu_index} is beyond NVML's GPU numbers (0 to {_NVML_INDEX_MAX}); "
            "pass the index nvidia-smi shows"
        )
    catalog = _catalog(args)
    layout = parse_layout(catalog.get(args.gpu), args.layout, catalog)
    setup = mig_setup(layout, gpu_index=args.gpu_index)
    if args.json:
        return _print_json(
            {
                **layout.to_dict(),
                "mig_parted_config": setup.mig_parted_config(),
                "steps": setup.steps(),
                "placements": [p.to_dict() for p in setup.placements],
            }
        )
    if args.format == "mig-parted":
        print(setup.mig_parted_config(), end="")
    else:
        print("\n".join(setup.steps()))
    return EXIT_OK


def _detect(args: argparse.Namespace) -> int:
    from mlperf_mig._io import atomic_write_json
    from mlperf_mig.registry.discovery import detection_from_state, read_nvml_state
    from mlperf_mig.registry.replay import RecordedNvml

    if args.record is not None:
        _check_record_target(args.record)
    source = RecordedNvml.from_file(args.replay) if args.replay is not None else None
    state = read_nvml_state(source) if source else read_nvml_state()
    if args.record is not None:
        atomic_write_json(args.record, state)
    detection = detection_from_state(state, _catalog(args))
    if args.json:
        return _print_json(detection.to_dict())
    if detection.message:
        print(printable(detection.message))
        return EXIT_OK
    # what NVML or a replayed file says is shown escaped (discovery did so; this keeps it so)
    rows = [_printable_row(_gpu_row(g)) for g in detection.gpus]
    print(text_table(rows, list(rows[0])))
    devices = [
        _printable_row(_device_row(g.index, d)) for g in detection.gpus for d in g.mig_devices
    ]
    if devices:
        print()
        print(text_table(devices, list(devices[0])))
    for gpu in detection.gpus:
        if gpu.lost:
            print(printable(gpu.problem))
    for gpu in detection.gpus:
        if gpu.vgpu is not None:
            print(printable(f"GPU {gpu.index}: {_vgpu_line(gpu.vgpu)}"))
    for gpu in detection.gpus:
        for note in gpu.disagreements:
            print(printable(f"GPU {gpu.index}: {note}"))
    return EXIT_OK


def _printable_row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: printable(v) if isinstance(v, str) else v for k, v in row.items()}


def _check_record_target(name: str) -> None:
    from mlperf_mig._io import ensure_writable_dir
    from mlperf_mig.errors import OutputDirError

    if not name.strip():
        raise OutputDirError("--record needs a file name, got ''; pass one such as state.json")
    path = Path(name)
    if path.is_dir():
        raise OutputDirError(
            f"--record {str(path)!r} is a folder; pass a file name such as {str(path / 'state.json')!r}"
        )
    ensure_writable_dir(path.parent)


def _gpu_row(gpu: GpuState) -> dict[str, Any]:
    mig = {None: "not capable", True: "on", False: "off"}
    if gpu.lost:
        return {
            "gpu": gpu.index,
            "name": gpu.name or None,
            "state": f"lost: {gpu.error} at {gpu.failed_query}",
            "catalog": None,
            "memory MiB": gpu.memory_mib,
            "vGPU": None,
            "MIG now": None,
            "MIG pending": None,
            "layout": None,
        }
    layout = gpu.layout()
    return {
        "gpu": gpu.index,
        "name": gpu.name,
        "state": "ok",
        "catalog": gpu.catalog_gpu.name if gpu.catalog_gpu else None,
        "memory MiB": gpu.memory_mib,
        "vGPU": gpu.vgpu.type_name if gpu.vgpu else None,
        "MIG now": mig[gpu.mig_current],
        "MIG pending": mig[gpu.mig_pending],
        "layout": str(layout) if layout else None,
    }


def _vgpu_line(vgpu: VgpuDevice) -> str:
    parent = vgpu.parent_gpu.name if vgpu.parent_gpu else "an unknown GPU"
    if vgpu.time_sliced and vgpu.shared_instance is not None:
        return (
            f"MIG-backed time-sliced vGPU {vgpu.type_name}: a share of one "
            f"{vgpu.shared_instance.name} instance of {parent} that several VMs time-slice "
            "(not an isolated instance: runs only with --shared)"
        )
    if vgpu.time_sliced:
        return f"time-sliced vGPU {vgpu.type_name} on {parent} (not MIG: runs only with --shared)"
    if vgpu.profile is None:
        return f"vGPU {vgpu.type_name} of no known type (see the note below)"
    return (
        f"MIG-backed vGPU {vgpu.type_name} = one {vgpu.profile.name} instance of {parent} "
        f"(UUID {vgpu.uuid}; run a layout of that one profile here)"
    )


def _device_row(index: int, device: MigDevice) -> dict[str, Any]:
    return {
        "gpu": index,
        "uuid": device.uuid,
        "gi": device.gpu_instance_id,
        "ci": device.compute_instance_id,
        "profile": device.profile.name,
        "start": device.placement_start,
        "memory MiB": device.memory_mib,
    }
