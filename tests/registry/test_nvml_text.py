"""Text NVML or a replayed state gives (GPU name, UUIDs, MIG device UUIDs, profile names, driver
version) reaches the terminal escaped (`printable`) through detect, doctor, plan and run: a state
with an escape sequence can neither set the window title nor clear the screen (issue 33 item 5)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlperf_mig.registry import RecordedNvml, detect

FIXTURES = Path(__file__).parent / "fixtures"
HOSTILE = "H100\x1b]0;owned\x07\x1b[2J"
SHOWN = "H100\\x1b]0;owned\\x07\\x1b[2J"


@pytest.fixture(name="hostile_replay")
def fixture_hostile_replay(tmp_path: Path) -> Path:
    """The recorded H200 with ESC/BEL in its GPU name, a MIG UUID, a profile name and the driver
    version."""
    state = json.loads((FIXTURES / "h200-7x1g.json").read_text(encoding="utf-8"))
    gpu = state["gpus"][0]
    gpu["name"] = HOSTILE
    gpu["mig_devices"][0]["uuid"] = f"MIG-{HOSTILE}"
    gpu["gi_profiles"][0]["name"] += "\x07"
    state["driver_version"] += "\x1b[31m"
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(state), encoding="utf-8")
    return path


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """The command in a child, so that log lines on stderr are caught with the rest."""
    return subprocess.run(
        [sys.executable, "-m", "mlperf_mig", *argv], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["detect", "--replay"], 0),
        (["detect", "--json", "--replay"], 0),
        (["doctor", "--no-smoke", "--replay"], 0),
        (["plan", "--scenario", "8", "--nvml-state"], 0),
        (["plan", "--scenario", "1", "--nvml-state"], 2),  # refused: the message names the GPU
    ],
    ids=["detect", "detect-json", "doctor", "plan", "plan-refused"],
)
def test_no_control_character_reaches_the_terminal(
    hostile_replay: Path, argv: list[str], code: int
) -> None:
    """No raw ESC or BEL in stdout or stderr; the GPU name is shown escaped, not dropped."""
    done = _cli(*argv, str(hostile_replay))
    both = done.stdout + done.stderr
    assert done.returncode == code, both
    assert "\x1b" not in both and "\x07" not in both
    assert SHOWN in both.replace("\\\\", "\\")  # JSON doubles the backslash


def test_discovery_records_the_text_escaped(hostile_replay: Path) -> None:
    """The detected GPU's name and MIG UUID are the escaped text: nothing downstream sees ESC."""
    (gpu,) = detect(RecordedNvml.from_file(hostile_replay)).gpus
    assert gpu.name == SHOWN
    assert gpu.mig_devices[0].uuid == f"MIG-{SHOWN}"
