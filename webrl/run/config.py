"""`WebRLConfig`: the whole run, composed of each component's own config section.

Each component receives only its section: the env workers `env`, the rollout coordinator
`rollout`, the inference workers `generator` + `inference`, the learner `learner`, the reward
`reward`. This module adds only what belongs to the job itself: which tasks, how many
actors, and the stages of the loop. Defaults are the embedded CPU default (sandbox sites, tiny
model); presets in webrl/configs/ change them (`--config NAME`).
"""
from __future__ import annotations

import dataclasses
import os

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from webrl.config import ConfigError, ModelConfig, RunConfig, fixed, moved_keys
from webrl.envs.config import EnvWorkerConfig
from webrl.learner.config import LearnerConfig, LearnerRun
from webrl.policy import GeneratorConfig
from webrl.policy.stack import PolicyConfig
from webrl.reward import RewardConfig
from webrl.rollout import InferenceConfig, RolloutConfig
from webrl.rollout.dyna import DynaConfig
from webrl.run.resources import ResourcesConfig
from webrl.run.rules import check_rules

STAGES = ("sft", "rl", "eval")
TASK_SOURCES = ("sandbox", "miniwob", "file", "env")
TASK_FILE_FORMATS = ("", "online_mind2web", "webvoyager", "deepshop", "synth", "webarena")


