"""A layout on two emulated GPUs, run end to end on the null backend: results per GPU and system."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlperf_mig.runner.results import RunResult

from .conftest import QUICK_NULL

pytestmark = pytest.mark.slow  # starts the runner's workers

SYSTEM = {"scenario": "2g.20gb+1g.10gb", "gpu_count": 2, "emulate": True, "accuracy": False}


@pytest.fixture(scope="module", name="independent")
def fixture_independent(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Two emulated A100s carrying 2g.20gb + 1g.10gb each, one LoadGen per instance."""
    import mlperf_mig

    return mlperf_mig.run(outdir=tmp_path_factory.mktemp("fleet") / "run", **SYSTEM, **QUICK_NULL)


@pytest.fixture(scope="module", name="unified")
def fixture_unified(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The same system under one LoadGen."""
    import mlperf_mig

    return mlperf_mig.run(
        outdir=tmp_path_factory.mktemp("fleet") / "run", mode="unified", **SYSTEM, **QUICK_NULL
    )


def test_every_instance_of_every_gpu_ran(independent: Any) -> None:
    """Four instances, two per GPU, each finished and named with its GPU."""
    assert independent.ok
    assert [(i.name, i.gpu_index) for i in independent.instances] == [
        ("g0-i0-2g.20gb", 0),
        ("g0-i1-1g.10gb", 0),
        ("g1-i0-2g.20gb", 1),
        ("g1-i1-1g.10gb", 1),
    ]


def test_gpu_subtotals_are_the_sums_of_their_instances(independent: Any) -> None:
    """Each GPU's subtotal is its instances' throughput summed; they add up to the total."""
    rows = independent.gpu_rows()
    for row in rows:
        members = [i.throughput for i in independent.instances if i.gpu_index == row.index]
        assert row.subtotal == pytest.approx(sum(members))
    assert sum(r.subtotal for r in rows) == pytest.approx(independent.total_throughput)


def test_results_json_has_the_gpus_list(independent: Any) -> None:
    """results.json names each GPU with its layout, instances and subtotal."""
    data = json.loads((Path(independent.outdir) / "results.json").read_text())
    assert [(g["index"], g["name"], g["layout"]) for g in data["gpus"]] == [
        (0, "A100-SXM4-80GB", "2g.20gb+1g.10gb"),
        (1, "A100-SXM4-80GB", "2g.20gb+1g.10gb"),
    ]
    assert all(g["subtotal"] > 0 for g in data["gpus"])
    assert data["system_id"] == "A100-SXM-80GB_MIG_2x2g.20gb+2x1g.10gb"


def test_results_json_round_trips(independent: Any) -> None:
    """The run read back has the same GPUs and subtotals."""
    again = RunResult.load(independent.outdir)
    assert again.gpu_rows() == independent.gpu_rows()


def test_table_shows_gpu_subtotals(independent: Any) -> None:
    """The table has one subtotal row per GPU and the system total."""
    table = independent.table()
    assert "GPU 0 subtotal" in table and "GPU 1 subtotal" in table
    assert "on 2 GPUs (A100-SXM4-80GB)" in table


def test_unified_run_is_one_result_for_the_system(unified: Any) -> None:
    """One LoadGen served all four instances; their GPUs' shares add up to its result."""
    assert unified.ok and unified.layout_result is not None
    rows = unified.gpu_rows()
    assert all(r.served_samples > 0 for r in rows)
    assert sum(r.subtotal for r in rows) == pytest.approx(unified.total_throughput)
    assert any("shared out by the samples" in label for label in unified.labels())


def test_tampered_gpus_entry_is_refused(independent: Any, tmp_path: Path) -> None:
    """A results.json whose gpus entry lost its index is one line naming the field."""
    from mlperf_mig.errors import UntrustedPathError

    data = json.loads((Path(independent.outdir) / "results.json").read_text())
    del data["gpus"][0]["index"]
    with pytest.raises(UntrustedPathError, match="gpus entry"):
        RunResult.from_dict(data)
