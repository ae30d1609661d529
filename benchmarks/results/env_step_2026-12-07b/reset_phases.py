"""Ad-hoc: where a reused-context MiniWoB reset spends its time (phases, medians over N)."""
import statistics, sys, time, collections
sys.path.insert(0, "benchmarks")
from webrl.envs import WebEnv
from webrl.envs import web_env as W, context_pool as CP
from webrl.envs.miniwob import MiniWoBTask

T = collections.defaultdict(list)
SPANS = []
def timed(owner, name, label):
    f = getattr(owner, name)
    def g(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            T[label].append(time.perf_counter() - t)
    setattr(owner, name, g)

timed(CP.ReusableContext, "_scrub", "scrub")
timed_settle = True
timed(W.WebEnv, "_observe", "observe")
timed(MiniWoBTask, "setup", "task.setup")
timed(W.WebEnv, "_open_entry", "open_entry(all)")
from playwright.sync_api._generated import Page, BrowserContext
from playwright.sync_api import _generated as G
IN_RESET = [False]
def timed_flag(owner, name, label, by=None):
    f = getattr(owner, name)
    def g(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            if IN_RESET[0]:
                T[label + (by(a, k) if by else "")].append(time.perf_counter() - t)
    setattr(owner, name, g)
timed_flag(W, "settle", "settle(reset)")
from webrl.envs import episode as E
timed_flag(E, "wait_ready_and_collect", "wait_ready_and_collect")
timed_flag(E, "arm_and_stamp", "arm_and_stamp")
timed_flag(Page, "goto", "goto", lambda a, k: "(blank)" if a[1] == "about:blank" else "(entry)")
timed_flag(Page, "evaluate", "page.evaluate")
timed_flag(Page, "screenshot", "screenshot")
timed_flag(G.CDPSession, "send", "cdp", lambda a, k: "." + a[1])
timed_flag(G.Mouse, "move", "mouse.move")
timed_flag(BrowserContext, "clear_cookies", "clear_cookies")
timed_flag(BrowserContext, "clear_permissions", "clear_permissions")
timed_flag(Page, "wait_for_load_state", "wait_for_load_state")

import os
from webrl.envs import safety as S
if os.environ.get("NOROUTE"):
    orig = S.RequestGuard.__call__
    import playwright.sync_api._generated as G2
    real_route = G2.BrowserContext.route
    def route(self, url, handler, **k):
        if isinstance(handler, S.RequestGuard):
            return None
        return real_route(self, url, handler, **k)
    G2.BrowserContext.route = route
if os.environ.get("COUNT"):
    orig = S.RequestGuard.__call__
    def call(self, route):
        T["routed:" + route.request.resource_type].append(0.0)
        t = time.perf_counter(); orig(self, route); T["guard handler " + route.request.resource_type].append(time.perf_counter() - t)
        SPANS.append((t, time.perf_counter()))
    S.RequestGuard.__call__ = call
N = int(sys.argv[1]) if len(sys.argv) > 1 else 20
env = WebEnv(config={"browser": {"viewport": "332x214"}})
env.reset(options={"task": MiniWoBTask("click-checkboxes", seed=999)})
T.clear()
resets = []
for i in range(N):
    t = time.perf_counter()
    IN_RESET[0] = True
    _, info = env.reset(options={"task": MiniWoBTask("click-checkboxes", seed=i)})
    IN_RESET[0] = False
    resets.append(time.perf_counter() - t)
    env.step("click(%s)" % info["elements"][0]["id"]) if info["elements"] else None
env.close()
print(f"reset median {1000*statistics.median(resets):.1f} ms")
for k, v in T.items():
    print(f"  {k:<18} median {1000*statistics.median(v):6.1f} ms  n={len(v)}")

SPANS.sort()
overl = sum(1 for a, b in zip(SPANS, SPANS[1:]) if b[0] < a[1])
print("handler spans", len(SPANS), "overlapping consecutive", overl)
