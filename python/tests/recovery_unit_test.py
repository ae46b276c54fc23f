"""tessel.torch.recovery without a cluster, over small fakes of the optimizer's
parts that record every call in one log: a RecoverableError with recovery off
is raised again and nothing rolls back; with recovery on one lost step is one
rollback (the worker's recover, count 1, each group's recovered() once, the
owner's step state, the held steps and the buffer store, in that order) and
the step reports it was not applied; abandon() makes exactly the next
skip_abandoned() drop the gradients; an error that is not recoverable passes
through with nothing rolled back; a hybrid session's recover(why) is used
instead of the worker's where there is one; the constructor's and
check_groups' refusals; resume_step and rejoined_in_place read the worker.

Usage: recovery_unit_test.py
"""
import unittest

import tessel
from tessel.torch.recovery import Recovery


class Worker:
    def __init__(self, log):
        self.log = log
        self.current_step = 6
        self.rejoined_in_place = 0

    def recover(self):
        self.log.append(("worker.recover",))
        self.current_step = 3  # back to the latest checkpoint


class Group:
    """A parameter group whose step raises `fail` (an exception instance) once."""

    def __init__(self, name, log, worker=None):
        self.name, self.log, self.worker, self.fail = name, log, worker, None

    def require_worker(self):
        return self.worker

    def step(self):
        self.log.append((self.name + ".step",))
        if self.fail is not None:
            e, self.fail = self.fail, None
            raise e

    def end_step(self):
        self.log.append((self.name + ".end_step",))

    def recovered(self):
        self.log.append((self.name + ".recovered",))

    def drop_gradients(self):
        self.log.append((self.name + ".drop_gradients",))


