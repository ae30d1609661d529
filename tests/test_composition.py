"""One rollout core: every wrapper stack on both engines, through the trainer's RL iteration.

{in-process transformers, server (`webrl serve` over real HTTP on 127.0.0.1)} x {[], [cascade],
[loci], [skills], [loci, cascade]} x {grpo, ppo}, plus Dyna-GRPO on both engines: each runs one
RL iteration of the sandbox from the config (one task, two trajectories, two turns) with the
shipped tiny pointer model, a real EnvWorker on Chromium (one, shared by every run), the real
DeepSpeed learner in process and the real weight sync (a state dict in process, a Hugging Face
folder the server loads). And for every stack, greedy decisions on real sandbox pages are
token-identical between the two engines, their log-probs equal within the server-engine tests'
tolerance, and a cascade's deferral reuses the heads' prefill on both (no second prefill).

Ray is left out on purpose: the actors' Ray shells are covered by tests/rollout/test_rollout_ray.py
and the Ray job tests; here what composes is the policy stack, the backends and the runner, and
22 runs must fit in a few minutes.
"""
import dataclasses
import json

import pytest
import torch

from tests.rollout.test_dyna import ThreadedWorker
from tests.test_trainer import LocalActors
from webrl.config import load_config
from webrl.run.config import WebRLConfig

