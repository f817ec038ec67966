"""Where instances run: emulated CPU partitions, live MIG devices (recorded NVML), shared GPUs."""

from __future__ import annotations

import pytest

import mlperf_mig
from mlperf_mig.errors import (
    LayoutError,
    LiveLayoutMismatchError,
    NameParseError,
    PlacementError,
    UnknownGpuError,
)
from mlperf_mig.placement.one_gpu import emulated_cpu_sets
from mlperf_mig.registry import RecordedNvml

from .conftest import NVML_STATES


def _state(name: str) -> RecordedNvml:
    return RecordedNvml.from_file(NVML_STATES / f"{name}.json")


def test_emulated_cpus_follow_compute_slices_on_two_cores() -> None:
    """Scenario 7 on 2 CPUs: the three 2g and the 1g share the cores in slice order."""
    assert emulated_cpu_sets([2, 2, 2, 1], 7, [0, 1]) == [(0,), (0,), (1,), (1,)]


def test_emulated_cpus_scale_with_the_machine() -> None:
    """On 14 CPUs each 1g of scenario 8 gets 2 CPUs and a 7g gets all 14."""
    assert emulated_cpu_sets([1] * 7, 7, range(14)) == [(2 * i, 2 * i + 1) for i in range(7)]
    assert emulated_cpu_sets([7], 7, range(14)) == [tuple(range(14))]


def test_smaller_layouts_get_proportionally_fewer_cpus() -> None:
    """A 4g instance gets 4/7 of the CPUs, as on the GPU."""
    assert emulated_cpu_sets([4], 7, range(14)) == [tuple(range(8))]


def test_plan_without_gpu_is_emulated_and_labelled() -> None:
    """Without a GPU the plan emulates the A100-80GB's scenario 7 and says so."""
    plan = mlperf_mig.plan(7, backend="null", emulate=True, cpus=[0, 1])
    assert plan.deployment.partitioning == "emulated"
    assert plan.layout == "3x2g.20gb+1g.10gb"
    assert all(slot.env["CUDA_VISIBLE_DEVICES"] == "" for slot in plan.slots)
    assert "emulated" in plan.table()


def test_emulated_plan_gives_each_instance_its_cpu_budget() -> None:
    """Layout 7 on 2 CPUs: each slot carries its share of CPU time (2/7 of the machine per 2g) and the plan notes how it is kept."""
    plan = mlperf_mig.plan(7, backend="known_answer", emulate=True, cpus=[0, 1])
    assert [s.cpu_share for s in plan.slots] == pytest.approx(
        [4 / 7, 4 / 7, 4 / 7, 2 / 7], abs=1e-6
    )
    assert all(s.cpu_budget in ("cgroup quota", "duty cycle") for s in plan.slots)
    assert any("proportion to compute slices" in note for note in plan.deployment.notes)


def test_a_backend_without_a_model_gets_no_cpu_budget() -> None:
    """The null backend computes nothing, so its emulated instances get no CPU budget, and the
    plan's notes say why (no proportions to keep; budgets would measure the quotas)."""
    plan = mlperf_mig.plan(7, backend="null", emulate=True, cpus=[0, 1])
    assert [(s.cpu_share, s.cpu_budget) for s in plan.slots] == [(None, None)] * 4
    assert plan.deployment.notes == (
        "no CPU budgets: the null backend computes no model, so there are no slice proportions "
        "to keep; the instances share the CPUs (a measurement of the harness)",
    )


def test_plan_emulates_another_gpu_by_name() -> None:
    """gpu='H200' translates scenario 7 to the H200's profiles."""
    plan = mlperf_mig.plan(7, backend="null", gpu="H200", emulate=True)
    assert plan.layout == "3x2g.35gb+1g.18gb"


@pytest.mark.parametrize("scenario", [0, 9, "12"])
def test_scenario_outside_study_range(scenario: object) -> None:
    """A layout number outside 1-8 names the range and the loadgen_scenario keyword."""
    with pytest.raises(NameParseError, match=r"1-8.*loadgen_scenario"):
        mlperf_mig.plan(scenario, backend="null", emulate=True)


def test_loadgen_scenario_passed_as_scenario() -> None:
    """'Server' given as the MIG layout is explained as a LoadGen scenario."""
    with pytest.raises(NameParseError, match="LoadGen scenario"):
        mlperf_mig.plan("Server", backend="null", emulate=True)


def test_layout_invalid_on_gpu() -> None:
    """4g+4g does not fit the A100."""
    with pytest.raises(LayoutError):
        mlperf_mig.plan("4g.40gb+4g.40gb", backend="null", emulate=True)


def test_unknown_gpu() -> None:
    """An unknown GPU name is a lookup error."""
    with pytest.raises(UnknownGpuError):
        mlperf_mig.plan(7, backend="null", gpu="H900", emulate=True)


def test_live_mig_devices_match_the_layout() -> None:
    """A100-80GB carrying scenario 7: each instance gets a MIG device of its profile."""
    plan = mlperf_mig.plan(7, backend="null", nvml_source=_state("a100-80gb-scenario7"))
    assert plan.deployment.partitioning == "mig"
    assert [s.profile for s in plan.slots] == ["2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"]
    uuids = [s.device for s in plan.slots]
    assert len(set(uuids)) == 4 and all(u.startswith("MIG-") for u in uuids)
    assert all(s.env["CUDA_VISIBLE_DEVICES"] == s.device for s in plan.slots)


def test_live_mig_devices_match_h200() -> None:
    """H200 with 7x 1g.18gb carries the study's scenario 8."""
    plan = mlperf_mig.plan(8, backend="null", nvml_source=_state("h200-7x1g"))
    assert [s.profile for s in plan.slots] == ["1g.18gb"] * 7


