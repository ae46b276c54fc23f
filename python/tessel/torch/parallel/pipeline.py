"""Pipeline: one stage of a pipeline-parallel model, run 1F1B over micro-batches.

Contract. Every process of a hybrid job (tessel.torch.init(pipeline_parallel=P))
makes a Pipeline of its own stage module, with the same micro_batches on every
stage (checked over the pipeline at construction: ValueError naming both
stages' numbers) and a loss_fn on the last stage. pipe.step(inputs, targets)
cuts the replica's batch into M micro-batches of equal rows (the first stage
reads `inputs`, the last `targets`; ValueError if M does not divide their
rows) and runs worker/hybrid.h's 1F1B schedule: a forward takes the stage's
input (stage 0: its rows of `inputs`; otherwise the previous stage's output,
received over UCX) and sends its output on; the last stage computes
loss_fn(output, targets) and backpropagates loss / M; a backward receives the
gradient of the stage's output from the next stage and sends its input's
gradient back. Gradients accumulate over the micro-batches in micro-batch
order (through DistributedOptimizer.no_sync() when the stage's optimizer is
bound, so each parameter is handed over once, after the last), so the stage
holds the gradient of its replica's mean loss for opt.step(). step() returns
that mean loss (a float) on every stage (the last stage's, broadcast), or
None when a lost shard server or process made the stage's optimizer
(recovery=True) roll every process back: opt.step() then applies nothing and
opt.step_count says where to go on.
Activations may be any float dtype and shape (a header carries them); a stage
whose forward or backward fails sends the error on to its neighbours, so the
whole pipeline raises it (naming the stage) instead of waiting out the
deadline. Messages carry (step, micro-batch, stage boundary) tags: sends
never block, so the schedule cannot deadlock. A step that raised leaves its
step number behind on every stage (what it left in flight is never taken for
a later step's): zero the gradients and call step() again. A stage without
parameters runs on the CPU.

Threads: the training thread's.

Example:
    tt.init(pipeline_parallel=2)
    stage = [block0, block1][tt.parallel.pipeline_stage()]
    pipe = Pipeline(stage, micro_batches=4, loss_fn=nn.MSELoss())
    opt = tt.DistributedOptimizer(torch.optim.SGD(stage.parameters(), lr=0.1), model=stage)
    opt.zero_grad(); loss = pipe.step(x, y); opt.step()
"""
import contextlib
import struct

import numpy as np
import torch

import tessel
from tessel.torch.parallel.layers import hybrid_of

_MAGIC = b"TPA1"
_OK, _FAILED = 0, 1
# dtype <-> (code, the NumPy dtype its bytes are carried as)
_DTYPES = {torch.float32: (0, np.float32), torch.float64: (1, np.float64),
           torch.float16: (2, np.float16), torch.bfloat16: (3, np.int16)}
_CODES = {code: (dt, npd) for dt, (code, npd) in _DTYPES.items()}


class StageError(RuntimeError):
    """Another stage of the pipeline failed; the message names it."""


def _pack(t):
    if t.dtype not in _DTYPES:
        raise TypeError(f"a pipeline activation must be a floating-point tensor; got {t.dtype}")
    code, npd = _DTYPES[t.dtype]
    data = t.detach().to("cpu").contiguous()
    if t.dtype == torch.bfloat16:
        data = data.view(torch.int16)
    head = _MAGIC + struct.pack("<BBH", _OK, code, t.dim()) + struct.pack(f"<{t.dim()}q", *t.shape)
    return head + data.numpy().astype(npd, copy=False).tobytes()


def _pack_error(text):
    return _MAGIC + struct.pack("<BBH", _FAILED, 0, 0) + text.encode()


def _unpack(raw, device, what):
    if raw[:4] != _MAGIC:
        raise StageError(f"{what}: not a pipeline message")
    status, code, ndim = struct.unpack_from("<BBH", raw, 4)
    if status == _FAILED:
        raise StageError(raw[8:].decode(errors="replace"))
    shape = struct.unpack_from(f"<{ndim}q", raw, 8)
    dtype, npd = _CODES[code]
    arr = np.frombuffer(raw, dtype=npd, offset=8 + 8 * ndim).copy().reshape(shape)
    t = torch.from_numpy(arr)
    if dtype == torch.bfloat16:
        t = t.view(torch.bfloat16)
    return t.to(device)


