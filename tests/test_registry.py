"""The engine registry names each policy's scheduler; a run imports its own policy's scheduler only."""

import subprocess
import sys

from servesim.engine.scheduler import Scheduler
from servesim.engines.registry import engines, policies, policy_class


def test_every_policy_names_a_scheduler_of_its_engine():
    assert policies() == ("static", "continuous", "vllm", "vllm-v0", "sglang", "trtllm")
    for e in engines():
        for policy in e.policies:
            cls = policy_class(policy)
            assert issubclass(cls, Scheduler) and cls.__module__.startswith(f"servesim.engines.{e.name}.")


def test_a_run_imports_only_its_own_engines_scheduler():
    code = ("import sys; from servesim import Request, simulate; "
            "simulate([Request(0, 0.0, 8, 2)], None, 'sglang', 'toy'); "
            "print(sorted(m for m in sys.modules if m.endswith(('scheduler', 'scheduler_v0', 'continuous'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert eval(out) == ["servesim.engine.scheduler", "servesim.engines.sglang.scheduler"]


def test_every_scheduler_keeps_under_30_names_in_its_instance_dict(monkeypatch):
    # CPython 3.11 specializes `self.x` and `self.f()` only on objects whose dict holds fewer than 30 names: a
    # scheduler past that runs every access in its loop on the slow path (SGLang's had 40; its own are slots now)
    from servesim import Request, simulate
    from servesim.engine import loop

    sizes, run = {}, loop.Engine.run

    def spy(self, *args, **kwargs):
        run(self, *args, **kwargs)
        sizes[self.sched.name] = len(vars(self.sched))

    monkeypatch.setattr(loop.Engine, "run", spy)
    for policy in policies():
        simulate([Request(i, i * 0.5, 40, 3) for i in range(4)], None, policy, "toy")
    assert set(sizes) == set(policies()) and max(sizes.values()) < 30, sizes
