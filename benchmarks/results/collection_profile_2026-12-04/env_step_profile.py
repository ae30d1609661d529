import cProfile, pstats, time, random
from webrl.config import load_config
from webrl.run.config import WebRLConfig
from webrl.run.tasks import task_sources
from webrl.envs.worker import EnvWorker
from webrl.envs.task import draw_tasks, task_rng
from webrl.actions import Action

cfg = load_config(WebRLConfig, None, [])
train, _ = task_sources(cfg.tasks, max_steps=cfg.rollout.max_turns)
worker = EnvWorker(cfg.env.__class__(**{**cfg.env.__dict__, "num_slots": 1}), train)
rng = task_rng(0, "rl", 1)
tasks = draw_tasks(train, rng, 30)
random.seed(0)
def loop():
    steps = resets = 0; t_step = t_reset = 0.0
    for task in tasks:
        t0 = time.perf_counter(); r = worker.reset(0, None, {"task": task}); t_reset += time.perf_counter() - t0; resets += 1
        for _ in range(2):
            els = r.info.get("elements") or []
            if not els: break
            t0 = time.perf_counter(); r = worker.step(0, Action.click(random.choice(els)["id"])); t_step += time.perf_counter() - t0; steps += 1
            if r.terminated or r.truncated: break
    print(f"reset {1000*t_reset/resets:.0f} ms x{resets}, step {1000*t_step/steps:.0f} ms x{steps}")
loop()
pr = cProfile.Profile(); pr.enable(); loop(); pr.disable()
st = pstats.Stats(pr); st.sort_stats("cumulative").print_stats(45)
worker.close()
