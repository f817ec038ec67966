"""The llama3.1-8b interface: a prompt of token ids in, token ids out (reference/llm.md).

A prompt is one row of `input_ids` (int32, padded to PROMPT_TOKENS) and its length in
`input_length`; the answer is a token stream of at most MAX_NEW_TOKENS int32 ids (greedy, the
reference's `max_tokens` 128).
"""

from __future__ import annotations

from mlperf_mig.workloads.workload import TOKEN_STREAM, ResponseFormat, TensorSpec

# The longest prompt a row holds. Inferred: the CNN/DailyMail validation prompts of the reference
# are tokenized with `model_max_length` 8000 and are shorter than this (a longer one is refused by
# name when the dataset is read).
PROMPT_TOKENS = 3072
MAX_NEW_TOKENS = 128
# Synthetic prompts for the tiny generated model: short enough for seconds on a CPU.
SYNTHETIC_PROMPT_TOKENS = 192

INPUTS = (
    TensorSpec(name="input_ids", dtype="int32", shape=(None, PROMPT_TOKENS)),
    TensorSpec(name="input_length", dtype="int32", shape=(None,)),
)
OUTPUTS = (TensorSpec(name="output_ids", dtype="int32", shape=(None, MAX_NEW_TOKENS)),)
RESPONSE = ResponseFormat(kind=TOKEN_STREAM, shape=(MAX_NEW_TOKENS,), dtype="int32")
