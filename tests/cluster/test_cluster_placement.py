"""Cluster addresses, placement of a layout over nodes, and the one-line refusals (no Ray started)."""

from __future__ import annotations

import builtins
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlperf_mig import registry
from mlperf_mig.cluster.connect import (
    check_reachable,
    import_ray,
    is_loopback,
    local_node_cpus,
    parse_cluster,
)
from mlperf_mig.cluster.inventory import check_versions
from mlperf_mig.emulation.cpu_budget import quota_support
from mlperf_mig.errors import ClusterError, SettingsError
from mlperf_mig.placement.nodes import NodeInventory, cluster_deployment
from mlperf_mig.registry.devices import LiveDevice

BIN = Path(sys.executable).parent


def _node(
    k: int,
    *,
    devices: tuple[LiveDevice, ...] = (),
    cpus: tuple[int, ...] = (0,),
    host: str | None = None,
) -> NodeInventory:
    return NodeInventory(
        node_id=f"{k:02d}" * 20,
        host=host or f"vm{k}",
        address=f"10.0.0.{k}",
        ray_version="2.60.0",
        python_version="3.11.7",
        cpus=cpus,
        devices=devices,
    )


def _vgpu(profile: str, k: int, gpu: str = "A100-SXM4-80GB") -> LiveDevice:
    return LiveDevice(
        kind="vgpu",
        gpu_index=0,
        gpu_model=gpu,
        profile=registry.default_catalog().get(gpu).profile(profile),
        uuid=f"GPU-{k:08d}",
        vgpu_type=f"A100D-{profile[0]}-{profile.split('.')[1][:-2]}C",
    )


def _mig(profile: str, k: int, start: int) -> LiveDevice:
    return LiveDevice(
        kind="mig",
        gpu_index=0,
        gpu_model="A100-SXM4-80GB",
        profile=registry.default_catalog().get("A100-SXM4-80GB").profile(profile),
        uuid=f"MIG-{k:08d}",
        placement_start=start,
    )


@pytest.fixture(name="catalog")
def fixture_catalog() -> registry.Catalog:
    return registry.default_catalog()


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("auto", "auto"),
        ("10.0.0.1:6379", "address"),
        ("ray://head:10001", "client"),
        ("local:3", "local"),
    ],
)
def test_cluster_forms_parse(text: str, kind: str) -> None:
    """Each documented --cluster form is recognised as its kind."""
    assert parse_cluster(text).kind == kind


@pytest.mark.parametrize(
    "text", ["", "local:0", "local:x", "local:99", "head", "head:port", "head:70000"]
)
def test_malformed_cluster_values_name_the_accepted_forms(text: str) -> None:
    """A value in none of the forms is a ClusterError that lists them."""
    with pytest.raises(ClusterError, match="local:"):
        parse_cluster(text)


@pytest.mark.parametrize(
    "text", ["local:²", "local:٣", "local:１", "head:٦٣٧٩", "ray://head:¹⁰⁰⁰¹"]
)
def test_cluster_counts_and_ports_take_ascii_digits_only(text: str) -> None:
    """A node count or port in superscripts or another script's digits is a ClusterError, not a traceback."""
    with pytest.raises(ClusterError, match="local:"):
        parse_cluster(text)


def test_loopback_addresses_are_recognised() -> None:
    """127.x, localhost and ::1 are loopback; other addresses are not."""
    assert is_loopback("127.0.0.1:6379") and is_loopback("localhost:1") and is_loopback("[::1]:5")
    assert not is_loopback("10.0.0.1:6379") and not is_loopback(None)


def test_an_address_nobody_answers_on_is_refused_at_once() -> None:
    """A closed port on loopback is one ClusterError naming the address, not minutes of retries."""
    with pytest.raises(ClusterError, match=r"no Ray cluster answers at 127\.0\.0\.1:1 "):
        check_reachable("127.0.0.1:1", timeout_s=2)


