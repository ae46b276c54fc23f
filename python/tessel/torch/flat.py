"""FlatGroup: a parameter group trained with ddp, zero1 or zero2.

Contract. After bind() every parameter's storage is a slice of the worker's
flat parameter buffer and its .grad (when not None) a slice of the worker's
gradient buffer (with a device model: of the Staging copies, staging.py), in
the group's order: backward writes gradients straight into what is pushed
and a step writes the new values straight into the model. With overlap an
autograd hook per parameter hands its range to the worker (GradientsReady)
once backward_passes_per_step backward passes produced it; the first one
sends changed settings first. collect_grads() puts what the hooks did not see
(a .grad torch replaced, or None) into the buffers before a step; rebind()
points the parameters at the worker's buffers again after a load or a
recovery moved them. close() gives the parameters memory of their own.
The hooks run with overlap=False too, to note when backward's last pass of
the step handed the gradients over (step() pushes them then): the gradient
buffer's _version at that point. collect_grads() raises RuntimeError if it
moved since (an in-place change: torch's clip_grad_norm_, p.grad.mul_()),
which would otherwise be lost or apply to this rank's share alone.

Threads: the hooks run during backward (autograd's thread for a CUDA model);
everything else on the training thread.

Example:
    g = FlatGroup(0, params, names, hyper_source, settings)
    g.worker = tessel.Worker(...); g.bind()     # params now view the worker's buffer
    loss.backward()                             # hooks: gradients_ready per parameter
    g.check_layout(); g.collect_grads(); g.step(); g.end_step()
"""
import torch

from tessel.torch.group import ParamGroup, changed_after_hand_over
from tessel.torch.precision import HALF, model_dtype
from tessel.torch.staging import Staging


