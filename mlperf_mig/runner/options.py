"""The options of one run, declared and checked once: `RunOptions`.

Each field of RunOptions is the one declaration of its option (`option`): its type, default,
check, the entry of the Python API's docstring and its command-line flag. `mlperf_mig.run`, `plan`
and `sweep` take the options as keyword arguments (their docstrings' option lists are made from
the declarations, and a test checks their parameters against them); the CLI's flags of run, plan
and sweep are made from them too (`_cli_args.add_flags`). Every caller builds one RunOptions;
`make_plan(options)` resolves it into a RunPlan.

The record checks what needs no machine: the type of every option and the ranges of its values
(counts and LoadGen settings within LoadGen's integer range, finite deadlines, output paths the
file system can hold), each error one line naming the argument, what it expected and what
arrived. What needs the machine (layouts on the GPU, files on disk, CPUs) is checked by
make_plan, still before any worker starts.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from mlperf_mig._checks import is_number, is_whole
from mlperf_mig._cli_args import (
    LAYOUT,
    SETTINGS_FLAG,
    STUDY,
    Flag,
    count_of,
    decimal_number,
    gpu_layout,
    gpu_layouts,
    gpu_selection,
    layout_spec,
)
from mlperf_mig._io import check_output_path
from mlperf_mig.errors import ClusterError, SettingsError
from mlperf_mig.placement.cluster_address import parse_cluster
from mlperf_mig.placement.deployment import ScenarioSpec
from mlperf_mig.workloads import workload_names_text

if TYPE_CHECKING:
    from mlperf_mig.registry.nvml_state import NvmlModule

_T = TypeVar("_T")

MODES = ("independent", "unified")
# LoadGen keeps counts and durations in 64-bit integers; durations in nanoseconds.
LOADGEN_INT_MAX = 2**63 - 1
_NS_PER_MS = 1_000_000
_DURATION_KEYS = ("min_duration", "max_duration")


def _kind(value: object) -> str:
    return f"{type(value).__name__} {value!r}"


def check_scenario(name: str, value: object) -> int | str | tuple[str, ...]:
    """A MIG layout as the API takes it: a study number, a layout string or a list of profiles."""
    if is_whole(value):
        return value
    if isinstance(value, str):
        if not value.strip():
            raise SettingsError(
                f"{name} is empty; pass a study layout 1-8 or a layout such as 3x2g.20gb+1g.10gb"
            )
        return value
    if (
        isinstance(value, Sequence)
        and value
        and all(isinstance(p, str) and p.strip() for p in value)
    ):
        return tuple(value)
    raise SettingsError(
        f"{name} must be a study layout number 1-8, a layout string such as '3x2g.20gb+1g.10gb' or "
        f"a non-empty list of MIG profile names, got {_kind(value)}"
    )


def _scenario(value: object) -> int | str | tuple[str, ...]:
    return check_scenario("scenario", value)


def _text(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise SettingsError(f"{attribute.name} must be a non-empty string, got {_kind(value)}")


def _optional_text(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if value is not None:
        _text(instance, attribute, value)


def _cluster(instance: object, attribute: attrs.Attribute, value: object) -> None:
    """A `--cluster` value in one of its forms (checked without importing Ray)."""
    if value is not None:
        parse_cluster(value)  # type: ignore[arg-type]  # it refuses what is not text itself


def _gpu_group(value: object) -> tuple[str, ...] | None:
    """Node names of one GPU's VMs: "a,b" or a list of names; None: no declared group."""
    if value is None:
        return None
    names = value.split(",") if isinstance(value, str) else value
    if (
        not isinstance(names, list | tuple)
        or not all(isinstance(n, str) and n.strip() for n in names)
        or not names
    ):
        raise SettingsError(
            f"gpu_group must name the nodes of one GPU, as 'ADDR,ADDR' or a list of node "
            f"addresses, host names or node IDs, got {_kind(value)}"
        )
    return tuple(n.strip() for n in names)


