"""Shared fixtures of the telemetry tests: a hand-driven clock and the recorded telemetry states."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mlperf_mig.telemetry.replay import RecordedTelemetry

FIXTURES = Path(__file__).parent / "fixtures"


class ManualClock:
    """A clock the test moves: replays read it instead of the machine's."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(name="clock")
def fixture_clock() -> ManualClock:
    return ManualClock()


def load_state(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


@pytest.fixture(name="replay")
def fixture_replay(clock: ManualClock) -> Callable[..., RecordedTelemetry]:
    """A RecordedTelemetry of a fixture state, driven by the test's clock; `edit` changes the
    state's telemetry section first."""

    def make(name: str, edit: Callable[[dict[str, Any]], None] | None = None) -> RecordedTelemetry:
        state = load_state(name)
        if edit is not None:
            edit(state)
        return RecordedTelemetry(state, clock=clock)

    return make
