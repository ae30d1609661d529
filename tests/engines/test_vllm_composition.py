"""Every policy wrapper, and Dyna-GRPO, over a real vLLM server, through the trainer's RL iteration.

{[], [cascade], [loci], [skills]} and Dyna-GRPO: one RL iteration each of the sandbox (one task,
two trajectories, two turns) with the shipped text-action checkpoint webrl:tiny-webagent on a
vLLM server launched by webrl's launcher, a real EnvWorker on Chromium, the real DeepSpeed
learner in process and the real weight sync (a Hugging Face folder the server reloads in place).
The cascade's heads read hidden states from the in-process copy the engine keeps (vLLM returns
none). The machinery is tests/test_composition.py's, with the vLLM protocol.
"""
import dataclasses
import json

import pytest
import torch

from tests.test_composition import STACKS, SharedActors, overrides

pytestmark = [pytest.mark.browser, pytest.mark.slow]
CHECKPOINT = "webrl:tiny-webagent"
PROMPT = ["generator.prompt.action_format=compact"]  # what the checkpoint was trained with


@pytest.fixture(scope="module")
def world(tmp_path_factory, vllm_server):
    from tests.rollout.test_dyna import ThreadedWorker
    from tests.skills.test_guided import LIBRARY
    from webrl.config import load_config
    from webrl.models import load_model
    from webrl.models.shipped import resolve_shipped
    from webrl.policy.cascade.heads import DecisionHeads, HeadsConfig, save_heads
    from webrl.run.config import WebRLConfig

    root = tmp_path_factory.mktemp("vllm-composition")
    path = resolve_shipped(CHECKPOINT)
    base = load_config(WebRLConfig, "vllm", [])
    model, _ = load_model(path)
    torch.manual_seed(0)
    heads = DecisionHeads(model.config.text_config.hidden_size, HeadsConfig())  # untrained: decisions vary
    prompt = base.generator.prompt
    server = vllm_server(path, (prompt.min_pixels, prompt.max_pixels))
    env = ThreadedWorker(dataclasses.replace(base.env, num_slots=1, threads=1))
    yield {"root": root, "path": path, "heads": str(save_heads(heads, root / "heads")),
           "library": str(LIBRARY.save(root / "skills")), "server": server, "env": env}
    env.close()


class VLLMActors(SharedActors):
    """tests/test_composition.py's actors with every inference engine speaking vLLM's protocol."""

    def start_inference(self, model_path, generator, index, count=1, endpoint=False):
        from tests.rollout.test_coordinator_logic import AsyncInference
        from webrl.rollout import InferenceConfig, InferenceWorker
        from webrl.engines.sglang import ServerEngineFactory

        server = self.config.rollout.server
        assert server.speaks == "vllm"
        factory = ServerEngineFactory(server.urls, self.world["path"], generator, policy=self.config.policy,
                                      protocol=server.speaks)
        workers = [InferenceWorker(factory(), InferenceConfig(batch_window_s=0.0)) for _ in range(count)]
        self.engines += workers
        return [AsyncInference(w) for w in workers]


def run_one_iteration(world, name, extra):
    from webrl.config import load_config
    from webrl.run.config import WebRLConfig
    from webrl.run.trainer import Trainer

    torch.manual_seed(0)
    run_dir = world["root"] / name
    config = load_config(WebRLConfig, None, [
        f"run.run_dir={run_dir}", f"model.path={CHECKPOINT}", *PROMPT, "trainer.iterations=1",
        "tasks.tasks_per_iteration=1", "rollout.group_size=2", "rollout.max_turns=2", "tasks.eval_tasks=0",
        "rollout.server.protocol=vllm", *extra])
    actors = VLLMActors(world, config, name)
    Trainer(config, actors=actors).fit()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    (row,) = [r for r in rows if "iteration" in r and "stage" not in r]
    return row, actors


@pytest.mark.parametrize("stack", [s for s in STACKS if s != "loci+cascade"])
def test_one_rl_iteration_of_every_wrapper_on_vllm(world, stack):
    name = f"vllm-{stack}"
    extra = overrides(world, "server", stack, threshold=0.0 if stack == "cascade" else 0.999)
    row, actors = run_one_iteration(world, name, [*extra, "learner.advantage.filter_zero_variance=false"])
    assert row["trajectories"] == 2 and row["dropped"] == 0 and row["samples"] >= 2
    assert row["policy_version"] == 1.0 and actors.synced == [1]
    ((version, weight_version),) = actors.reported[-1]
    assert version == 1 and weight_version == f"{name}:v1"  # the server reloaded the learner's folder


def test_dyna_grpo_on_vllm(world):
    extra = [*overrides(world, "server", "none"), "dyna.every=1", "dyna.states_per_iteration=1",
             "dyna.refine_advantage=joint_group"]
    row, _ = run_one_iteration(world, "vllm-dyna", extra)
    assert row["dyna/sim_iteration"] == 1.0 and row["dyna/states_simulated"] == 1.0
    assert row["dyna/refined_episodes"] == 1.0 and row["dyna/replays_diverged"] == 0.0
