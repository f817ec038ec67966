"""The multi-instance runner: one worker per MIG instance, aggregation, sweeps."""
