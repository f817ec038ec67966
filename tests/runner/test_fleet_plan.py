"""Selecting GPUs: a layout on every GPU of a host, planned on recorded and emulated systems."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from mlperf_mig import cli, registry
from mlperf_mig.errors import (
    ClusterError,
    LiveLayoutMismatchError,
    PlacementError,
    SettingsError,
    UnknownProfileError,
)
from mlperf_mig.placement.deployment import system_id, system_layout
from mlperf_mig.placement.one_gpu import emulated_gpu_cpus
from mlperf_mig.runner.options import RunOptions
from mlperf_mig.runner.plan import make_plan

from .conftest import NVML_STATES

DGX = NVML_STATES / "dgx-a100-8x-7x1g.json"
TWO_MODELS = NVML_STATES / "two-models-a100-h200.json"
MIG_OFF = NVML_STATES / "a100-pair-mig-off.json"


def _plan(state: Any = None, **options: Any) -> Any:
    source = None if state is None else registry.RecordedNvml.from_file(state)
    return make_plan(RunOptions(backend="null", nvml_source=source, **options))


def test_dgx_replay_has_56_instances_on_their_own_devices() -> None:
    """Study layout 8 on every GPU of the recorded DGX-A100: 56 MIG devices, seven per GPU."""
    plan = _plan(DGX, scenario=8, gpus="all")
    assert len(plan.slots) == 56
    assert len({s.device for s in plan.slots}) == 56
    assert Counter(s.gpu_index for s in plan.slots) == dict.fromkeys(range(8), 7)
    assert plan.deployment.partitioning == "mig"


def test_dgx_system_is_named_as_nvidia_named_it() -> None:
    """The system ID counts the instances of all GPUs, as NVIDIA's DGX-A100 MIG result did."""
    plan = _plan(DGX, scenario=8, gpus="all")
    assert system_id(plan.deployment.parts) == "A100-SXM-80GB_MIG_56x1g.10gb"
    assert plan.layout == "8x[7x1g.10gb]"


def test_instances_of_several_gpus_name_their_gpu() -> None:
    """Over several GPUs an instance's folder says its GPU and its place on it."""
    plan = _plan(DGX, scenario=8, gpus=[2, 5])
    assert [s.name for s in plan.slots][:2] == ["g2-i0-1g.10gb", "g2-i1-1g.10gb"]
    assert plan.slots[7].name == "g5-i0-1g.10gb" and plan.slots[7].index == 7


def test_one_gpu_keeps_its_instance_names() -> None:
    """Selecting one GPU keeps the one-GPU names and sets the GPU index."""
    plan = _plan(DGX, scenario=8, gpus=[3])
    assert plan.slots[0].name == "i0-1g.10gb"
    assert {s.gpu_index for s in plan.slots} == {3}


def test_study_layout_translates_per_gpu_model() -> None:
    """A host with an A100 and an H200: study layout 8 is 1g.10gb on one and 1g.18gb on the other."""
    plan = _plan(TWO_MODELS, scenario=7, layouts={1: 8}, gpus="all")
    assert {p.index: str(p.layout) for p in plan.deployment.parts} == {
        0: "3x2g.20gb+1g.10gb",
        1: "7x1g.18gb",
    }
    assert "H200" in plan.gpu and "A100" in plan.gpu


def test_engines_are_per_model_and_profile() -> None:
    """Two GPU models build one engine per model and profile."""
    plan = make_plan(
        RunOptions(
            backend="onnxruntime",
            scenario=7,
            layouts={1: 8},
            gpus="all",
            nvml_source=registry.RecordedNvml.from_file(TWO_MODELS),
        )
    )
    keys = {e.key: e.gpu for e in plan.engines}
    assert keys["H200-SXM5-141GB-1g.18gb"] == "H200-SXM5-141GB"
    assert len(keys) == 3


def test_layouts_select_their_gpus() -> None:
    """Without gpus, the GPUs given a layout are the selection."""
    plan = _plan(DGX, scenario=8, layouts={4: 8, 6: "7x1g.10gb"})
    assert sorted({s.gpu_index for s in plan.slots}) == [4, 6]


def test_emulated_gpus_each_get_their_share_of_the_cpus() -> None:
    """Eight emulated GPUs on two CPUs: GPUs 0-3 on one CPU, 4-7 on the other."""
    plan = _plan(None, scenario=8, gpu="A100-SXM4-80GB", gpu_count=8, emulate=True, cpus=[0, 1])
    by_gpu = {s.gpu_index: set(s.cpus) for s in plan.slots}
    assert by_gpu == {0: {0}, 1: {0}, 2: {0}, 3: {0}, 4: {1}, 5: {1}, 6: {1}, 7: {1}}
    assert len(plan.slots) == 56


def test_emulated_gpu_cpu_shares_split_evenly() -> None:
    """Four CPUs among two GPUs: two each, in order."""
    assert emulated_gpu_cpus(2, [0, 1, 2, 3]) == [(0, 1), (2, 3)]


