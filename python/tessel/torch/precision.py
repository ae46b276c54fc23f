"""The strategies and precisions a DistributedOptimizer takes, and the torch dtype
a model computes in under each precision.

Contract. STRATEGIES and PRECISIONS are the accepted names; HALF maps a half
precision ("bf16", "fp16") to the torch dtype of the model's parameters and
gradients, which are then views of the worker's half buffers (the servers keep
fp32 masters). model_dtype() is float32 for "fp32". Constants only: safe from
any thread.

Example:
    model_dtype("bf16")    # torch.bfloat16
    "fp16" in HALF         # True: half buffers on the worker
"""
import torch

STRATEGIES = ("ddp", "zero1", "zero2", "fsdp")
PRECISIONS = ("fp32", "bf16", "fp16")
HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}


def model_dtype(precision):
    """The dtype the model's parameters and gradients have under `precision`."""
    return HALF.get(precision, torch.float32)
