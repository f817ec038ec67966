"""What one node of a cluster offers, as plain data: the record placement puts instances on.

A node offers its live devices (MIG devices, a MIG-backed vGPU, whole GPUs) as the registry's
`LiveDevice` records; a node without a GPU offers its CPUs. The cluster (cluster/inventory.py)
takes the record on each node and sends it to the driver as plain data (`to_dict`), where it is
read back as untrusted input (`from_dict`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from mlperf_mig.registry.devices import LiveDevice

_v = attrs.validators
_TEXT = _v.instance_of(str)


@attrs.frozen(kw_only=True)
class NodeInventory:
    """One Ray node: where it is, what Ray and Python it runs, and the devices it offers."""

    node_id: str = attrs.field(validator=_TEXT)
    host: str = attrs.field(validator=_TEXT)
    address: str = attrs.field(validator=_TEXT)
    ray_version: str = attrs.field(validator=_TEXT)
    python_version: str = attrs.field(validator=_TEXT)
    cpus: tuple[int, ...] = attrs.field(
        converter=tuple, validator=_v.deep_iterable(_v.and_(_v.instance_of(int), _v.ge(0)))
    )
    devices: tuple[LiveDevice, ...] = attrs.field(
        converter=tuple, validator=_v.deep_iterable(_v.instance_of(LiveDevice))
    )
    message: str = attrs.field(
        default="", validator=_TEXT
    )  # why the node has no GPU device (discovery's words)
    replayed: bool = attrs.field(default=False, validator=_v.instance_of(bool))

    @property
    def short_id(self) -> str:
        return self.node_id[:8]

    @property
    def emulated(self) -> bool:
        """True when the node has no GPU device and offers its CPUs instead."""
        return not self.devices

    def to_dict(self) -> dict[str, Any]:
        """Plain data, as it crosses Ray and as `cluster-info --json` prints it."""
        data = attrs.asdict(self, recurse=False)
        data["cpus"] = list(self.cpus)
        data["devices"] = [d.to_dict() for d in self.devices]
        return data

    @classmethod
    def from_dict(cls, data: Any) -> NodeInventory:
        """The inventory a node sent, read as untrusted input: ValueError naming what is wrong."""
        fields = {f.name for f in attrs.fields(cls)}
        if not isinstance(data, Mapping) or set(data) != fields:
            got = sorted(data) if isinstance(data, Mapping) else type(data).__name__
            raise ValueError(f"a node inventory must have the keys {sorted(fields)}, got {got}")
        devices = data["devices"]
        if not isinstance(devices, list | tuple):
            raise ValueError(f"devices must be a list, got {type(devices).__name__}")
        try:
            return cls(**{**data, "devices": [LiveDevice.from_dict(d) for d in devices]})
        except TypeError as exc:
            raise ValueError(str(exc)) from None


def inventory_rows(inventories: Sequence[NodeInventory]) -> list[dict[str, Any]]:
    """One row per device (or per emulated node) for `cluster-info`."""
    rows = []
    for inv in inventories:
        base = {
            "node": inv.short_id,
            "host": inv.host,
            "address": inv.address,
            "cpus": len(inv.cpus),
        }
        if inv.emulated:
            rows.append(
                {
                    **base,
                    "kind": "emulated",
                    "gpu": "-",
                    "device": "cpu:" + ",".join(map(str, inv.cpus)),
                    "profile": "- (CPU partition)",
                }
            )
        for device in inv.devices:
            rows.append(
                {
                    **base,
                    "kind": device.kind,
                    "gpu": device.gpu_model,
                    "device": device.vgpu_type or device.uuid,
                    "profile": device.profile.name if device.profile else "whole GPU",
                }
            )
    return rows
