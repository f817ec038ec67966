"""The MLCommons submission checker's rules, as data (reference/mlperf.md section 3).

Read in mlcommons/inference tools/submission/submission_checker: constants.py (required files,
system-description fields, measurements keys, seeds, accuracy patterns, performance sample
counts, minimum duration, latency bounds, required scenarios), checks/performance_check.py,
checks/accuracy_check.py, checks/system_check.py, checks/measurements_checks.py, loader.py
(paths of v6.0 and later), configuration/configuration.py (model names, early stopping), and
tools/submission/truncate_accuracy_log.py (truncation and hash). The checker is the judge; these
values must follow it, not our taste. What it knows per model class (sample counts, latency
bounds, minimum queries, required scenarios, accuracy targets and patterns, compliance audits) is
each workload's `checker_models` (workloads/<name>/); this module asks the workloads for it.
"""

from __future__ import annotations

import re

from mlperf_mig.workloads import CheckerModel, Workload, workloads

DEFAULT_VERSION = "v6.1"

VALID_DIVISIONS = ("closed", "open", "network")
WRITABLE_DIVISIONS = ("closed", "open")
VALID_STATUSES = ("available", "preview", "rdi")
VALID_SYSTEM_TYPES = ("datacenter", "edge", "datacenter,edge", "edge,datacenter")
# Scenario folder names: LoadGen's scenarios, and Interactive, whose logs are a Server run
# (under the interactive conf model name; the checker maps the pair, performance_check.py)
SCENARIOS = ("SingleStream", "MultiStream", "Offline", "Server", "Interactive")
LOG_SCENARIO = {"Interactive": "Server"}  # folder -> the effective_scenario its logs must have
# loader.py check_scenarios: where both are optional scenarios, one of them is required
ONE_OF_SCENARIOS = ("Interactive", "Server")
EARLY_STOPPING_SCENARIOS = ("SingleStream", "MultiStream", "Server")

# LoadGen's built-in mlperf.conf seeds, per checker version (constants.py MODEL_CONFIG[v]["seeds"]).
# v6.1 is the version of LoadGen 6.0.x, whose mlperf.conf carries the v6.1 seeds.
SEEDS: dict[str, dict[str, int]] = {
    "v5.0": {
        "qsl_rng_seed": 6023615788873153749,
        "sample_index_rng_seed": 15036839855038426416,
        "schedule_rng_seed": 9933818062894767841,
    },
    "v5.1": {
        "qsl_rng_seed": 1780908523862526354,
        "sample_index_rng_seed": 14771362308971278857,
        "schedule_rng_seed": 18209322760996052031,
    },
    "v6.0": {
        "qsl_rng_seed": 2465351861681999779,
        "sample_index_rng_seed": 14276810075590677512,
        "schedule_rng_seed": 3936089224930324775,
    },
    "v6.1": {
        "qsl_rng_seed": 2085463073848966840,
        "sample_index_rng_seed": 2747215439041700203,
        "schedule_rng_seed": 16159082839903944936,
    },
}

MIN_DURATION_MS = 600_000
HASH_LINE = re.compile(r"^hash=([\w\d]+)$")
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")

# truncate_accuracy_log.py: keep 4 KiB from the start and 4 KiB from the end.
MAX_ACCURACY_LOG_SIZE = 10 * 1024
VIEWABLE_SIZE = 4096
TRUNCATION_MARKER = b"\n\n...\n\n"

# constants.py RESULT_FIELD_NEW: the log record each scenario's result is read from; the
# checker's performance check fails when the performance log lacks it.
RESULT_KEYS = {
    "Offline": "result_samples_per_second",
    "SingleStream": "early_stopping_latency_ss",
    "MultiStream": "early_stopping_latency_ms",
    "Server": "result_completed_samples_per_sec",
}
# checks/system_check.py and performance_check.py: the network-mode flag of a system
# description. Absent means false; present, it must be the string "true" or "false" (the checker
# calls .lower() on it), false in the closed division, and true needs the network fields too.
NETWORK_FIELD = "is_network"
# results.py (summary.csv) of recent checkers: int(number_of_nodes) * int(accelerators_per_node),
# outside any check, so a value int() cannot read stops the whole checker.
WHOLE_NUMBER_SYSTEM_FIELDS = ("number_of_nodes", "accelerators_per_node")
NETWORK_MODE_FIELDS = (
    "network_type",
    "network_media",
    "network_rate",
    "nic_loadgen",
    "number_nic_loadgen",
    "net_software_stack_loadgen",
    "network_protocol",
    "number_connections",
    "nic_sut",
    "number_nic_sut",
    "net_software_stack_sut",
    "network_topology",
)

REQUIRED_PERF_FILES = ("mlperf_log_summary.txt", "mlperf_log_detail.txt")
OPTIONAL_PERF_FILES = ("mlperf_log_accuracy.json",)
# utils.files_diff ignores these in every folder whose file list it compares.
ALWAYS_OPTIONAL_FILES = ("mlperf_log_trace.json", "results.json", ".gitkeep")
REQUIRED_ACC_FILES = (
    "mlperf_log_summary.txt",
    "mlperf_log_detail.txt",
    "accuracy.txt",
    "mlperf_log_accuracy.json",
)
REQUIRED_SCENARIO_FILES = ("measurements.json", "user.conf", "README.md")

