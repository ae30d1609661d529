"""ReSim: trees and traces by hand on a 3-page toy site, determinism, ended / rejected / diverged
branches, config errors, the written demos through the SFT converter, and one real-Chromium check
that every recorded next state is what a fresh replay shows."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import pytest

from webrl.actions import Action
from webrl.envs.worker import EnvStepResult
from webrl.recipes.resim import ResimConfig, ResimCounts, expand_state, resim_demos, resim_episode, resim_response
from webrl.recipes.resim_trace import resim_trace
from webrl.types import load_trajectories

# The toy site: home --click(0)--> shop --click(0)--> bought (done, reward 1).
# home: click(1) -> help (whose click(0) goes home), click(2) -> bye (done, reward 0).
# shop: click(1) -> home. Clicking an unlisted element or typing sets last_action_error (as WebEnv does).
PAGES = {
    "home": ("Home", [("Shop", "a", "shop"), ("Help", "button", "help"), ("Quit", "button", "bye")]),
    "shop": ("Shop", [("Buy", "button", "bought"), ("Home", "a", "home")]),
    "help": ("Help", [("Home", "a", "home")]),
    "bought": ("Thanks", []),
    "bye": ("Bye", []),
}
REWARD = {"bought": 1.0, "bye": 0.0}
HOME_ELEMENTS = '[0] link "Shop"\n[1] button "Help"\n[2] button "Quit"'


@dataclass
class Spec:
    id: str = "toy/buy"
    goal: str = "Buy the thing."
    site: str = "toy"
    level: int = 0
    split: str = "train"
    start_url: str = "http://toy/home"


class ToyTask:
    spec = Spec()

    def oracle_action(self, view: dict) -> Action:
        return Action.click(0)  # home -> shop -> buy; help -> home


def oracle(task, obs):
    return task.oracle_action(obs)


class ToySite:
    """A deterministic env slot of the episode runner (reset(task) / step(action) ->
    `EnvStepResult`); `unstable=True` changes the home title on every reset."""

    def __init__(self, unstable: bool = False, max_steps: int = 10):
        self.unstable, self.max_steps, self.resets = unstable, max_steps, 0

    def _obs(self, feedback: str = "", error: str = "") -> dict:
        title, links = PAGES[self.page]
        if self.unstable and self.page == "home":
            title = f"Home {self.resets}"
        lines = [f'[{i}] {"link" if tag == "a" else "button"} "{name}"' for i, (name, tag, _) in enumerate(links)]
        return {"url": f"http://toy/{self.page}", "title": title, "elements_text": "\n".join(lines),
                "feedback": feedback, "last_action_error": error, "step": self.steps}

    def _result(self, reward=0.0, terminated=False, feedback="", error="", info=None) -> EnvStepResult:
        elements = [{"id": i, "bbox": [0, 20 * i, 100, 20], "tag": tag, "name": name}
                    for i, (name, tag, _) in enumerate(PAGES[self.page][1])]
        truncated = not terminated and self.steps >= self.max_steps
        return EnvStepResult(0, self._obs(feedback, error), reward, terminated, truncated,
                             {"elements": elements, **(info or {})})

    def reset(self, task) -> EnvStepResult:
        self.page, self.steps = "home", 0
        self.resets += 1
        return self._result()

    def step(self, action: Action) -> EnvStepResult:
        self.steps += 1
        links = PAGES[self.page][1]
        if action.kind == "click" and action.element >= len(links):
            return self._result(error=f"no element {action.element} on {self.page}")
        if action.kind == "click":
            name, _, self.page = links[action.element]
            return self._result(REWARD.get(self.page, 0.0), self.page in REWARD, feedback=f"Clicked {name}")
        if action.kind == "stop":
            return self._result(terminated=True)
        return self._result(error="cannot type here")  # type


def test_state_tree_by_hand_depth_two():
    # home, b=3, d=2, no value rollout, 0.1 a step:
    #   click(0): shop, then the oracle's click(0): bought, done, reward 1 -> terminal 1 - 0.2 = 0.8
    #   click(1): help, then click(0): home, not done                     -> unfinished 0 - 0.2
    #   click(2): bye, done, reward 0                                     -> terminal 0 - 0.1
    env, counts = ToySite(), ResimCounts()
    obs = env.reset(ToyTask())
    config = ResimConfig(branching=3, depth=2, value_steps=0, step_cost=0.1)
    tree, episodes, actions = expand_state(env, ToyTask(), [], obs, config, oracle, counts)
    by_action = {b.action: b for b in tree.branches}
    assert tree.branches[0].action == "click(0)" and tree.branches[0].proposed_by == "base"
    assert sorted(by_action) == ["click(0)", "click(1)", "click(2)"]
    base, help_, quit_ = by_action["click(0)"], by_action["click(1)"], by_action["click(2)"]
    assert [s.state.url for s in base.steps] == ["http://toy/shop", "http://toy/bought"]
    assert [(s.reward, s.done) for s in base.steps] == [(0.0, False), (1.0, True)]
    assert (base.value, base.value_source, base.reward, base.env_steps) == (0.8, "terminal", 1.0, 2)
    assert [s.action for s in help_.steps] == ["click(1)", "click(0)"]
    assert [s.state.url for s in help_.steps] == ["http://toy/help", "http://toy/home"]
    assert (help_.value, help_.value_source) == (-0.2, "unfinished")
    assert [s.state.title for s in quit_.steps] == ["Bye"] and (quit_.value, quit_.value_source) == (-0.1, "terminal")
    assert tree.chosen == 0 and tree.prefix == [] and not any(b.diverged for b in tree.branches)
    assert episodes[0].results[0].observation["url"] == "http://toy/shop" and actions[0] == Action.click(0)
    # env steps: 2 (base) + 2 (help, then home) + 1 (quit ends) = 5
    assert counts.env_steps == 5
    assert "because it has the highest value (0.80)" in resim_trace(tree)
    assert "Outcome: not finished yet and no end in sight after 2 step(s), so this option is worth -0.20." \
        in resim_trace(tree)


def test_episode_trace_text_and_counts_by_hand():
    # b=3 takes all three of home's elements and both of shop's; 0.1 a step.
    # state 0 (home): click(0) 1 step + rollout 1 (buy)            = 2 steps, value 1 - 0.2 (rollout)
    #                 click(1) help, home, shop, bought: 1 + 3     = 4 steps, value 1 - 0.4 (rollout)
    #                 click(2) bye                                 = 1 step,  value 0 - 0.1 (terminal)
    # state 1 (shop, prefix click(0)): click(0): 1 replay + 1      = 2 env steps, value 1 - 0.1 (terminal)
    #                 click(1): 1 replay + home + shop + bought    = 4 env steps, value 1 - 0.3 (rollout)
    config = ResimConfig(branching=3, depth=1, value_steps=3, step_cost=0.1, summary_elements=2,
                         action_format="pointer")
    counts = ResimCounts()
    traj, trees = resim_episode(ToySite(), ToyTask(), config, counts=counts)
    assert (counts.states, counts.branches, counts.env_steps) == (2, 5, 13)
    assert [t.chosen for t in trees] == [0, 0] and trees[1].prefix == ["click(0)"]
    assert sorted(b.value for b in trees[0].branches) == [-0.1, 0.6, 0.8]
    assert [b.value for b in trees[1].branches] == [0.9, 0.7]
    assert sorted(b.value_source for b in trees[0].branches) == ["rollout", "rollout", "terminal"]
    expected = "\n".join([
        "I consider 2 action(s) and simulate where each leads.",
        "Option 1 (my first idea): click(0).",
        '  Step 1, after it: URL http://toy/bought, title "Thanks", feedback: Clicked Buy; '
        'the episode ends (reward 1.00).',
        "  Outcome: the episode ends with reward 1.00 after 1 step(s), so this option is worth 0.90.",
        "Option 2 (an alternative): click(1).",
        '  Step 1, after it: URL http://toy/home, title "Home", feedback: Clicked Home, '
        'elements: [0] link "Shop"; [1] button "Help" (+1 more).',
        "  Outcome: not finished yet; continuing from there, it ends with reward 1.00 after 3 step(s), "
        "so this option is worth 0.70.",
        "Decision: option 1, click(0), because it has the highest value (0.90).",
    ])
    assert resim_trace(trees[1], summary_elements=2) == expected
    assert traj.turns[1].response_text == f"<think>\n{expected}\n</think>\n<tool_call>click(<e0>)</tool_call>"
    assert [t.action for t in traj.turns] == [Action.click(0), Action.click(0)]
    assert [t.decided_by for t in traj.turns] == ["resim", "resim"]
    assert traj.turns[1].observation.url == "http://toy/shop" and traj.turns[1].observation.feedback == "Clicked Shop"
    assert traj.turns[1].feedback == "Clicked Buy"
    assert (traj.info.task_reward, traj.info.terminated, traj.info.source) == (1.0, True, "resim")
    assert traj.reward_details["resim"]["chosen"] == [0, 0]
    # without a step cost both shop options are worth 1: the tie goes to the base policy's action
    tied = resim_episode(ToySite(), ToyTask(), ResimConfig(branching=3, depth=1, value_steps=3, step_cost=0.0))[1]
    assert resim_trace(tied[1]).endswith("Decision: option 1, click(0), because options 1, 2 tie at 1.00 "
                                         "and it comes first.")


def test_compact_and_som_calls():
    tree = resim_episode(ToySite(), ToyTask(), ResimConfig(branching=1, depth=1, value_steps=0))[1][0]
    assert resim_response(tree, Action.click(0), ResimConfig(action_format="compact")).endswith(
        "</think>\n<tool_call>click(0)</tool_call>")
    som = resim_response(tree, Action.click(0), ResimConfig(action_format="som"))
    assert som.endswith('<tool_call>{"name": "browser", "arguments": {"action": "click", "element": 0}}</tool_call>')


def test_deterministic_under_the_seed():
    def run(seed):
        traj, trees = resim_episode(ToySite(), ToyTask(), ResimConfig(branching=2, depth=1, value_steps=3, seed=seed))
        return [asdict(t) for t in trees], [t.response_text for t in traj.turns]

    assert run(7) == run(7)
    # b=2 at home: the one alternative is click(1) or click(2), drawn by the seeded rng
    alternatives = {run(seed)[0][0]["branches"][1]["action"] for seed in range(12)}
    assert alternatives == {"click(1)", "click(2)"}


def test_best_alternative_is_chosen_over_the_base_action():
    # a base policy that quits at home (click(2): bye, reward 0) and follows the oracle elsewhere,
    # 0.1 a step: click(2): terminal 0 - 0.1;  click(0): shop, buy -> rollout 1 - 0.2;
    #             click(1): help, home, quit -> rollout 0 - 0.3
    def quitter(task, obs):
        return Action.click(2) if obs["url"].endswith("/home") else Action.click(0)

    traj, trees = resim_episode(ToySite(), ToyTask(), ResimConfig(branching=3, depth=1, value_steps=3, step_cost=0.1),
                                quitter)
    values = {b.action: (b.value, b.value_source) for b in trees[0].branches}
    assert values == {"click(2)": (-0.1, "terminal"), "click(0)": (0.8, "rollout"), "click(1)": (-0.3, "rollout")}
    assert trees[0].branches[trees[0].chosen].action == "click(0)"
    assert traj.turns[0].action == Action.click(0) and traj.info.task_reward == 1.0
    assert "because it has the highest value (0.80)" in traj.turns[0].response_text


def test_rejected_actions_are_steps_with_their_error():
    def proposes(task, obs):  # an unlisted element at home (the env reports an error), the oracle elsewhere
        return Action.click(9) if obs["url"].endswith("/home") else Action.click(0)

    # home, b=3, d=1, 2 rollout steps, 0.05 a step; the seeded alternatives at home are click(0), click(1):
    #   click(9): home again (error), then click(9) twice more          -> unfinished 0 - 3 * 0.05
    #   click(0): shop, then the base policy's click(0): bought         -> rollout    1 - 2 * 0.05
    #   click(1): help, then click(0): home, then click(9): error       -> unfinished 0 - 3 * 0.05
    config = ResimConfig(branching=3, depth=1, value_steps=2)
    traj, trees = resim_episode(ToySite(), ToyTask(), config, proposes)
    first = trees[0]
    values = {b.action: (b.value, b.value_source) for b in first.branches}
    assert values == {"click(9)": (-0.15, "unfinished"), "click(0)": (0.9, "rollout"),
                      "click(1)": (-0.15, "unfinished")}
    base = first.branches[0]
    assert base.steps[0].state.error == "no element 9 on home" and not base.steps[0].done
    assert "error: no element 9 on home" in resim_trace(first)
    assert first.branches[first.chosen].action == "click(0)"
    assert traj.status == "ok" and traj.info.task_reward == 1.0

    def types(task, obs):  # typing is refused with last_action_error, the page stays
        return Action.type_text("x", element=0)

    tree = resim_episode(ToySite(), ToyTask(), ResimConfig(branching=1, depth=2, value_steps=0), types)[1][0]
    steps = tree.branches[0].steps
    assert [s.state.error for s in steps] == ["cannot type here"] * 2 and not any(s.done for s in steps)
    assert "error: cannot type here" in resim_trace(tree)


def test_a_chosen_action_the_env_rejects_is_a_turn_like_any_other():
    traj, trees = resim_episode(ToySite(), ToyTask(), ResimConfig(branching=1, depth=1, value_steps=0, max_states=2),
                                lambda task, obs: Action.click(9))
    assert traj.status == "ok" and len(traj.turns) == 2 and traj.info.truncated and traj.info.task_reward is None
    assert [t.observation.last_action_error for t in traj.turns] == ["", "no element 9 on home"]
    assert traj.turns[0].feedback == "no element 9 on home"


class FlakySite(ToySite):
    """Every third reset shows another home title (a replay that does not reach the same page)."""

    def _obs(self, feedback: str = "", error: str = "") -> dict:
        obs = super()._obs(feedback, error)
        if self.page == "home" and self.resets % 3 == 0:
            obs["title"] = "Home (changed)"
        return obs


def test_replay_that_differs_is_marked_and_never_chosen():
    # resets: 1 = the episode's start, 2-4 the three branch replays of home: #3 differs
    config = ResimConfig(branching=3, depth=1, value_steps=3, step_cost=0.0)
    env = FlakySite()
    tree = expand_state(env, ToyTask(), [], env.reset(ToyTask()), config, oracle, ResimCounts())[0]
    assert [b.diverged for b in tree.branches] == [False, True, False]
    assert tree.chosen != 1
    assert "(the page differed on replay; this option is not considered.)" in resim_trace(tree)


def test_every_replay_differing_drops_the_episode_and_nothing_is_written(tmp_path):
    config = ResimConfig(branching=2, depth=1, value_steps=3)
    traj, trees = resim_episode(ToySite(unstable=True), ToyTask(), config)
    assert traj.status == "dropped" and "not deterministic" in traj.drop_reason and trees == []
    counts = resim_demos([ToyTask()], ToySite(unstable=True), 1, tmp_path, config)
    assert (counts.episodes, counts.not_kept, counts.traces) == (1, 1, 0)
    assert (tmp_path / "demos.jsonl").read_text() == ""


class CrashingSite(ToySite):
    """The browser 'crashes' on the first step after the first replay: WebEnv's infra end."""

    def step(self, action: Action) -> EnvStepResult:
        result = super().step(action)
        if self.resets >= 2:
            return self._result(info={"infra_error": "browser crashed", "truncation_reason": "infra_error"})
        return result


