"""Judge agreement on real sandbox episodes: checker outcomes from the Shop site, screenshots from
Chromium, a judge behind `webrl serve` over HTTP (a scripted engine, so the verdicts are known)."""
import pytest

from webrl.actions import Action
from webrl.reward import ActionHistoryJudge, JudgeReward, OpenAIBackendConfig, OpenAIChatBackend, judge_agreement
from webrl.serve import ServeConfig, ServerThread, create_app
from webrl.types import Image, Trajectory, Turn

from .fixtures import STUB_LIMITS
from .helpers import StubEngine, user_text


def give_up_episode(env, task) -> Trajectory:
    """The agent answers at once without looking: the checker scores it 0."""
    obs, _ = env.reset(options={"task": task})
    turn = Turn(images=[Image.from_array(obs["screenshot"])], response_text='answer("no idea")',
                action=Action.answer("no idea"), observation={"url": obs["url"]})
    obs, reward, terminated, _, _ = env.step(turn.action)
    turn.feedback = obs["feedback"]
    return Trajectory(task_id=task.spec.id, goal=task.spec.goal, turns=[turn],
                      info={"task_reward": float(reward), "terminated": terminated})


@pytest.mark.browser
def test_agreement_on_sandbox_trajectories(browser_session):
    from webrl.recipes.demos import run_oracle_episode
    from webrl.envs.sites.source import make_task
    from webrl.envs.web_env import WebEnv

    env = WebEnv(config={"browser": {"viewport": "small"}}, session=browser_session)
    try:
        solved = run_oracle_episode(env, make_task("shop", 0, "train", 1)).trajectory
        failed = give_up_episode(env, make_task("shop", 0, "train", 2))
    finally:
        env.close()
    # the checker's outcome is in info; no reward function has scored either yet
    assert (solved.info.task_reward, failed.info.task_reward) == (1.0, 0.0)
    assert (solved.reward, failed.reward) == (None, None)

    # A naive judge that believes any answer text: the oracle ends with stop() (no answer ->
    # "(none)" -> NOT SUCCESS) and the give-up answers "no idea" (-> SUCCESS): it disagrees twice.
    engine = StubEngine(lambda m: "Verdict: NOT SUCCESS" if "Final answer: (none)" in user_text(m)
                        else "Verdict: SUCCESS")
    with ServerThread(create_app(engine, ServeConfig(**{**STUB_LIMITS, "max_image_pixels": 1280 * 1000}))) as server:
        backend = OpenAIChatBackend(OpenAIBackendConfig(base_url=server.url + "/v1", model="stub", timeout_s=60))
        report = judge_agreement(JudgeReward(ActionHistoryJudge(), backend), [solved, failed])
    # oracle (truth 1) judged 0 -> fn; give-up (truth 0) judged 1 -> fp
    assert (report.tp, report.fn, report.fp, report.tn) == (0, 1, 1, 0) and report.agreement == 0.0, report.format()
    # the judge saw the real screenshots (JPEG over HTTP, the env's 640x480 viewport)
    sizes = [img.size for messages in engine.seen for img in messages[1].images]
    assert sizes and all(size == (640, 480) for size in sizes)
    assert any("click(" in user_text(m) for m in engine.seen)  # the oracle's factual actions
