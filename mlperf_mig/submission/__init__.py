"""Submission-style output: the MLPerf submission tree, system description and checker.

`write_submission(run_dirs, division=..., submitter=..., outdir=...)` writes the tree the MLCommons
submission checker expects; `check_submission(path)` reports what breaks the rules we know.
"""

from __future__ import annotations

from mlperf_mig.submission.check import Problem, check_submission
from mlperf_mig.submission.writer import SubmissionTree, write_submission

__all__ = ["Problem", "SubmissionTree", "check_submission", "write_submission"]