def test_live_layout_mismatch_shows_both_layouts_and_the_plan() -> None:
    """Asking for scenario 6 on a GPU carrying scenario 7 shows both and the creation steps."""
    with pytest.raises(LiveLayoutMismatchError) as excinfo:
        mlperf_mig.plan(6, backend="null", nvml_source=_state("a100-80gb-scenario7"))
    message = str(excinfo.value)
    assert "3x 2g.20gb + 1g.10gb" in message
    assert "4g.40gb + 2g.20gb + 1g.10gb" in message
    assert "nvidia-smi mig" in message and "\n" not in message


def test_mig_disabled_is_refused() -> None:
    """A GPU with MIG disabled is refused, pointing at --shared."""
    with pytest.raises(PlacementError, match="shared"):
        mlperf_mig.plan(7, backend="null", nvml_source=_state("h100-mig-disabled"))


def test_mig_disabled_with_shared_time_shares_the_gpu() -> None:
    """With shared=True every instance runs on the whole GPU, labelled shared."""
    plan = mlperf_mig.plan(7, backend="null", shared=True, nvml_source=_state("h100-mig-disabled"))
    assert plan.deployment.partitioning == "shared"
    assert len({s.device for s in plan.slots}) == 1
    assert "shared" in plan.table()


def test_no_driver_means_emulation() -> None:
    """A machine without the NVIDIA driver runs emulated partitions."""
    plan = mlperf_mig.plan(7, backend="null", nvml_source=_state("no-driver"))
    assert plan.deployment.partitioning == "emulated"


def test_emulated_partitions_refuse_tensorrt() -> None:
    """TensorRT cannot run emulated (CPU) partitions; the error says what to use."""
    from mlperf_mig.errors import BackendUnavailableError

    with pytest.raises(BackendUnavailableError, match="onnxruntime"):
        mlperf_mig.plan(7, backend="tensorrt", emulate=True)


def test_system_id_names_its_gpu_and_layout() -> None:
    """A system ID selects both the GPU and the layout."""
    plan = mlperf_mig.plan("H100-SXM5-80GB_MIG_1x4g.40gb+1x3g.40gb", backend="null", emulate=True)
    assert plan.gpu == "H100-SXM5-80GB"
    assert [s.profile for s in plan.slots] == ["4g.40gb", "3g.40gb"]


def test_profile_list_is_a_layout() -> None:
    """A list of profile names is a layout, ordered largest first."""
    plan = mlperf_mig.plan(["1g.10gb", "3g.40gb"], backend="null", emulate=True)
    assert [s.name for s in plan.slots] == ["i0-3g.40gb", "i1-1g.10gb"]


def test_shared_without_a_gpu_is_refused() -> None:
    """shared=True on emulated partitions would be silently ignored: refused instead."""
    with pytest.raises(PlacementError, match="time-share"):
        mlperf_mig.plan(7, backend="null", shared=True, emulate=True)


def _deployment(scenario: object, name: str, **options: object):
    """choose_deployment on a recorded NVML state, as make_plan calls it."""
    from mlperf_mig.placement.one_gpu import choose_deployment
    from mlperf_mig.registry import default_catalog, detect

    catalog = default_catalog()
    detection = detect(_state(name), catalog=catalog)
    return choose_deployment(scenario, gpu=None, catalog=catalog, detection=detection, **options)


def test_vgpu_guest_runs_its_one_profile() -> None:
    """In an A100D-2-20C guest, study scenario 4 (one 2g.20gb) runs on the vGPU, partitioning vgpu."""
    deployment = _deployment(4, "vgpu-a100d-2-20c")
    assert deployment.partitioning == "vgpu" and deployment.gpu.name == "A100-PCIE-80GB"
    (slot,) = deployment.slots
    uuid = _state("vgpu-a100d-2-20c").state["gpus"][0]["uuid"]
    assert (slot.profile, slot.device, slot.env["CUDA_VISIBLE_DEVICES"]) == ("2g.20gb", uuid, uuid)


def test_vgpu_guest_refuses_a_layout_of_several_instances() -> None:
    """In an A100D-2-20C guest, scenario 7 is refused: one VM holds one instance."""
    with pytest.raises(LiveLayoutMismatchError, match="A100D-2-20C"):
        _deployment(7, "vgpu-a100d-2-20c")


def test_time_sliced_vgpu_is_refused_like_a_gpu_without_mig() -> None:
    """A time-sliced vGPU cannot isolate a layout; the error names it and points at --shared."""
    with pytest.raises(PlacementError, match=r"time-sliced vGPU \(A100D-20C\).*shared"):
        _deployment(4, "vgpu-a100d-20c-time-sliced")


def test_time_sliced_vgpu_with_shared_time_shares_it() -> None:
    """With shared=True the instances time-share the time-sliced vGPU, labelled shared."""
    deployment = _deployment(7, "vgpu-a100d-20c-time-sliced", shared=True)
    assert deployment.partitioning == "shared" and len({s.device for s in deployment.slots}) == 1


def test_live_mig_target_uses_the_registry_matching() -> None:
    """On an A100-80GB carrying scenario 7 the deployment's devices are the registry's match."""
    from mlperf_mig.registry import default_catalog, detect, match_layout

    deployment = _deployment(7, "a100-80gb-scenario7")
    state = detect(_state("a100-80gb-scenario7"), catalog=default_catalog()).gpus[0]
    assert deployment.partitioning == "mig"
    assert [s.device for s in deployment.slots] == [
        d.uuid for d in match_layout(deployment.layout, state)
    ]