def test_an_infrastructure_error_is_not_a_simulated_end_and_drops_the_episode():
    traj, trees = resim_episode(CrashingSite(), ToyTask(), ResimConfig(branching=2, depth=1, value_steps=0))
    assert traj.status == "dropped" and "browser crashed" in traj.drop_reason and trees == []


def test_only_successful_episodes_are_kept_unless_asked(tmp_path):
    def quits(task, obs):  # home -> Quit: the episode ends with reward 0
        return Action.click(2)

    config = ResimConfig(branching=1, depth=1, value_steps=0)
    counts = resim_demos([ToyTask()], ToySite(), 1, tmp_path / "a", config, quits)
    assert (counts.episodes, counts.not_kept, counts.traces) == (1, 1, 0)
    counts = resim_demos([ToyTask()], ToySite(), 1, tmp_path / "b", ResimConfig(branching=1, depth=1, value_steps=0,
                                                                                 keep="all"), quits)
    assert (counts.not_kept, counts.traces) == (0, 1)
    assert load_trajectories(tmp_path / "b" / "demos.jsonl")[0].info.task_reward == 0.0


def test_max_states_truncates():
    # the help loop never ends: home -click(1)-> help -click(0)-> home ...
    def loop(task, obs):
        return Action.click(1) if obs["url"].endswith("/home") else Action.click(0)

    config = ResimConfig(branching=1, depth=1, value_steps=0, max_states=3)
    traj, trees = resim_episode(ToySite(), ToyTask(), config, loop)
    assert len(traj.turns) == 3 and traj.info.truncated and traj.info.task_reward is None
    assert [t.observation.url for t in traj.turns] == ["http://toy/home", "http://toy/help", "http://toy/home"]


