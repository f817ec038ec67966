"""The host's side: worker CPU use and memory from /proc, CPU package energy from powercap."""

from __future__ import annotations

import os
import time

import pytest

from mlperf_mig.telemetry.host import PackageEnergy, WorkerWatch
from mlperf_mig.telemetry.sampler import Sampler


def _zone(root, name: str, energy: int, wrap: int = 1000) -> None:
    zone = root / name
    zone.mkdir(parents=True, exist_ok=True)
    (zone / "energy_uj").write_text(f"{energy}\n")
    (zone / "max_energy_range_uj").write_text(f"{wrap}\n")


def test_package_energy_undoes_a_counter_wrap(tmp_path):
    """A RAPL counter that wraps at 1000 µJ from 900 to 100 has used 200 µJ."""
    _zone(tmp_path, "intel-rapl:0", 900)
    energy = PackageEnergy(tmp_path)
    assert energy.read()[PackageEnergy.COLUMN] == 0.0
    _zone(tmp_path, "intel-rapl:0", 100)
    assert energy.read()[PackageEnergy.COLUMN] == pytest.approx(200e-6)


def test_package_energy_sums_the_packages_not_their_subzones(tmp_path):
    """Two packages are summed; a subzone (core, dram) is part of its package, not added."""
    _zone(tmp_path, "intel-rapl:0", 0)
    _zone(tmp_path, "intel-rapl:1", 0)
    _zone(tmp_path, "intel-rapl:0:0", 0)
    energy = PackageEnergy(tmp_path)
    energy.read()
    _zone(tmp_path, "intel-rapl:0", 10)
    _zone(tmp_path, "intel-rapl:1", 20)
    _zone(tmp_path, "intel-rapl:0:0", 500)
    assert energy.read()[PackageEnergy.COLUMN] == pytest.approx(30e-6)


def test_package_energy_is_a_sampler_source(tmp_path):
    """The sampler can name the package's column, as it does each source's before writing the CSV."""
    _zone(tmp_path, "intel-rapl:0", 0)
    sampler = Sampler([PackageEnergy(tmp_path)], interval_s=1.0)
    assert sampler.columns() == [PackageEnergy.COLUMN]
    assert PackageEnergy.COLUMN in sampler.sample_once()


def test_no_powercap_says_why(tmp_path):
    """A machine without powercap has no package energy, and says so."""
    energy = PackageEnergy(tmp_path / "absent")
    assert not energy.available and "not exposed" in energy.why_not


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_counter_says_why(tmp_path):
    """A counter only root may read gives no energy and the reason."""
    _zone(tmp_path, "intel-rapl:0", 5)
    (tmp_path / "intel-rapl:0" / "energy_uj").chmod(0)
    assert "not readable" in PackageEnergy(tmp_path).why_not


def test_worker_watch_measures_a_running_process():
    """A busy process (this one) shows CPU use and resident memory once it has two readings."""
    watch = WorkerWatch({"me": 1.0})
    watch.worker_started("me", os.getpid())
    watch.read()
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    row = watch.read()
    assert row["me:cpu_pct"] > 0 and row["me:rss_mib"] > 0


def test_worker_watch_forgets_an_ended_worker():
    """After worker_ended the instance's cells are empty."""
    watch = WorkerWatch({"me": 1.0})
    watch.worker_started("me", os.getpid())
    watch.worker_ended("me")
    assert watch.read() == {"me:cpu_pct": None, "me:rss_mib": None}
