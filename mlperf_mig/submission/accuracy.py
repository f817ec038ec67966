"""accuracy/ of a result: the truncated accuracy log and accuracy.txt with its hash line.

Follows tools/submission/truncate_accuracy_log.py: the hash is the SHA-256 of the FULL
mlperf_log_accuracy.json; a log above 10 KiB keeps its first and last 4 KiB around a marker. The
accuracy line is what the reference accuracy scripts print (accuracy-imagenet.py:
"accuracy=76.456%, good=38228, total=50000"; accuracy-squad.py: '{"exact_match": .., "f1": ..}'),
which the checker reads with the workload's accuracy pattern (rules.accuracy_pattern).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

import attrs

from mlperf_mig._io import atomic_write_bytes, atomic_write_text
from mlperf_mig.submission import rules


@attrs.frozen(kw_only=True)
class AccuracyFigures:
    """The metric of an accuracy run, as the reference script reports it."""

    model: str  # checker model class: "resnet", "bert-99", "bert-99.9"
    values: Mapping[str, float]  # the workload's accuracy_figures (resnet: accuracy, good, total)

    def line(self) -> str:
        """The line the reference accuracy script prints for these figures."""
        return rules.workload_of_model(self.model).accuracy_line(self.values)


def how_computed(model: str) -> list[str]:
    """accuracy.txt's lines on how the figure was computed and how to check it ("#" lines, which
    no checker pattern matches)."""
    script = rules.workload_of_model(model).reference_script
    return [
        f"# computed by mlperf-mig as {script.how}",
        f"# check it on the full log (its sha256 is the hash line): {script.command}   "
        f"({script.why})",
    ]


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def truncate(data: bytes) -> bytes:
    """The accuracy log as the submission keeps it: whole up to 10 KiB, else head + tail."""
    if len(data) <= rules.MAX_ACCURACY_LOG_SIZE:
        return data
    return data[: rules.VIEWABLE_SIZE] + rules.TRUNCATION_MARKER + data[-rules.VIEWABLE_SIZE :]


def is_truncated(data: bytes) -> bool:
    """True for a log cut by `truncate` (or by the MLCommons tool)."""
    return rules.TRUNCATION_MARKER in data and len(data) == (
        2 * rules.VIEWABLE_SIZE + len(rules.TRUNCATION_MARKER)
    )


def accuracy_txt(figures: AccuracyFigures | None, full_log_hash: str, note: str = "") -> str:
    """accuracy.txt: the reference accuracy line (when meaningful) with how it was computed and
    the official script's command, notes, then the hash line."""
    lines = []
    if figures is not None:
        lines += [figures.line(), *how_computed(figures.model)]
    if note:
        lines.append(note)
    lines.append(f"hash={full_log_hash}")
    return "\n".join(lines) + "\n"


def write_accuracy_files(
    full_log: str | os.PathLike[str], dest_dir: Path, figures: AccuracyFigures | None, note: str
) -> str:
    """Write the truncated log and accuracy.txt into `dest_dir`; return the full log's hash."""
    data = Path(full_log).read_bytes()
    digest = sha256_of(data)
    atomic_write_bytes(dest_dir / "mlperf_log_accuracy.json", truncate(data))
    atomic_write_text(dest_dir / "accuracy.txt", accuracy_txt(figures, digest, note))
    return digest