@dataclass
class TasksConfig:
    source: str = "sandbox"
    """Where tasks come from: sandbox (the project's local sites), miniwob (MiniWoB++ ids, local
    HTML), file (a tasks file: Online-Mind2Web / WebVoyager / DeepShop, WebArena's, or `webrl synth`'s) or env (a
    registered env name: `ray.tune.registry.register_env` or a Gymnasium id whose `tasks` is used)."""
    sites: list[str] = field(default_factory=lambda: ["widgets"])
    """Sandbox sites to train and evaluate on: any of shop, travel, wiki, widgets."""
    train_levels: list[int] = field(default_factory=lambda: [0])
    """Difficulty levels of training tasks (0: one step, 1: 2-4 steps, 2: 5-15 steps)."""
    eval_levels: list[int] = field(default_factory=lambda: [0])
    """Difficulty levels of the held-out evaluation tasks."""
    eval_split: str = "train"
    """source=sandbox: entities of the evaluation tasks. train: training entities in fresh tasks
    (new seeds, so new layouts, pairings and element orders: held-out tasks, seen words); test:
    entities (labels, values, products) no training task uses (the shipped tiny checkpoints are
    near zero there: see their model cards)."""
    miniwob: list[str] = field(default_factory=list)
    """source=miniwob: MiniWoB++ task names (e.g. click-button); empty = all 128."""
    file: str = ""
    """source=file: path of the tasks file (JSON array or JSONL)."""
    file_format: str = ""
    """source=file: online_mind2web | webvoyager | deepshop | synth (a `webrl synth` tasks.jsonl:
    its checker scores a task where it has one, the run's judge otherwise) | webarena (WebArena /
    VisualWebArena task configs, scored by WebArena's evaluators: `webrl.envs.webarena`); empty =
    guess from the file (a live-web format)."""
    webarena_sites: dict = field(default_factory=dict)
    """file_format=webarena: site placeholder -> base URL of your server, e.g. {shopping:
    'http://127.0.0.1:7770', gitlab: 'http://127.0.0.1:8023'} (names: shopping, shopping_admin,
    reddit, gitlab, wikipedia, map, homepage, classifieds). Their hosts are added to
    env.network.local_sites unless that key is set."""
    webarena_split: str = ""
    """file_format=webarena: a file of the task ids to load (a JSON list or one id per line, or
    WebArena-Lite's test_webarena_lite.raw.json, read by its old_task_id); empty = every task."""
    webarena_auth_dir: str = ""
    """file_format=webarena: folder of the storage-state files (WebArena's .auth/*_state.json,
    written by its auto_login.py) the tasks log in with; empty = paths relative to tasks.file."""
    webarena_skip_reset: bool = False
    """file_format=webarena: leave out tasks marked require_reset (webrl does not reset your sites)."""
    env_id: str = ""
    """source=env: the registered env name; its creator must return an env with a `tasks` source."""
    env_config: dict = field(default_factory=dict)
    """source=env: the `env_config` mapping handed to the env's creator."""
    kinds: list[str] = field(default_factory=list)
    """source=sandbox: keep only tasks of these kinds, in training and evaluation (e.g.
    [click_button, click_link]: `webrl.envs.sites.source.task_kinds` lists a site's kinds);
    empty = all. The embedded default: [tab_button], which a layer that sets tasks.source, sites
    or levels (and not kinds) drops."""
    tasks_per_iteration: int = 8
    """Distinct tasks per RL iteration; each is sampled rollout.group_size times."""
    eval_tasks: int = 48
    """Held-out tasks per evaluation: one greedy episode each, plus eval.samples_per_task sampled
    ones (the embedded default: 96 tasks x 1 + 4)."""

    def __post_init__(self) -> None:
        if self.source not in TASK_SOURCES:
            raise ConfigError(f"tasks.source must be one of {TASK_SOURCES}, got {self.source!r}")
        if self.tasks_per_iteration < 1 or self.eval_tasks < 0:
            raise ConfigError("tasks.tasks_per_iteration must be >= 1 and tasks.eval_tasks >= 0")
        if self.source == "file" and not self.file:
            raise ConfigError("tasks.source=file needs tasks.file (the path of the tasks file)")
        if self.source == "env" and not self.env_id:
            raise ConfigError("tasks.source=env needs tasks.env_id (a name given to register_env)")
        if self.eval_split not in ("test", "train"):
            raise ConfigError(f"tasks.eval_split must be one of ('test', 'train'), got {self.eval_split!r}")
        if self.file_format not in TASK_FILE_FORMATS:
            raise ConfigError(f"tasks.file_format must be one of {TASK_FILE_FORMATS}, got {self.file_format!r}")
        if self.source != "file" and (self.file or self.file_format):
            raise ConfigError(f"tasks.file and tasks.file_format apply to tasks.source=file only (source is "
                              f"{self.source!r}); set tasks.source=file or leave them empty")
        if self.kinds:
            self._check_kinds()
        self._check_webarena()

    def _check_webarena(self) -> None:
        keys = {"webarena_sites": self.webarena_sites, "webarena_split": self.webarena_split,
                "webarena_auth_dir": self.webarena_auth_dir, "webarena_skip_reset": self.webarena_skip_reset}
        if self.file_format != "webarena":
            stray = [k for k, v in keys.items() if v]
            if stray:
                raise ConfigError(f"tasks.{stray[0]} applies to tasks.file_format=webarena only (file_format is "
                                  f"{self.file_format!r})")
            return
        from webrl.envs.webarena import normalise_sites

        try:
            normalise_sites(self.webarena_sites)
        except ValueError as err:
            raise ConfigError(f"tasks.webarena_sites: {err}") from None

    def _check_kinds(self) -> None:
        if self.source != "sandbox":
            raise ConfigError(f"tasks.kinds applies to source=sandbox only (source is {self.source!r})")
        from webrl.envs.sites.source import task_kinds

        for key, levels in (("train_levels", self.train_levels), ("eval_levels", self.eval_levels)):
            have = task_kinds(self.sites, levels)
            if not set(self.kinds) & set(have):
                raise ConfigError(f"tasks.kinds: none of {self.kinds} is a kind of sites {self.sites} at "
                                  f"tasks.{key}={levels}; allowed: {have}")
        known = task_kinds(self.sites, sorted({*self.train_levels, *self.eval_levels}))
        unknown = [k for k in self.kinds if k not in known]
        if unknown:
            raise ConfigError(f"tasks.kinds: unknown {unknown}; allowed for sites {self.sites}: {known}")