def test_mixed_layouts_are_spelled_out() -> None:
    """GPUs with different layouts show each layout and how many GPUs carry it."""
    plan = _plan(
        None, scenario=8, gpu_count=3, layouts={2: "3g.40gb+4g.40gb"}, gpus="all", emulate=True
    )
    assert plan.layout == "2x[7x1g.10gb] + 1x[4g.40gb+3g.40gb]"


def test_mig_off_gpu_is_time_shared_with_shared() -> None:
    """With --shared a GPU without MIG joins the set, and the run is labelled shared."""
    plan = _plan(MIG_OFF, scenario=7, gpus="all", shared=True)
    assert plan.deployment.partitioning == "shared"
    assert [p.partitioning for p in plan.deployment.parts] == ["mig", "shared"]


def test_plan_json_lists_the_gpus() -> None:
    """plan.json has one `gpus` entry per GPU with its instances."""
    plan = _plan(DGX, scenario=8, gpus=[0, 1])
    gpus = plan.to_dict()["gpus"]
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[1]["instances"][0] == "g1-i0-1g.10gb" and len(gpus[1]["instances"]) == 7


# --- bad input ----------------------------------------------------------------------------------
def test_gpu_index_not_there() -> None:
    """A GPU index the machine does not have says which it has."""
    with pytest.raises(PlacementError, match=r"GPU index 9 is not there.*pass some of 0, 1"):
        _plan(TWO_MODELS, scenario=7, gpus=[0, 9])


def test_emulated_gpu_index_not_there() -> None:
    """An index beyond the emulated GPUs says how many there are."""
    with pytest.raises(PlacementError, match="GPU index 8 is not there: the run emulates 8 GPUs"):
        _plan(None, scenario=8, gpus=[8], gpu_count=8, emulate=True)


def test_layout_for_a_gpu_model_it_does_not_fit() -> None:
    """An A100 profile asked of the H200 names the GPU and its profiles."""
    with pytest.raises(UnknownProfileError, match=r"GPU 1 \(NVIDIA H200\).*1g.10gb"):
        _plan(TWO_MODELS, scenario=7, layouts={1: "7x1g.10gb"}, gpus="all")


def test_layout_for_a_gpu_not_selected() -> None:
    """--layout for a GPU outside --gpus is refused."""
    with pytest.raises(SettingsError, match="names GPU 3, which is not selected"):
        _plan(DGX, scenario=8, gpus=[0], layouts={3: 8})


def test_gpu_without_mig_in_the_set() -> None:
    """A GPU with MIG off in the set needs --shared, and the message says so."""
    with pytest.raises(PlacementError, match=r"GPU 1 .*MIG disabled.*--shared"):
        _plan(MIG_OFF, scenario=7, gpus="all")


def test_live_layout_differs_shows_setup_steps() -> None:
    """A GPU carrying another layout is shown with its MIG setup steps."""
    with pytest.raises(LiveLayoutMismatchError, match=r"GPU 1 .*nvidia-smi mig -i 1"):
        _plan(TWO_MODELS, scenario=7, gpus="all")


def test_more_instances_than_the_host_can_start() -> None:
    """Thousands of emulated instances are refused, saying how many this host can start."""
    with pytest.raises(SettingsError, match=r"this host can start at most \d+"):
        _plan(None, scenario=8, gpu_count=1000, emulate=True)


def test_gpu_count_with_live_gpus() -> None:
    """gpu_count on a machine with GPUs asks for --gpus or --emulate."""
    with pytest.raises(SettingsError, match=r"--gpus.*--emulate"):
        _plan(DGX, scenario=8, gpu_count=2)


def test_gpus_of_a_host_on_a_cluster() -> None:
    """A cluster takes --gpus all only: its nodes number their GPUs each from 0."""
    with pytest.raises(ClusterError, match="gpus='all'"):
        RunOptions(cluster="local:2", gpus=[0, 1])


@pytest.mark.parametrize("value", [[], [0, 0], [-1], "one", [True]])
def test_gpus_option_refuses_bad_values(value: object) -> None:
    """gpus takes 'all' or distinct non-negative indices."""
    with pytest.raises(SettingsError, match="gpus"):
        RunOptions(gpus=value)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--nvml-state", str(TWO_MODELS), "--gpus", "0,9"], "GPU index 9 is not there"),
        (["--nvml-state", str(TWO_MODELS), "--gpus", "all", "--layout", "1=7x1g.10gb"], "GPU 1"),
        (
            ["--nvml-state", str(DGX), "--scenario", "8", "--gpus", "0", "--layout", "3=8"],
            "not selected",
        ),
        (["--nvml-state", str(MIG_OFF), "--gpus", "all"], "--shared"),
        (["--gpu-count", "1000", "--scenario", "8", "--emulate"], "can start at most"),
        (["--nvml-state", str(DGX), "--gpus", "0", "--layout", "0=8", "--layout", "0=7"], "twice"),
        (["--gpus", "zero"], "'all' or GPU indices"),
    ],
)
def test_cli_bad_gpu_selection_is_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    """Each bad GPU selection is one error line and exit 2, before anything runs."""
    try:
        code = cli.main(["plan", "--backend", "null", *argv])
    except SystemExit as exc:  # argparse refuses malformed values itself
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and words in errors[0]


