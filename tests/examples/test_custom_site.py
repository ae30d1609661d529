"""examples/custom_site.py: the user's site and checker work in a real browser, and the example
trains on them end to end (registered env -> Trainer -> checkpoint)."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "custom_site.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("custom_site_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.browser
def test_checker_rewards_exactly_the_goal_colour(browser_session):
    from webrl.envs import WebEnv

    example = _load_example()
    server, base_url = example.serve_site()
    env = WebEnv({"browser": {"viewport": "640x480"}}, session=browser_session)
    try:
        task = example.PickColourSource(base_url).sample(np.random.default_rng(0))
        goal = task.spec.params["color"]
        wrong = next(c for c in example.COLORS if c != goal)
        for colour, expected in ((goal, 1.0), (wrong, 0.0)):
            _, info = env.reset(options={"task": task})
            button = next(e["id"] for e in info["elements"] if e["name"] == colour)
            _, reward, _, _, _ = env.step(f"click({button})")  # navigates to /chosen?color=<colour>
            _, reward, terminated, _, info = env.step("stop()")
            assert terminated and reward == expected, (colour, goal)
            assert info["reward_details"] == {"path": "/chosen", "chosen": colour}
    finally:
        env.close()
        server.shutdown()


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.browser
def test_example_trains_on_the_registered_site(run_dir):
    folder = Path(run_dir) / "custom-site"
    cmd = [sys.executable, str(EXAMPLE), "--config", "smoke", f"run.run_dir={folder}", "trainer.iterations=1",
           "tasks.tasks_per_iteration=1", "tasks.eval_tasks=1", "rollout.max_turns=2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "held-out success (greedy)" in done.stdout and "colours/l0" in done.stdout
    assert (folder / "checkpoints" / "step-00000001" / "hf" / "config.json").exists()
    log = (folder / "trajectories" / "trajectories.jsonl").read_text()
    assert '"colours/pick-' in log  # the rollouts ran the user's tasks