@dataclass
class SFTStageConfig:
    demos: int = 48
    """Oracle demonstrations recorded from the training split for the SFT stage."""
    demo_levels: list[int] = field(default_factory=lambda: [0])
    """Levels the demonstrations are drawn from."""
    demos_dir: str = ""
    """Use demonstrations already recorded here (`webrl demos --out DIR`) instead of recording."""
    epochs: int = 3
    """Passes over the demonstrations (when `curriculum` is empty)."""
    batch_size: int = 32
    """Samples (turns) per optimizer step: each pass is split into ceil(samples / batch_size)
    mini-batches."""
    lr: float = 1e-3
    """Peak learning rate of the SFT stage (1e-3 suits tiny models; the 4B recipe uses 1e-5)."""
    warmup_steps: int = 0
    """Optimizer steps of linear warm-up from 0 to sft.lr."""
    scheduler: str = "constant"
    """LR schedule after warm-up: "constant", "linear" or "cosine" (decaying over all phases' steps)."""
    freeze_vision_tower: bool = False
    """Keep the vision encoder fixed during SFT (the RL stage follows learner.freeze_vision_tower)."""
    action_weight: float = 1.0
    """Loss weight of the action tokens (GUI-Libra: 2; 1 = uniform cross-entropy)."""
    coordinate_factor: float = 1.0
    """Extra factor on coordinate tokens within the action (GUI-Libra: 2)."""
    direct_fraction: float = 0.0
    """Share of reasoning turns (from sft.data / sft.demos_dir) also trained as direct actions,
    drawn afresh each pass (GUI-Libra: 1.0)."""
    curriculum: list = field(default_factory=list)
    """Phases as [max_level, epochs] pairs, e.g. [[0, 4], [1, 8]]: 4 passes over the level-0
    turns, then 8 over levels 0-1 (levels from each demonstration's task). Empty = `epochs`
    passes over all demonstrations. A decaying LR schedule spans all phases."""
    data: list[str] = field(default_factory=list)
    """Offline datasets added to the demonstrations, each "FORMAT:PATH" or "PATH" (format
    guessed), loaded with `webrl.datasets.load_offline`; their conversion reports are logged."""

    def __post_init__(self) -> None:
        if self.demos < 0 or self.epochs < 1 or self.batch_size < 1:
            raise ConfigError("sft.demos must be >= 0, sft.epochs and sft.batch_size >= 1")
        for i, spec in enumerate(self.data):
            self._check_data_spec(i, spec)
        for phase in self.curriculum:
            if len(phase) != 2 or int(phase[0]) < 0 or int(phase[1]) < 1:
                raise ConfigError(f"sft.curriculum entries are [max_level, epochs] with max_level >= 0 "
                                  f"and epochs >= 1, got {list(phase)!r}")
        from webrl.learner.config import SCHEDULERS

        if self.scheduler not in SCHEDULERS:
            raise ConfigError(f"sft.scheduler must be one of {list(SCHEDULERS)}, got {self.scheduler!r}")
        if not self.lr > 0 or self.warmup_steps < 0:
            raise ConfigError(f"sft.lr must be > 0 and sft.warmup_steps >= 0, got {self.lr}, {self.warmup_steps}")
        from webrl.algos import SFTConfig

        SFTConfig(self.action_weight, self.coordinate_factor, self.direct_fraction)  # its own checks

    @staticmethod
    def _check_data_spec(i: int, spec: Any) -> None:
        """sft.data[i]: a non-empty string whose FORMAT (before the first ':', when it names no
        existing path) is one `webrl.datasets` knows, when that module lists its FORMATS; without
        them the format is checked when the data is loaded (`webrl.recipes.sft.offline_trajectories`)."""
        if not isinstance(spec, str) or not spec.strip():
            raise ConfigError(f"sft.data[{i}] must be a non-empty 'FORMAT:PATH' or 'PATH' string, got {spec!r}")
        head, sep, _ = spec.partition(":")
        if not sep or os.path.exists(spec) or len(head) == 1:  # a bare path (or a Windows drive letter)
            return
        try:
            from webrl.datasets import FORMATS
        except ImportError:
            return
        if head not in FORMATS:
            raise ConfigError(f"sft.data[{i}]={spec!r}: unknown format {head!r}; allowed: {sorted(FORMATS)}")


def sft_learner(config: "WebRLConfig", total_steps: int) -> LearnerConfig:
    """The SFT stage's learner: the RL learner's engine (ZeRO stage, dtype, checkpointing,
    DeepSpeed overrides, checkpoints) with the stage's own optimizer, batching and loss."""
    from webrl.algos import SFTConfig
    from webrl.learner.config import OptimConfig

    rl, sft = config.learner, config.sft
    optim = OptimConfig(lr=sft.lr, warmup_steps=sft.warmup_steps, scheduler=sft.scheduler,
                        total_steps=max(total_steps, 1), weight_decay=rl.optim.weight_decay, grad_clip=rl.optim.grad_clip)
    return LearnerConfig(objective="sft", zero_stage=rl.zero_stage, dtype=rl.dtype,
                         freeze_vision_tower=sft.freeze_vision_tower, gradient_checkpointing=rl.gradient_checkpointing,
                         deepspeed_overrides=rl.deepspeed_overrides, optim=optim,
                         batching=dataclasses.replace(rl.batching, ppo_epochs=1, mini_batches=1),
                         checkpoint=rl.checkpoint,
                         sft=SFTConfig(sft.action_weight, sft.coordinate_factor, sft.direct_fraction))


