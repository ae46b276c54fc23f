"""HybridMesh: this process's place in a hybrid (data x tensor x pipeline) job.

Contract. Made by tessel.torch.init(tensor_parallel=T, pipeline_parallel=P): it
checks T and P against the world size (ValueError naming the numbers before
anything connects), joins the job's worker-to-worker mesh (tessel.Mesh, i.e.
worker/hybrid.h's HybridSession without a worker of its own) and knows this
process's coordinates: replica d, stage p, tensor rank t, numbered as
worker/hybrid_layout.h does (t = rank % T, p = (rank / T) % P, d = rank / (T * P)).
It hands out the tags of tensor-parallel collectives: every tensor rank of a
stage runs the same layers in the same order, so a per-process sequence
number names the same collective on each (step, micro-batch and index fields
of worker/hybrid.h's tag hold its 56 bits). recover() runs the session's
recovery (every process, a new peer generation) and restarts the sequences,
the same on every process. A process tessel-launch --max_restarts started
again ($TESSEL_RESTART_COUNT > 0) joins as a replacement: the survivors,
recovering, welcome it, and its partition worker resumes from the checkpoint
every partition agrees on (the session's resume, done when the worker is
attached); start-up agreements the others made once (Pipeline's, the
replicated parameters') are skipped (`replacement`). The partition's DistributedOptimizer attaches its
worker (attach()), so a lost shard server also ends mesh waits.

Floor. The session's part of a hybrid job, beside session.py (which makes it)
and below tessel.torch.parallel (whose layers and Pipeline reach it through the
session): it imports nothing of tessel.torch, so the imports between the
package's modules stay acyclic (tests/imports_test.py).

Threads: the training thread's (autograd runs the layers' backward there on a
CPU model).

Example:
    h = HybridMesh(cfg, tensor_parallel=2, pipeline_parallel=1)   # cfg: Session.init's
    h.tp, h.t, h.tensor_group                                     # 2, 0 or 1, [r0, r1]
    h.mesh.all_reduce_sum(h.tensor_group, h.tensor_tag("forward_sum"), a, "fc2's sum")
"""
import os
import weakref

import numpy as np
import torch

import tessel


