"""The system registry: MIG-capable GPUs, their profiles and placements, layouts, discovery."""

from mlperf_mig.registry.catalog import Catalog, default_catalog, load_catalog, load_gpu_file
from mlperf_mig.registry.devices import (
    LiveDevice,
    match_layout,
    node_inventory,
    usable_devices,
)
from mlperf_mig.registry.discovery import (
    Detection,
    GpuState,
    MigDevice,
    MigUuid,
    VgpuDevice,
    detect,
    parse_mig_uuid,
    read_nvml_state,
)
from mlperf_mig.registry.mig_setup import MigSetup, mig_setup
from mlperf_mig.registry.model import Gpu, Layout, Placement, Profile
from mlperf_mig.registry.names import (
    parse_layout,
    parse_system_id,
    parse_vgpu_type,
    system_id,
    vgpu_type_name,
)
from mlperf_mig.registry.replay import RecordedNvml
from mlperf_mig.registry.solver import maximal_layouts, solve_placements, valid_layouts
from mlperf_mig.registry.study import StudyScenario, study_layout, study_scenarios, translate_layout

__all__ = [
    "Catalog",
    "Detection",
    "Gpu",
    "GpuState",
    "Layout",
    "LiveDevice",
    "MigDevice",
    "MigSetup",
    "MigUuid",
    "Placement",
    "Profile",
    "RecordedNvml",
    "StudyScenario",
    "VgpuDevice",
    "default_catalog",
    "detect",
    "load_catalog",
    "load_gpu_file",
    "match_layout",
    "maximal_layouts",
    "mig_setup",
    "node_inventory",
    "parse_layout",
    "parse_mig_uuid",
    "parse_system_id",
    "parse_vgpu_type",
    "read_nvml_state",
    "solve_placements",
    "study_layout",
    "study_scenarios",
    "system_id",
    "translate_layout",
    "usable_devices",
    "valid_layouts",
    "vgpu_type_name",
]
