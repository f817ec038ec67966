"""The devices of a detected GPU, the one layout-to-device matching, and the node inventory."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from mlperf_mig.errors import LiveLayoutMismatchError
from mlperf_mig.registry import (
    Catalog,
    RecordedNvml,
    detect,
    match_layout,
    node_inventory,
    parse_layout,
)
from mlperf_mig.registry.devices import LiveDevice, assign_devices


def _gpu(state: dict[str, Any], catalog: Catalog):
    return detect(RecordedNvml(state), catalog=catalog).gpus[0]


def test_match_layout_gives_one_device_per_instance(load_state, catalog: Catalog) -> None:
    """match_layout returns one live device per instance of the requested layout, in its order."""
    gpu = _gpu(load_state("a100-80gb-scenario7"), catalog)
    devices = match_layout(parse_layout(gpu.catalog_gpu, "1g.10gb+3x2g.20gb"), gpu)
    assert [d.profile.name for d in devices] == ["2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"]
    assert [d.placement_start for d in devices] == [0, 2, 4, 6]
    assert len({d.uuid for d in devices}) == 4 and {d.kind for d in devices} == {"mig"}


def test_match_layout_of_another_layout_is_a_mismatch(load_state, catalog: Catalog) -> None:
    """Asking for a layout the GPU does not carry names both layouts and the creation steps."""
    gpu = _gpu(load_state("h200-7x1g"), catalog)
    with pytest.raises(
        LiveLayoutMismatchError, match=r"carries the MIG layout 7x 1g\.18gb.*nvidia-smi mig"
    ):
        match_layout(parse_layout(gpu.catalog_gpu, "3x2g.35gb+1g.18gb"), gpu)


def test_a_gpu_without_gpu_instances_is_refused_in_a_sentence(load_state, catalog: Catalog) -> None:
    """MIG on with no GPU instance: the refusal says the GPU carries no MIG device (a sentence,
    not 'carries the MIG layout no MIG devices')."""
    state = load_state("h200-7x1g")
    state["gpus"][0]["mig_devices"] = []
    gpu = _gpu(state, catalog)
    with pytest.raises(LiveLayoutMismatchError) as raised:
        match_layout(parse_layout(gpu.catalog_gpu, "3x2g.35gb+1g.18gb"), gpu)
    assert "carries no MIG device, but the run asks for 3x 2g.35gb + 1g.18gb" in str(raised.value)
    assert "layout no MIG devices" not in str(raised.value)


def test_a_gpu_instance_split_into_compute_instances_is_refused(
    load_state, catalog: Catalog
) -> None:
    """A GPU instance holding two compute instances is refused, naming it, not half used."""
    state = load_state("a100-80gb-scenario7")
    devices = state["gpus"][0]["mig_devices"]
    devices.append(
        {
            **devices[0],
            "index": 4,
            "compute_instance_id": 1,
            "uuid": "MIG-4b4a1c2e-7d3f-5a9b-8c21-0e6f9d3b2a99",
        }
    )
    gpu = _gpu(state, catalog)
    with pytest.raises(LiveLayoutMismatchError, match="GPU instance 3 holds 2 compute instances"):
        match_layout(parse_layout(gpu.catalog_gpu, "3x2g.20gb+1g.10gb"), gpu)


def test_vgpu_guest_matches_its_one_profile(load_state, catalog: Catalog) -> None:
    """In an A100D-2-20C guest the layout 2g.20gb runs on the vGPU itself."""
    gpu = _gpu(load_state("vgpu-a100d-2-20c"), catalog)
    (device,) = match_layout(parse_layout(gpu.catalog_gpu, "2g.20gb"), gpu)
    assert (device.kind, device.uuid, device.vgpu_type) == ("vgpu", gpu.uuid, "A100D-2-20C")


def test_vgpu_guest_refuses_another_layout(load_state, catalog: Catalog) -> None:
    """In an A100D-2-20C guest scenario 7 (four instances) is refused: one VM, one instance."""
    gpu = _gpu(load_state("vgpu-a100d-2-20c"), catalog)
    with pytest.raises(LiveLayoutMismatchError, match=r"one 2g\.20gb instance.*its own VM"):
        match_layout(parse_layout(gpu.catalog_gpu, "3x2g.20gb+1g.10gb"), gpu)


def test_time_sliced_vgpu_matches_no_layout(load_state, catalog: Catalog) -> None:
    """A time-sliced vGPU holds no MIG instance, so even a one-profile layout is refused."""
    gpu = _gpu(load_state("vgpu-a100d-20c-time-sliced"), catalog)
    with pytest.raises(LiveLayoutMismatchError, match="time-sliced vGPU"):
        match_layout(parse_layout(gpu.catalog_gpu, "2g.20gb"), gpu)


def test_node_inventory_of_a_mig_gpu(load_state, catalog: Catalog) -> None:
    """A GPU carrying scenario 7 reports four MIG devices, largest first."""
    inventory = node_inventory(
        detect(RecordedNvml(load_state("a100-80gb-scenario7")), catalog=catalog)
    )
    assert [
        (d.kind, d.profile.name if d.profile else None, d.placement_start) for d in inventory
    ] == [
        ("mig", "2g.20gb", 0),
        ("mig", "2g.20gb", 2),
        ("mig", "2g.20gb", 4),
        ("mig", "1g.10gb", 6),
    ]
    assert {d.gpu_model for d in inventory} == {"A100-SXM4-80GB"} and {
        d.gpu_index for d in inventory
    } == {0}


def test_node_inventory_of_a_vgpu_guest_as_plain_data(load_state, catalog: Catalog) -> None:
    """A vGPU guest reports one vgpu device; its plain data names the profile and carries it whole."""
    (device,) = node_inventory(
        detect(RecordedNvml(load_state("vgpu-a100d-2-20c")), catalog=catalog)
    )
    assert device.to_dict() == {
        "kind": "vgpu",
        "index": 0,
        "gpu": "A100-PCIE-80GB",
        "profile": "2g.20gb",
        "profile_spec": catalog.get("A100-PCIE-80GB").profile("2g.20gb").to_dict(),
        "uuid": "GPU-7f3e2a10-4c5b-11ee-9d2a-3c8f1e6b0a21",
        "placement_start": None,
        "vgpu_type": "A100D-2-20C",
    }


@pytest.mark.parametrize("name", ["h100-mig-disabled", "vgpu-a100d-20c-time-sliced"])
def test_node_inventory_of_a_whole_gpu(name: str, load_state, catalog: Catalog) -> None:
    """A GPU with MIG off, or a time-sliced vGPU, is one whole `gpu` device without a profile."""
    (device,) = node_inventory(detect(RecordedNvml(load_state(name)), catalog=catalog))
    assert (device.kind, device.profile) == ("gpu", None)


def test_node_inventory_without_a_driver_is_empty(load_state, catalog: Catalog) -> None:
    """No driver, no devices."""
    assert node_inventory(detect(RecordedNvml(load_state("no-driver")), catalog=catalog)) == ()


@pytest.mark.parametrize("state", ["a100-80gb-scenario7", "vgpu-a100d-2-20c", "h100-mig-disabled"])
def test_a_device_reads_back_from_its_json(state: str, load_state, catalog: Catalog) -> None:
    """Each device's to_dict, through JSON, reads back as the same device (profile included)."""
    for device in node_inventory(detect(RecordedNvml(load_state(state)), catalog=catalog)):
        assert LiveDevice.from_dict(json.loads(json.dumps(device.to_dict()))) == device


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"uuid": None}, "uuid"),
        ({"index": -1}, "index"),
        ({"kind": "tpu"}, "kind"),
        ({"profile": "1g.10gb"}, "is not its profile_spec"),
        ({"profile_spec": {"name": "2g.20gb"}}, "profile_id"),
        ({"extra": 1}, "must have the keys"),
    ],
)
def test_a_device_from_another_machine_is_checked(
    change: dict, said: str, load_state, catalog: Catalog
) -> None:
    """A device's plain data with a wrong field, a foreign key or a broken profile is a ValueError naming it."""
    (device,) = node_inventory(
        detect(RecordedNvml(load_state("vgpu-a100d-2-20c")), catalog=catalog)
    )
    with pytest.raises(ValueError, match=said):
        LiveDevice.from_dict({**device.to_dict(), **change})