def rl_learner(config: "WebRLConfig") -> LearnerConfig:
    """The RL stage's learner: learner.* with its LR schedule spanning the run's RL optimizer
    steps (trainer.iterations x batching.mini_batches x batching.ppo_epochs)."""
    rl = config.learner
    steps = max(1, config.trainer.iterations * rl.batching.mini_batches * rl.batching.ppo_epochs)
    return dataclasses.replace(rl, optim=dataclasses.replace(rl.optim, total_steps=steps))


def sft_learners(config: "WebRLConfig", model_path: str) -> Callable[[int], tuple[LearnerConfig, LearnerRun]]:
    """`learner_for` of `webrl.recipes.sft.sft_stage`: total optimizer steps -> the stage's learner."""
    return lambda steps: (sft_learner(config, steps), learner_run(config, model_path))


@dataclass
class TrainerConfig:
    stages: list[str] = field(default_factory=lambda: ["rl"])
    """Stages in order: sft, rl. Evaluation runs before the first and after the last stage."""
    iterations: int = 8
    """RL iterations (collect -> reward -> advantages -> update -> sync)."""
    eval_every: int = 0
    """Also evaluate every N RL iterations (0: only before and after)."""
    checkpoint_every: int = 1
    """Checkpoint every N RL iterations (the last one always)."""

    def __post_init__(self) -> None:
        bad = [s for s in self.stages if s not in STAGES]
        if bad:
            raise ConfigError(f"trainer.stages entries must be among {STAGES}, got {bad}")
        if self.iterations < 0 or self.eval_every < 0 or self.checkpoint_every < 1:
            raise ConfigError("trainer.iterations/eval_every must be >= 0; checkpoint_every >= 1")


@dataclass
class EvalStageConfig:
    endpoint: str = ""
    """OpenAI-compatible server root including /v1 to evaluate instead of model.path (the
    served model's family is model.family); empty = evaluate the checkpoint at model.path."""
    endpoint_model: str = "default"
    """Model name sent to the endpoint."""
    endpoint_api_key_env: str = fixed("OPENAI_API_KEY", "the endpoint's key is read from OPENAI_API_KEY, as OpenAI clients read it")
    """Environment variable holding the endpoint's key (unset: "EMPTY", as local servers take)."""
    export_om2w: bool = fixed(True, "the result folders are small and what the official WebJudge script reads")
    """`webrl eval` also writes every trajectory in the Online-Mind2Web v2 result format
    (`<run_dir>/om2w/<task_id>/result.json`), the layout the official WebJudge script reads."""
    samples_per_task: int = 0
    """Besides the greedy episode, this many episodes per held-out task sampled at the rollout
    temperature (0 = off): `success_sampled`, their mean success. More sensitive than greedy
    success to a policy that moved probability toward the right action without (yet) changing
    its argmax; costs samples_per_task x eval_tasks more episodes per evaluation. The embedded
    default samples 4 (derived 0 with eval.endpoint, tasks.eval_tasks=0 or non-sandbox tasks,
    unless set)."""

    max_dropped_share: float = 1.0
    """Largest share of an evaluation's trajectories that may be dropped (infrastructure errors,
    refused start URLs, judge failures) before `webrl eval` / `webrl train` exit non-zero; an
    evaluation that dropped every trajectory always fails (1.0: only that). Either way the drop
    reasons are printed with their counts."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_dropped_share <= 1.0:
            raise ConfigError(f"eval.max_dropped_share must be in [0, 1], got {self.max_dropped_share}")
        if self.endpoint and not self.endpoint.startswith(("http://", "https://")):
            raise ConfigError(f"eval.endpoint must start with http:// or https://, got {self.endpoint!r}")
        if self.samples_per_task < 0:
            raise ConfigError(f"eval.samples_per_task must be >= 0, got {self.samples_per_task}")
        if self.samples_per_task and self.endpoint:
            raise ConfigError("eval.samples_per_task needs the checkpoint's own sampler; set it to 0 with eval.endpoint")


DEFAULT_KINDS = ["tab_button"]
"""The embedded default's task kind: widgets level 1 `tab_button` (open a tab, then click a button
inside it). The shipped checkpoint samples it worse than its argmax (sampled 0.31-0.41, greedy
0.45-0.53), so RL's first effect has room to show within 8 iterations (issue 52; `tasks.kinds`
goes back to every kind when a layer sets the tasks' source, sites or levels without it)."""