class FlatGroup(ParamGroup):
    """One group's parameters as views of its worker's flat buffers (see the module's docs)."""

    def __init__(self, index, params, names, hyper_source, settings):
        super().__init__(index, params, names, hyper_source, settings)
        self.ranges = []  # (begin, end) of each parameter in the flat buffers
        self.flat_params = None
        self.flat_grads = None
        self.grad_views = []
        self.param_ptrs = []
        self.ready = [0] * len(params)  # backward passes seen per parameter this step
        self.staging = None  # Staging for parameters on a device
        self.staged = [False] * len(params)  # per parameter: its gradient was queued this step
        # Backward handed this step's gradients over (the last pass's hooks ran), and
        # the gradient buffer's _version then: an in-place change after it is refused.
        self.handed = False
        self.grad_version = None

    # --- binding -------------------------------------------------------------
    def bind(self):
        offset = 0
        for p in self.params:
            self.ranges.append((offset, offset + p.numel()))
            offset += p.numel()
        self.register_layout()
        if self.settings.strategy == "ddp":
            self.worker.synchronize_optimizer_state()  # every rank takes rank 0's parameters
        if self.settings.staged:
            self.staging = Staging(self.settings.device, offset,
                                   model_dtype(self.settings.precision))
        self.rebind()
        self.flat_grads.zero_()
        self.staged = [False] * len(self.params)
        self.ready = [0] * len(self.params)
        for i, p in enumerate(self.params):
            self.hooks.append(self._hook(i, p))

    def _hook(self, i, p):
        # The AccumulateGrad node of p: its post-hook runs once p.grad holds
        # this backward's gradient (Horovod's way, torch 1.x). Without overlap it
        # only notes the hand-over (step() pushes).
        acc = p.expand_as(p).grad_fn.next_functions[0][0]
        begin, end = self.ranges[i]

        def hook(*_):
            if self.worker is None:  # closed
                return
            self._adopt_grad(i, p)
            if not self.settings.sync:  # no_sync(): torch adds into .grad in place
                return
            # Staged (on a CUDA model this runs on autograd's thread), step()
            # sends the settings and hands the gradients over.
            overlap = self.settings.overlap
            if overlap and self.staging is None and not any(self.ready):  # settings first
                self.sync_hyper()
            self.ready[i] += 1
            if self.ready[i] == self.settings.backward_passes_per_step:
                self.handed = True
                if overlap and self.staging is None:
                    self.worker.gradients_ready(begin, end)
                elif overlap:
                    self.staging.enqueue(begin, end)
                    self.staged[i] = True
            if self.handed:  # the buffer's version once backward wrote this gradient
                self.grad_version = self.flat_grads._version

        acc.register_hook(hook)
        return acc  # keep the node alive

    def rebind(self):
        """Points the parameters at the worker's buffers again (a load or a
        recovery may have moved them)."""
        w = self.worker
        if self.settings.precision in HALF:  # the model computes in half; servers keep fp32
            dtype = HALF[self.settings.precision]
            self.flat_params = torch.from_numpy(w.half_params()).view(dtype)
            self.flat_grads = torch.from_numpy(w.half_grads()).view(dtype)
        else:
            self.flat_params = torch.from_numpy(w.params())
            self.flat_grads = torch.from_numpy(w.grads())
        if self.staging is not None:  # the model's tensors are the device's copies
            self.staging.attach(self.flat_params, self.flat_grads)
            self.staging.upload()
            self.flat_params, self.flat_grads = self.staging.params, self.staging.grads
            self.staged = [False] * len(self.params)
        self.grad_views = []
        for p, (b, e) in zip(self.params, self.ranges):
            with torch.no_grad():
                p.data = self.flat_params[b:e].view(p.shape)
            view = self.flat_grads[b:e].view(p.shape)
            self.grad_views.append(view)
            if p.grad is not None:  # None stays None, as torch's optimizer sees it
                p.grad = view
        self.param_ptrs = [p.data_ptr() for p in self.params]
        self.handed = False  # new buffers: a step starts over

    # --- a step ----------------------------------------------------------------
    def check_layout(self):
        for i, p in enumerate(self.params):
            if tuple(p.shape) != self.shapes[i] or p.data_ptr() != self.param_ptrs[i]:
                raise ValueError(
                    f"parameter {self.names[i]} was replaced or reshaped (now {tuple(p.shape)}, "
                    f"was {self.shapes[i]}) after the DistributedOptimizer was made; Tessel "
                    f"keeps the registered layout: make a new optimizer for a new model")

    def collect_grads(self):
        """Every parameter's gradient in the worker's buffer; has_grad says which
        have one (torch's p.grad is not None). A parameter without one pushes zeros
        (part of the mean if another rank has one) and keeps .grad None.
        RuntimeError (changed_after_hand_over) if a gradient changed in place since
        backward handed it over; nothing is pushed then."""
        if self.handed and self.flat_grads._version != self.grad_version:
            raise changed_after_hand_over(
                [n for n, p in zip(self.names, self.params) if p.grad is not None])
        for i, p in enumerate(self.params):
            self.has_grad[i] = p.grad is not None
            if p.grad is None:
                self.grad_views[i].zero_()
            else:
                self._adopt_grad(i, p)
        if self.staging is not None:  # what backward's hooks did not queue
            for i, (b, e) in enumerate(self.ranges):
                if not self.staged[i]:
                    self.staging.enqueue(b, e)
                    self.staged[i] = True
        if self.handed:  # its own writes above are not the user's
            self.grad_version = self.flat_grads._version

    def _adopt_grad(self, i, p):
        """p.grad back into the worker's buffer if something replaced it."""
        view = self.grad_views[i]
        if p.grad is None:
            return
        if p.grad.data_ptr() != view.data_ptr():
            view.copy_(p.grad)
            p.grad = view

    def grad_tensors(self):
        """The tensors holding this step's gradients (checked for overflow)."""
        return [self.flat_grads]

    def push_rest(self):
        if self.staging is not None:  # the device's copies, as step() hands them over
            self.staging.hand_over(self.require_worker())

    def step(self):
        w = self.require_worker()
        if self.staging is not None:
            self.staging.hand_over(w)
        w.step()
        if self.staging is not None:
            self.staging.upload()

    def end_step(self):
        self.ready = [0] * len(self.params)
        self.staged = [False] * len(self.params)
        self.handed = False

    def drop_gradients(self):
        """A skipped step: this step's gradients are forgotten."""
        if self.staging is not None:
            self.staging.drain()
            self.staged = [False] * len(self.params)
        self.flat_grads.zero_()
        self.ready = [0] * len(self.params)
        self.handed = False

    def recovered(self):
        """After worker.recover(): the buffers may have moved; gradients start over."""
        self.rebind()
        self.flat_grads.zero_()

    def loaded(self):
        """After worker.deserialize()."""
        self.rebind()

    # --- the rest of the optimizer's interface --------------------------------
    def zero_grad(self, set_to_none):
        self.handed = False
        self.ready = [0] * len(self.params)
        if set_to_none:
            for p in self.params:
                p.grad = None
            return
        self.flat_grads.zero_()
        for p, view in zip(self.params, self.grad_views):
            if p.grad is not None:
                p.grad = view

    def hold_all(self):
        """Nothing to gather: the parameters are always held."""
        return []

    def full_values(self):
        """Parameters not held now, by index: none (model_state.py)."""
        return {}

    def flat_slice(self, begin, end):
        """Elements [begin, end) of the group's flat parameters cut by tensor:
        {index: (offset in the tensor, 1-D copy)}."""
        out = {}
        for i, (b, e) in enumerate(self.ranges):
            lo, hi = max(b, begin), min(e, end)
            if lo < hi:
                out[i] = (lo - b, self.flat_params[lo:hi].detach().clone())
        return out

    def load_params(self, values):
        """New parameters (fp32, the group's flat order) onto the servers; the
        optimizer state and step stay. Collective."""
        w = self.require_worker()
        w.load_params(values)
        if self.settings.strategy == "ddp":  # each rank loaded its own copy: rank 0's win
            w.synchronize_optimizer_state()
        self.loaded()

    def mean_gradients(self):
        """The mean over ranks of this step's gradients, per parameter (copies)."""
        self.collect_grads()
        if self.staging is not None:
            self.staging.wait()
        mean = torch.from_numpy(self.require_worker().synchronize_gradients())
        return [mean[b:e].view(p.shape).clone().to(p.device)
                for p, (b, e) in zip(self.params, self.ranges)]

    def close(self):
        """Leaves the job; the parameters move into memory of their own first."""
        if self.worker is None:
            return
        with torch.no_grad():
            if self.settings.precision in HALF:  # the fp32 masters, as the model was made
                full = torch.from_numpy(self.worker.gather_all())
                for p, (b, e) in zip(self.params, self.ranges):
                    p.data = full[b:e].view(p.shape).clone().to(p.device)
                    p.grad = None
            else:
                for p in self.params:
                    p.data = p.data.clone()
                    p.grad = None if p.grad is None else p.grad.clone()
        if self.staging is not None:
            self.staging.drain()
            self.staging = None
        self.worker.close()
        self.worker = None