def _live(catalog: Catalog, *names: str) -> list[LiveDevice]:
    gpu = catalog.get("A100-SXM4-80GB")
    return [
        LiveDevice(
            kind="mig", gpu_index=0, gpu_model=gpu.name, profile=gpu.profile(n), uuid=f"MIG-{k}"
        )
        for k, n in enumerate(names)
    ]


def test_assign_devices_exact_refuses_devices_left_over(catalog: Catalog) -> None:
    """Exact matching wants the devices to form the layout: a device left over is no match."""
    layout = parse_layout(catalog.get("A100-SXM4-80GB"), "2g.20gb+1g.10gb")
    devices = _live(catalog, "1g.10gb", "2g.20gb", "1g.10gb")
    assert assign_devices(layout.profiles, devices, exact=True) is None


def test_assign_devices_not_exact_takes_some_in_layout_order(catalog: Catalog) -> None:
    """Without exact, the layout takes one device per profile, in its order, leaving the rest."""
    layout = parse_layout(catalog.get("A100-SXM4-80GB"), "2g.20gb+1g.10gb")
    devices = _live(catalog, "1g.10gb", "2g.20gb", "1g.10gb")
    assert assign_devices(layout.profiles, devices, exact=False) == (1, 0)


def test_assign_devices_matches_by_profile_id_not_name(catalog: Catalog) -> None:
    """A device whose profile has the layout's ID under another name (a driver's alias) matches."""
    gpu = catalog.get("A100-SXM4-80GB")
    wanted = gpu.profile("1g.10gb")
    renamed = attrs.evolve(wanted, name="1g.9gb")
    device = LiveDevice(kind="mig", gpu_index=0, gpu_model=gpu.name, profile=renamed, uuid="MIG-0")
    assert assign_devices([wanted], [device], exact=True) == (0,)


def test_assign_devices_never_gives_a_whole_gpu(catalog: Catalog) -> None:
    """A whole GPU (no profile) is no instance of a layout."""
    whole = LiveDevice(
        kind="gpu", gpu_index=0, gpu_model="A100-SXM4-80GB", profile=None, uuid="GPU-0"
    )
    profile = catalog.get("A100-SXM4-80GB").profile("7g.80gb")
    assert assign_devices([profile], [whole], exact=False) is None