def _default_tasks() -> TasksConfig:
    """Widgets level-1 tab_button tasks (DEFAULT_KINDS), 96 held-out tasks per evaluation."""
    return TasksConfig(train_levels=[1], eval_levels=[1], kinds=list(DEFAULT_KINDS), eval_tasks=96)


def _default_eval() -> EvalStageConfig:
    """Besides the greedy episode, 4 sampled episodes per held-out task: the table's sampled line,
    the one RL moves on the tiny checkpoint (benchmarks/results/default_gain_2026-12-07)."""
    return EvalStageConfig(samples_per_task=4)


def _default_env() -> EnvWorkerConfig:
    return EnvWorkerConfig(num_slots=4, viewport="640x480")


def _default_learner() -> LearnerConfig:
    """GRPO at lr 5e-4, two optimizer steps per iteration (2e-4 until 2026-12-07: on the default's
    tab_button tasks 5e-4 moved held-out sampled success by 8-12 points in 8 iterations)."""
    from webrl.learner.config import BatchingConfig, OptimConfig

    return LearnerConfig(objective="grpo", optim=OptimConfig(lr=5e-4), batching=BatchingConfig(mini_batches=2))


def _default_run() -> RunConfig:
    return RunConfig(name="default")


def _default_model() -> ModelConfig:
    """The shipped SFT checkpoint (webrl/assets/tiny-webagent-pointer/MODEL_CARD.md)."""
    return ModelConfig(path="webrl:tiny-webagent-pointer")


def _default_rollout() -> RolloutConfig:
    """8 trajectories per task (64 per iteration), two-step tasks within 4 turns (one slip allowed)."""
    return RolloutConfig(group_size=8, max_turns=4)


def default_generator() -> GeneratorConfig:
    """The prompt format the shipped checkpoint was trained with: elements as `<e3> button "Go"`
    chosen by the element pointer, no reasoning, 112x112 screenshots (12 visual tokens)."""
    from webrl.policy import PromptConfig, SamplingConfig

    prompt = PromptConfig(action_format="pointer", prompt_version="brief", think=False, max_prompt_tokens=512,
                          max_pixels=12544)
    return GeneratorConfig(prompt=prompt, sampling=SamplingConfig(max_new_tokens=24))


