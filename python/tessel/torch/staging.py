"""Staging: a parameter group's tensors on a device, copied to and from the
worker's host buffers.

Contract. For a model on a CUDA device (or, for tests, a CPU model with
TESSEL_TORCH_STAGING=1) the model's parameters and gradients are views of
`params` and `grads` here, on the device; the worker's buffers (host) stay
the data path's. Gradients go device -> a page-locked stage (asynchronously,
on a stream of Tessel's, behind the stream that produced them) -> the
worker's buffer, range by range; parameters go the other way after each
step. On the CPU the same copies run synchronously, the CUDA path's logic
where no GPU is.
  - attach(host_params, host_grads): the worker's buffers (after a recovery
    or a load may have moved them); drains what was queued.
  - enqueue(begin, end): grads[begin:end] is final on the current stream.
  - wait(): every queued range is in the worker's buffer (nothing handed over).
  - hand_over(worker): each queued range to worker.gradients_ready as its
    copy lands, in order; the queue is then empty.
  - drain(): waits for the queued copies and forgets them (a skipped step).
  - upload(): the worker's parameters to the device, ordered before any later
    work on the current stream.

Why two stagings. worker/device_staging.h (C++ DeviceStaging) does the same
job for the C++ SDK, and this one cannot be it, nor it this one: each stages
memory its own runtime owns, ordered on its own runtime's streams.
  - Here the device tensors are torch's (its caching allocator: the model's
    parameters and .grad are views of them, so autograd writes gradients in
    place), backward runs on torch's current stream, and the copies are
    ordered against that stream with torch.cuda streams and events. The
    extension (python/BUILD's _tessel.so) links no CUDA and no gpu/ code:
    torch brings its own CUDA runtime.
  - DeviceStaging owns raw device buffers allocated through gpu::Device
    (gpu/device.h) and orders copies on that Device's kCompute, kToHost and
    kToDevice streams, for models that compute through gpu::Device
    (model/device_mlp.h, tessel-train). It also keeps what only the C++ path
    has: DDP's update and top-k compression on the device, half-precision
    casts on the device, per-chunk parameter waits.
Using DeviceStaging from here would mean handing torch's memory and stream to
a second CUDA runtime (gpu/cuda_device's static one) and bridging events
between them. What the two share is the protocol, kept the same on purpose:
gradients leave the device range by range behind the stream that produced
them, are handed to Worker.gradients_ready in order as each copy lands, and
the new parameters go back after Worker.step() before their next reader.

Threads: enqueue may run on autograd's thread (a hook), the rest on the
training thread; torch's autograd finishes backward before step() runs, so
they never overlap.

Example:
    st = Staging(torch.device("cuda"), n, torch.float32)
    st.attach(torch.from_numpy(w.params()), torch.from_numpy(w.grads()))
    st.upload()                 # the model computes on st.params
    ... backward writes st.grads; a hook calls st.enqueue(b, e) per parameter
    st.hand_over(w); w.step(); st.upload()
"""
import torch


class Staging:
    """A parameter group whose tensors live on a device (CUDA; or, for tests, a
    CPU model with TESSEL_TORCH_STAGING=1). The model's parameters and
    gradients are views of `params` and `grads` here, on the device; the
    worker's buffers (host) stay the data path's. Gradients go device -> a
    page-locked stage (asynchronously, on our stream, behind the stream that
    produced them) -> the worker's buffer, range by range; parameters go the
    other way after each step. On the CPU the same copies run synchronously."""

    def __init__(self, device, n, dtype):
        self.device = device
        self.cuda = device.type == "cuda"
        self.params = torch.empty(n, dtype=dtype, device=device)
        self.grads = torch.zeros(n, dtype=dtype, device=device)
        # Asynchronous copies need page-locked host memory.
        self.grad_stage = torch.empty(n, dtype=dtype, pin_memory=self.cuda)
        self.param_stage = torch.empty(n, dtype=dtype, pin_memory=self.cuda)
        self.stream = torch.cuda.Stream(device=device) if self.cuda else None
        self.pending = []  # [event, begin, end, landed in the worker's buffer]
        self.host_params = None
        self.host_grads = None

    def attach(self, host_params, host_grads):
        """The worker's buffers (a recovery or a load may have moved them)."""
        self.drain()
        self.host_params = host_params
        self.host_grads = host_grads

    def enqueue(self, begin, end):
        """grads[begin:end] is final on the current stream: copy it out."""
        if self.cuda:
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(self.stream):
                self.grad_stage[begin:end].copy_(self.grads[begin:end], non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        else:
            self.grad_stage[begin:end].copy_(self.grads[begin:end])
            event = None
        self.pending.append([event, begin, end, False])

    def _land(self, entry):
        event, begin, end, landed = entry
        if not landed:
            if event is not None:
                event.synchronize()
            self.host_grads[begin:end].copy_(self.grad_stage[begin:end])
            entry[3] = True

    def wait(self):
        """Every queued gradient is in the worker's buffer (nothing handed over)."""
        for entry in self.pending:
            self._land(entry)

    def hand_over(self, worker):
        """Hands each queued range to the worker as its copy lands, in order."""
        pending, self.pending = self.pending, []
        for entry in pending:
            self._land(entry)
            worker.gradients_ready(entry[1], entry[2])

    def drain(self):
        """Waits for the queued copies and forgets them (a skipped step, a rebind)."""
        for event, *_ in self.pending:
            if event is not None:
                event.synchronize()
        self.pending = []

    def upload(self):
        """The worker's parameters to the device, before any later work on the
        current stream reads them."""
        if not self.cuda:
            self.param_stage.copy_(self.host_params)
            with torch.no_grad():
                self.params.copy_(self.param_stage)
            return
        self.stream.synchronize()  # the previous upload no longer reads the stage
        self.param_stage.copy_(self.host_params)
        # Work already enqueued that reads the old values runs first.
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream), torch.no_grad():
            self.params.copy_(self.param_stage, non_blocking=True)
        torch.cuda.current_stream(self.device).wait_stream(self.stream)


