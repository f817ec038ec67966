"""A worker entry for the audit-resume tests, imported by name in the workers: the harness's
run_instance with the null backend paced at 2 ms per sample, every sample computed (so that its
audits pass); each worker records its pid in `<instance>/pids/`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from audit_entries import PacedBackend

from mlperf_mig.harness import instance


def paced(task: Any, *, before_start: Any, progress: Any) -> Any:
    """run_instance with a paced null backend that computes every sample."""
    pids = Path(task.outdir) / "pids"
    pids.mkdir(parents=True, exist_ok=True)
    (pids / str(os.getpid())).touch()
    opened = instance.open_task_backend
    instance.open_task_backend = lambda t, b: PacedBackend(opened(t, b), cache=False)
    return instance.run_instance(task, before_start=before_start, progress=progress)