@dataclass
class WebRLConfig:
    """The whole run; each component receives only its own section."""

    run: RunConfig = field(default_factory=_default_run)
    """Run folder, seed, resume."""
    model: ModelConfig = field(default_factory=_default_model)
    """Policy checkpoint (or a tiny random-init model)."""
    tasks: TasksConfig = field(default_factory=_default_tasks)
    """Which tasks to train and evaluate on."""
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    """Ray cluster and actor counts."""
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    """Stages and iteration counts of the loop."""
    sft: SFTStageConfig = field(default_factory=SFTStageConfig)
    """Supervised stage on oracle demonstrations."""
    eval: EvalStageConfig = field(default_factory=_default_eval)
    """What `webrl eval` evaluates (a checkpoint or an endpoint) and what it writes."""
    env: EnvWorkerConfig = field(default_factory=_default_env)
    """Every EnvWorker (slots per browser, viewport, time limits, safety)."""
    rollout: RolloutConfig = field(default_factory=_default_rollout)
    """Group size, horizon, timeouts, retries."""
    generator: GeneratorConfig = field(default_factory=default_generator)
    """Prompting and sampling of the rollout policy."""
    inference: InferenceConfig = field(default_factory=InferenceConfig)
    """Dynamic batching of inference requests."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    """Policy wrappers around the generator, in rollouts and evaluation alike (wrappers: [loci,
    cascade] outermost first; the cascade's heads_dir and threshold; LOCI's search settings)."""
    learner: LearnerConfig = field(default_factory=_default_learner)
    """RL learner (objective grpo or ppo, DeepSpeed ZeRO stage, optimizer, batching)."""
    reward: RewardConfig = field(default_factory=lambda: RewardConfig(kind="programmatic"))
    """Reward: the sandbox checker by default; judges for live-web tasks."""
    dyna: DynaConfig = field(default_factory=DynaConfig)
    """Dyna-GRPO (Dyna-Mind stage 2): SimRollout iterations that refine sampled responses with the
    real future states they led to, alternating with plain GRPO (`webrl.rollout.dyna`). Off unless dyna.every is set."""

    @staticmethod
    def derived_overrides(merged: dict, explicit: set[str]) -> list[str]:
        """Defaults that follow from other keys (`webrl.config.load_config` applies them to
        every key no preset or override set): the default's task kind (DEFAULT_KINDS) only with
        its own tasks, so a layer that sets tasks.source, sites or levels gets every kind; the
        sampled evaluation only on sandbox tasks with tasks.eval_tasks and without eval.endpoint (an endpoint has no
        sampler here, and on other tasks 4x the evaluation's episodes, judged, is the user's
        call); run.deterministic batches one request per forward in
        process (batch composition moves the forward's last bits); a live-web tasks file (tasks.source=file, not
        `webrl synth`'s) runs under the live-web network policy (CDN subresources load, internal
        hosts stay out) and is scored by the judge recipe, as webrl/LiveWeb-v0 does; the
        sandbox's allowlist policy and programmatic checker would abort every CDN request and
        leave every trajectory unscored."""
        tasks, out = merged["tasks"], []
        task_keys = ("tasks.source", "tasks.sites", "tasks.train_levels", "tasks.eval_levels")
        if "tasks.kinds" not in explicit and any(k in explicit for k in task_keys):
            out.append("tasks.kinds=[]")  # the default's kind belongs to its site and levels
        if "eval.samples_per_task" not in explicit and (merged["eval"]["endpoint"] or tasks["source"] != "sandbox"
                                                         or not tasks["eval_tasks"]):
            out.append("eval.samples_per_task=0")  # no sampler at an endpoint, nothing to sample, or the user's call
        if "rollout.dynamic_sampling.enabled" not in explicit and not dynamic_sampling_applies(merged):
            out.append("rollout.dynamic_sampling.enabled=false")  # nothing filtered, or the async collector draws
        if (merged["run"]["deterministic"] and merged["rollout"]["engine"] == "transformers"
                and "inference.max_batch_size" not in explicit):
            out.append("inference.max_batch_size=1")  # run.deterministic: one request per forward in process
        if tasks["source"] == "file" and tasks.get("file_format") != "synth":
            if "env.subresource_policy" not in explicit:
                out.append("env.subresource_policy=public")
            if "reward.kind" not in explicit and tasks.get("file_format") != "webarena":
                out.append("reward.kind=recipe")  # WebArena tasks keep the checker: their own evaluators
        if tasks.get("file_format") == "webarena" and "env.network.local_sites" not in explicit:
            from webrl.envs.webarena import site_hosts

            try:  # the user's WebArena servers are reachable
                hosts = site_hosts(tasks.get("webarena_sites") or {})
            except ValueError:  # TasksConfig refuses the mapping, naming the key
                hosts = []
            if hosts:
                out.append(f"env.network.local_sites=[{','.join(hosts)}]")
        return out

    @staticmethod
    def switched_off(merged: dict) -> dict[str, str]:
        """Sections the merged config switches off -> the key that switches them: what an earlier
        layer (a preset) set there, a later layer's switch drops (`webrl.config.load_config`),
        so `--config smoke learner.objective=ppo` takes that one key."""
        learner, rollout = merged["learner"], merged["rollout"]
        off = {"learner.ppo": "learner.objective"} if learner["objective"] == "grpo" else {}
        if learner["objective"] == "ppo":
            off.update({"learner.advantage": "learner.objective", "learner.step": "learner.objective"})
        if not merged["dyna"]["every"]:
            off["dyna"] = "dyna.every"
        if not rollout["balanced"]["enabled"]:
            off["rollout.balanced"] = "rollout.balanced.enabled"
        if not rollout["dynamic_sampling"]["enabled"]:
            off["rollout.dynamic_sampling"] = "rollout.dynamic_sampling.enabled"
        if "sft" not in merged["trainer"]["stages"]:
            off["sft"] = "trainer.stages"  # a preset's SFT settings, when a later layer runs no SFT stage
        if rollout["engine"] == "transformers":
            off["rollout.server"] = "rollout.engine"
        else:
            off.update({"generator.sparse_prefill": "rollout.engine",
                        "resources.gpus_per_inference_worker": "rollout.engine"})
        return off

    def __post_init__(self) -> None:
        check_rules(self)  # the cross-section rules (webrl.run.rules)


def dynamic_sampling_applies(merged: dict) -> bool:
    """Whether dynamic sampling can act on a (merged, plain-dict) config: sync collection and GRPO
    filtering zero-variance groups (PPO trains on every group; rollout.mode=async draws on the
    collector's thread)."""
    learner = merged["learner"]
    filtering = learner["objective"] == "grpo" and (learner.get("advantage") or {}).get("filter_zero_variance", True)
    return bool(filtering) and merged["rollout"]["mode"] == "sync"


def weight_sync(config: "WebRLConfig") -> tuple[str, str]:
    """The run's resolved (learner.weight_sync mode, backend): `resolve_weight_sync` with what
    the config says about the receivers' GPUs."""
    from webrl.learner.config import resolve_weight_sync

    res, server = config.resources, config.rollout.server
    if config.rollout.engine == "transformers":
        receivers: Optional[bool] = res.gpus_per_inference_worker > 0
    elif server.launch != "none":
        receivers = server.launch in ("sglang", "vllm") and server.gpus_per_server > 0
    else:
        receivers = None  # servers the user started
    mode, backend = resolve_weight_sync(config.learner.weight_sync, config.rollout.engine,
                                        bool(res.gpus_per_learner_rank), receivers)
    if config.rollout.engine == "server" and server.speaks == "vllm" and mode == "collective" and backend != "nccl":
        from webrl.config import ConfigError

        raise ConfigError(f"learner.weight_sync.mode='collective' reaches vLLM servers through vLLM's NCCL weight "
                          f"transfer only (GPUs on the learner and the servers: resources.gpus_per_learner_rank > 0 "
                          f"and rollout.server.gpus_per_server > 0), and the backend here is {backend!r}: with "
                          f"these resources allowed: ['auto', 'disk'] (the servers reload each iteration's folder)")
    return mode, backend


moved_keys({
    "run.wandb_project": "renamed: run.trackers=[wandb:PROJECT]",
    "run.mlflow_experiment": "renamed: run.trackers=[mlflow:EXPERIMENT]",
    "sft.learner.sft.*": "renamed: sft.action_weight, sft.coordinate_factor, sft.direct_fraction",
    "trainer.log_every": "removed: the metrics table is printed every iteration (metrics.jsonl has them all)",
    "sft.learner.optim.lr": "renamed to sft.lr",
    "sft.learner.optim.warmup_steps": "renamed to sft.warmup_steps",
    "sft.learner.optim.scheduler": "renamed to sft.scheduler",
    "sft.learner.freeze_vision_tower": "renamed to sft.freeze_vision_tower",
    "sft.learner.*": "removed: the SFT stage uses the RL learner's engine settings (learner.zero_stage, dtype, "
                     "gradient_checkpointing, deepspeed_overrides, checkpoint) and its own sft.lr / warmup_steps / "
                     "scheduler / freeze_vision_tower / action_weight / coordinate_factor / direct_fraction",
})

def learner_run(config: WebRLConfig, model_path: str, temperature: float = 1.0) -> LearnerRun:
    """What the run derives for a learner: the policy to train, the run's seed, the temperature
    log-probs are taken at (the rollout's, for RL) and the prompt's screenshot pixel bounds (the
    learner must encode screenshots exactly as the rollout did)."""
    prompt = config.generator.prompt
    return LearnerRun(model_path=model_path, seed=config.run.seed, temperature=temperature,
                      image_min_pixels=prompt.min_pixels, image_max_pixels=prompt.max_pixels)
