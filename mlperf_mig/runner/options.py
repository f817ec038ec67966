"""The options of one run, checked once: `RunOptions`.

`mlperf_mig.run`, `plan`, `sweep` and the CLI build one RunOptions from their keyword arguments;
`make_plan(options)` resolves it into a RunPlan. The record checks what needs no machine: the
type of every option and the ranges of its values (counts and LoadGen settings within LoadGen's
integer range, finite deadlines, output paths the file system can hold), each error one line
naming the argument, what it expected and what arrived. What needs the machine (layouts on the
GPU, files on disk, CPUs) is checked by make_plan, still before any worker starts.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from mlperf_mig._io import check_output_path
from mlperf_mig.errors import ClusterError, SettingsError
from mlperf_mig.runner.cluster_address import parse_cluster
from mlperf_mig.runner.placement import ScenarioSpec

MODES = ("independent", "unified")
# LoadGen keeps counts and durations in 64-bit integers; durations in nanoseconds.
LOADGEN_INT_MAX = 2**63 - 1
_NS_PER_MS = 1_000_000
_DURATION_KEYS = ("min_duration", "max_duration")


def _kind(value: object) -> str:
    return f"{type(value).__name__} {value!r}"


def check_scenario(name: str, value: object) -> int | str | tuple[str, ...]:
    """A MIG layout as the API takes it: a study number, a layout string or a list of profiles."""
    if isinstance(value, int) and not isinstance(value, bool):
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
        parse_cluster(value)  # type: ignore[arg-type]


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
        return value  # type: ignore[return-value]
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")]
        if all(p.isascii() and p.isdigit() for p in parts):
            value = [int(p) for p in parts]
    ok = isinstance(value, Sequence) and not isinstance(value, str) and value
    if not ok or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
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
        if isinstance(key, bool) or not isinstance(key, int) or key < 0:
            raise SettingsError(f"layouts keys must be GPU indices (0, 1, ...), got {_kind(key)}")
        pairs.append((key, check_scenario(f"layouts[{key}]", layout)))
    return tuple(sorted(pairs))


def _gpu_count(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_GPUS:
        raise SettingsError(
            f"gpu_count must be a whole number from 1 to {MAX_GPUS} (how many GPUs to emulate), "
            f"got {_kind(value)}"
        )


def _flag(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if not isinstance(value, bool):
        raise SettingsError(f"{attribute.name} must be True or False, got {_kind(value)}")


def _mode(instance: object, attribute: attrs.Attribute, value: object) -> None:
    _text(instance, attribute, value)
    if value not in MODES:
        raise SettingsError(
            f"mode {value!r} is not one of {', '.join(MODES)} (independent: one LoadGen per "
            "instance, summed; unified: one LoadGen for the whole layout)"
        )


def _count(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= LOADGEN_INT_MAX:
        raise SettingsError(
            f"{attribute.name} must be a whole number from 1 to {LOADGEN_INT_MAX} (or None), got "
            f"{_kind(value)}"
        )


MAX_REPEATS = 1000


def _repeats(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REPEATS:
        raise SettingsError(
            f"repeats must be a whole number from 1 to {MAX_REPEATS} (how often each layout runs; "
            f"the study used 3), got {_kind(value)}"
        )


def _seconds(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if value is None:
        return
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value <= 0 or value * 1e9 > LOADGEN_INT_MAX:
        raise SettingsError(
            f"{attribute.name} must be a positive, finite number of seconds (or None), got {_kind(value)}"
        )


def _path(value: object) -> str | None:
    """os.fspath of a str or path-like; anything else is left for the validator to refuse."""
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        return path if isinstance(path, str) else value  # type: ignore[return-value]
    return value  # type: ignore[return-value]


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


def _outdir(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise SettingsError(
            f"outdir must be a path (str or os.PathLike) or None, got {_kind(value)}"
        )
    check_output_path("outdir", value)


def check_setting(key: str, value: object) -> None:
    """A LoadGen setting override: a finite number within LoadGen's integer range (durations are
    milliseconds that LoadGen keeps in nanoseconds)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
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
    ok = isinstance(value, Sequence) and not isinstance(value, str) and value
    if not ok or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in value):
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


@attrs.frozen(kw_only=True)
class RunOptions:
    """Every option of a run, with its type and range checked; see `mlperf_mig.run`."""

    scenario: ScenarioSpec = attrs.field(default=7, converter=_scenario)
    benchmark: str = attrs.field(default="resnet50", validator=_text)
    loadgen_scenario: str = attrs.field(default="Offline", validator=_text)
    backend: str = attrs.field(default="auto", validator=_text)
    preset: str = attrs.field(default="quick", validator=_text)
    mode: str = attrs.field(default="independent", validator=_mode)
    gpu: str | None = attrs.field(default=None, validator=_optional_text)
    outdir: str | None = attrs.field(default=None, converter=_path, validator=_outdir)
    variant: str = attrs.field(default="full", validator=_text)
    precision: str | None = attrs.field(default=None, validator=_optional_text)
    shared: bool = attrs.field(default=False, validator=_flag)
    emulate: bool = attrs.field(default=False, validator=_flag)
    accuracy: bool = attrs.field(default=True, validator=_flag)
    compliance: bool = attrs.field(default=False, validator=_flag)
    # the telemetry sampler (mlperf_mig/telemetry) around the performance round
    telemetry: bool = attrs.field(default=True, validator=_flag)
    settings: tuple[tuple[str, float], ...] = attrs.field(default=(), converter=_settings)
    user_conf: str | None = attrs.field(default=None, converter=_path, validator=_optional_path)
    dataset: str | None = attrs.field(default=None, converter=_path, validator=_optional_path)
    vocab: str | None = attrs.field(default=None, converter=_path, validator=_optional_path)
    sample_count: int | None = attrs.field(default=None, validator=_count)
    batch_size: int | None = attrs.field(default=None, validator=_count)
    model_path: str | None = attrs.field(default=None, converter=_path, validator=_optional_path)
    cache_dir: str | None = attrs.field(default=None, converter=_path, validator=_optional_path)
    timeout_s: float | None = attrs.field(default=None, validator=_seconds)
    worker_entry: str | None = attrs.field(default=None, validator=_worker_entry)
    nvml_source: Any = None
    cpus: tuple[int, ...] | None = attrs.field(default=None, converter=_cpus)
    cluster: str | None = attrs.field(default=None, validator=_cluster)
    gpu_group: tuple[str, ...] | None = attrs.field(default=None, converter=_gpu_group)
    # a whole system (runner/system.py): which GPUs, a layout per GPU, how many to emulate
    gpus: str | tuple[int, ...] | None = attrs.field(default=None, converter=_gpu_indices)
    layouts: tuple[tuple[int, ScenarioSpec], ...] = attrs.field(default=(), converter=_gpu_layouts)
    gpu_count: int | None = attrs.field(default=None, validator=_gpu_count)
    # studies (study/repeats.py): each repeat and each alone run is a plan made from the others
    repeats: int = attrs.field(default=1, validator=_repeats)
    isolation: bool = attrs.field(default=False, validator=_flag)

    def __attrs_post_init__(self) -> None:
        """Options that cannot go together are refused before a cluster or worker starts."""
        if self.cluster is not None and self.gpus not in (None, "all"):
            raise ClusterError(
                f"gpus={list(self.gpus)} picks GPUs of one host, but a cluster's nodes number their "  # type: ignore[arg-type]
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
