"""The vLLM backend: a generative workload on one MIG slice, its limits set from the slice.

The backend table (engines/backends/__init__.py) reads `BACKEND`; vllm is imported only inside
the functions that start an engine. The rest of the library may use the parts on their own:
`vllm_settings` (what a slice holds), `worker_environment` and `bind_slice` (the process a
worker needs), `VllmModel` (dummy or user weights) and `load_generator` (a TokenGenerator).
"""

from mlperf_mig.engines.backends.vllm.backend import VllmBackend, generate_batch, slice_settings
from mlperf_mig.engines.backends.vllm.generator import VllmGenerator, import_vllm, load_generator
from mlperf_mig.engines.backends.vllm.model import VllmModel, shape_from_config
from mlperf_mig.engines.backends.vllm.settings import (
    VLLM_PRECISIONS,
    VllmSettings,
    apply_worker_environment,
    bind_slice,
    settings_for_profile,
    vllm_settings,
    worker_environment,
)

BACKEND = VllmBackend

__all__ = [
    "BACKEND",
    "VLLM_PRECISIONS",
    "VllmBackend",
    "VllmGenerator",
    "VllmModel",
    "VllmSettings",
    "apply_worker_environment",
    "bind_slice",
    "generate_batch",
    "import_vllm",
    "load_generator",
    "settings_for_profile",
    "shape_from_config",
    "slice_settings",
    "vllm_settings",
    "worker_environment",
]
