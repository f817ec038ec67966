"""The live progress display: lines per state change off a terminal, redraws on a terminal."""

from __future__ import annotations

import io

from mlperf_mig.runner.progress import ProgressDisplay


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_stream_gets_a_line_per_state_change() -> None:
    """Off a terminal, 'ready' and the final status are printed once each, 'started' is not."""
    out = io.StringIO()
    display = ProgressDisplay(["i0-2g.20gb"], phase="performance", expected_s=2.0, stream=out)
    for what in ("started", "ready", "ok"):
        display.event("i0-2g.20gb", what)
    display.close()
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["[performance] i0-2g.20gb: ready", "[performance] i0-2g.20gb: ok"]
    assert "started" not in out.getvalue()


def test_terminal_shows_samples_elapsed_and_expected() -> None:
    """On a terminal each instance's line (a tqdm line) shows completed samples and the expected time."""
    out = _Terminal()
    display = ProgressDisplay(
        ["i0-2g.20gb", "i1-1g.10gb"], phase="performance", expected_s=2.0, stream=out
    )
    display.event("i0-2g.20gb", "ready")
    display.event("i1-1g.10gb", "ready")
    display.progress("i0-2g.20gb", 128)
    display.close()
    text = out.getvalue()
    first = [part for part in text.split("\r") if "i0-2g.20gb" in part][-1]
    second = [part for part in text.split("\r") if "i1-1g.10gb" in part][-1]
    assert "128 samples" in first and "~2 s expected" in first and "running" in first
    assert "ready" in second