STACKS = {"none": [], "cascade": ["cascade"], "loci": ["loci"], "skills": ["skills"], "loci+cascade": ["loci", "cascade"]}
LOGPROB_TOL = 1e-4  # as tests/engines/test_sglang.py: unpadded (server) vs left-padded (in process)
pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The shipped checkpoint, a heads folder, a skill library, one EnvWorker and one `webrl serve`."""
    from tests.skills.test_guided import LIBRARY
    from webrl.chat.local import LocalChatEngine
    from webrl.models import load_model
    from webrl.models.shipped import resolve_shipped
    from webrl.policy.cascade.heads import DecisionHeads, HeadsConfig, save_heads
    from webrl.serve import ServeConfig, ServerThread, create_app

    root = tmp_path_factory.mktemp("composition")
    path = resolve_shipped("webrl:tiny-webagent-pointer")
    base = load_config(WebRLConfig, None, [])
    model, processor = load_model(path)
    torch.manual_seed(0)
    heads = DecisionHeads(model.config.text_config.hidden_size, HeadsConfig())  # untrained: decisions vary
    heads_dir = str(save_heads(heads, root / "heads"))
    library = str(LIBRARY.save(root / "skills"))
    prompt = base.generator.prompt
    server = ServerThread(create_app(LocalChatEngine(model, processor, "tiny"), ServeConfig(
        max_new_tokens=64, default_max_tokens=16, image_min_pixels=prompt.min_pixels,
        image_max_pixels=prompt.max_pixels))).start()
    env = ThreadedWorker(dataclasses.replace(base.env, num_slots=1, threads=1))
    yield {"root": root, "path": path, "heads": heads_dir, "library": library, "server": server, "env": env}
    env.close()
    server.stop()


def overrides(world, engine: str, stack: str, threshold: float = 0.0) -> list[str]:
    out = [f"policy.wrappers=[{','.join(STACKS[stack])}]"]
    if "cascade" in STACKS[stack]:
        out += [f"policy.cascade.heads_dir={world['heads']}", f"policy.cascade.threshold={threshold}"]
    if "loci" in STACKS[stack]:
        out += ["policy.loci.max_rounds=1", "policy.loci.retries=0"]
    if "skills" in STACKS[stack]:
        out += [f"policy.skills.library_dir={world['library']}"]
    if engine == "server":
        out += ["rollout.engine=server", f"rollout.server.urls=[{world['server'].url}]"]
    return out


def engine_for(world, config):
    """The inference engine `RunActors.start_inference` builds for `config`, without Ray."""
    from webrl.engines.engine import GeneratorEngineFactory
    from webrl.engines.sglang import ServerEngineFactory

    if config.rollout.engine == "server":
        return ServerEngineFactory(config.rollout.server.urls, world["path"], config.generator, policy=config.policy)()
    return GeneratorEngineFactory(world["path"], config.generator, policy=config.policy)()


class SharedActors(LocalActors):
    """RunActors' interface over the module's one EnvWorker and server: per run its own engine (the
    run's stack over its backend) and a real learner in process; weights sync as RunActors does
    (a state dict to the in-process model, an exported folder the server loads)."""

    def __init__(self, world, config, name):
        super().__init__()
        self.world, self.config, self.name, self.engines = world, config, name, []
        self.reported = []  # the weight version each engine reports right after each sync

    def start_env_workers(self):
        return [(self.world["env"], 0)]

    def start_inference(self, model_path, generator, index, count=1, endpoint=False):
        from tests.rollout.test_coordinator_logic import AsyncInference
        from webrl.rollout import InferenceConfig, InferenceWorker

        config = dataclasses.replace(self.config, generator=generator)
        workers = [InferenceWorker(engine_for(self.world, config), InferenceConfig(batch_window_s=0.0))
                   for _ in range(count)]
        self.engines += workers
        return [AsyncInference(w) for w in workers]

    def start_learner(self, section, run):
        from webrl.learner import LearnerGroup

        self.learners.append(LearnerGroup(section, run, 1, use_ray=False))
        return self.learners[-1]

    def sync_weights(self, learner, version):
        self.synced.append(version)
        if self.config.rollout.engine == "server":
            folder = learner.export_hf(str(self.world["root"] / self.name / f"v{version}"))
            self.engines[0].set_weights(folder, version, f"{self.name}:v{version}")
            for worker in self.engines[1:]:
                worker.engine.note_weights(f"{self.name}:v{version}")
                worker.version = version
        else:
            for worker in self.engines:
                worker.set_weights(learner.get_weights().as_dict(), version)
        self.reported.append([(w.version, getattr(w.engine, "weight_version", None)) for w in self.engines])

    def close(self):
        for learner in self.learners:
            learner.shutdown()
        if self.config.rollout.engine == "server":  # the next run starts from the checkpoint again
            self.engines[0].engine.load_weights_from_disk(self.world["path"], f"reset-after-{self.name}")
        self.closed = True


def run_one_iteration(world, name, extra):
    from webrl.run.trainer import Trainer

    torch.manual_seed(0)
    run_dir = world["root"] / name
    config = load_config(WebRLConfig, None, [
        f"run.run_dir={run_dir}", "trainer.iterations=1", "tasks.tasks_per_iteration=1", "rollout.group_size=2",
        "rollout.max_turns=2", "tasks.eval_tasks=0", *extra])
    actors = SharedActors(world, config, name)
    Trainer(config, actors=actors).fit()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    (row,) = [r for r in rows if "iteration" in r and "stage" not in r]
    return config, row, actors


CORE_METRICS = {"iteration", "trajectories", "dropped", "env_steps", "samples", "prompt_tokens", "cached_prompt_tokens",
                "informative_groups", "time_collect_s", "time_update_s", "staleness"}


@pytest.mark.parametrize("objective", ["grpo", "ppo"])
@pytest.mark.parametrize("stack", list(STACKS))
@pytest.mark.parametrize("engine", ["transformers", "server"])
def test_one_rl_iteration_of_every_stack_on_both_engines(world, engine, stack, objective):
    extra = overrides(world, engine, stack, threshold=0.0 if stack == "cascade" else 0.999)
    if objective == "ppo":
        extra += ["learner.objective=ppo"]
    else:  # equal rewards in the one group must not skip the update this test is about
        extra += ["learner.advantage.filter_zero_variance=false"]
    config, row, actors = run_one_iteration(world, f"{engine}-{stack}-{objective}", extra)
    assert CORE_METRICS <= set(row) and row["trajectories"] == 2 and row["dropped"] == 0
    assert row["samples"] >= 2 and row["policy_version"] == 1.0 and actors.synced == [1]
    ((version, weight_version),) = actors.reported[-1]
    assert version == 1  # the update reached the engine (in process, or the server's folder)
    if engine == "server":  # the server loaded the exported folder and reports its version
        assert weight_version == f"{engine}-{stack}-{objective}:v1"


@pytest.mark.parametrize("engine", ["transformers", "server"])
def test_dyna_grpo_on_both_engines(world, engine):
    extra = [*overrides(world, engine, "none"), "dyna.every=1", "dyna.states_per_iteration=1",
             "dyna.refine_advantage=joint_group"]
    _, row, _ = run_one_iteration(world, f"{engine}-dyna", extra)
    assert row["dyna/sim_iteration"] == 1.0 and row["dyna/states_simulated"] == 1.0
    assert row["dyna/refined_episodes"] == 1.0 and row["dyna/replays_diverged"] == 0.0


def sandbox_requests(world, n=3):
    """Requests on real sandbox pages (the first state of n training tasks), as the runner builds them."""
    from webrl.envs.sites.source import SandboxTaskSource
    from webrl.policy.types import PolicyRequest
    from webrl.rollout.coordinator import run_coroutine
    from webrl.rollout.episode import observation_of
    import numpy as np

    source, rng = SandboxTaskSource(sites=("widgets",), levels=(0,), split="train"), np.random.default_rng(3)
    out = []
    for _ in range(n):
        result = run_coroutine(world["env"].reset(0, None, {"task": source.sample(rng)}))
        out.append(PolicyRequest(observation_of(result, "som")))
    return out


@pytest.mark.parametrize("stack", list(STACKS))
def test_greedy_decisions_are_token_identical_on_both_engines(world, stack):
    requests = sandbox_requests(world)
    threshold = 0.999 if stack == "loci+cascade" else 0.0  # both cascade paths: heads decide / defer
    decisions = {}
    for engine in ("transformers", "server"):
        config = load_config(WebRLConfig, None, overrides(world, engine, stack, threshold))
        config.generator.sampling.greedy = True  # evaluation's decoding; not a run setting
        built = engine_for(world, config)
        decisions[engine] = built.act(requests)
        if engine == "server":
            built.close()
    for local, remote in zip(decisions["transformers"], decisions["server"]):
        assert remote.prompt_ids == local.prompt_ids and remote.response_ids == local.response_ids
        assert remote.response_text == local.response_text and remote.parsed == local.parsed
        assert len(remote.logprobs) == len(local.logprobs)
        assert torch.allclose(torch.tensor(remote.logprobs), torch.tensor(local.logprobs), atol=LOGPROB_TOL, rtol=0)
        assert getattr(remote, "decided_by", "generator") == getattr(local, "decided_by", "generator")
        if stack == "loci+cascade":  # the deferral decoded from the heads' prefill on both engines
            assert local.decided_by == "generator"
            assert local.stats.cached_tokens == remote.stats.cached_tokens == len(local.prompt_ids) - 1
        if stack == "cascade":
            assert local.decided_by == "heads" and local.generated_tokens == 0
