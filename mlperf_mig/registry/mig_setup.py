"""How to set a layout up on a GPU (MigSetup): a mig-parted v1 config and ordered nvidia-smi steps.

Printing only: nothing here changes MIG state. Steps pin every GPU instance to an explicit
placement and create the largest first, so the driver never picks a start that fragments the
memory slices (the MIG guide's `19,19,14,9` example fails for exactly that reason).
"""

from __future__ import annotations

import re

import attrs

from mlperf_mig.errors import LayoutError
from mlperf_mig.registry.model import Layout, Placement
from mlperf_mig.registry.solver import solve_placements


@attrs.frozen(kw_only=True)
class MigSetup:
    """How to create `layout` on GPU `gpu_index`: explicit placements, largest first."""

    layout: Layout
    placements: tuple[Placement, ...]
    gpu_index: int = attrs.field(default=0, validator=attrs.validators.ge(0))

    @property
    def config_name(self) -> str:
        """mig-parted config name: `mlperf-mig-3x2g.20gb-1x1g.10gb` (`+` written as `.`)."""
        parts = [f"{n}x{p.name}" for p, n in self.layout.counts()]
        return "mlperf-mig-" + re.sub(r"\+", ".", "-".join(parts))

    def mig_parted_config(self) -> str:
        """A mig-parted `version: v1` config that applies the layout to this GPU type."""
        filters = ", ".join(f'"0x{pci:08X}"' for pci in self.layout.gpu.pci_device_ids)
        lines = [
            "version: v1",
            "mig-configs:",
            f"  {self.config_name}:",
        ]
        first = "    - "
        if filters:
            lines.append(f"{first}device-filter: [{filters}]  # {self.layout.gpu.name}")
            first = "      "
        lines += [
            f"{first}devices: [{self.gpu_index}]",
            "      mig-enabled: true",
            "      mig-devices:",
            *(f'        "{p.name}": {n}' for p, n in self.layout.counts()),
        ]
        return "\n".join(lines) + "\n"

    def steps(self) -> list[str]:
        """nvidia-smi commands, in order: enable MIG, then one pinned GPU instance (+ its compute
        instance) per placement, largest first."""
        gpu = self.gpu_index
        return [
            f"nvidia-smi -i {gpu} -mig 1",
            *(
                f"nvidia-smi mig -i {gpu} -cgi {p.profile.profile_id}:{p.start} -C"
                f"  # {p.profile.name} on memory slice{'s' if p.size > 1 else ''} {p.memory_range}"
                for p in self.placements
            ),
        ]


def mig_setup(layout: Layout, *, gpu_index: int = 0) -> MigSetup:
    """Plan the creation of `layout`; raises LayoutError when it does not fit its GPU."""
    if gpu_index < 0:
        raise LayoutError(
            f"GPU index {gpu_index} is negative; nvidia-smi numbers GPUs from 0, so pass 0 or more"
        )
    placements = tuple(
        sorted(solve_placements(layout), key=lambda p: (p.profile.size_key, p.start))
    )
    return MigSetup(layout=layout, placements=placements, gpu_index=gpu_index)
