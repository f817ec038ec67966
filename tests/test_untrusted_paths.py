"""The shared checks for paths and names read back from folders the project does not trust."""

from __future__ import annotations

import os
import stat

import pytest

from mlperf_mig._io import (
    atomic_write_json,
    inside,
    refuse_links_below,
    safe_name,
    write_failed,
)
from mlperf_mig.errors import UntrustedPathError


@pytest.mark.parametrize("name", ["Offline", "i0-7g.80gb", "1g.10gb+me", "MIG_56x1g.10gb", "r@1"])
def test_safe_name_keeps_plain_names(name):
    """A name this tool writes passes unchanged."""
    assert safe_name(name, "scenario", "results.json") == name


@pytest.mark.parametrize(
    "name", ["../x", "a/b", ".hidden", "a b", "x\n", "", "..", "a..b", 3, None]
)
def test_safe_name_refuses_names_that_leave_a_folder(name):
    """Separators, dots that climb, control characters and non-strings are refused by field."""
    with pytest.raises(UntrustedPathError, match=r"results\.json.*scenario"):
        safe_name(name, "scenario", "results.json")


def test_inside_refuses_climbing_and_absolute_paths(tmp_path):
    """'..' and absolute paths are refused before anything is touched."""
    for bad in ("../victim", "a/../../victim", "/etc/passwd", ""):
        with pytest.raises(UntrustedPathError):
            inside(tmp_path, bad, "log_dir")
    assert inside(tmp_path, "a/b.txt", "log_dir") == tmp_path / "a" / "b.txt"


def test_inside_refuses_a_symlink_on_the_way(tmp_path):
    """A link anywhere below the folder is refused with its path, whatever it points to."""
    outside = tmp_path / "outside"
    outside.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "logs").symlink_to(outside)
    with pytest.raises(UntrustedPathError, match="symbolic link"):
        inside(run, "logs/mlperf_log_detail.txt", "log")


def test_refuse_links_below_finds_a_deep_link(tmp_path):
    """A symlinked file deep in a tree is found before the tree is copied or chmod-ed."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").symlink_to("/etc/passwd")
    with pytest.raises(UntrustedPathError, match="a/b/f"):
        refuse_links_below(tmp_path, "the run folder")
    (tmp_path / "a" / "b" / "f").unlink()
    refuse_links_below(tmp_path, "the run folder")


def test_atomic_writes_honour_the_umask(tmp_path):
    """A shareable output gets the umask's mode (0644 under 022), not mkstemp's 0600."""
    old = os.umask(0o022)
    try:
        path = atomic_write_json(tmp_path / "results.json", {"a": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_write_failed_names_a_too_long_component(tmp_path):
    """The message for a name over 255 bytes is built without raising a second error."""
    path = tmp_path / ("x" * 300) / "results.json"
    error = write_failed(path, OSError(36, "File name too long"))
    assert "File name too long" in str(error) and "free" in str(error)
