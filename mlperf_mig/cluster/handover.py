"""What an open cluster session hands the layers below it, which import nothing of cluster/.

`cluster_run(text)` is what the public face enters around planning and running a `--cluster`
run: it opens the cluster's session (or takes the one an outer block opened) and, for the
duration of the block, hands placement the nodes' inventories (`placement.choose.nodes_handed`)
and the runner the rounds that start Ray actors on those nodes (`runner.execute.rounds_handed`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from mlperf_mig.cluster.connect import ClusterSession, cluster_scope
from mlperf_mig.cluster.inventory import take_inventory
from mlperf_mig.placement.choose import nodes_handed
from mlperf_mig.placement.cluster_address import ClusterSpec
from mlperf_mig.placement.nodes import NodeInventory
from mlperf_mig.runner.execute import rounds_handed

if TYPE_CHECKING:
    from mlperf_mig.runner.plan import RunPlan
    from mlperf_mig.runner.rounds import Rounds


class SessionHandover:
    """One open session as placement's ClusterNodes and the runner's ClusterRounds."""

    def __init__(self, session: ClusterSession) -> None:
        self._session = session

    @property
    def spec(self) -> ClusterSpec:
        return self._session.spec

    def inventories(self) -> list[NodeInventory]:
        """Every alive node's inventory, taken now on its own node (cluster/inventory.py)."""
        return take_inventory(self._session)

    def rounds(self, plan: RunPlan, outdir: Path, stream: TextIO | None) -> Rounds:
        """The plan's rounds with one Ray actor per instance (cluster/rounds.py, imported when a
        cluster run starts)."""
        from mlperf_mig.cluster.rounds import ClusterIndependentRounds, ClusterUnifiedRounds

        kind = ClusterUnifiedRounds if plan.mode == "unified" else ClusterIndependentRounds
        return kind(plan, outdir, stream)


@contextlib.contextmanager
def cluster_run(text: str | ClusterSpec | None) -> Iterator[ClusterSession | None]:
    """The session of cluster `text` for the block (see cluster_scope), handed to placement and
    the runner; None: no cluster, nothing handed."""
    with cluster_scope(text) as session:
        handover = None if session is None else SessionHandover(session)
        with nodes_handed(handover), rounds_handed(handover):
            yield session