VERIFY_FILES = {
    "TEST01": ("verify_accuracy.txt", "verify_performance.txt"),
    "TEST04": ("verify_performance.txt",),
    "TEST06": ("verify_accuracy.txt",),
}
# TEST06's verify_accuracy.txt lines the checker reads (each check True, the first token may be
# Skipped in Offline)
TEST06_LINES = (
    ("First token check pass: True", "First token check pass: Skipped"),
    ("EOS check pass: True",),
    ("Sample length check pass: True",),
)
PASS_LINE = "TEST PASS"
# TEST01 where the payloads differ: the accuracy of both runs on the sampled set, compared.
TEST01_ACC_FILES = (
    "mlperf_log_accuracy.json", "accuracy.txt", "baseline_accuracy.txt", "compliance_accuracy.txt",
)  # fmt: skip

MEASUREMENTS_KEYS = (
    "input_data_types",
    "retraining",
    "starting_weights_filename",
    "weight_data_types",
    "weight_transformations",
)

SYSTEM_FIELDS = (
    "division",
    "submitter",
    "status",
    "system_name",
    "number_of_nodes",
    "host_processor_model_name",
    "host_processors_per_node",
    "host_processor_core_count",
    "host_memory_capacity",
    "host_storage_capacity",
    "host_storage_type",
    "accelerators_per_node",
    "accelerator_model_name",
    "accelerator_memory_capacity",
    "framework",
    "operating_system",
    "system_type",
    "other_software_stack",
    "host_processor_frequency",
    "host_processor_caches",
    "host_memory_configuration",
    "host_processor_interconnect",
    "host_networking",
    "host_networking_topology",
    "accelerator_frequency",
    "accelerator_host_interconnect",
    "accelerator_interconnect",
    "accelerator_interconnect_topology",
    "accelerator_memory_configuration",
    "accelerator_on-chip_memories",
    "cooling",
    "hw_notes",
    "sw_notes",
    "host_network_card_count",
    "system_type_detail",
)
# Fields the checker requires to be non-empty (a falsy value such as 0 or "" fails).
MEANINGFUL_SYSTEM_FIELDS = (
    "division",
    "submitter",
    "system_type",
    "status",
    "system_name",
    "number_of_nodes",
    "host_processor_model_name",
    "host_processors_per_node",
    "host_processor_core_count",
    "host_memory_capacity",
    "host_memory_configuration",
    "host_storage_capacity",
    "host_storage_type",
    "host_networking",
    "host_network_card_count",
    "host_networking_topology",
    "accelerators_per_node",
    "accelerator_model_name",
    "accelerator_memory_capacity",
    "accelerator_host_interconnect",
    "accelerator_memory_configuration",
    "accelerator_interconnect",
    "cooling",
    "framework",
    "operating_system",
    "other_software_stack",
)


def short_run_settings(model: str) -> dict[str, float]:
    """user.conf settings of an Offline run the checker accepts that still ends in seconds.

    The checker wants a 600 s minimum duration and the official performance sample count in every
    division; with a target of 0.1 samples/s the Offline query holds 66 samples, so LoadGen ends
    early and calls the result INVALID (min duration not met), which the open division accepts.
    """
    return {
        "min_duration": MIN_DURATION_MS,
        "performance_sample_count_override": checker_model(model).performance_sample_count,
        "target_qps": 0.1,
    }


def log_scenario(folder: str) -> str:
    """The LoadGen scenario the logs of scenario folder `folder` must say (Interactive: Server)."""
    return LOG_SCENARIO.get(folder, folder)


def _models() -> dict[str, tuple[CheckerModel, Workload]]:
    """The checker's model classes, each with the workload whose result folders it judges."""
    return {model.name: (model, w) for w in workloads() for model in w.checker_models}


def checker_model(model: str) -> CheckerModel:
    """What the checker knows of model class `model` ("resnet", "bert-99", ...)."""
    return _models()[model][0]


def workload_of_model(model: str) -> Workload:
    """The workload whose results the checker's model class `model` judges."""
    return _models()[model][1]


def benchmark_folders() -> dict[str, str]:
    """Result folder name -> the checker's model class (configuration.get_mlperf_model)."""
    return {folder: name for name, (model, _) in _models().items() for folder in model.folders}


def mlperf_model(benchmark_folder: str) -> str | None:
    """The checker's model class for a result folder name, None for a name it would reject."""
    return benchmark_folders().get(benchmark_folder)


def accuracy_pattern(model: str) -> re.Pattern[str]:
    """The regex the checker reads model `model`'s accuracy.txt figure with (ACC_PATTERN)."""
    return re.compile(checker_model(model).accuracy_pattern)


def known_versions() -> tuple[str, ...]:
    return tuple(SEEDS)
