"""benchmarks/cascade.py: the generator's prompt comes from its checkpoint (`webrl_prompt.json`),
the random-init path keeps its Set-of-Mark prompt, arguments, and the per-episode counting
(step success, element accuracy, tokens, heads share) on a scripted env and policy."""
import json
import shutil
from dataclasses import asdict, dataclass

import numpy as np
import pytest

from tests.benchmarks.helpers import load_benchmark

from webrl.actions import Action
from webrl.envs.task import TaskSpec
from webrl.policy import PromptConfig
from webrl.policy.types import Decision



@pytest.fixture(scope="module")
def bench():
    return load_benchmark("cascade")


TRAINED = {"action_format": "compact", "prompt_version": "brief", "context_mode": "full", "reasoning_turns": 2,
           "num_screenshots": 1, "max_prompt_tokens": 512, "history_elements": False, "think": False,
           "min_pixels": 3136, "max_pixels": 12544}


def test_prompt_from_checkpoint_file(bench, tmp_path):
    # "screenshot": a key older checkpoints wrote (a PromptConfig field that did nothing, removed)
    (tmp_path / "webrl_prompt.json").write_text(json.dumps({**TRAINED, "screenshot": "auto",
                                                            "written_by": "a later version"}))
    assert bench.generator_prompt(tmp_path) == PromptConfig(**TRAINED)  # unknown keys ignored
    # an explicit --max-pixels overrides the screenshot size only; min_pixels stays <= max_pixels
    small = bench.generator_prompt(tmp_path, max_pixels=2000)
    assert asdict(small) == {**TRAINED, "max_pixels": 2000, "min_pixels": 2000}
    assert bench.generator_prompt(tmp_path, max_pixels=50000).min_pixels == 3136


def test_prompt_without_file_is_the_random_init_som_prompt(bench, tmp_path):
    p = bench.generator_prompt(tmp_path)
    assert (p.action_format, p.think, p.min_pixels, p.max_pixels) == ("som", False, 1024, 48 * 28 * 28)
    assert bench.generator_prompt(tmp_path, max_pixels=4096).max_pixels == 4096


def test_shipped_generator_gets_its_trained_prompt(bench):
    p = bench.generator_prompt("webrl:tiny-webagent")
    # webrl/assets/tiny-webagent/webrl_prompt.json: compact calls, brief system prompt, 112 x 112 px
    assert (p.action_format, p.prompt_version, p.think, p.max_pixels) == ("compact", "brief", False, 12544)


def test_benchmark_generator_uses_the_checkpoint_prompt(bench, tiny_qwen25vl_path, tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_qwen25vl_path, ckpt)
    (ckpt / "webrl_prompt.json").write_text(json.dumps(TRAINED))
    gen, model = bench.build_generator(ckpt, max_new_tokens=7)
    assert gen.config.prompt == PromptConfig(**TRAINED)
    assert gen.builder.format.name == "compact"
    assert (gen.config.sampling.greedy, gen.config.sampling.max_new_tokens) == (True, 7)
    plain, _ = bench.build_generator(tiny_qwen25vl_path, max_new_tokens=7)  # no file: random-init path
    assert plain.builder.format.name == "som" and plain.config.prompt.max_pixels == 48 * 28 * 28


def test_args_target_features_and_names(bench):
    a = bench._args(["--target-features", "text", "both", "--heads-epochs", "5", "--generator", "webrl:tiny-webagent"])
    assert (a.target_features, a.heads_epochs, a.viewport, a.max_pixels) == (["text", "both"], 5, "640x480", None)
    assert bench._args([]).target_features == ["visual"]
    with pytest.raises(SystemExit):
        bench._args(["--target-features", "pixels"])
    a = bench._args(["--episode-split", "train", "--query-prefix", "<tool_call>"])
    assert (a.episode_split, a.query_prefix, bench.heldout_folder(a.episode_split)) == ("train", "<tool_call>",
                                                                                       "heldout-train")
    assert (bench._args([]).episode_split, bench.heldout_folder("test")) == ("test", "test")
    with pytest.raises(SystemExit):
        bench._args(["--episode-split", "dev"])
    assert bench.policy_name("text", 0.5, several=False) == "cascade@0.5"
    assert bench.policy_name("text", 0.5, several=True) == "cascade[text]@0.5"


@dataclass
class _Decision(Decision):
    """A decision with the cascade's extra fields (`CascadeDecision`'s decided_by, generated_tokens)."""

    decided_by: str = "generator"
    generated_tokens: int = 0


class _Policy:
    """Answers click(1) (heads, 0 tokens), click(3) (generator, 5 tokens), stop (generator, 2)."""

    def __init__(self):
        self.script = [(Action.click(1), 0, "heads"), (Action.click(3), 5, "generator"), (Action.stop(), 2, "generator")]

    def act(self, requests):
        assert len(requests) == 1 and requests[0].observation.elements  # the heads need the boxes
        action, tokens, decided_by = self.script.pop(0)
        return [_Decision(action, action.to_compact(), response_ids=[0] * tokens, decided_by=decided_by,
                          generated_tokens=tokens)]


class _Task:
    """Oracle: click(1), click(2), stop."""

    spec = TaskSpec(id="shop/l0/test/x/0", goal="g", start_url="http://127.0.0.1/")

    def oracle_action(self, view):
        return [Action.click(1), Action.click(2), None][view["step"]]  # None: the oracle is done (stop)


class _Env:
    def __init__(self):
        self.step_no = 0

    def _obs(self):
        elements = [{"id": i, "bbox": [0, 10 * i, 10, 10]} for i in range(4)]
        return {"goal": "g", "url": "http://127.0.0.1/", "step": self.step_no, "elements_text": "",
                "screenshot": np.zeros((40, 40, 3), dtype=np.uint8)}, {"elements": elements}

    def reset(self, options):
        self.step_no = 0
        return self._obs()

    def step(self, action):
        self.step_no += 1
        done = action.kind == "stop"
        return (*self._obs()[:1], 1.0 if done else 0.0, done, False, self._obs()[1])


def test_episode_counts_by_hand(bench):
    stats = bench.run_episode(_Env(), _Task(), _Policy(), max_steps=6)
    # steps: click(1)=oracle, click(3)!=click(2), stop=stop -> 2 of 3 exact; the oracle names an
    # element on 2 steps, the policy matches it on 1; tokens 0 + 5 + 2; one heads decision; success
    assert {k: stats[k] for k in ("steps", "ok", "element_steps", "element_ok", "tokens", "heads", "reward")} == \
        {"steps": 3, "ok": 2, "element_steps": 2, "element_ok": 1, "tokens": 7, "heads": 1, "reward": 1.0}
    summary = bench.evaluate(_Env(), [_Task()], _Policy(), max_steps=6)
    assert summary["step_success"] == pytest.approx(2 / 3) and summary["element_accuracy"] == 0.5
    assert summary["generated_tokens_per_step"] == pytest.approx(7 / 3) and summary["heads_share"] == pytest.approx(1 / 3)
    assert summary["task_success"] == 1.0 and summary["episodes"] == 1


def test_max_steps_caps_the_episode(bench):
    stats = bench.run_episode(_Env(), _Task(), _Policy(), max_steps=2)
    assert (stats["steps"], stats["reward"]) == (2, 0.0)  # stopped before the policy's stop: no success