@pytest.mark.parametrize("field, value", [("branching", 0), ("depth", 0), ("value_steps", -1), ("max_states", 0),
                                          ("summary_elements", -2), ("branching", 1.5), ("seed", "x"),
                                          ("step_cost", 1.0), ("step_cost", -0.1), ("step_cost", True), ("keep", "some"),
                                          ("action_format", "computer_use")])
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=rf"ResimConfig\.{field}"):
        ResimConfig(**{field: value})


def test_demos_file_reads_back_and_renders_for_sft(tmp_path):
    from webrl.models import load_model
    from webrl.models.shipped import read_trained_prompt
    from webrl.policy import GeneratorPolicy, sft_samples_from_trajectory
    from webrl.policy.generator import GeneratorConfig
    from webrl.policy.prompt import PromptConfig

    config = ResimConfig(branching=2, depth=1, value_steps=3)
    counts = resim_demos([ToyTask(), ToyTask()], ToySite(), n=2, out_dir=tmp_path, config=config)
    assert (counts.episodes, counts.traces, counts.states) == (2, 4, 4)
    trajs = load_trajectories(tmp_path / "demos.jsonl")
    assert len(trajs) == 2 and json.dumps(trajs[0].reward_details)  # provenance round-trips
    model, processor = load_model("webrl:tiny-webagent-pointer")
    policy = GeneratorPolicy(model, processor, GeneratorConfig(prompt=PromptConfig(
        **read_trained_prompt("webrl:tiny-webagent-pointer"))))
    samples = sft_samples_from_trajectory(trajs[0], policy)
    assert len(samples) == 2
    for turn, sample in zip(trajs[0].turns, samples):
        assert policy.tokenizer.decode(sample.response_ids) == turn.response_text  # the trace and the call
        assert turn.response_text.startswith("<think>\n") and turn.response_text.endswith("</tool_call>")
    # the shipped 512-token prompt budget drops the first turn (its trace is long); without a
    # budget the second prompt holds the first turn's trace as history (context_mode "full")
    assert "(Steps before step 1 are omitted" in policy.tokenizer.decode(samples[1].prompt_ids)
    unlimited = GeneratorPolicy(model, processor, GeneratorConfig(prompt=PromptConfig(
        **{**read_trained_prompt("webrl:tiny-webagent-pointer"), "max_prompt_tokens": 0})))
    history = unlimited.tokenizer.decode(sft_samples_from_trajectory(trajs[0], unlimited)[1].prompt_ids)
    assert history.count("I consider 2 action(s)") == 1 and "Task: Buy the thing." in history