def test_missing_ray_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without Ray, --cluster says to install the cluster extra, as the README does."""
    real_import = builtins.__import__

    def no_ray(name: str, *args: object, **kwargs: object) -> object:
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "ray", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ClusterError, match=r"pip install -e '\.\[cluster\]'"):
        import_ray()


def test_nodes_of_another_ray_version_are_refused() -> None:
    """A node whose Ray differs from the driver's is named, with the version to install."""
    pytest.importorskip("ray")
    import ray

    odd = NodeInventory(
        node_id="ab" * 20,
        host="vm9",
        address="10.0.0.9",
        ray_version="0.0.1",
        python_version="3.11.7",
        cpus=(0,),
        devices=(),
    )
    with pytest.raises(ClusterError, match=rf"vm9.*Ray 0\.0\.1.*ray=={ray.__version__}"):
        check_versions([odd])


def test_local_nodes_split_the_cpus() -> None:
    """local:N gives each node its own CPUs while there are enough, and shares them after."""
    assert local_node_cpus(2, [0, 1, 2, 3]) == [(0, 1), (2, 3)]
    assert local_node_cpus(3, [0, 1]) == [(0,), (0,), (1,)]


def test_emulated_layout_spreads_over_the_nodes(catalog: registry.Catalog) -> None:
    """Layout 7 on three GPU-less hosts: instances go round the nodes, each with CPU time by slices of the smallest host."""
    nodes = [_node(0, cpus=(0, 1, 2)), _node(1, cpus=(3,)), _node(2, cpus=(4,))]
    deployment = cluster_deployment(
        7, inventories=nodes, cluster="auto", gpu=None, gpu_group=None, catalog=catalog
    )
    assert deployment.partitioning == "emulated"
    assert [s.node for s in deployment.slots] == [
        nodes[0].node_id,
        nodes[1].node_id,
        nodes[2].node_id,
        nodes[0].node_id,
    ]
    assert [s.cpu_share for s in deployment.slots] == pytest.approx(
        [2 / 7, 2 / 7, 2 / 7, 1 / 7], abs=1e-6
    )
    assert all(s.host and s.cpu_budget == "duty cycle" for s in deployment.slots)
    assert any("vm0: 2" in note for note in deployment.notes)  # the CPUs the proportions leave idle


def test_local_nodes_of_one_host_keep_identical_instances_equal(catalog: registry.Catalog) -> None:
    """local:3 on 2 CPUs (nodes sharing a CPU): the three 2g get equal budgets and the 1g half of one."""
    nodes = [_node(k, cpus=c, host="box") for k, c in enumerate(local_node_cpus(3, [0, 1]))]
    deployment = cluster_deployment(
        7, inventories=nodes, cluster="local:3", gpu=None, gpu_group=None, catalog=catalog
    )
    assert [s.cpu_share for s in deployment.slots] == pytest.approx(
        [4 / 7, 4 / 7, 4 / 7, 2 / 7], abs=1e-6
    )
    assert {s.cpu_budget for s in deployment.slots} == {
        quota_support()[0]
    }  # this machine's, probed


def test_vgpus_of_one_declared_group_form_the_layout(catalog: registry.Catalog) -> None:
    """Four VMs with the study's vGPUs, named as one GPU, carry layout 7; the grouping is declared."""
    profiles = ["2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"]
    nodes = [_node(k, devices=(_vgpu(p, k),)) for k, p in enumerate(profiles)]
    group = [n.address for n in nodes]
    deployment = cluster_deployment(
        7, inventories=nodes, cluster="auto", gpu=None, gpu_group=group, catalog=catalog
    )
    assert deployment.partitioning == "vgpu" and deployment.grouping == "declared"
    assert sorted(s.env["CUDA_VISIBLE_DEVICES"] for s in deployment.slots) == sorted(
        f"GPU-{k:08d}" for k in range(4)
    )


def test_vgpus_without_a_group_are_refused_with_the_fix(catalog: registry.Catalog) -> None:
    """Several vGPUs cannot be known to share a GPU: the refusal asks for --gpu-group and shows both sides."""
    nodes = [_node(k, devices=(_vgpu("2g.20gb", k),)) for k in range(3)] + [
        _node(3, devices=(_vgpu("1g.10gb", 3),))
    ]
    with pytest.raises(ClusterError, match=r"--gpu-group.*") as caught:
        cluster_deployment(
            7, inventories=nodes, cluster="auto", gpu=None, gpu_group=None, catalog=catalog
        )
    assert "3x 2g.20gb + 1g.10gb" in str(caught.value) and "vm3" in str(caught.value)


