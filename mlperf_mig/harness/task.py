"""The task record of one LoadGen test: what a worker, the CLI or the runner asks the harness to
run (plain, picklable data), read by the worker entry point (instance.py), the LoadGen test
(loadgen_test.py) and the dataset readers (datasets.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from mlperf_mig._paths import optional_path_text, path_text
from mlperf_mig.errors import SettingsError
from mlperf_mig.harness.settings import SettingsSpec, normalize_loadgen_scenario
from mlperf_mig.workloads import Workload, get_workload

if TYPE_CHECKING:
    from mlperf_mig.engines.spec import EngineSpec

MODES = ("performance", "accuracy")
AUDITS = ("TEST01", "TEST04", "TEST06")  # ResNet50, BERT; llama3.1-8b (harness/compliance.py)


def check_positive(name: str, value: int | None) -> None:
    """Refuse a count below 1: 0 would otherwise quietly mean "the default" somewhere below."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise SettingsError(f"{name} must be a whole number of at least 1 (or None), got {value!r}")


def _mode(instance: object, attribute: attrs.Attribute, value: str) -> None:
    if value not in MODES:
        raise SettingsError(f"mode {value!r} is not one of {', '.join(MODES)}")


def _audit(instance: InstanceTask, attribute: attrs.Attribute, value: str | None) -> None:
    if value is not None and value not in AUDITS:
        raise SettingsError(f"audit {value!r} is not one of {', '.join(AUDITS)} (or None)")
    if value is not None and instance.mode != "performance":
        raise SettingsError(f"audit {value} is a performance-mode test; got mode {instance.mode!r}")


def _positive(instance: object, attribute: attrs.Attribute, value: int | None) -> None:
    check_positive(attribute.name, value)


@attrs.frozen(kw_only=True)
class InstanceTask:
    """Everything one worker needs to run one LoadGen test; plain, picklable data.

    `engine` is the engines pillar's EngineSpec (opened in the worker with open_backend), or None
    for the null backend. `dataset` is the workload's dataset (an ImageNet validation folder
    with val_map.txt for ResNet50, a SQuAD v1.1 dev json or its folder for BERT); None means
    synthetic samples.
    `outdir` is the instance's folder: the logs go to `<outdir>/<mode>/`, the user.conf to
    `<outdir>/user.conf`. `audit` ("TEST01", "TEST04") makes the test a compliance audit: its
    audit.config, logs and user.conf go to `<outdir>/<audit>/` (see harness/compliance.py).
    """

    benchmark: Workload = attrs.field(converter=get_workload)  # a name is resolved once, here
    loadgen_scenario: str = attrs.field(converter=normalize_loadgen_scenario)
    outdir: str = attrs.field(converter=path_text)
    mode: str = attrs.field(default="performance", validator=_mode)
    engine: EngineSpec | None = None
    cache_dir: str | None = attrs.field(default=None, converter=optional_path_text)
    threads: int | None = attrs.field(default=None, validator=_positive)
    settings: SettingsSpec = attrs.field(factory=SettingsSpec)
    dataset: str | None = attrs.field(default=None, converter=optional_path_text)
    vocab: str | None = attrs.field(default=None, converter=optional_path_text)
    sample_count: int | None = attrs.field(default=None, validator=_positive)
    batch_size: int | None = attrs.field(default=None, validator=_positive)
    batch_window_ms: float | None = None
    seed: int = 0
    audit: str | None = attrs.field(default=None, validator=_audit)

    @property
    def log_dir(self) -> Path:
        return Path(self.outdir) / (self.audit or self.mode)
