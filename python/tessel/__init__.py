"""Tessel: a distributed parameter service for training, from Python.

`tessel.Worker` is the C++ worker SDK (worker/worker.h) through pybind11;
`tessel.torch` is the PyTorch binding built on it (DistributedOptimizer).
Errors: ValueError for bad input, tessel.RecoverableError for a step that
Worker.recover() can repair, tessel.TesselError otherwise.
`tessel.group_job_name(job, g)` names parameter group g's job (core/job_name.h).
"""
from tessel._tessel import RecoverableError, TesselError, Worker, group_job_name

__all__ = ["RecoverableError", "TesselError", "Worker", "group_job_name"]