def test_mig_devices_of_one_bare_metal_gpu_are_observed(catalog: registry.Catalog) -> None:
    """A node whose GPU carries layout 6 runs it; the grouping is observed, not declared."""
    devices = (_mig("4g.40gb", 0, 0), _mig("2g.20gb", 1, 4), _mig("1g.10gb", 2, 6))
    deployment = cluster_deployment(
        6,
        inventories=[_node(0, devices=devices), _node(1)],
        cluster="auto",
        gpu=None,
        gpu_group=None,
        catalog=catalog,
    )
    assert deployment.partitioning == "mig" and deployment.grouping == "observed"
    assert [s.device for s in deployment.slots] == ["MIG-00000000", "MIG-00000001", "MIG-00000002"]


def test_a_group_of_two_gpu_models_is_refused(catalog: registry.Catalog) -> None:
    """A declared group mixing an A100 and an H100 vGPU is one line naming both models."""
    nodes = [
        _node(0, devices=(_vgpu("2g.20gb", 0),)),
        _node(1, devices=(_vgpu("1g.10gb", 1, gpu="H100-SXM5-80GB"),)),
    ]
    with pytest.raises(ClusterError, match="mixes GPU models"):
        cluster_deployment(
            ["2g.20gb", "1g.10gb"],
            inventories=nodes,
            cluster="auto",
            gpu=None,
            gpu_group=["10.0.0.0", "10.0.0.1"],
            catalog=catalog,
        )


def test_a_cluster_without_the_layouts_devices_is_refused(catalog: registry.Catalog) -> None:
    """Layout 8 (7x 1g) on a node carrying layout 6 is refused, showing the layout and the inventory."""
    devices = (_mig("4g.40gb", 0, 0), _mig("2g.20gb", 1, 4), _mig("1g.10gb", 2, 6))
    with pytest.raises(
        ClusterError, match=r"cannot hold the layout: the layout is 7x 1g\.10gb.*4g\.40gb"
    ):
        cluster_deployment(
            8,
            inventories=[_node(0, devices=devices)],
            cluster="auto",
            gpu=None,
            gpu_group=None,
            catalog=catalog,
        )


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "mlperf-mig"), *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["run", "--cluster", "local:0"], "local:N needs a node count"),
        (["run", "--cluster", "local:²"], "local:N needs a node count"),
        (["plan", "--cluster", "local:٣"], "local:N needs a node count"),
        (
            ["run", "--cluster", "127.0.0.1:1", "--no-accuracy"],
            "no Ray cluster answers at 127.0.0.1:1",
        ),
        (["run", "--cluster", "local:2", "--shared"], "shared cannot be combined with a cluster"),
        (["plan", "--gpu-group", "a,b"], "no cluster was given"),
        (["cluster-info", "--cluster", "nowhere"], "is not an address"),
    ],
)
def test_cluster_mistakes_are_one_line_and_exit_2(
    args: list[str], words: str, tmp_path: Path
) -> None:
    """Each cluster mistake is one line on stderr, exit 2, and no run folder."""
    out = tmp_path / "run"
    done = _cli(*args, *(["--outdir", str(out)] if args[0] == "run" else []))
    assert done.returncode == 2, done.stderr
    assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_settings_reject_a_gpu_group_that_names_nothing() -> None:
    """An empty gpu_group entry is refused by the options record."""
    from mlperf_mig.runner.options import RunOptions

    with pytest.raises(SettingsError, match="gpu_group"):
        RunOptions(cluster="auto", gpu_group=["10.0.0.1", " "])


def test_loopback_switches_are_undone_when_the_session_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A loopback cluster's switches hold during the session and are put back after it."""
    pytest.importorskip("ray")
    from ray._private import ray_constants

    from mlperf_mig.cluster.connect import LOOPBACK_ENV, _loopback_only

    for key in LOOPBACK_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", True)
    restore = _loopback_only()
    assert all(os.environ[key] == value for key, value in LOOPBACK_ENV.items())
    assert ray_constants.ENABLE_RAY_CLUSTER is False
    restore()
    assert not any(key in os.environ for key in LOOPBACK_ENV)
    assert ray_constants.ENABLE_RAY_CLUSTER is True


