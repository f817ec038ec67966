"""A single run's screen in a pseudo-terminal: the phase lines stay and the table starts at column 0."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

COLUMNS, ROWS = 160, 60
_CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])")


def screen_of(output: str, columns: int = COLUMNS) -> list[str]:
    """What a terminal shows after `output`: carriage return, line feed, backspace, cursor moves
    (CSI A/B/C/D/G) and erasing (CSI K, J) are applied; other sequences are ignored."""
    rows: dict[int, list[str]] = {}
    row = col = 0
    i = 0
    while i < len(output):
        match = _CSI.match(output, i)
        if match:
            arg, op = match.group(1), match.group(2)
            n = int(arg) if arg.isdigit() else 1
            line = rows.get(row, [])
            if op == "A":
                row = max(0, row - n)
            elif op == "B":
                row += n
            elif op == "C":
                col += n
            elif op == "D":
                col = max(0, col - n)
            elif op == "G":
                col = n - 1
            elif op == "K":
                del line[col if arg in ("", "0") else 0 :]
            elif op == "J":
                for r in [r for r in rows if r > row]:
                    del rows[r]
                del line[col:]
            i = match.end()
            continue
        char = output[i]
        if char == "\r":
            col = 0
        elif char == "\n":
            row += 1
        elif char == "\b":
            col = max(0, col - 1)
        elif char >= " ":
            line = rows.setdefault(row, [])
            line.extend(" " * (col + 1 - len(line)))
            line[col] = char
            col = min(col + 1, columns - 1)
        i += 1
    last = max(rows, default=-1)
    return ["".join(rows.get(r, [])).rstrip() for r in range(last + 1)]


def _run_in_pty(argv: list[str], timeout_s: float = 300) -> str:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    env = {**os.environ, "TERM": "xterm", "COLUMNS": str(COLUMNS)}
    child = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif child.poll() is not None:
            break
    child.wait(timeout=30)
    os.close(master)
    return b"".join(chunks).decode("utf-8", errors="replace")


@pytest.mark.slow
def test_single_run_screen_keeps_phase_lines_and_starts_the_table_at_column_0(
    tmp_path: Path,
) -> None:
    """After `mlperf-mig run` in a terminal the '[performance] done' line is on screen and the table's title starts at column 0."""
    cli = str(Path(sys.executable).parent / "mlperf-mig")
    output = _run_in_pty(
        [
            cli,
            "run",
            "--scenario",
            "2g.20gb+1g.10gb",
            "--backend",
            "null",
            "--no-accuracy",
            "--outdir",
            str(tmp_path / "run"),
        ]
    )
    screen = screen_of(output)
    title = [line for line in screen if "(LoadGen scenario)" in line]
    assert title, "\n".join(screen)
    assert title[0].startswith("resnet50 Offline"), "\n".join(screen)
    assert any(line.startswith("[performance] done in") for line in screen), "\n".join(screen)
    assert any(line.startswith("[performance] i1-1g.10gb") and "ok" in line for line in screen), (
        "\n".join(screen)
    )


def test_screen_model_applies_carriage_return_and_cursor_up() -> None:
    """The screen model overwrites after a carriage return and moves up with CSI A."""
    assert screen_of("abc\rX\n\x1b[Ay") == ["Xyc"]
