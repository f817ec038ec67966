"""The part of the `ray` module the cluster rounds use, as a type (the module itself satisfies it).

Ray is imported lazily (it is an optional dependency and costs seconds to import), so the rounds
take the module as an argument; this Protocol says what they call on it instead of `Any`.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any, Protocol


class RayApi(Protocol):
    """Ray's driver-side calls: start and stop actors, wait for and fetch results, list nodes."""

    exceptions: ModuleType  # ray.exceptions: RayError, GetTimeoutError, ActorUnavailableError, ...

    def remote(self, *args: Any, **kwargs: Any) -> Any: ...

    def get(self, object_refs: Any, /, *, timeout: float | None = None) -> Any: ...

    def wait(
        self, object_refs: Sequence[Any], /, *, num_returns: int = 1, timeout: float | None = None
    ) -> tuple[list[Any], list[Any]]: ...

    def kill(self, actor: Any, /, *, no_restart: bool = True) -> None: ...

    def nodes(self) -> list[dict[str, Any]]: ...

    def get_runtime_context(self) -> Any: ...
