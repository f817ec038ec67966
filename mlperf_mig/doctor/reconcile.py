"""Each detected GPU reconciled with the shipped catalog: every field where live NVML data differs."""

from __future__ import annotations

from typing import Any

import attrs

from mlperf_mig.registry.discovery import GpuState, profile_differences
from mlperf_mig.registry.model import ProfileValue

MATCHES = "catalog matches"


@attrs.frozen(kw_only=True)
class FieldDifference:
    """One field of one MIG profile where the live GPU and the shipped table disagree."""

    profile: str
    field: str
    ours: ProfileValue  # the shipped table's value; None where the table lacks the profile
    live: ProfileValue  # NVML's value; None where the driver lacks the profile

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "field": self.field,
            "ours": _plain(self.ours),
            "live": _plain(self.live),
        }


@attrs.frozen(kw_only=True)
class GpuCheck:
    """What doctor says about one GPU: MIG modes, the vGPU it is, and the reconciliation."""

    index: int
    name: str
    catalog_gpu: str | None
    mig_current: bool | None
    mig_pending: bool | None
    virtualization: str | None
    vgpu: dict[str, Any] | None
    live_profiles: int  # profiles NVML reported (0: MIG off on a driver that cannot say, or a VM)
    differences: tuple[FieldDifference, ...] = attrs.field(converter=tuple[FieldDifference, ...])
    notes: tuple[str, ...] = attrs.field(converter=tuple[str, ...])
    # What the board needs before MIG can be on (catalog `prerequisites`: the RTX PRO Workstation
    # and Max-Q need compute mode and a minimum vBIOS); said while MIG is not on.
    prerequisites: str = ""
    error: str | None = None  # GPU_IS_LOST, UNKNOWN or NOT_FOUND: the GPU could not be read
    problem: str = ""  # for a lost GPU: what it answered to which query, and the fix

    @property
    def lost(self) -> bool:
        return self.error is not None

    @property
    def verdict(self) -> str:
        """'catalog matches', the differences in one line, why nothing could be compared, or
        that the GPU is lost."""
        if self.lost:
            return f"lost ({self.error}): nothing to compare"
        if self.catalog_gpu is None:
            return (
                "not in the catalog: add a data file for it (systems/gpus/, see systems/README.md)"
            )
        if self.vgpu is not None:
            return "a vGPU inside a VM: NVML shows no MIG profiles to compare"
        if not self.live_profiles and self.mig_current:
            return "no live MIG profiles to compare: NVML listed none with MIG on (see the notes)"
        if not self.live_profiles:
            return "no live MIG profiles to compare (MIG off on a driver that lists none while off)"
        if not self.differences:
            return MATCHES
        return f"{len(self.differences)} field(s) differ: " + "; ".join(
            f"{d.profile} {d.field} ours {_plain(d.ours)} live {_plain(d.live)}"
            for d in self.differences
        )

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self, recurse=False)
        data["differences"] = [d.to_dict() for d in self.differences]
        data["notes"] = list(self.notes)
        data["verdict"] = self.verdict
        return data


def _plain(value: ProfileValue) -> str | int | float | list[int] | None:
    return list(value) if isinstance(value, tuple) else value


def check_gpu(state: GpuState) -> GpuCheck:
    """Reconcile one detected GPU: the live profiles (merged by discovery) against the shipped ones."""
    return GpuCheck(
        index=state.index,
        name=state.name,
        catalog_gpu=state.catalog_gpu.name if state.catalog_gpu else None,
        mig_current=state.mig_current,
        mig_pending=state.mig_pending,
        virtualization=state.virtualization,
        vgpu=state.vgpu.to_dict() if state.vgpu else None,
        live_profiles=sum(p.provenance == "live" for p in state.catalog_gpu.profiles)
        if state.catalog_gpu and state.vgpu is None
        else 0,
        differences=reconcile(state),
        notes=state.disagreements,
        prerequisites=state.shipped_gpu.prerequisites
        if state.shipped_gpu is not None and not state.mig_current and state.vgpu is None
        else "",
        error=state.error,
        problem=state.problem,
    )


def reconcile(state: GpuState) -> list[FieldDifference]:
    """Every field of every profile where the live GPU differs from the shipped table, plus the
    profiles only one side has. Empty when there is nothing live to compare."""
    shipped, effective = state.shipped_gpu, state.catalog_gpu
    if shipped is None or effective is None or state.vgpu is not None:
        return []
    live = [p for p in effective.profiles if p.provenance == "live"]
    if not live:
        return []
    found: list[FieldDifference] = []
    for profile in live:
        table = shipped.profile_by_id(profile.profile_id)
        if table is None:
            found.append(
                FieldDifference(profile=profile.name, field="profile", ours=None, live="present")
            )
            continue
        found.extend(
            FieldDifference(profile=table.name, field=field, ours=ours, live=theirs)
            for field, ours, theirs in profile_differences(table, profile)
        )
    live_ids = {p.profile_id for p in live}
    found.extend(
        FieldDifference(profile=p.name, field="profile", ours="present", live=None)
        for p in shipped.profiles
        if p.profile_id not in live_ids
    )
    return found