class HybridMesh:
    """See the module's docs."""

    def __init__(self, cfg, tensor_parallel, pipeline_parallel, mesh=None):
        """mesh: an object with tessel.Mesh's interface to use instead of joining the
        job's mesh (tests: an in-process fake, tests/fakes.py's MeshWorld); it must
        have this rank and these sizes."""
        world = cfg["world_size"]
        for name, v in (("tensor_parallel", tensor_parallel),
                        ("pipeline_parallel", pipeline_parallel)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"tessel.torch.init: {name} must be an int >= 1, got {v!r}")
        per = tensor_parallel * pipeline_parallel
        if world % per:
            raise ValueError(
                f"tessel.torch.init: tensor_parallel={tensor_parallel} x pipeline_parallel="
                f"{pipeline_parallel} = {per} does not divide the world size {world}: start a "
                f"multiple of {per} processes (tessel-launch --nproc_per_node) or change "
                f"tensor_parallel or pipeline_parallel")
        self.tp, self.pp, self.dp = tensor_parallel, pipeline_parallel, world // per
        self.job = cfg["job"]
        # A process tessel-launch --max_restarts started again: a replacement the
        # running job welcomes, or one of a whole job restarting.
        restarted = int(os.environ.get("TESSEL_RESTART_COUNT", "0") or 0) > 0
        if mesh is not None:
            got = (mesh.rank, mesh.dp, mesh.tp, mesh.pp)
            if got != (cfg["rank"], self.dp, self.tp, self.pp):
                raise ValueError(f"HybridMesh: the mesh given is rank {got[0]} of dp x tp x pp = "
                                 f"{got[1]} x {got[2]} x {got[3]}; this process is rank "
                                 f"{cfg['rank']} of {self.dp} x {self.tp} x {self.pp}")
        self.mesh = mesh if mesh is not None else tessel.Mesh(
            cfg["registry"], cfg["job"], cfg["rank"], world, dp=self.dp, tp=self.tp,
            pp=self.pp, fingerprint="tessel.torch", ucx_tls=cfg["ucx_tls"], token=cfg["token"],
            connect_timeout_s=cfg["connect_timeout_s"], step_timeout_s=cfg["step_timeout_s"],
            resume=restarted)
        # Welcomed into a running job: the others did the start-up agreements (a
        # Pipeline's, the replicated parameters') long ago; this process skips them,
        # until its first step (DistributedOptimizer.step clears it): a Pipeline or
        # optimizer made after that is made by everyone, and agrees with everyone.
        self.replacement = self.mesh.replacement
        self.rank = cfg["rank"]
        self.d, self.p, self.t = self.mesh.coords
        self.tensor_group = list(self.mesh.tensor_group)
        self.data_group = list(self.mesh.data_group)
        self.pipeline_group = list(self.mesh.pipeline_group)
        self.next_rank, self.prev_rank = self.mesh.next_rank, self.mesh.prev_rank
        self._tensor_seq = 0
        self._config_seq = 0
        self._attached = None  # the worker the mesh holds (attach())
        self.pipelines = weakref.WeakSet()  # their step numbers restart with a recovery

    def describe(self, rank=None):
        """'rank 5 (d1 p0 t1)' (this process's by default)."""
        return self.mesh.describe(self.rank if rank is None else rank)

    def tensor_tag(self, kind):
        """The tag of this process's next tensor-parallel collective."""
        seq = self._tensor_seq
        self._tensor_seq += 1
        return self.mesh.tag(tessel.MESH_KINDS[kind], seq >> 24, (seq >> 12) & 4095,
                             seq & 4095)

    def config_tag(self):
        """The tag of the next start-up agreement (a Pipeline's construction): the
        same on every process that constructs the same things in the same order."""
        self._config_seq += 1
        return self.mesh.tag(tessel.MESH_KINDS["config"], 0, 1, self._config_seq & 4095)

    def partition_job(self, job=None):
        """The shard-server job of this process's partition: JOB.p<p>.t<t>."""
        return tessel.partition_job_name(job or self.job, self.p, self.t)

    def replicate(self, shared):
        """Makes every parameter in `shared` tensor rank 0's (one broadcast over the
        tensor group), so replicated parameters (a row-parallel bias, layer norms)
        start identical; their gradients are then identical too, and so are their
        updates. `shared`: the parameters no tensor-parallel layer splits, which the
        caller knows (parallel/layers.py's replicated_parameters): this module sits
        below the layers, beside the session that makes it."""
        if self.tp == 1 or self.replacement:  # a replacement's come from the checkpoint
            return
        if not shared:
            return
        with torch.no_grad():
            flat = torch.cat([p.detach().reshape(-1).to("cpu") for p in shared])
            raw = self.mesh.broadcast(self.tensor_group, self.tensor_group[0],
                                      self.tensor_tag("gather"), flat.numpy(),
                                      "tensor rank 0's replicated parameters")
            flat = torch.from_numpy(np.frombuffer(raw, dtype=np.float32).copy())
            at = 0
            for p in shared:
                p.copy_(flat[at:at + p.numel()].view_as(p))
                at += p.numel()

    def attach(self, worker):
        """The partition's worker (None: detach). A restarted process resumes through
        it: attach before the worker's layout is registered. The mesh keeps a pointer
        to it: detach it before it is closed (detach())."""
        self._attached = worker  # first: the mesh holds it even if attaching fails
        self.mesh.attach(worker)
        if worker is None:
            self._attached = None

    def detach(self, worker):
        """Detaches `worker` if it is the one attached: an optimizer closing (or
        refused half made) leaves a later optimizer's worker attached."""
        if worker is not None and self._attached is worker:
            self.attach(None)

    def recover(self, why):
        """The session's recovery (worker/hybrid.h HybridSession::Recover), then every
        sequence and pipeline step number restarts (the same on every process)."""
        self.mesh.recover(str(why))
        self._tensor_seq = 0
        for p in list(self.pipelines):
            p._steps = 0

    def finish(self):
        self.mesh.finish()

    def close(self):
        try:
            self.attach(None)
        finally:
            self.mesh.close()