MAX_GPUS = 1024  # emulated GPUs of one run; the host check in make_plan bounds the instances


def _gpu_indices(value: object) -> str | tuple[int, ...] | None:
    """GPUs to run on: "all", a list of GPU indices (or "0,3"), or None (one GPU, as before)."""
    if value is None or value == "all":
        return value
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")]
        if all(p.isascii() and p.isdigit() for p in parts):
            value = [int(p) for p in parts]
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or not value
        or not all(is_whole(i, 0) for i in value)
    ):
        raise SettingsError(
            f"gpus must be 'all' or a non-empty list of GPU indices such as [0, 3] (--gpus all or "
            f"--gpus 0,3), got {_kind(value)}"
        )
    twice = sorted({i for i in value if list(value).count(i) > 1})
    if twice:
        raise SettingsError(
            f"gpus names GPU {', '.join(map(str, twice))} twice; name each GPU once"
        )
    return tuple(value)


def _gpu_layouts(value: object) -> tuple[tuple[int, int | str | tuple[str, ...]], ...]:
    """A layout per GPU: {0: "7x1g.10gb", 1: "3g.40gb+4g.40gb"} (or --layout GPU=LAYOUT)."""
    if value is None:
        return ()
    if isinstance(value, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        value = dict(value)  # already converted (attrs.evolve, defaults)
    if not isinstance(value, Mapping):
        raise SettingsError(
            "layouts must map GPU indices to layouts, e.g. {0: '7x1g.10gb', 1: '3g.40gb+4g.40gb'}, "
            f"got {_kind(value)}"
        )
    pairs = []
    for key, layout in value.items():
        if not is_whole(key, 0):
            raise SettingsError(f"layouts keys must be GPU indices (0, 1, ...), got {_kind(key)}")
        pairs.append((key, check_scenario(f"layouts[{key}]", layout)))
    return tuple(sorted(pairs))


def _gpu_count(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if value is not None and not is_whole(value, 1, MAX_GPUS):
        raise SettingsError(
            f"gpu_count must be a whole number from 1 to {MAX_GPUS} (how many GPUs to emulate), "
            f"got {_kind(value)}"
        )


def check_flag(name: str, value: object) -> None:
    """An on/off argument is True or False (not 1, "no" or None)."""
    if not isinstance(value, bool):
        raise SettingsError(f"{name} must be True or False, got {_kind(value)}")


def _flag(instance: object, attribute: attrs.Attribute, value: object) -> None:
    check_flag(attribute.name, value)


def _mode(instance: object, attribute: attrs.Attribute, value: object) -> None:
    _text(instance, attribute, value)
    if value not in MODES:
        raise SettingsError(
            f"mode {value!r} is not one of {', '.join(MODES)} (independent: one LoadGen per "
            "instance, summed; unified: one LoadGen for the whole layout)"
        )


def _count(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if value is not None and not is_whole(value, 1, LOADGEN_INT_MAX):
        raise SettingsError(
            f"{attribute.name} must be a whole number from 1 to {LOADGEN_INT_MAX} (or None), got "
            f"{_kind(value)}"
        )


MAX_REPEATS = 1000


def _repeats(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if not is_whole(value, 1, MAX_REPEATS):
        raise SettingsError(
            f"repeats must be a whole number from 1 to {MAX_REPEATS} (how often each layout runs; "
            f"the study used 3), got {_kind(value)}"
        )


def _seconds(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if value is None:
        return
    if not is_number(value) or value <= 0 or value * 1e9 > LOADGEN_INT_MAX:
        raise SettingsError(
            f"{attribute.name} must be a positive, finite number of seconds (or None), got {_kind(value)}"
        )


def _path(value: object) -> object:
    """os.fspath of a str or path-like; anything else is left for the validator to refuse."""
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        return path if isinstance(path, str) else value
    return value


def _optional_path(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise SettingsError(
            f"{attribute.name} must be a path (str or os.PathLike) or None, got {_kind(value)}"
        )
    if not value:
        raise SettingsError(
            f"{attribute.name} is an empty path; pass a file or folder name, or leave it out"
        )


def check_outdir(name: str, value: object) -> None:
    """An output folder: a path (str or path-like) the file system can hold, or None."""
    if value is None:
        return
    path = _path(value)
    if not isinstance(path, str):
        raise SettingsError(
            f"{name} must be a path (str or os.PathLike) or None, got {_kind(value)}"
        )
    check_output_path(name, path)


def _outdir(instance: object, attribute: attrs.Attribute, value: object) -> None:
    check_outdir(attribute.name, value)


def check_setting(key: str, value: object) -> None:
    """A LoadGen setting override: a finite number within LoadGen's integer range (durations are
    milliseconds that LoadGen keeps in nanoseconds)."""
    if not is_number(value):
        raise SettingsError(f"setting {key} must be a finite number, got {_kind(value)}")
    limit = LOADGEN_INT_MAX // _NS_PER_MS if key in _DURATION_KEYS else LOADGEN_INT_MAX
    if abs(value) > limit:
        unit = " ms" if key in _DURATION_KEYS else ""
        raise SettingsError(
            f"setting {key} = {value!r} is beyond LoadGen's 64-bit range; pass at most {limit}{unit}"
        )


def _settings(value: object) -> tuple[tuple[str, float], ...]:
    if value is None:
        return ()
    if isinstance(value, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        value = dict(value)  # already converted (attrs.evolve, defaults)
    if not isinstance(value, Mapping):
        raise SettingsError(
            f"settings must be a mapping of user.conf keys to numbers, e.g. {{'min_duration': 5000}}, "
            f"got {_kind(value)}"
        )
    for key, number in value.items():
        if not isinstance(key, str) or not key.strip():
            raise SettingsError(f"settings keys must be user.conf key names, got {_kind(key)}")
        check_setting(key, number)
    return tuple(sorted(value.items()))


def _cpus(value: object) -> tuple[int, ...] | None:
    if value is None:
        return None
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or not value
        or not all(is_whole(c, 0) for c in value)
    ):
        raise SettingsError(
            f"cpus must be a non-empty list of CPU numbers (or None), got {_kind(value)}"
        )
    return tuple(value)


def _worker_entry(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if value is None:
        return
    module, sep, function = value.partition(":") if isinstance(value, str) else ("", "", "")
    if not (sep and module and function):
        raise SettingsError(
            f"worker_entry must be 'package.module:function' (or None), got {_kind(value)}"
        )


OPTION = "mlperf_mig.option"  # the attrs metadata key of an option's declaration


@attrs.frozen(kw_only=True)
class Option:
    """One option as declared: its name, default, the type the Python API takes, the entry of
    the API's docstring and its command-line form (None: Python only)."""

    name: str
    default: object
    accepts: str
    doc: str
    flag: Flag | None


Check = Callable[[Any, "attrs.Attribute[Any]", Any], None]  # an attrs validator


def option(
    default: _T | None,
    *,
    doc: str,
    check: Check | None = None,
    convert: Callable[[Any], object] | None = None,
    accepts: str | None = None,
    flag: Flag | None = None,
) -> _T:
    """A field of an options record, declared once: its default, its check (an attrs validator)
    and/or conversion (a converter that checks), the type the API takes where it is not the
    field's own, the docstring entry and the command-line flag (None: Python only). Typed as
    the field it declares; a default of None may be one the converter turns into the field's
    value (settings, layouts)."""
    declared = {"doc": doc, "accepts": accepts, "flag": flag}
    return attrs.field(
        default=default, validator=check, converter=convert, metadata={OPTION: declared}
    )


def declared_options(record: type) -> tuple[Option, ...]:
    """The options of an attrs record whose fields are declared with `option`, in order."""
    return tuple(
        Option(
            name=f.name,
            default=f.default,
            accepts=m["accepts"] or str(f.type),
            doc=m["doc"],
            flag=m["flag"],
        )
        for f in attrs.fields(record)
        if (m := f.metadata.get(OPTION)) is not None
    )


def options_doc(options: Iterable[Option], *, skip: Iterable[str] = ()) -> str:
    """The option list of a docstring: one entry per option, wrapped to 100 columns."""
    left_out = set(skip)
    entries = [
        textwrap.fill(
            o.doc,
            width=100,
            initial_indent=f"    {o.name + ':':<17} ",
            subsequent_indent=" " * 22,
            break_on_hyphens=False,
        )
        for o in options
        if o.name not in left_out
    ]
    return "\n" + "\n".join(entries)


def _recorded_nvml(path: str | None) -> NvmlModule | None:
    """--nvml-state FILE: the recorded NVML state (telemetry too where the state recorded it)."""
    if path is None:
        return None
    from mlperf_mig.telemetry.replay import RecordedTelemetry

    return RecordedTelemetry.from_file(path)


@attrs.frozen(kw_only=True)
class RunOptions:
    """Every option of a run, with its type and range checked; see `mlperf_mig.run`.

    Each field is the one declaration of its option: the Python API's parameters and docstrings
    and the command-line flags of run, plan and sweep are made from these (`RUN_OPTIONS`), in
    this order.
    """

    scenario: ScenarioSpec = option(  # noqa: RUF009 (option() is an attrs field, as field() is)
        7,
        convert=_scenario,
        doc='the seed study\'s MIG layout 1-8, a layout string ("3x2g.20gb+1g.10gb"), a list of '
        "profile names, or a system ID. Not the LoadGen scenario, which is loadgen_scenario.",
        flag=Flag(
            name="--scenario",
            type=layout_spec,
            group=LAYOUT,
            help="the study's MIG layout 1-8, a layout such as 3x2g.20gb+1g.10gb, or a system ID "
            "(default 7; the LoadGen scenario is --loadgen-scenario)",
        ),
    )
    benchmark: str = option(
        "resnet50",
        check=_text,
        doc=f"the workload: {workload_names_text()}.",
        flag=Flag(name="--benchmark", help=f"{workload_names_text()} (default resnet50)"),
    )
    loadgen_scenario: str = option(
        "Offline",
        check=_text,
        doc="the MLPerf LoadGen scenario: Offline, Server, SingleStream or MultiStream; or "
        "Interactive (llama3.1-8b: a Server test under llama3_1-8b-interactive, p99 TTFT 500 ms, "
        "TPOT 30 ms).",
        flag=Flag(
            name="--loadgen-scenario",
            help="MLPerf LoadGen scenario: Offline, Server, SingleStream, MultiStream, or "
            "Interactive (llama3.1-8b: Server under its interactive limits) (default Offline)",
        ),
    )
    mode: str = option(
        "independent",
        check=_mode,
        doc='"independent" (one LoadGen per instance; the sum is an engineering metric) or '
        '"unified" (one LoadGen dispatching to all instances).',
        flag=Flag(
            name="--mode",
            choices=MODES,
            help="independent: one LoadGen per instance (summed); unified: one LoadGen for the "
            "layout",
        ),
    )
    backend: str = option(
        "auto",
        check=_text,
        doc='"auto" (TensorRT with a GPU, else ONNX Runtime), "tensorrt", "onnxruntime", "null" '
        "(no model: measures the harness).",
        flag=Flag(name="--backend", help="auto, tensorrt, onnxruntime or null (default auto)"),
    )
    preset: str = option(
        "quick",
        check=_text,
        doc='"quick" (short, measured targets) or "submission" (official rules).',
        flag=Flag(name="--preset", help="quick or submission (default quick)"),
    )
    variant: str = option(
        "full",
        check=_text,
        doc='"full" or "tiny" model graphs.',
        flag=Flag(name="--variant", choices=("full", "tiny"), help="model size (default full)"),
    )
    precision: str | None = option(
        None,
        check=_optional_text,
        doc='"fp32", "fp16" or "int8" (default: the backend\'s).',
        flag=Flag(name="--precision", help="fp32, fp16 or int8 (default: the backend's)"),
    )
    gpu: str | None = option(
        None,
        check=_optional_text,
        doc="GPU to emulate without a GPU (default A100-SXM4-80GB), or which live GPU.",
        flag=Flag(name="--gpu", help="GPU to emulate without a GPU (default A100-SXM4-80GB)"),
    )
    shared: bool = option(
        False,
        check=_flag,
        doc="time-share a GPU without MIG between the instances (labelled shared).",
        flag=Flag(
            name="--shared",
            action="store_true",
            help="on a GPU without MIG, let the instances time-share it (labelled shared)",
        ),
    )
    emulate: bool = option(
        False,
        check=_flag,
        doc="emulate the partitions on the CPU even with a GPU.",
        flag=Flag(
            name="--emulate",
            action="store_true",
            help="emulate partitions on the CPU even with a GPU",
        ),
    )
    accuracy: bool = option(
        True,
        check=_flag,
        doc="run the accuracy test after the performance test.",
        flag=Flag(name="--no-accuracy", action="store_false", help="skip the accuracy run"),
    )
    compliance: bool = option(
        False,
        check=_flag,
        doc="then run the compliance audits (ResNet50 TEST01 and TEST04, BERT TEST01), each a "
        "fresh LoadGen test verified against the performance and accuracy runs.",
        flag=Flag(
            name="--compliance",
            action="store_true",
            help="then run the compliance audits (TEST01, TEST04 for resnet50); a failed audit "
            "exits 1",
        ),
    )
    # the telemetry sampler (mlperf_mig/telemetry) around the performance round
    telemetry: bool = option(
        True,
        check=_flag,
        doc="sample GPU power and energy, each instance's activity and memory and each worker's "
        "CPU use at 10 Hz in the runner process around the performance round (results.json "
        '"telemetry", telemetry.csv); False turns the sampler off.',
        flag=Flag(
            name="--no-telemetry",
            action="store_false",
            help="do not sample GPU power, energy and each instance's activity during the run "
            "(default: sampled at 10 Hz into results.json and telemetry.csv)",
        ),
    )
    settings: tuple[tuple[str, float], ...] = option(
        None,
        convert=_settings,
        accepts="Mapping[str, float] | None",
        doc='LoadGen settings in user.conf keys and units, {"min_duration": 5000}.',
        flag=SETTINGS_FLAG,
    )
    user_conf: str | None = option(
        None,
        convert=_path,
        check=_optional_path,
        accepts="PathArg | None",
        doc="a user.conf file with LoadGen settings.",
        flag=Flag(name="--user-conf", help="a user.conf file with LoadGen settings"),
    )
    dataset: str | None = option(
        None,
        convert=_path,
        check=_optional_path,
        accepts="PathArg | None",
        doc="ImageNet val folder, SQuAD dev json or cnn_eval.json (default synthetic).",
        flag=Flag(
            name="--dataset",
            help="ImageNet val folder, SQuAD dev json or cnn_eval.json (default synthetic)",
        ),
    )
    vocab: str | None = option(
        None,
        convert=_path,
        check=_optional_path,
        accepts="PathArg | None",
        doc="BERT's vocab.txt for the SQuAD dev json, or the LLM's tokenizer.json.",
        flag=Flag(name="--vocab", help="vocab.txt for SQuAD, or the LLM's tokenizer.json"),
    )
    sample_count: int | None = option(
        None, check=_count, doc="use the first N samples of the dataset."
    )
    batch_size: int | None = option(
        None,
        check=_count,
        doc="batch size of every instance (default: the engine recipe's).",
        flag=Flag(
            name="--batch-size",
            type=count_of("the batch size of every instance", 8),
            help="batch size of every instance (default: the engine recipe's per profile)",
        ),
    )
    model_path: str | None = option(
        None,
        convert=_path,
        check=_optional_path,
        accepts="PathArg | None",
        doc="an ONNX model file instead of the generated graph (vLLM: a Hugging Face folder).",
        flag=Flag(
            name="--model",
            help="an ONNX model file instead of the generated graph (vllm: a Hugging Face folder)",
        ),
    )
    cache_dir: str | None = option(
        None,
        convert=_path,
        check=_optional_path,
        accepts="PathArg | None",
        doc="model and engine cache folder.",
    )
    timeout_s: float | None = option(
        None,
        check=_seconds,
        doc="seconds one LoadGen test may take before its worker counts as hung.",
        flag=Flag(
            name="--timeout", type=decimal_number, help="seconds before a worker counts as hung"
        ),
    )
    outdir: str | None = option(
        None,
        convert=_path,
        check=_outdir,
        accepts="PathArg | None",
        doc="run folder (default: a new timestamped folder in the current directory).",
        flag=Flag(name="--outdir", help="output folder (default: a new timestamped folder here)"),
    )
    worker_entry: str | None = option(
        None,
        check=_worker_entry,
        doc='"module:function" run in each worker instead of the harness (tests).',
        flag=Flag(name="--worker-entry", hidden=True, help="tests inject faults"),
    )
    cluster: str | None = option(
        None,
        check=_cluster,
        doc='the Ray cluster to run the instances on (None: this host): "auto", "HOST:PORT", '
        '"ray://HOST:PORT", or "local:N" (N throwaway nodes on this machine).',
        flag=Flag(
            name="--cluster",
            metavar="ADDR",
            help="run the instances on a Ray cluster: auto, HOST:PORT, ray://HOST:PORT, or "
            "local:N (N throwaway nodes on this machine); needs mlperf-mig[cluster]",
        ),
    )
    gpu_group: tuple[str, ...] | None = option(
        None,
        convert=_gpu_group,
        accepts="Sequence[str] | str | None",
        doc="cluster runs on vGPUs: the nodes (addresses, host names or node IDs) whose vGPUs "
        "are slices of one GPU; the run says the grouping was declared.",
        flag=Flag(
            name="--gpu-group",
            metavar="NODES",
            help="with --cluster on vGPUs: comma-separated nodes (address, host or node ID) "
            "whose vGPUs are slices of one GPU (the run says the grouping was declared)",
        ),
    )
    # a whole system (placement/fleet.py): which GPUs, a layout per GPU, how many to emulate
    gpus: str | tuple[int, ...] | None = option(
        None,
        convert=_gpu_indices,
        accepts="Sequence[int] | str | None",
        doc='run the layout on each of these GPUs at once: "all" or indices such as [0, 3] '
        '(None: one GPU); with a cluster, "all" is every GPU of every node. results.json then '
        "has one `gpus` entry per GPU with its subtotal.",
        flag=Flag(
            name="--gpus",
            type=gpu_selection,
            metavar="all|0,3",
            help="put the layout on each of these GPUs at once (all, or indices); with "
            "--cluster, all means every GPU of every node",
        ),
    )
    layouts: tuple[tuple[int, ScenarioSpec], ...] = option(
        None,
        convert=_gpu_layouts,
        accepts="Mapping[int, ScenarioSpec] | None",
        doc='a layout per GPU, {0: "7x1g.10gb", 1: "3g.40gb+4g.40gb"}; a GPU without one '
        "carries `scenario` (study numbers translate per GPU model).",
        flag=Flag(
            name="--layout",
            action="append",
            type=gpu_layout,
            value=gpu_layouts,
            metavar="GPU=LAYOUT",
            help="a GPU's own layout, e.g. 1=3g.40gb+4g.40gb (repeatable; the others carry "
            "--scenario)",
        ),
    )
    gpu_count: int | None = option(
        None,
        check=_gpu_count,
        doc="without a GPU (or with emulate): emulate this many GPUs of `gpu`, each on its share "
        'of the CPUs; on a cluster, per GPU-less node (with gpus="all").',
        flag=Flag(
            name="--gpu-count",
            type=count_of("how many GPUs to emulate", 8),
            metavar="N",
            help="without a GPU: emulate N GPUs of --gpu, each on its share of the CPUs "
            "(on a cluster: per node, with --gpus all)",
        ),
    )
    nvml_source: NvmlModule | None = option(  # noqa: RUF009 (an attrs field)
        None,
        doc="a recorded NVML state instead of this machine's GPUs (tests).",
        flag=Flag(
            name="--nvml-state",
            value=_recorded_nvml,
            metavar="FILE",
            help="use a recorded NVML state (from `mlperf-mig detect --record FILE`) instead of "
            "this machine's GPUs",
        ),
    )
    cpus: tuple[int, ...] | None = option(
        None,
        convert=_cpus,
        accepts="Sequence[int] | None",
        doc="CPUs the emulated partitions share (default: those of this process).",
    )
    # studies (study/repeats.py): each repeat and each alone run is a plan made from the others
    repeats: int = option(
        1,
        check=_repeats,
        doc="run the layout N times, each repeat a complete run in `outdir`/repeat-<k>; `run` "
        "returns a RepeatedRun (means, 95% intervals) when N > 1 or with isolation.",
        flag=Flag(
            name="--repeats",
            type=count_of("how often each layout runs", 3),
            group=STUDY,
            metavar="N",
            help="run each layout N times (each repeat its own folder); tables show means with "
            "95%% confidence intervals (default 1; the study used 3)",
        ),
    )
    isolation: bool = option(
        False,
        check=_flag,
        doc="also run each distinct profile of the layout alone (the rest of the GPU idle, same "
        "device) and report each instance's interference against it.",
        flag=Flag(
            name="--isolation",
            action="store_true",
            group=STUDY,
            help="also run each distinct profile of the layout alone and report each instance's "
            "interference against it",
        ),
    )

    def __attrs_post_init__(self) -> None:
        """Options that cannot go together are refused before a cluster or worker starts."""
        if self.cluster is not None and self.gpus not in (None, "all"):
            raise ClusterError(
                f"gpus={list(self.gpus)} picks GPUs of one host, but a cluster's nodes number their "
                "GPUs each from 0; pass gpus='all' / --gpus all (every GPU of every node)"
            )
        if (
            self.cluster is not None
            and self.gpus is None
            and (self.gpu_count is not None or self.layouts)
        ):
            raise ClusterError(
                "gpu_count and layouts on a cluster are per GPU of every node: add gpus='all' / "
                "--gpus all, or drop --gpu-count / --layout"
            )
        if self.cluster is None:
            if self.gpu_group is not None:
                raise SettingsError(
                    "gpu_group / --gpu-group names the VMs of one GPU in a cluster, but no cluster "
                    "was given; add --cluster ADDRESS or drop --gpu-group"
                )
            return
        given = {
            "shared": self.shared,
            "nvml_source": self.nvml_source is not None,
            "cpus": self.cpus is not None,
        }
        for name in (n for n, on in given.items() if on):
            raise ClusterError(
                f"{name} cannot be combined with a cluster: instances on different nodes cannot "
                f"time-share one GPU, and each node reports its own devices and CPUs; drop {name} "
                "or --cluster"
            )

    @property
    def studied(self) -> bool:
        """Whether the run is a study: repeated, or with isolation runs."""
        return self.repeats > 1 or self.isolation


def check_progress(progress: object) -> None:
    """`progress` is True, False, None or a writable text stream."""
    if isinstance(progress, bool) or progress is None:
        return
    if not callable(getattr(progress, "write", None)):
        raise SettingsError(
            f"progress must be True, False or a text stream such as sys.stderr, got {_kind(progress)}"
        )


RUN_OPTIONS = declared_options(RunOptions)


def run_options(values: Mapping[str, Any]) -> RunOptions:
    """The RunOptions of a call's keyword arguments (those of them that are run options)."""
    return RunOptions(**{o.name: values[o.name] for o in RUN_OPTIONS if o.name in values})
