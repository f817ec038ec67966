"""Scratch folders of cluster instances (issue 33 item 8): each is named by its round, so the
driver can have it removed on its node however the round ends, and nothing else is removed.
(tests/cluster/test_cluster_signals.py checks the same through a real Ray cluster's SIGTERM.)"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from mlperf_mig.cluster import actors
from mlperf_mig.cluster.actors import InstanceActor, remove_scratch, scratch_folder

TOKEN = "4242-0badcafe"


@pytest.fixture(name="node_temp")
def fixture_node_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The node's temp folder, here a fresh one; no settling pause between removals."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(actors, "_SCRATCH_SETTLE_S", 0.0)
    return tmp_path


def test_an_actors_scratch_folder_is_named_by_its_round(node_temp: Path) -> None:
    """An instance actor of a round works in <temp>/mlperf-mig-<token>-<name>, private to it."""
    actor = InstanceActor("i0-1g.10gb", {}, None, TOKEN)
    assert actor.folder == node_temp / f"mlperf-mig-{TOKEN}-i0-1g.10gb"
    assert actor.folder.is_dir() and actor.folder.stat().st_mode & 0o777 == 0o700


def test_a_killed_actors_folder_is_removed_with_what_it_wrote(node_temp: Path) -> None:
    """What a killed actor left (its folder and the files in it) is removed on its node."""
    actor = InstanceActor("i0", {}, None, TOKEN)
    (actor.folder / "performance").mkdir()
    (actor.folder / "performance" / "mlperf_log_detail.txt").write_text("partial")
    assert remove_scratch(TOKEN, ["i0"]) == [str(actor.folder)]
    assert list(node_temp.iterdir()) == []


def test_only_the_rounds_own_folders_are_removed(node_temp: Path) -> None:
    """Another round's folder, and a link standing where this round's folder would be, are
    left as they are (a link's target is never touched)."""
    other = node_temp / "mlperf-mig-1-ffffffff-i0"
    other.mkdir()
    target = node_temp / "elsewhere"
    target.mkdir()
    (target / "keep").write_text("x")
    scratch_folder(TOKEN, "i1").symlink_to(target)
    assert remove_scratch(TOKEN, ["i0", "i1"]) == []
    assert (
        other.is_dir() and (target / "keep").exists() and scratch_folder(TOKEN, "i1").is_symlink()
    )