class Part:
    """The held steps, the buffer store or the hybrid session: records its calls."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def recovered(self):
        self.log.append((self.name + ".recovered",))

    def restore(self, step):
        self.log.append((self.name + ".restore", step))

    def recover(self, why):
        self.log.append((self.name + ".recover", str(why)))


class Owner:
    """What Recovery reads of a DistributedOptimizer."""

    def __init__(self, groups=1, hybrid=False, store=True):
        self.log = []
        self.worker = Worker(self.log)
        self._groups = [Group("g0", self.log, self.worker)]
        self._groups += [Group(f"g{i}", self.log) for i in range(1, groups)]
        self._hybrid = Part("hybrid", self.log) if hybrid else None
        self._held = Part("held", self.log)
        self._buffer_store = Part("store", self.log) if store else None

    @property
    def step_count(self):
        return self.worker.current_step

    def _forget_step(self):
        self.log.append(("owner.forget_step",))


def lost():
    return tessel.RecoverableError("shard server 1 lost")


class RecoveryTest(unittest.TestCase):
    def test_off_raises_again_and_rolls_nothing_back(self):
        o = Owner()
        rec = Recovery(o, False, "zero2", 0)
        e = lost()
        o._groups[0].fail = e
        with self.assertRaises(tessel.RecoverableError) as caught:
            rec.run_steps()
        self.assertIs(caught.exception, e, "the same error, unchanged")
        self.assertEqual(o.log, [("g0.step",)], "nothing rolled back, no end_step")
        self.assertEqual(rec.count, 0)
        with self.assertRaises(tessel.RecoverableError) as caught:
            rec.abandon(e)
        self.assertIs(caught.exception, e)
        self.assertFalse(rec.skip_abandoned(), "an abandon that raised abandons nothing")
        self.assertEqual(o.log, [("g0.step",)])

    def test_one_rollback(self):
        o = Owner()
        rec = Recovery(o, True, "zero2", 3)
        self.assertTrue(rec.run_steps(), "a step without error is applied")
        self.assertEqual(rec.count, 0)
        o.log.clear()
        o._groups[0].fail = lost()
        self.assertFalse(rec.run_steps(), "a lost step is not applied")
        self.assertEqual(rec.count, 1)
        self.assertEqual(o.log, [
            ("g0.step",), ("worker.recover",), ("g0.recovered",), ("owner.forget_step",),
            ("held.recovered",), ("store.restore", 3), ("g0.end_step",)])
        o.log.clear()
        self.assertTrue(rec.run_steps(), "the next step is applied again")
        self.assertEqual(rec.count, 1)
        self.assertEqual(o.log, [("g0.step",), ("g0.end_step",)])

    def test_rollback_calls_each_group_once(self):
        # run_steps over two groups (the optimizer refuses recovery with two;
        # the rollback itself still reaches every group once).
        o = Owner(groups=2, store=False)
        rec = Recovery(o, True, "zero1", 1)
        o._groups[1].fail = lost()
        self.assertFalse(rec.run_steps())
        recovered = [c for c in o.log if c[0].endswith(".recovered")]
        self.assertEqual(recovered, [("g0.recovered",), ("g1.recovered",), ("held.recovered",)])
        self.assertEqual([c for c in o.log if c[0] == "worker.recover"], [("worker.recover",)])
        self.assertNotIn("store.restore", [c[0] for c in o.log], "no store, no restore")

    def test_abandon_skips_exactly_the_next_step(self):
        o = Owner()
        rec = Recovery(o, True, "fsdp", 2)
        self.assertFalse(rec.skip_abandoned())
        rec.abandon(lost())
        self.assertEqual(rec.count, 1)
        self.assertEqual(o.log, [("worker.recover",), ("g0.recovered",), ("owner.forget_step",),
                                 ("held.recovered",), ("store.restore", 3)])
        o.log.clear()
        self.assertTrue(rec.skip_abandoned())
        self.assertEqual(o.log, [("g0.drop_gradients",)])
        self.assertFalse(rec.skip_abandoned(), "once")
        self.assertEqual(o.log, [("g0.drop_gradients",)])

    def test_other_errors_pass_through(self):
        o = Owner()
        rec = Recovery(o, True, "zero2", 1)
        for e in (tessel.TesselError("a deadline"), RuntimeError("compute"),
                  ValueError("bad input")):
            o.log.clear()
            o._groups[0].fail = e
            with self.assertRaises(type(e)) as caught:
                rec.run_steps()
            self.assertIs(caught.exception, e)
            self.assertEqual(o.log, [("g0.step",)], f"{type(e).__name__}: nothing rolled back")
        self.assertEqual(rec.count, 0)
        self.assertFalse(rec.skip_abandoned())

    def test_hybrid_session_recovers(self):
        o = Owner(hybrid=True, store=False)
        rec = Recovery(o, True, "zero2", 1)
        o._groups[0].fail = lost()
        self.assertFalse(rec.run_steps())
        self.assertEqual(o.log, [
            ("g0.step",), ("hybrid.recover", "shard server 1 lost"), ("g0.recovered",),
            ("owner.forget_step",), ("held.recovered",), ("g0.end_step",)])
        o.log.clear()
        rec.abandon(lost())
        self.assertEqual(o.log[0], ("hybrid.recover", "shard server 1 lost"))
        self.assertNotIn(("worker.recover",), o.log)
        self.assertEqual(rec.count, 2)

    def test_refusals(self):
        for strategy, every in (("ddp", 1), ("zero2", 0)):
            with self.assertRaisesRegex(ValueError, "zero1, zero2 or fsdp and "
                                        "checkpoint_every_steps >= 1"):
                Recovery(Owner(), True, strategy, every)
        Recovery(Owner(), False, "ddp", 0)  # recovery off: anything goes
        o = Owner(groups=2)
        with self.assertRaisesRegex(ValueError, "one parameter group"):
            Recovery(o, True, "zero2", 1).check_groups(o._groups)
        Recovery(o, False, "zero2", 1).check_groups(o._groups)

    def test_resume_step_and_rejoined(self):
        o = Owner()
        rec = Recovery(o, True, "zero2", 1)
        rec.started()
        o.worker.current_step = 9
        self.assertEqual(rec.resume_step, 6, "the step when the process started")
        self.assertIs(rec.rejoined_in_place, False)
        o.worker.rejoined_in_place = 1
        self.assertIs(rec.rejoined_in_place, True)


if __name__ == "__main__":
    unittest.main()