def _describe_shape(t):
    return f"[{', '.join(str(d) for d in t.shape)}] {str(t.dtype).replace('torch.', '')}"


class Pipeline:
    """See the module's docs."""

    def __init__(self, stage_module, micro_batches=1, loss_fn=None, *, session=None):
        h = hybrid_of(session, "Pipeline")
        if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or not (
                1 <= micro_batches <= tessel.MAX_MICRO_BATCHES):
            raise ValueError(f"Pipeline: micro_batches must be an int in [1, "
                             f"{tessel.MAX_MICRO_BATCHES}], got {micro_batches!r}")
        self.h = h
        self.module = stage_module
        self.micro_batches = micro_batches
        self.loss_fn = loss_fn
        self.stage, self.stages = h.p, h.pp
        self.first, self.last = h.p == 0, h.p == h.pp - 1
        if self.last and loss_fn is None:
            raise ValueError(f"Pipeline: the last stage ({h.describe()}) needs loss_fn")
        self._steps = 0
        self._check_agreement()
        h.pipelines.add(self)
        self.schedule = tessel.one_f_one_b(self.stage, self.stages, micro_batches)

    def _check_agreement(self):
        """Every stage of this pipeline was made with the same micro_batches."""
        h = self.h
        mine = struct.pack("<i", self.micro_batches)
        tag = h.config_tag()
        if h.pp == 1 or h.replacement:  # the running job agreed at its start
            return
        theirs = [struct.unpack("<i", b)[0] for b in
                  h.mesh.all_gather(h.pipeline_group, tag, mine, "the pipeline's micro_batches")]
        for stage, m in enumerate(theirs):
            if m != self.micro_batches:
                raise ValueError(
                    f"Pipeline: stage {self.stage} ({h.describe()}) was made with micro_batches="
                    f"{self.micro_batches} but stage {stage} ({h.describe(h.pipeline_group[stage])}"
                    f") with micro_batches={m}: every stage must cut the batch the same way")

    def _tag(self, kind, micro, boundary):
        return self.h.mesh.tag(tessel.MESH_KINDS[kind], self._steps, micro, boundary)

    def _chunks(self, batch, name):
        if batch is None:
            raise ValueError(f"Pipeline.step: stage {self.stage} needs {name}")
        n = batch.shape[0]
        if n % self.micro_batches:
            raise ValueError(f"Pipeline.step: {name} has {n} rows; micro_batches="
                             f"{self.micro_batches} does not divide them")
        return torch.split(batch, n // self.micro_batches)

    def _optimizer(self):
        ref = getattr(self.module, "_tessel_optimizer", None)
        return ref() if ref is not None else None

    def step(self, inputs=None, targets=None):
        """One step's forwards and backwards over the micro-batches (see the module's
        docs); returns the replica's mean loss."""
        first_param = next(iter(self.module.parameters()), None)  # none: a stage of functions
        device = first_param.device if first_param is not None else torch.device("cpu")
        xs = self._chunks(inputs, "inputs") if self.first else None
        ys = self._chunks(targets, "targets") if self.last else None
        held = {}  # micro-batch -> (input, output or loss)
        self._sent = set()  # (kind, micro-batch) sent this step
        losses = []
        opt = self._optimizer()
        try:
            for forward, j in self.schedule:
                if forward:
                    held[j] = self._forward(j, xs, ys, device, losses)
                else:
                    last_pass = j == self.micro_batches - 1
                    quiet = opt.no_sync() if opt is not None and not last_pass else \
                        contextlib.nullcontext()
                    with quiet:
                        self._backward(j, held.pop(j))
        except tessel.RecoverableError as e:  # a lost shard server or process
            if opt is None or not opt.recovery:
                self._steps += 1  # (see below)
                raise
            opt.abandon_step(e)  # every process rolls back (step numbers restart at 0)
            return None
        except tessel.TesselError:
            self._steps += 1
            raise  # the mesh's own failure (a deadline, a peer gone): every peer sees it
        except StageError as e:  # another stage's: on to the neighbour on the other side
            self._fail_step(_pack_error(str(e)))
            raise
        except Exception as e:  # this stage's own compute: tell the others, then raise
            text = str(e)
            if not text.startswith("pipeline stage"):
                text = f"pipeline stage {self.stage} ({self.h.describe()}) failed: {text}"
            self._fail_step(_pack_error(text))
            raise
        try:
            loss = float(torch.stack(losses).mean()) if self.last else 0.0
            loss = self._share_loss(loss)
        finally:
            self._steps += 1
        return loss

    def _fail_step(self, error):
        """Tells the neighbours, then leaves the step's number behind: its messages
        (the error sent on, activations no one took) may still be in flight, and the
        next step must not meet them under the same tags."""
        try:
            self._fail_neighbours(error)
        finally:
            self._steps += 1

    def _forward(self, j, xs, ys, device, losses):
        h = self.h
        if self.first:
            x = xs[j]
        else:
            raw = h.mesh.recv(h.prev_rank, self._tag("activation", j, self.stage - 1),
                              f"micro-batch {j}'s activation from stage {self.stage - 1}")
            x = _unpack(raw, device, "activation").requires_grad_(True)
        try:
            out = self.module(x)
        except tessel.TesselError:
            # A tensor-parallel layer's wait inside the module: a lost shard
            # server or peer (RecoverableError) must reach step()'s handlers
            # as itself, not as this stage's own failure.
            raise
        except Exception as e:
            raise RuntimeError(f"pipeline stage {self.stage} ({h.describe()}): its forward failed "
                               f"on micro-batch {j}'s input, {_describe_shape(x)}"
                               f"{'' if self.first else f' from stage {self.stage - 1}'}: {e}"
                               ) from e
        if self.last:
            loss = self.loss_fn(out, ys[j])
            if loss.dim() != 0:
                raise ValueError(f"Pipeline: loss_fn returned shape {tuple(loss.shape)}; it must "
                                 f"return a scalar (a reduction such as the mean)")
            losses.append(loss.detach())
            return x, loss
        self._send(h.next_rank, "activation", j, self.stage, _pack(out))
        return x, out

    def _backward(self, j, held):
        h = self.h
        x, out = held
        if self.last:
            (out / self.micro_batches).backward()
        else:
            raw = h.mesh.recv(h.next_rank, self._tag("activation_grad", j, self.stage),
                              f"the gradient of micro-batch {j}'s activation from stage "
                              f"{self.stage + 1}")
            grad = _unpack(raw, out.device, "activation gradient")
            if grad.shape != out.shape:
                raise ValueError(f"pipeline stage {self.stage}: the gradient of its output from "
                                 f"stage {self.stage + 1} is {_describe_shape(grad)}, the output "
                                 f"{_describe_shape(out)}")
            if out.requires_grad:  # else nothing before it learns (a first stage of functions)
                torch.autograd.backward(out, grad)
        if not self.first:
            g = x.grad if x.grad is not None else torch.zeros_like(x)  # input unused
            self._send(h.prev_rank, "activation_grad", j, self.stage - 1, _pack(g))

    def _send(self, peer, kind, j, boundary, payload):
        self.h.mesh.send(peer, self._tag(kind, j, boundary), payload)
        self._sent.add((kind, j))

    def _fail_neighbours(self, text):
        """Sends an error message on every tag a neighbour may be waiting on this step."""
        h = self.h
        for j in range(self.micro_batches):
            if not self.last and ("activation", j) not in self._sent:
                self._send(h.next_rank, "activation", j, self.stage, text)
            if not self.first and ("activation_grad", j) not in self._sent:
                self._send(h.prev_rank, "activation_grad", j, self.stage - 1, text)

    def _share_loss(self, loss):
        h = self.h
        if h.pp == 1:
            return loss
        raw = h.mesh.broadcast(h.pipeline_group, h.pipeline_group[-1],
                               self._tag("loss", 0, 0), struct.pack("<d", loss),
                               "the step's loss from the last stage")
        return struct.unpack("<d", raw)[0]