def test_cli_plan_json_of_a_system(capsys: pytest.CaptureFixture[str]) -> None:
    """`plan --gpus all --json` on the recorded DGX lists eight GPUs and 56 instances."""
    assert (
        cli.main(
            [
                "plan",
                "--backend",
                "null",
                "--scenario",
                "8",
                "--gpus",
                "all",
                "--nvml-state",
                str(DGX),
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert len(data["gpus"]) == 8 and len(data["instances"]) == 56


def test_system_layout_of_one_gpu_is_its_layout() -> None:
    """One GPU's system layout is just its layout."""
    plan = _plan(DGX, scenario=8, gpus=[0])
    assert system_layout(plan.deployment.parts) == "7x1g.10gb"


@pytest.fixture(name="eight_gib")
def fixture_eight_gib(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host of 8 GiB: half of it holds 56 null workers and 64 ResNet50 samples each, not 1024."""
    monkeypatch.setattr("mlperf_mig.harness.settings.machine_memory_bytes", lambda: 8 * 2**30)


SYSTEM_56 = {"scenario": 8, "gpu_count": 8, "emulate": True}


def test_quick_run_of_many_instances_loads_fewer_samples(eight_gib: None) -> None:
    """A quick run whose 56 sample sets do not fit loads fewer samples each, and says so."""
    plan = _plan(None, **SYSTEM_56)
    assert dict(plan.overrides)["performance_sample_count_override"] == 64
    assert any("loads 64 of resnet50's 1024 performance samples" in line for line in plan.header())


def test_unified_run_shares_one_sample_set(eight_gib: None) -> None:
    """In unified mode the 56 instances share one sample set, so all 1024 samples fit."""
    plan = _plan(None, mode="unified", **SYSTEM_56)
    assert "performance_sample_count_override" not in dict(plan.overrides)


def test_submission_run_that_does_not_fit_says_how_many_can(eight_gib: None) -> None:
    """The submission preset keeps every sample: 56 do not fit, and the refusal says how many do."""
    with pytest.raises(SettingsError, match=r"can start at most 6 in half"):
        _plan(None, preset="submission", **SYSTEM_56)


def test_given_sample_count_is_kept_and_checked(eight_gib: None) -> None:
    """A sample count the user set is not lowered: a run that cannot hold it is refused."""
    with pytest.raises(SettingsError, match="can start at most"):
        _plan(None, settings={"performance_sample_count_override": 1024}, **SYSTEM_56)


def test_alone_run_of_a_system_is_on_its_own_gpu() -> None:
    """With isolation, a system's profile runs alone on its GPU: a one-GPU plan of that profile."""
    from pathlib import Path

    from mlperf_mig.study.repeats import alone_plan

    plan = _plan(TWO_MODELS, scenario=7, layouts={1: 8}, gpus="all")
    alone = alone_plan(plan, "1g.18gb", Path("alone"))
    assert (alone.layout, alone.gpu) == ("1g.18gb", "H200-SXM5-141GB")
    assert [g["index"] for g in alone.to_dict()["gpus"]] == [1]


@pytest.mark.nvml
def test_live_gpus_with_mig_each_carry_their_live_layout() -> None:
    """On this machine's MIG GPUs, asking each for the layout it carries plans one slot per MIG
    device, each on its own device, named with its GPU."""
    detection = registry.detect()
    live = {
        s.index: s
        for s in detection.gpus
        if s.mig_current and s.mig_devices and all(d.profile for d in s.mig_devices)
    }
    if not live:
        pytest.skip("no GPU with MIG enabled and MIG devices here")
    layouts = {i: [d.profile.name for d in s.mig_devices] for i, s in live.items()}
    plan = make_plan(RunOptions(backend="null", gpus=sorted(live), layouts=layouts))
    assert len(plan.slots) == sum(len(s.mig_devices) for s in live.values())
    assert {s.device for s in plan.slots} == {d.uuid for s in live.values() for d in s.mig_devices}
    assert {s.gpu_index for s in plan.slots} == set(live)


def test_layout_without_gpus_keeps_the_scenario_on_the_other_emulated_gpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--layout 1=7x1g.10gb --gpu-count 2 --scenario 3` (issue 33): GPU 0 carries layout 3,
    GPU 1 its own, and every instance is named by its GPU (g0-..., g1-...)."""
    code = cli.main(
        ["plan", "--layout", "1=7x1g.10gb", "--gpu-count", "2", "--scenario", "3", "--emulate",
         "--backend", "null", "--json"]
    )  # fmt: skip
    assert code == 0
    plan = json.loads(capsys.readouterr().out)
    assert [g["index"] for g in plan["gpus"]] == [0, 1]
    names = [i["name"] for i in plan["instances"]]
    assert names[0] == "g0-i0-3g.40gb" and len(names) == 8
    assert all(n.startswith("g1-") for n in names[1:])
