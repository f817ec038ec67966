"""Emulated CPU budgets: CPU time in proportion to compute slices, and how it is enforced."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import mlperf_mig
from mlperf_mig.emulation import cpu_budget
from mlperf_mig.emulation.cpu_budget import (
    CGROUP_QUOTA,
    DUTY_CYCLE,
    WHOLE_CPUS,
    DutyCycle,
    budget_env,
    budget_from_env,
    emulated_cpu_budgets,
)
from mlperf_mig.runner.jobs import instance_env


def test_layout_7_on_two_cores_gets_time_in_slice_proportion() -> None:
    """Three 2g and a 1g on 2 CPUs get 4/7, 4/7, 4/7 and 2/7 of a CPU: the whole machine."""
    budgets = emulated_cpu_budgets([2, 2, 2, 1], 7, [0, 1], enforcement=DUTY_CYCLE).budgets
    assert [b.share for b in budgets] == pytest.approx([4 / 7, 4 / 7, 4 / 7, 2 / 7], abs=1e-6)
    assert sum(b.share for b in budgets) == pytest.approx(2.0)


def test_the_whole_gpu_gets_every_cpu_without_a_quota() -> None:
    """A 7g on 2 CPUs owns both: affinity alone keeps it, and nothing needs a note."""
    result = emulated_cpu_budgets([7], 7, [0, 1], enforcement=DUTY_CYCLE)
    (budget,) = result.budgets
    assert (budget.cpus, budget.share, budget.threads, budget.enforced_by) == (
        (0, 1),
        2.0,
        2,
        WHOLE_CPUS,
    )
    assert result.notes == ()


def test_instances_outnumbering_cores_share_them_by_budget() -> None:
    """Seven 1g on 2 CPUs each get 2/7 of a CPU, enforced and said so in the notes."""
    result = emulated_cpu_budgets([1] * 7, 7, [0, 1], enforcement=DUTY_CYCLE)
    assert all(
        b.share == pytest.approx(2 / 7, abs=1e-6) and b.enforced_by == DUTY_CYCLE
        for b in result.budgets
    )
    assert any("duty cycle" in note for note in result.notes)


def test_a_share_above_one_cpu_gets_threads_to_use_it() -> None:
    """A 4g alone on 2 CPUs gets 8/7 CPU over both CPUs with two threads (the rest stays idle, as on the GPU)."""
    (budget,) = emulated_cpu_budgets([4], 7, [0, 1], enforcement=DUTY_CYCLE).budgets
    assert budget.share == pytest.approx(8 / 7, abs=1e-6)
    assert budget.cpus == (0, 1) and budget.threads == 2


def test_whole_gpu_cpus_scales_the_shares() -> None:
    """Standing for 1 CPU, a 2g of an A100 gets 2/7 of a CPU wherever its CPUs are."""
    budgets = emulated_cpu_budgets(
        [2], 7, [4, 5, 6], whole_gpu_cpus=1, enforcement=DUTY_CYCLE
    ).budgets
    assert budgets[0].share == pytest.approx(2 / 7, abs=1e-6) and budgets[0].cpus == (4,)


def test_tiny_shares_are_named_in_the_notes() -> None:
    """Shares below 0.1 CPU cannot keep the proportion, and the notes say so."""
    result = emulated_cpu_budgets([1] * 7, 7, [0], whole_gpu_cpus=0.5, enforcement=DUTY_CYCLE)
    assert any(note.startswith("proportion not kept") for note in result.notes)


def test_unknown_enforcement_is_refused() -> None:
    """Only the cgroup quota or the duty cycle can be asked for."""
    with pytest.raises(ValueError, match="enforcement"):
        emulated_cpu_budgets([1], 7, [0], enforcement="nice")


def test_duty_cycle_sleeps_until_cpu_time_is_within_the_share() -> None:
    """After 0.1 s of CPU in 0.1 s of wall time at a quarter CPU, it sleeps 0.3 s."""
    now = {"wall": 0.0, "cpu": 0.0}
    slept: list[float] = []
    duty = DutyCycle(
        0.25, clock=lambda: now["wall"], cpu_clock=lambda: now["cpu"], sleep=slept.append
    )
    now.update(wall=0.1, cpu=0.1)
    duty.settle()
    assert slept == [pytest.approx(0.3, abs=1e-9)]


def test_idle_time_earns_only_a_short_burst() -> None:
    """Ten idle seconds (the barrier, loading) do not let the next second of CPU run unthrottled."""
    now = {"wall": 0.0, "cpu": 0.0}
    slept: list[float] = []
    duty = DutyCycle(
        0.5, clock=lambda: now["wall"], cpu_clock=lambda: now["cpu"], sleep=slept.append
    )
    now.update(wall=10.0)
    duty.settle()
    now.update(wall=11.0, cpu=1.0)
    duty.settle()
    assert slept and slept[-1] > 0.9


def test_budget_travels_in_the_worker_environment() -> None:
    """An emulated slot's share and enforcement reach its worker's environment and read back."""
    plan = mlperf_mig.plan(7, backend="known_answer", emulate=True, cpus=[0])
    slot = plan.slots[3]
    env = instance_env(slot)
    assert float(env[cpu_budget.SHARE_ENV]) == pytest.approx(1 / 7, abs=1e-6)
    os.environ.update(env)
    try:
        assert budget_from_env() == (pytest.approx(1 / 7, abs=1e-6), slot.cpu_budget)
    finally:
        for key in budget_env(1.0, DUTY_CYCLE):
            os.environ.pop(key, None)


def test_a_whole_cpu_budget_needs_no_environment() -> None:
    """Whole CPUs are kept by affinity: no share travels."""
    assert budget_env(2.0, WHOLE_CPUS) == {}


def test_cgroup_quota_caps_a_busy_process() -> None:
    """Where this machine allows cgroup quotas, a process under a quarter-CPU quota gets at most about that."""
    if cpu_budget.quota_support()[0] != CGROUP_QUOTA:
        pytest.skip(f"no cgroup quota here: {cpu_budget.quota_support()[1]}")
    code = textwrap.dedent(
        """
        import time
        from mlperf_mig.emulation.cpu_budget import join_quota_cgroup
        join_quota_cgroup(0.25)
        cpu, wall = time.process_time(), time.monotonic()
        while time.monotonic() - wall < 1.0:
            pass
        print((time.process_time() - cpu) / (time.monotonic() - wall))
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert float(child.stdout) <= 0.25 + 0.1


def test_with_cgroups_a_whole_gpu_is_weighed_too() -> None:
    """Where quotas are used, a 7g owning both CPUs still gets a cgroup, weighed like the others against other processes."""
    (budget,) = emulated_cpu_budgets([7], 7, [0, 1], enforcement=CGROUP_QUOTA).budgets
    assert budget.enforced_by == CGROUP_QUOTA and budget.share == 2.0
