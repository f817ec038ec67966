"""The part of the `ray` module the cluster rounds use, as a type (the module itself satisfies it).

Ray is imported lazily (it is an optional dependency and costs seconds to import), so the rounds
take the module as an argument; this Protocol says what they call on it instead of `Any`. Ray's
exceptions are imported from `ray.exceptions` where they are caught: the `ray` package binds that
submodule only as a side effect of importing it, which a type checker does not count as a member.
"""

from __future__ import annotations

from typing import Any, Protocol


class RayApi(Protocol):
    """Ray's driver-side calls: start and stop actors, wait for and fetch results, list nodes."""

    def remote(self, *args: Any, **kwargs: Any) -> Any: ...

    def get(self, object_refs: Any, /, *, timeout: float | None = None) -> Any: ...

    def wait(
        self, object_refs: list[Any], /, *, num_returns: int = 1, timeout: float | None = None
    ) -> tuple[list[Any], list[Any]]: ...

    def kill(self, actor: Any, /, *, no_restart: bool = True) -> None: ...

    def nodes(self) -> list[dict[str, Any]]: ...

    def get_runtime_context(self) -> Any: ...
