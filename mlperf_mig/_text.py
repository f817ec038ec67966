"""Text read back from a file, a replay or another host, made safe to print.

Every string that did not come from this process (a GPU name in an NVML replay, an error in a
results.json, a host note from a cluster node) goes through `printable` before it reaches a
terminal or a page: control characters (ESC, BEL, carriage return, the C1 range, bidi overrides)
are shown escaped, so a crafted file can neither set the window title nor clear the screen.
"""

from __future__ import annotations

import re

# C0 controls (tab and newline included: a read-back field is one line), DEL, the C1 range, and
# the Unicode format characters that reorder or hide text (bidi embeddings, overrides, isolates).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """`text` as one printable line: every control character written as its escape (ESC as
    '\\x1b'); plain text is returned unchanged."""
    return _CONTROL.sub(_escaped, str(text))
