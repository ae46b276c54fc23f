"""Session: init from arguments or tessel-launch's environment, checked; shutdown
closes the optimizers and resets; the default session behind tessel.torch."""
import os
import unittest
from unittest import mock

import tessel.torch as tt
from tessel.torch import session as session_lib
from tessel.torch.session import Session

ENV = {"TESSEL_REGISTRY": "127.0.0.1:5000", "TESSEL_JOB": "mlp", "TESSEL_RANK": "1",
       "TESSEL_WORLD_SIZE": "2"}


class Closing:
    def __init__(self, log):
        self.log = log

    def close(self):
        self.log.append(self)


class SessionTest(unittest.TestCase):
    def test_from_the_environment(self):
        with mock.patch.dict(os.environ, ENV, clear=True):
            cfg = Session().init()
        self.assertEqual(cfg, dict(registry="127.0.0.1:5000", job="mlp", rank=1, world_size=2,
                                   num_servers=0, ucx_tls="", token="", connect_timeout_s=60.0,
                                   step_timeout_s=120.0, metrics_address="", timeline=""))

    def test_arguments_win(self):
        s = Session()
        with mock.patch.dict(os.environ, ENV, clear=True):
            s.init(job="other", rank=0, world_size=1, num_servers=3)
        self.assertEqual((s.config["job"], s.rank(), s.size(), s.config["num_servers"]),
                         ("other", 0, 1, 3))

    def test_refusals(self):
        s = Session()
        with mock.patch.dict(os.environ, {}, clear=True):
            with self.assertRaisesRegex(ValueError, r"no registry given and \$TESSEL_REGISTRY"):
                s.init()
        with mock.patch.dict(os.environ, dict(ENV, TESSEL_RANK="x"), clear=True):
            with self.assertRaisesRegex(ValueError, r"\$TESSEL_RANK='x' is not a int"):
                s.init()
        with mock.patch.dict(os.environ, ENV, clear=True):
            with self.assertRaisesRegex(ValueError, r"rank 5 is outside \[0, 2\)"):
                s.init(rank=5)
            with self.assertRaisesRegex(ValueError, "world_size must be >= 1"):
                s.init(rank=0, world_size=0)
        self.assertFalse(s.initialized, "a refused init leaves the session as it was")
        with self.assertRaisesRegex(RuntimeError, r"call tessel.torch.init\(\) first"):
            s.rank()

    def test_metrics_and_timeline(self):
        env = dict(ENV, TESSEL_METRICS_ADDRESS="127.0.0.1:0", TESSEL_TIMELINE="/tmp/t-{rank}.json")
        with mock.patch.dict(os.environ, env, clear=True):
            cfg = Session().init()
            self.assertEqual((cfg["metrics_address"], cfg["timeline"]),
                             ("127.0.0.1:0", "/tmp/t-{rank}.json"))
            self.assertEqual(Session().init(metrics_address="")["metrics_address"], "")
            with self.assertRaisesRegex(ValueError, r"has no '\{rank\}': with 2 ranks"):
                Session().init(timeline="/tmp/t.json")
            self.assertEqual(Session().init(world_size=1, rank=0, timeline="/tmp/t.json")
                             ["timeline"], "/tmp/t.json")

    def test_shutdown_closes_last_first_and_resets(self):
        s = Session()
        with mock.patch.dict(os.environ, ENV, clear=True):
            s.init()
        log = []
        a, b = Closing(log), Closing(log)
        s.adopt(a)
        s.adopt(b)
        s.shutdown()
        self.assertEqual(log, [b, a])
        self.assertFalse(s.initialized)
        s.shutdown()
        self.assertEqual(len(log), 2, "closed once")

    def test_sessions_are_independent(self):
        s, t = Session(), Session()
        s.init(registry="r", job="j", rank=0, world_size=1)
        self.assertFalse(t.initialized)

    def test_the_default_session(self):
        with mock.patch.dict(os.environ, ENV, clear=True):
            tt.init()
        self.assertEqual(tt.default_session().config["job"], "mlp")
        self.assertEqual((tt.rank(), tt.size()), (1, 2))
        tt.shutdown()
        with self.assertRaisesRegex(RuntimeError, r"call tessel.torch.init\(\) first"):
            tt.size()
        with self.assertRaisesRegex(RuntimeError, r"call tessel.torch.init\(\) first"):
            tt.DistributedOptimizer(None)

    def test_reset_default_session(self):
        with mock.patch.dict(os.environ, ENV, clear=True):
            tt.init()
        old = tt.default_session()
        log = []
        old.adopt(Closing(log))
        self.assertIs(session_lib.reset_default_session(), old)
        self.assertIsNot(tt.default_session(), old)
        self.assertFalse(tt.default_session().initialized, "the new default is uninitialized")
        self.assertEqual(log, [], "nothing of the old one is closed")
        self.assertTrue(old.initialized)
        with self.assertRaisesRegex(RuntimeError, r"call tessel.torch.init\(\) first"):
            tt.rank()
        old.shutdown()


if __name__ == "__main__":
    unittest.main()