@pytest.mark.browser
@pytest.mark.slow
def test_real_webenv_branches_match_a_fresh_replay(browser_session):
    from webrl.envs import WebEnv, WebEnvConfig
    from webrl.envs.sites.source import make_task
    from webrl.rollout.states import StateView
    from webrl.rollout.slots import GymSlot

    task = make_task("widgets", 0, "train", 5)
    env = GymSlot(WebEnv(WebEnvConfig.from_dict({"browser": {"viewport": "small"}}), session=browser_session))
    try:
        config = ResimConfig(branching=2, depth=1, value_steps=2)
        traj, trees = resim_episode(env, task, config)
        assert traj.status == "ok" and traj.info.task_reward == 1.0, [t.response_text for t in traj.turns]
        # the oracle's click then its stop() (found by the rollout): 1 - 2 * 0.05
        assert all(len(t.branches) == 2 for t in trees) and trees[0].branches[0].value == 0.9
        assert [t.chosen for t in trees] == [0, 0]
        for tree in trees:
            for branch in tree.branches:
                assert not branch.diverged
                result = env.reset(task)
                for compact in tree.prefix:
                    result = env.step(_action_of(compact))
                    assert not (result.terminated or result.truncated)
                assert StateView.of(result.observation) == tree.state  # the state replays
                step = branch.steps[0]
                result = env.step(_action_of(step.action))
                done = result.terminated or result.truncated
                assert StateView.of(result.observation) == step.state and (result.reward, done) == (step.reward,
                                                                                                    step.done)
        assert len(traj.turns[0].images) == 1 and traj.turns[0].observation.screenshot_size == [640, 480]
    finally:
        env.env.close()


def _action_of(compact: str) -> Action:
    from webrl.actions import parse_compact

    parsed = parse_compact(compact)
    assert isinstance(parsed, Action), compact
    return parsed


@pytest.mark.browser
@pytest.mark.slow
def test_the_resim_command_writes_traces_sft_reads(tmp_path, capsys):
    from webrl.cli import main
    from webrl.types import load_trajectories

    out = tmp_path / "resim"
    assert main(["resim", "n=1", f"out={out}", "viewport=small", "resim.branching=2", "resim.depth=1",
                 "resim.value_steps=2"]) == 0
    printed = capsys.readouterr().out
    assert "ReSim: " in printed and f"webrl sft sft.demos_dir={out}" in printed
    (traj,) = load_trajectories(out / "demos.jsonl")
    assert traj.turns and all(t.response_text.startswith("<think>") and t.decided_by == "resim" for t in traj.turns)
