"""The part of the `ray` module the cluster rounds use, as a type (the module itself satisfies it).

Ray is imported lazily (it is an optional dependency and costs seconds to import), so the rounds
take the module as an argument; this Protocol says what they call on it instead of `Any`. Ray's
exceptions are imported from `ray.exceptions` where they are caught: the `ray` package binds that
submodule only as a side effect of importing it, which a type checker does not count as a member.
"""

from __future__ import annotations

from typing import Any, Protocol

# Ray's own handles, as the rounds hold them (Ray's types are generic over what runs remotely).
RayRef = Any  # a ray.ObjectRef: the future value of one remote call
RayActor = Any  # a Ray actor handle (of a class of cluster/actors.py or cluster/serving.py)
RayRemote = Any  # what ray.remote makes of a class or function: .options(...).remote(...) starts it
RayArgument = Any  # what ray.remote takes: the class or function, or its resource options
RayValue = Any  # a remote call's value as ray.get hands it back
RayContext = Any  # ray.get_runtime_context(): the driver's node, job and worker IDs


class RayApi(Protocol):
    """Ray's driver-side calls: start and stop actors and tasks, wait for and fetch results, list
    nodes."""

    def remote(self, *args: RayArgument, **kwargs: RayArgument) -> RayRemote: ...

    def get(
        self, object_refs: RayRef | list[RayRef], /, *, timeout: float | None = None
    ) -> RayValue: ...

    def wait(
        self, object_refs: list[RayRef], /, *, num_returns: int = 1, timeout: float | None = None
    ) -> tuple[list[RayRef], list[RayRef]]: ...

    def kill(self, actor: RayActor, /, *, no_restart: bool = True) -> None: ...

    def cancel(self, ref: RayRef, /, *, force: bool = False, recursive: bool = True) -> None: ...

    def nodes(self) -> list[dict[str, Any]]: ...

    def get_runtime_context(self) -> RayContext: ...
