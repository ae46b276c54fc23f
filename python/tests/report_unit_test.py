"""tessel.torch's step report and straggler warning (report.py) over a fake worker:
the phases of a step (the caller's compute, the workers' push/wait/pull/update
summed over groups, the rest as other), a skipped step's, the warning once when
the servers start naming a rank and once when they stop (on rank 0 and the rank
named, nobody else), and a step that raised leaving no report."""
import unittest
import warnings

from tessel.torch import report


class FakeWorker:
    def __init__(self, rank, phases=None):
        self.rank = rank
        self.current_step = 0
        self.phases = phases or dict(compute=0.0, push=0.01, wait=0.02, pull=0.03, update=0.0)
        self.named = []

    def last_step_phases(self):
        return dict(self.phases)

    def stragglers(self):
        return list(self.named)


class FakeOpt:
    """What timed_step reads of a DistributedOptimizer: workers, and a step."""

    def __init__(self, workers):
        self.workers = workers
        self.sleep = 0.0

    @report.timed_step
    def step(self, closure=None):
        if closure is not None:
            closure()
        for w in self.workers:
            w.current_step += 1
        return True


def named(rank, score=3.0, lateness=0.2, host="n1", pid=42):
    return dict(rank=rank, registry_rank=rank, score=score, lateness=lateness, shard=0,
                since_unix_ms=1, host=host, pid=pid)


def steps(opt, n):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("default")
        for _ in range(n):
            opt.step()
    return [str(w.message) for w in got if w.category is report.StragglerWarning]


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.poll_s = report.POLL_S
        report.POLL_S = 0  # every step looks (the fake's steps take microseconds)

    def tearDown(self):
        report.POLL_S = self.poll_s

    def test_phases_summed_over_groups(self):
        opt = FakeOpt([FakeWorker(1), FakeWorker(1, dict(compute=0, push=0.1, wait=0.2, pull=0.3,
                                                         update=0.4))])
        self.assertIsNone(report.last_step_report(opt))
        opt.step(lambda: None)
        r = report.last_step_report(opt)
        self.assertEqual((r.step, r.rank, r.applied), (1, 1, True))
        self.assertAlmostEqual(r.push, 0.11)
        self.assertAlmostEqual(r.wait, 0.22)
        self.assertAlmostEqual(r.pull, 0.33)
        self.assertAlmostEqual(r.update, 0.4)
        self.assertEqual(r.other, 0.0)  # the fake's step took less than its workers said
        self.assertIsNone(r.slowest)
        self.assertIn("step 1, rank 1: compute ", repr(r))
        self.assertIn("no straggler named", repr(r))

    def test_compute_is_the_callers_time(self):
        import time
        opt = FakeOpt([FakeWorker(0)])
        opt.step()
        time.sleep(0.05)
        opt.step(lambda: time.sleep(0.03))
        r = report.last_step_report(opt)
        self.assertGreaterEqual(r.compute, 0.08)
        self.assertLess(r.compute, 0.5)

    def test_skipped_step_has_no_phases(self):
        opt = FakeOpt([FakeWorker(0)])
        opt.step()
        opt.workers[0].current_step -= 1  # the next step applies nothing (as a skipped one)
        opt.step()
        r = report.last_step_report(opt)
        self.assertFalse(r.applied)
        self.assertEqual((r.push, r.wait, r.pull, r.update), (0, 0, 0, 0))
        self.assertIn("(applied nothing)", repr(r))

    def test_raised_step_leaves_the_last_report(self):
        opt = FakeOpt([FakeWorker(0)])
        opt.step()
        before = report.last_step_report(opt)

        def boom():
            raise RuntimeError("user code")
        with self.assertRaises(RuntimeError):
            opt.step(boom)
        self.assertIs(report.last_step_report(opt), before)

    def test_warned_once_on_rank0_and_the_named_rank(self):
        for rank in range(3):
            w = FakeWorker(rank, dict(compute=0, push=0.0, wait=0.0, pull=0.0, update=0))
            opt = FakeOpt([w])
            self.assertEqual(steps(opt, 3), [], f"rank {rank}: fault-free steps warn nobody")
            w.named = [named(2)]
            said = steps(opt, 5)
            r = report.last_step_report(opt)
            self.assertEqual((r.slowest.rank, r.slowest.score, r.slowest.host), (2, 3.0, "n1"))
            self.assertIn("slowest rank 2 (host n1 pid 42): 3.00x the median", repr(r))
            if rank == 0:
                self.assertEqual(len(said), 1, said)
                self.assertIn("rank 2 is the job's straggler: rank 2 (host n1 pid 42): 3.00x "
                              "the median rank's step, its last push 0.200 s after", said[0])
            elif rank == 2:
                self.assertEqual(len(said), 1, said)
                self.assertIn("this rank (2) is the job's straggler: 3.0x the median step", said[0])
                self.assertIn("phase computing", said[0])
            else:
                self.assertEqual(said, [])
            w.named = [named(2, score=2.5)]  # a new score: no new warning
            self.assertEqual(steps(opt, 2), [])
            self.assertEqual(report.last_step_report(opt).slowest.score, 2.5)
            w.named = []
            said = steps(opt, 4)
            self.assertEqual(len(said), 1 if rank in (0, 2) else 0, said)
            if said:
                self.assertIn("no longer the job's straggler (it was 2.5x", said[0])
            self.assertIsNone(report.last_step_report(opt).slowest)
            w.named = [named(2)]  # named again: said again
            self.assertEqual(len(steps(opt, 1)), 1 if rank in (0, 2) else 0)

    def test_own_phase_pushing_and_pulling(self):
        w = FakeWorker(1, dict(compute=0, push=0.5, wait=0.0, pull=0.5, update=0))
        opt = FakeOpt([w])
        steps(opt, 3)
        w.named = [named(1)]
        said = steps(opt, 1)
        self.assertIn("phase pushing and pulling", said[0])

    def test_looks_at_most_every_poll_s(self):
        report.POLL_S = 3600
        w = FakeWorker(0)
        opt = FakeOpt([w])
        self.assertEqual(steps(opt, 1), [])  # the first step looks
        w.named = [named(1)]
        self.assertEqual(steps(opt, 5), [])  # not again within POLL_S
        self.assertEqual(report.last_step_report(opt).slowest.rank, 1)  # the report asks now

    def test_slowest_is_the_highest_score(self):
        w = FakeWorker(0)
        opt = FakeOpt([w])
        w.named = [named(1, score=1.6), named(3, score=2.9)]
        said = steps(opt, 1)
        self.assertEqual(report.last_step_report(opt).slowest.rank, 3)
        self.assertEqual([s.rank for s in report.last_step_report(opt).stragglers], [1, 3])
        self.assertEqual(len(said), 2)


if __name__ == "__main__":
    unittest.main()
