"""ResNet50-v1.5's official MLPerf model interface (reference/mlperf.md section 2): what the graph
builder generates and what a user's resnet50_v1.onnx must have."""

from __future__ import annotations

from mlperf_mig.workloads.workload import TensorSpec

INPUTS = (TensorSpec(name="input_tensor:0", dtype="float32", shape=(None, 3, 224, 224)),)
OUTPUTS = (
    TensorSpec(name="ArgMax:0", dtype="int64", shape=(None,)),
    TensorSpec(name="softmax_tensor:0", dtype="float32", shape=(None, 1001)),
)
