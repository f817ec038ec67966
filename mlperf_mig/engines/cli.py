"""`mlperf-mig build` and `mlperf-mig backends`: the engine builder's commands."""

from __future__ import annotations

import argparse
import json

import attrs

from mlperf_mig._cli_args import whole_number
from mlperf_mig.engines.backends import AUTO, backend_class, backend_names
from mlperf_mig.engines.resolve import resolve_spec
from mlperf_mig.engines.spec import PRECISIONS, VARIANTS, EngineSpec
from mlperf_mig.workloads import workload_names


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    build = subparsers.add_parser(
        "build",
        help="build an engine for a benchmark, or reuse the cached one",
        description=(
            "Build (or reuse from the cache) the engine of a benchmark for one backend, precision "
            "and MIG profile. Without --model the synthetic graph with the official interface is "
            "generated; with --gpu and --profile the batch size is the recipe's for that profile. "
            "TensorRT engines must be built inside a MIG instance of that profile."
        ),
    )
    build.add_argument("--benchmark", required=True, help=", ".join(workload_names()))
    build.add_argument(
        "--backend",
        default=AUTO,
        help=f"auto (TensorRT where usable, else ONNX Runtime), {', '.join(backend_names())}",
    )
    build.add_argument(
        "--precision",
        help=f"{', '.join(PRECISIONS)} (default: the backend's preferred one, or the --model file's)",
    )
    build.add_argument("--gpu", help="GPU the engine is for, e.g. H100-SXM5-80GB or A100-80GB")
    build.add_argument("--profile", help="MIG profile on that GPU, e.g. 1g.10gb (needs --gpu)")
    build.add_argument(
        "--model", help="an ONNX file with the official interface (default: generate)"
    )
    build.add_argument("--variant", choices=VARIANTS, default="full", help="generated graph size")
    build.add_argument(
        "--loadgen-scenario",
        default="Offline",
        help="LoadGen scenario whose recipe batch size to build for (default Offline)",
    )
    build.add_argument("--seed", type=whole_number, default=0, help="seed of the synthetic weights")
    build.add_argument(
        "--cache-dir", help="engine cache folder (default $MLPERF_MIG_CACHE or ~/.cache/mlperf-mig)"
    )
    build.set_defaults(handler=_build)

    backends = subparsers.add_parser(
        "backends", help="list the inference backends and whether they can run here"
    )
    backends.add_argument("--json", action="store_true", help="print JSON for programs")
    backends.set_defaults(handler=_backends)


def _build(args: argparse.Namespace) -> int:
    from mlperf_mig.engines.build import build_engine

    spec = resolve_spec(
        args.benchmark,
        backend=args.backend,
        precision=args.precision,
        variant=args.variant,
        model_path=args.model,
        seed=args.seed,
        gpu=args.gpu,
        mig_profile=args.profile,
        loadgen_scenario=args.loadgen_scenario,
        cache_dir=args.cache_dir,
    )
    if not backend_class(spec.backend).engine_suffix:
        print(f"{spec.backend} backend: nothing to build (it has no engine file)")
        return 0
    built = build_engine(spec, args.cache_dir)
    device = spec.gpu or "CPU"
    if spec.mig_profile:
        device += f" {spec.mig_profile}"
    model = spec.model_path or f"generated {spec.variant} graph"
    batches = ",".join(str(b) for b in spec.batch_sizes)
    if _batch_is_inferred(spec, args.loadgen_scenario):
        batches += " [inferred: ours, not NVIDIA's]"
    print(
        f"{'reused' if built.reused else 'built'} {spec.benchmark} {spec.precision} "
        f"{spec.backend} engine for {device} (batch {batches}, {model}): {built.path}"
    )
    return 0


def _batch_is_inferred(spec: EngineSpec, loadgen_scenario: str) -> bool:
    """Whether the recipe's batch size that `spec` was built for is ours rather than NVIDIA's."""
    from mlperf_mig.engines.recipes import load_recipe
    from mlperf_mig.registry import default_catalog

    recipe = load_recipe(spec.benchmark, spec.precision)
    if spec.gpu is None:
        slices = recipe.whole_gpu_slices if backend_class(spec.backend).needs_gpu else None
    elif spec.mig_profile is None:
        slices = default_catalog().get(spec.gpu).compute_slices
    else:
        slices = default_catalog().get(spec.gpu).profile(spec.mig_profile).compute_slices
    return recipe.is_inferred(slices, loadgen_scenario)


def _backends(args: argparse.Namespace) -> int:
    from mlperf_mig._table import text_table
    from mlperf_mig.engines.backends import iter_backend_infos

    infos = list(iter_backend_infos())
    if args.json:
        print(json.dumps([attrs.asdict(info) for info in infos], indent=2))
        return 0
    rows = [
        {
            "backend": info.name,
            "usable": "yes" if info.available else "no",
            "version": info.version,
            "why not": info.reason,
        }
        for info in infos
    ]
    print(text_table(rows, ["backend", "usable", "version", "why not"]))
    return 0
