"""What a run's table says about itself: why a result is INVALID, which node ran each instance, units."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

pytestmark = pytest.mark.slow  # starts the runner's workers


def test_an_invalid_result_says_why_in_the_notes(good_run: Any) -> None:
    """A Server result that LoadGen marked INVALID has its reasons under the table."""
    first = good_run.instances[0]
    invalid = attrs.evolve(
        first.performance,
        valid=False,
        invalid_by_design=False,
        invalid_reasons=("Reduce target QPS to improve latency.",),
    )
    run = attrs.evolve(
        good_run, instances=[attrs.evolve(first, performance=invalid), *good_run.instances[1:]]
    )
    assert f"note: {first.name} valid NO: Reduce target QPS to improve latency." in run.table()


def test_cluster_table_names_each_instances_node(good_run: Any) -> None:
    """A cluster run's table has a node column with each instance's Ray node."""
    nodes = ["ab" * 20, "cd" * 20]
    instances = [attrs.evolve(i, node=n) for i, n in zip(good_run.instances, nodes)]
    cluster = {"cluster": "local:2", "nodes": nodes, "grouping": "emulated", "start_skew_ms": None}
    table = attrs.evolve(good_run, instances=instances, cluster=cluster).table()
    header = table.splitlines()[1].split()
    assert "node" in header and "abababab" in table and "cdcdcdcd" in table


def test_unified_share_column_names_its_unit(good_run: Any) -> None:
    """Unified mode's per-instance column says it counts samples served."""
    instances = [
        attrs.evolve(i, dispatched_samples=128, performance=None) for i in good_run.instances
    ]
    table = attrs.evolve(good_run, mode="unified", instances=instances, layout_status="ok").table()
    assert "samples served" in table.splitlines()[1]


def test_run_result_to_html_is_a_page_with_its_table_and_notes(good_run: Any) -> None:
    """RunResult.to_html() is a complete HTML page holding the table and the emulated label."""
    page = good_run.to_html()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<table" in page and "emulated" in page
