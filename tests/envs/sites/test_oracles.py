"""Oracle solvers: success on sampled tasks of every site and level, and path lengths that
match the levels (0: one step, 1: two to four, 2: five to fifteen; a final `stop()` is not a
step, a final `answer(...)` is).

The default run drives a few tasks per site and level through `WebEnv`; the slow sweep runs
WEBRL_SITES_SWEEP tasks per site and level (100 for the full bar, 10 by default; a third from
the test split) with the light runner
(helpers.light_episode: same element collection, no screenshots) and requires >= 99%.
"""
import os

import pytest

from webrl.recipes.demos import run_oracle_episode
from webrl.envs.sites.source import SITE_NAMES, make_task
from tests.envs.sites.helpers import light_episode

STEP_RANGE = {0: (1, 1), 1: (2, 4), 2: (5, 15)}
# Tasks per site and level in the slow sweep. The full 100 (the bar: 1,200 episodes,
# 25-40 minutes on 2 cores) runs with WEBRL_SITES_SWEEP=100; the suite's default (10: 120
# episodes, about 100 s of the suite's 15 minutes; 20 took 227 s) keeps the suite within its
# budget and still requires every one of its episodes to succeed.
SWEEP = int(os.environ.get("WEBRL_SITES_SWEEP", "10"))


def _steps(actions: list[str]) -> int:
    return sum(not a.startswith("stop(") for a in actions)


def _split(seed: int) -> str:
    return "test" if seed % 3 == 0 else "train"


@pytest.mark.browser
@pytest.mark.parametrize("site", SITE_NAMES)
def test_oracle_through_webenv(site_env, site):
    for level in (0, 1, 2):
        task = make_task(site, level, "train" if level != 1 else "test", 100 + level)
        result = run_oracle_episode(site_env, task, record_images=level == 0)
        actions = [t.response_text for t in result.trajectory.turns]
        assert result.infra_error is None
        assert result.reward == 1.0, (task.spec.goal, actions, result.trajectory.reward_details)
        lo, hi = STEP_RANGE[level]
        assert lo <= _steps(actions) <= hi, (task.spec.goal, actions)
        if level == 0:
            assert result.trajectory.turns[0].images[0].size == (640, 480)


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("site", SITE_NAMES)
def test_oracle_success_100_per_level(light_page, site):
    for level in (0, 1, 2):
        failures, lengths = [], []
        for seed in range(SWEEP):
            task = make_task(site, level, _split(seed), seed)
            reward, actions, details = light_episode(light_page, task)
            lengths.append(_steps(actions))
            if reward != 1.0:
                failures.append((task.spec.id, task.spec.goal, actions, details))
        assert len(failures) <= SWEEP // 100, failures          # >= 99%
        lo, hi = STEP_RANGE[level]
        assert lo <= min(lengths) and max(lengths) <= hi, (site, level, sorted(set(lengths)))
