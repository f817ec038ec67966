"""The grammar of a `--cluster` value ("auto", "HOST:PORT", "ray://HOST:PORT", "local:N").

It lives in placement/ (below runner/ and cluster/, which connects to what it names) so that
RunOptions checks the option, and placement finds the nodes handed to it for that value, without
importing the cluster package; cluster/connect.py parses with it too.
"""

from __future__ import annotations

import attrs

from mlperf_mig.errors import ClusterError

MAX_LOCAL_NODES = 16


@attrs.frozen(kw_only=True)
class ClusterSpec:
    """A parsed `--cluster` value: its kind and where it points."""

    kind: str  # "auto", "address", "client" or "local"
    address: str | None = None  # HOST:PORT, ray://HOST:PORT, or None
    nodes: int | None = None  # local:N

    def __str__(self) -> str:
        if self.kind == "local":
            return f"local:{self.nodes}"
        return self.address or "auto"


def parse_cluster(text: str) -> ClusterSpec:
    """The ClusterSpec of a `--cluster` value; raises ClusterError naming the accepted forms."""
    forms = "'auto', 'HOST:PORT', 'ray://HOST:PORT' or 'local:N' (N nodes on this machine)"
    if not isinstance(text, str) or not text.strip():
        raise ClusterError(f"cluster {text!r} is not a cluster address; pass {forms}")
    value = text.strip()
    if value == "auto":
        return ClusterSpec(kind="auto")
    if value.startswith("local:"):
        count = value.removeprefix("local:")
        if not _ascii_digits(count) or not 1 <= int(count) <= MAX_LOCAL_NODES:
            raise ClusterError(
                f"cluster {value!r}: local:N needs a node count N from 1 to {MAX_LOCAL_NODES}, "
                "e.g. local:3"
            )
        return ClusterSpec(kind="local", nodes=int(count))
    client = value.startswith("ray://")
    host, sep, port = value.removeprefix("ray://").rpartition(":")
    if not sep or not host or not _ascii_digits(port) or not 0 < int(port) < 65536:
        raise ClusterError(f"cluster {value!r} is not an address; pass {forms}")
    return ClusterSpec(kind="client" if client else "address", address=value)


def _ascii_digits(text: str) -> bool:
    """True for a non-empty run of 0-9 (str.isdigit also takes '²' and other scripts' digits)."""
    return text.isascii() and text.isdigit()
