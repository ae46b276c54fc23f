"""Tessel: a distributed parameter service for training, from Python.

`tessel.Worker` is the C++ worker SDK (worker/worker.h) through pybind11;
`tessel.torch` is the PyTorch binding built on it (DistributedOptimizer).
Errors: ValueError for bad input, tessel.RecoverableError for a step that
Worker.recover() can repair, tessel.TesselError otherwise.
`tessel.group_job_name(job, g)` names parameter group g's job, and
`tessel.buffers_job_name(job)` the job of its model's buffers (core/job_name.h);
`tessel.train_state_at(blob, step, params)` rewrites a serialize() blob.
`tessel.Mesh` is a hybrid job's worker-to-worker mesh (worker/hybrid.h), with
`partition_job_name`, `one_f_one_b`, `MESH_KINDS` and `MAX_MICRO_BATCHES`;
tessel.torch.parallel builds tensor and pipeline parallelism on it.
"""
from tessel._tessel import (MAX_MICRO_BATCHES, MESH_KINDS, Mesh, RecoverableError, TesselError,
                            Worker, buffers_job_name, group_job_name, one_f_one_b,
                            partition_job_name, train_state_at)

__all__ = ["MAX_MICRO_BATCHES", "MESH_KINDS", "Mesh", "RecoverableError", "TesselError", "Worker",
           "buffers_job_name", "group_job_name", "one_f_one_b", "partition_job_name",
           "train_state_at"]
