"""Which Ray cluster a run uses, and the connection to it.

A cluster is named by one string (`--cluster`, `cluster=`):
    auto            the cluster this machine joined with `ray start` (or RAY_ADDRESS)
    HOST:PORT       the head node's GCS address, as `ray start --head` prints it
    ray://HOST:PORT Ray Client, for a driver outside the cluster's network
    local:N         a throwaway cluster of N nodes on this machine, torn down afterwards: the
                    study's VMs, emulated. It binds to loopback only and reports no usage data.

Every failure to connect is one line saying what to do (ClusterError, exit 2): Ray missing, an
address nothing answers on, a cluster of another Ray or Python version.

Ray replaces a driver's SIGTERM handler when it starts (a Python one that exits 1, and the core
worker's C++ one that prints a stack dump), so a session keeps the project's handlers: it enters
`stop_signals()` and puts the handlers back after Ray has started, and SIGTERM stops a cluster run
as it stops a local one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from mlperf_mig.errors import ClusterError
from mlperf_mig.placement.cluster_address import ClusterSpec, parse_cluster

if TYPE_CHECKING:
    from ray.cluster_utils import Cluster


log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
INSTALL_HINT = "pip install -e '.[cluster]'"  # as the manual (docs/systems.md) says it
# Environment of every Ray process that `local:N` starts: loopback only, no usage statistics.
# Ray resolves "127.0.0.1" to the machine's first address unless it believes clusters are off
# (ray._private.services.get_node_ip_address), so that switch keeps the driver on loopback too.
LOOPBACK_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
}
LOCAL_NODE_CPUS_ENV = "MLPERF_MIG_NODE_CPUS"  # the CPUs a local:N node emulates its partition on
# room for a node's share of the sample set (ResNet50: 588 KiB a sample) without spilling to disk
LOCAL_OBJECT_STORE_BYTES = 768 * 1024 * 1024
_KEPT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def import_ray() -> ModuleType:
    """The `ray` module, or ClusterError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ClusterError(
            f"--cluster needs Ray, which is not installed here; install it with {INSTALL_HINT}"
        ) from None
    return ray


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse at once an address nothing answers on (Ray itself would retry for minutes)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ClusterError(
            f"no Ray cluster answers at {address} ({exc.strerror or exc}); start one with "
            "`ray start --head` on the head node, or pass its address (see `mlperf-mig "
            "cluster-info --help`)"
        ) from None


def version_error(message: str) -> ClusterError:
    """The one line for Ray's own version-mismatch error, with the install that fixes it."""
    import ray

    return ClusterError(
        f"the Ray cluster runs another Ray or Python version than this driver (Ray "
        f"{ray.__version__}, Python {sys.version.split()[0]} here): {' '.join(message.split())}; "
        "install the cluster's Ray version here, e.g. pip install 'ray==<its version>'"
    )


class ClusterSession:
    """A connection to a Ray cluster (and, for local:N, the cluster itself) for one run."""

    def __init__(
        self,
        spec: ClusterSpec,
        address: str,
        local: Cluster | None = None,
        restore: Callable[[], None] | None = None,
    ) -> None:
        self.spec = spec
        self.address = address
        self._local = local
        self._restore = restore  # undoes the loopback switches of a loopback cluster

    @property
    def emulated_nodes(self) -> bool:
        """True for local:N, whose nodes are processes of this machine, not VMs."""
        return self.spec.kind == "local"

    def close(self) -> None:
        """Disconnect; a local:N cluster is shut down with every process it started."""
        ray = import_ray()
        with contextlib.suppress(Exception):
            ray.shutdown()
        if self._local is not None:
            from mlperf_mig.emulation.cpu_budget import remove_stale_cgroups

            self._local.shutdown()
            self._local = None
            remove_stale_cgroups()  # the CPU quotas of its actors (emulation/cpu_budget.py)
        if self._restore is not None:
            self._restore()
            self._restore = None

    def __enter__(self) -> ClusterSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _init(ray: ModuleType, address: str) -> None:
    """ray.init on an existing cluster, its failures as one line."""
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    except ConnectionError as exc:
        raise ClusterError(
            f"no Ray cluster found at {address!r} ({' '.join(str(exc).split())}); start one "
            "with `ray start --head`, or pass its address as --cluster HOST:PORT"
        ) from None
    except RuntimeError as exc:
        if "version mismatch" in str(exc).lower():
            raise version_error(str(exc)) from None
        raise


