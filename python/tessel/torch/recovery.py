"""Recovery: what a DistributedOptimizer does with a step lost to a lost member.

Contract. Recovery(owner, enabled, strategy, checkpoint_every_steps) holds one
optimizer's recovery state (`enabled`, the rollback `count`, whether the step
in flight was abandoned, the step the process resumed at) and decides:
  - whether recovery can be on: zero1, zero2 or fsdp with
    checkpoint_every_steps >= 1 (the constructor) and one parameter group
    (check_groups; each group is a job, and their checkpoints could roll back
    to different steps). ValueError before anything connects.
  - what a tessel.RecoverableError does (a group's step in run_steps, or one
    raised outside step() given to abandon): with recovery off it is raised
    again, unchanged; with recovery on the job rolls back and the step
    returns. Any other error (tessel.TesselError included) passes through
    untouched, with nothing rolled back.
  - a rollback (roll_back), always in this order: the hybrid session's
    recover(why) where the owner has one (every process of the mesh to the
    newest checkpoint complete in every partition), else the first group's
    worker.recover() (the latest checkpoint); count + 1; each group's
    recovered(); the owner's step-local state forgotten
    (owner._forget_step()); the held steps' recovered() (the next step is
    held as a restarted rank's first is); rank 0's buffer store restores the
    checkpoint's buffers (restore(owner.step_count)) where there is one.
  - an abandoned step (abandon): rolled back as above, and the next step()
    applies nothing: skip_abandoned() drops each group's gradients and says
    True exactly once.
The owner (DistributedOptimizer) provides _groups, _hybrid, _held,
_buffer_store (each read at the time of use: close() clears some),
step_count and _forget_step(). Every rank of a job sees the same errors in
the same step, so they roll back together.

Threads: the training thread's.

Example (what DistributedOptimizer does):
    rec = Recovery(opt, True, "zero2", checkpoint_every_steps=5)
    if rec.skip_abandoned(): return False     # in step()
    applied = rec.run_steps()                 # False: the job rolled back
    except tessel.RecoverableError as e: rec.abandon(e)   # outside step()
"""
import tessel


class Recovery:
    def __init__(self, owner, enabled, strategy, checkpoint_every_steps):
        if enabled and (strategy == "ddp" or checkpoint_every_steps < 1):
            raise ValueError("recovery needs strategy zero1, zero2 or fsdp and "
                             "checkpoint_every_steps >= 1")
        self._owner = owner
        self.enabled = bool(enabled)
        self.count = 0  # rollbacks made by this process
        self._abandoned = False  # a step lost outside step() (a Pipeline's): apply nothing
        self.resume_step = 0  # set by started()

    def check_groups(self, groups):
        """ValueError for recovery over more than one parameter group."""
        if self.enabled and len(groups) > 1:
            raise ValueError("recovery takes one parameter group (each group is a job, and "
                             "their checkpoints could roll back to different steps)")

    def started(self):
        """Records the step this process goes on from (the owner is connected)."""
        self.resume_step = self._owner.step_count

    @property
    def rejoined_in_place(self):
        """Whether this process replaced a lost worker without a rollback."""
        return bool(self._owner._groups[0].require_worker().rejoined_in_place)

    def run_steps(self):
        """Every group's step, then its end_step(); True if the step was applied,
        False if it was lost and the job rolled back."""
        before = self.count
        for g in self._owner._groups:
            try:
                g.step()
            except tessel.RecoverableError as e:
                if not self.enabled:
                    raise
                self.roll_back(e)
            g.end_step()
        return self.count == before

    def abandon(self, error):
        """A RecoverableError raised outside step(): rolls back (re-raises `error`
        with recovery off); the next step() applies nothing."""
        if not self.enabled:
            raise error
        self.roll_back(error)
        self._abandoned = True

    def skip_abandoned(self):
        """True once after abandon(), having dropped each group's gradients."""
        if not self._abandoned:
            return False
        self._abandoned = False
        for g in self._owner._groups:
            g.drop_gradients()
        return True

    def roll_back(self, why):
        """Rolls the job back to its latest checkpoint (a hybrid job's every process
        to the newest one complete in every partition); step_count goes back."""
        o = self._owner
        if o._hybrid is not None:
            o._hybrid.recover(why)
        else:
            o._groups[0].worker.recover()
        self.count += 1
        for g in o._groups:
            g.recovered()
        o._forget_step()
        o._held.recovered()
        if o._buffer_store is not None:  # rank 0: the checkpoint's buffers
            o._buffer_store.restore(o.step_count)
