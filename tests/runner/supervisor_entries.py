"""Worker entries for the supervisor tests, imported by path in the workers.

Each reports what its worker process looks like from inside (environment, CPU affinity, the
modules it started with), or records its pid and hangs (for the tests that kill the runner).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any


def environment(names: list[str], **_protocol: Any) -> dict[str, str | None]:
    """The values of the variables `names` in the worker (None where unset)."""
    return {name: os.environ.get(name) for name in names}


def affinity(_payload: Any, **_protocol: Any) -> list[int]:
    """The CPUs the worker may run on."""
    return sorted(os.sched_getaffinity(0))


def loaded_modules(names: list[str], **_protocol: Any) -> list[str]:
    """Which of the modules `names` the worker had imported before its entry ran."""
    return [name for name in names if name in sys.modules]


def record_pid_then_hang(folder: str, *, before_start: Any, **_protocol: Any) -> None:
    """Writes the worker's pid into `folder`, waits at the start barrier, then hangs."""
    (Path(folder) / str(os.getpid())).write_text("")
    before_start()
    time.sleep(3600)


def ready_late(_payload: Any, *, before_start: Any, **_protocol: Any) -> str:
    """Waits 2 s before reaching the start barrier, then returns once released."""
    time.sleep(2)
    before_start()
    return "released"


def killed_at_the_barrier(_payload: Any, *, before_start: Any, **_protocol: Any) -> None:
    """SIGKILLs itself half a second after it began waiting at the start barrier."""
    import signal
    import threading

    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGKILL)).start()
    before_start()
    time.sleep(3600)