def local_node_cpus(nodes: int, cpus: list[int] | None = None) -> list[tuple[int, ...]]:
    """The CPUs each of `nodes` local nodes emulates its partition on: this machine's CPUs
    split evenly (shared when there are fewer CPUs than nodes)."""
    available = sorted(os.sched_getaffinity(0)) if cpus is None else sorted(cpus)
    n = len(available)
    shares = []
    for k in range(nodes):
        low = k * n // nodes
        high = max(low + 1, (k + 1) * n // nodes)
        shares.append(tuple(available[min(i, n - 1)] for i in range(low, high)))
    return shares


def _loopback_only() -> Callable[[], None]:
    """Keep this driver and the processes it starts on loopback; returns what undoes it.

    The switches must be in the environment before Ray is imported (it reads them once, at
    import); where Ray was imported before, its constant is set too."""
    saved = {key: os.environ.get(key) for key in LOOPBACK_ENV}
    os.environ.update(LOOPBACK_ENV)
    try:
        import_ray()
    except ClusterError:
        _put_back(saved)
        raise
    from ray._private import ray_constants

    was = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False

    def restore() -> None:
        ray_constants.ENABLE_RAY_CLUSTER = was
        _put_back(saved)

    return restore


def _put_back(saved: dict[str, str | None]) -> None:
    """Set the environment variables in `saved` back to their values (None: unset)."""
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _start_local(ray: ModuleType, nodes: int) -> tuple[Cluster, str]:
    """A Ray cluster of `nodes` nodes on this machine, on loopback only."""
    from ray.cluster_utils import Cluster

    shares = local_node_cpus(nodes)
    cluster = None
    try:
        for share in shares:
            node_args: dict[str, Any] = {  # Ray's keyword arguments of one node
                "num_cpus": len(share),
                "node_ip_address": "127.0.0.1",
                "object_store_memory": LOCAL_OBJECT_STORE_BYTES,
                "env_vars": {**LOOPBACK_ENV, LOCAL_NODE_CPUS_ENV: ",".join(map(str, share))},
            }
            if cluster is None:
                cluster = Cluster(
                    initialize_head=True,
                    head_node_args={**node_args, "include_dashboard": False},
                )
            else:
                cluster.add_node(**node_args)
        assert cluster is not None
        cluster.wait_for_nodes()
        return cluster, cluster.address
    except BaseException as exc:
        if cluster is not None:
            cluster.shutdown()
        if isinstance(exc, Exception):  # Ray's own startup errors: one line, the cause kept in it
            reason = " ".join(str(exc).split())
            raise ClusterError(
                f"could not start a local Ray cluster of {nodes} nodes ({type(exc).__name__}: "
                f"{reason}); the machine may be overloaded: retry, or ask for fewer nodes"
            ) from None
        raise


def open_cluster(text: str | ClusterSpec) -> ClusterSession:
    """Connect to the cluster `text` names (starting it first for local:N)."""
    spec = parse_cluster(text) if isinstance(text, str) else text
    loopback = spec.kind == "local" or is_loopback(spec.address)
    restore = _loopback_only() if loopback else None
    ray = import_ray()

    if ray.is_initialized():
        ray.shutdown()
    if spec.kind == "local":
        try:
            with _handlers_kept():
                local, address = _start_local(ray, spec.nodes or 1)
        except BaseException:
            if restore is not None:
                restore()
            raise
        session = ClusterSession(spec, address, local, restore)
        try:
            with _handlers_kept():
                _init(ray, address)
        except BaseException:
            session.close()
            raise
        log.info("started a local Ray cluster of %d nodes at %s", spec.nodes, address)
        return session
    address = spec.address or "auto"
    session = ClusterSession(spec, address, restore=restore)
    try:
        if spec.address is not None:
            check_reachable(spec.address)
        with _handlers_kept():
            _init(ray, address)
    except BaseException:
        session.close()
        raise
    return session


@contextlib.contextmanager
def _handlers_kept() -> Iterator[None]:
    """This process's SIGINT, SIGTERM and SIGHUP handlers stay in force through a Ray start.

    Ray installs its own SIGTERM handler in the driver (ray.init: sys.exit(15); a node the
    driver starts: kill that node and exit 1) through ray._private.utils.set_sigterm_handler,
    which is switched off for the block; ray.init's core worker then installs a C++ handler that
    prints a stack dump, which no Python switch reaches, so the handlers in force before the
    block are installed again when it ends (signal.signal sets the C-level handler too). Outside
    the main thread, where Python sets no handlers, nothing is changed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    import ray._private.utils as ray_utils

    saved = {signum: signal.getsignal(signum) for signum in _KEPT_SIGNALS}
    install = ray_utils.set_sigterm_handler
    ray_utils.set_sigterm_handler = _keep_sigterm_handler
    try:
        yield
    finally:
        ray_utils.set_sigterm_handler = install
        for signum, handler in saved.items():
            if (
                handler is not None
            ):  # None: a handler not set from Python, which Python cannot set back
                signal.signal(signum, handler)


def _keep_sigterm_handler(handler: object) -> None:
    """Ray's set_sigterm_handler while a session starts: the handler in force stays."""


def is_loopback(address: str | None) -> bool:
    """True for an address on this machine's loopback (127.0.0.0/8, ::1, localhost)."""
    if address is None:
        return False
    host = address.removeprefix("ray://").rpartition(":")[0].strip("[]")
    return host == "localhost" or host == "::1" or host.startswith("127.")


_active: ClusterSession | None = None


@contextlib.contextmanager
def cluster_scope(text: str | ClusterSpec | None) -> Iterator[ClusterSession | None]:
    """The session of cluster `text` for the duration of the block: the one an outer block
    already opened for it (a run plans and executes on one session), or a new one, closed (and a
    local cluster torn down) when the block ends, however it ends. None: no cluster."""
    global _active
    if text is None:
        yield None
        return
    from mlperf_mig.runner.supervisor import stop_signals

    spec = parse_cluster(text) if isinstance(text, str) else text
    if _active is not None and _active.spec == spec:
        yield _active
        return
    # SIGTERM and SIGHUP stop the block as Ctrl-C does, so the cluster is closed on them too
    with stop_signals():
        session = open_cluster(spec)
        _active = session
        try:
            yield session
        finally:
            _active = None
            session.close()
