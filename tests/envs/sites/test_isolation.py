"""Eight episodes in parallel on one browser (one BrowserContext each, steps interleaved
round-robin) stay isolated: each ends with exactly its own cart line or its own form values."""
import pytest

from webrl.envs import WebEnv, WebEnvConfig
from webrl.envs.observation import oracle_view
from webrl.envs.sites.source import make_task


def _tasks_of_kind(site, level, kind, n):
    tasks, seed = [], 0
    while len(tasks) < n:
        task = make_task(site, level, "train", seed)
        seed += 1
        if task.kind == kind and all(t.spec.params.get("pid") != task.spec.params.get("pid") or site != "shop"
                                     for t in tasks):
            tasks.append(task)
    return tasks


@pytest.mark.browser
def test_eight_parallel_episodes_stay_isolated(browser_session):
    tasks = _tasks_of_kind("shop", 1, "add_variant", 4) + _tasks_of_kind("widgets", 1, "submit_values", 4)
    config = WebEnvConfig.from_dict({"browser": {"viewport": "small"}})
    envs = [WebEnv(config, session=browser_session) for _ in tasks]
    try:
        live = {}
        for i, (env, task) in enumerate(zip(envs, tasks)):
            live[i] = env.reset(options={"task": task})
        rewards, details = {}, {}
        while live:  # one step of every running episode per round: their requests interleave
            for i in list(live):
                obs, info = live[i]
                obs, reward, terminated, truncated, info = envs[i].step(tasks[i].oracle_action(oracle_view(obs, info)))
                if terminated or truncated:
                    rewards[i], details[i] = reward, info["reward_details"]
                    del live[i]
                else:
                    live[i] = (obs, info)
        assert rewards == {i: 1.0 for i in range(8)}
        for i, task in enumerate(tasks[:4]):  # each cart holds its own line only (a shared cart would hold four)
            p = task.spec.params
            assert details[i]["cart"] == {str((p["pid"], p["size"], p["colour"])): p["qty"]}
        for i, task in enumerate(tasks[4:], start=4):
            submitted = details[i]["last_submission"]
            assert all(submitted[cid] == value for cid, value in task.spec.params["targets"])
    finally:
        for env in envs:
            env.close()
