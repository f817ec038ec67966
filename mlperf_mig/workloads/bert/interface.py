"""BERT-Large's official MLPerf model interface for SQuAD v1.1 (reference/mlperf.md section 2):
what the graph builder generates and what a user's model.onnx must have."""

from __future__ import annotations

from mlperf_mig.workloads.workload import TensorSpec

SEQ_LEN = 384

INPUTS = tuple(
    TensorSpec(name=n, dtype="int64", shape=(None, SEQ_LEN))
    for n in ("input_ids", "input_mask", "segment_ids")
)
OUTPUTS = tuple(
    TensorSpec(name=n, dtype="float32", shape=(None, SEQ_LEN))
    for n in ("output_start_logits", "output_end_logits")
)