def test_a_node_that_cannot_report_is_one_line_naming_it() -> None:
    """A node whose discovery task failed (e.g. mlperf-mig missing there) is a ClusterError naming the node."""
    ray = pytest.importorskip("ray")
    from mlperf_mig.cluster.inventory import _node_answer

    class FailedRay:
        exceptions = ray.exceptions

        @staticmethod
        def get(ref: object) -> object:
            raise ray.exceptions.RayTaskError(
                "describe_this_node", "tb", ModuleNotFoundError("No module named 'mlperf_mig'")
            )

    with pytest.raises(
        ClusterError,
        match=r"node abcdef12 could not report its devices .*mlperf_mig.*install the same",
    ):
        _node_answer(FailedRay, "abcdef1234", object())


def test_a_node_inventory_reads_back_from_its_plain_data() -> None:
    """A node's inventory, through JSON as it crosses Ray, reads back with the registry's device records."""
    node = _node(0, devices=(_mig("4g.40gb", 0, 0), _vgpu("2g.20gb", 1)), cpus=(0, 1))
    assert NodeInventory.from_dict(json.loads(json.dumps(node.to_dict()))) == node


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"cpus": ["0"]}, "cpus"),
        ({"devices": {"kind": "mig"}}, "devices must be a list"),
        ({"host": None}, "host"),
        ({"shell": "rm"}, "must have the keys"),
    ],
)
def test_a_node_inventory_with_wrong_fields_is_refused(change: dict, said: str) -> None:
    """A node's plain data with a wrong field or a foreign key is a ValueError naming it."""
    data = {**_node(0, devices=(_mig("1g.10gb", 0, 6),)).to_dict(), **change}
    with pytest.raises(ValueError, match=said):
        NodeInventory.from_dict(data)


def test_a_node_answer_the_driver_cannot_read_is_one_line_naming_it() -> None:
    """A node whose inventory does not read back (another mlperf-mig there) is a ClusterError naming the node."""
    ray = pytest.importorskip("ray")
    from mlperf_mig.cluster.inventory import _node_answer

    class OddRay:
        exceptions = ray.exceptions

        @staticmethod
        def get(ref: object) -> object:
            return {**_node(0).to_dict(), "devices": [{"kind": "mig"}]}

    with pytest.raises(
        ClusterError,
        match=r"node abcdef12 reported an inventory this driver cannot read .*install the same",
    ):
        _node_answer(OddRay, "abcdef1234", object())


def test_cluster_devices_match_by_profile_id_not_name(catalog: registry.Catalog) -> None:
    """A node device whose profile prints under another name but has the layout's profile ID is placed."""
    import attrs

    devices = tuple(
        attrs.evolve(d, profile=attrs.evolve(d.profile, name=d.profile.name + "-alias"))
        for d in (_mig("4g.40gb", 0, 0), _mig("2g.20gb", 1, 4), _mig("1g.10gb", 2, 6))
    )
    deployment = cluster_deployment(
        6,
        inventories=[_node(0, devices=devices)],
        cluster="auto",
        gpu=None,
        gpu_group=None,
        catalog=catalog,
    )
    assert [s.device for s in deployment.slots] == ["MIG-00000000", "MIG-00000001", "MIG-00000002"]


def test_cluster_info_names_where_auto_found_the_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """`cluster-info --cluster auto` prints the address Ray found, never 'at auto'."""
    from types import SimpleNamespace

    from mlperf_mig.cluster.connect import parse_cluster
    from mlperf_mig.cluster.inventory import inventory_table

    fake_ray = SimpleNamespace(
        get_runtime_context=lambda: SimpleNamespace(gcs_address="10.1.2.3:6379")
    )
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    session = SimpleNamespace(spec=parse_cluster("auto"), address="auto", emulated_nodes=False)
    head = inventory_table(session, [_node(0)]).splitlines()[0]
    assert "at auto" not in head and "10.1.2.3:6379" in head and "auto-discovery" in head
