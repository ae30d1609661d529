"""Configs of the learner: one dataclass per piece, each validated in `__post_init__`.

    LearnerConfig
      ├─ optim: OptimConfig          client AdamW, LR schedule, gradient clipping
      ├─ batching: BatchingConfig    token-budget micro-batches, PPO epochs / mini-batches
      ├─ checkpoint: CheckpointConfig  keep-last-N, verification on load
      ├─ weight_sync: WeightSyncConfig  learner -> rollout weights: object store, broadcast or disk
      ├─ loss                        the policy loss (GRPO and PPO)
      ├─ advantage / step            GRPO's group and GiGPO step advantages
      └─ ppo                         PPO's GAE and value loss

    LearnerRun                       what the run derives for its learner (model path, seed,
                                     rollout temperature, the prompt's pixel bounds): passed
                                     next to the config, never a config section a user sets
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Optional
from webrl.algos import GRPOConfig, PPOConfig, SFTConfig
from webrl.algos.advantages import GroupAdvantageConfig
from webrl.algos.losses import PolicyLossConfig
from webrl.algos.step_advantages import StepAdvantageConfig
from webrl.learner.consistency import ConsistencyConfig
from webrl.config import fixed

OBJECTIVE_NAMES = ("grpo", "ppo", "sft")
ZERO_STAGES = (0, 1, 2, 3)
DTYPES = ("auto", "float32", "bfloat16")
SCHEDULERS = ("constant", "linear", "cosine")
VERIFY_MODES = ("size", "sha256")
WEIGHT_SYNC_MODES = ("auto", "object_store", "collective", "disk")
WEIGHT_SYNC_BACKENDS = ("auto", "gloo", "nccl")
#: which modes each rollout engine can apply (`resolve_weight_sync`)
ENGINE_WEIGHT_SYNC = {"transformers": ("object_store", "collective"), "server": ("disk", "collective")}


def _one_of(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")


def _positive(name: str, value, *, allow_zero: bool = False) -> None:
    if not (value >= 0 if allow_zero else value > 0):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")


@dataclass
class OptimConfig:
    """Client-side torch.optim.AdamW (nothing compiles C++ ops) and its LR schedule."""

    lr: float = 1e-6
    """Peak learning rate."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW (beta1, beta2)."""
    eps: float = fixed(1e-8, "AdamW's epsilon")
    """AdamW epsilon."""
    scheduler: str = "constant"
    """LR schedule after warm-up: "constant", "linear" (decay to min_lr_ratio) or "cosine"."""
    warmup_steps: int = 0
    """Optimizer steps of linear warm-up from 0 to lr."""
    total_steps: int = fixed(1000, "a run spans its own optimizer steps: trainer.iterations x mini_batches x ppo_epochs "
                             "for RL, the passes' steps for SFT")
    """Optimizer steps the decaying schedules span (ignored by "constant")."""
    min_lr_ratio: float = fixed(0.0, "the decaying schedules end at 0")
    """Final LR of "linear" / "cosine" as a fraction of lr."""
    grad_clip: float = 1.0
    """Global gradient-norm clip (DeepSpeed `gradient_clipping`); 0 disables."""

    def __post_init__(self) -> None:
        _positive("OptimConfig.lr", self.lr)
        _positive("OptimConfig.weight_decay", self.weight_decay, allow_zero=True)
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"OptimConfig.betas must be two numbers in [0, 1), got {self.betas!r}")
        self.betas = (float(self.betas[0]), float(self.betas[1]))
        _positive("OptimConfig.eps", self.eps)
        _one_of("OptimConfig.scheduler", self.scheduler, SCHEDULERS)
        _positive("OptimConfig.warmup_steps", self.warmup_steps, allow_zero=True)
        _positive("OptimConfig.total_steps", self.total_steps)
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"OptimConfig.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        _positive("OptimConfig.grad_clip", self.grad_clip, allow_zero=True)


@dataclass
class BatchingConfig:
    """How turn samples become micro-batches, mini-batches and epochs."""

    token_budget: int = 16384
    """Padded tokens per micro-batch per rank (rows x longest row). A single longer sample
    still gets its own micro-batch."""
    max_samples_per_micro_batch: int = fixed(64, "micro-batches are sized by learner.batching.token_budget; this caps the rows of one")
    """Upper bound on rows per micro-batch (image tensors grow with rows too)."""
    ppo_epochs: int = 1
    """Passes over the update's samples."""
    mini_batches: int = 1
    """Optimizer steps per epoch: the samples are shuffled and split into this many parts."""

    def __post_init__(self) -> None:
        for name in ("token_budget", "max_samples_per_micro_batch", "ppo_epochs", "mini_batches"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"BatchingConfig.{name} must be >= 1, got {getattr(self, name)!r}")


VERIFY_ON_LOAD = "sha256"
"""Checkpoints are verified file by file against their manifest's sha256 on load."""


@dataclass
class CheckpointConfig:
    """Learner checkpoints (see `webrl.learner.checkpoint`)."""

    keep_last: int = 3
    """Complete checkpoints kept under a checkpoint root; older ones are deleted after a save."""
    export_hf: bool = fixed(True, "every checkpoint carries a Hugging Face folder, what webrl eval and the servers load")
    """Also write the policy in Hugging Face format (`hf/`), loadable by plain transformers."""

    @property
    def verify(self) -> str:
        return VERIFY_ON_LOAD

    def __post_init__(self) -> None:
        _positive("CheckpointConfig.keep_last", self.keep_last)


WEIGHT_SYNC_TIMEOUT_S = 300.0
"""Deadline of the weight-broadcast group's set-up and of each broadcast, in seconds."""


@dataclass
class WeightSyncConfig:
    """How the weights reach the rollout after each update (`webrl.learner.weights`)."""

    mode: str = "auto"
    """"object_store": rank 0 puts the weights into Ray's object store once, every in-process
    inference worker copies them (rollout.engine=transformers); "collective": learner rank 0
    broadcasts them in buckets to a group of the receivers, never through the driver
    (in-process workers, or servers speaking SGLang's /update_weights_from_distributed);
    "disk": a Hugging Face folder the servers load (rollout.engine=server); "auto":
    object_store for the transformers engine, disk for servers (the behaviour before the
    broadcast existed; on CPU the broadcast measured faster, benchmarks/results/
    weight_sync_2026-12-01, but the trainer's Ray runs have not yet been exercised with it)."""
    bucket_mb: float = fixed(256.0, "the bucket size changes the broadcast's speed, not the weights: benchmarks/weight_sync.py measures others")
    """Bucket size of the broadcast in MiB: consecutive tensors up to this many bytes travel as
    one flat tensor (a larger tensor travels alone)."""
    backend: str = "auto"
    """Broadcast backend: "auto" (nccl when the learner has GPUs, else gloo), "gloo" or "nccl"
    (`webrl serve` speaks gloo only)."""

    def __post_init__(self) -> None:
        _one_of("learner.weight_sync.mode", self.mode, WEIGHT_SYNC_MODES)
        _one_of("learner.weight_sync.backend", self.backend, WEIGHT_SYNC_BACKENDS)
        _positive("learner.weight_sync.bucket_mb", self.bucket_mb)

    @property
    def timeout_s(self) -> float:
        """Deadline of the group's set-up and of each broadcast (WEIGHT_SYNC_TIMEOUT_S)."""
        return WEIGHT_SYNC_TIMEOUT_S

    @property
    def group_name(self) -> str:
        """Name of the broadcast group: SGLang's default."""
        return "weight_update_group"

    @property
    def bucket_bytes(self) -> int:
        return max(1, int(self.bucket_mb * 2**20))


def resolve_weight_sync(config: WeightSyncConfig, engine: str, learner_gpus: bool,
                        receiver_gpus: Optional[bool] = None) -> tuple[str, str]:
    """(mode, backend) for a run whose rollout uses `engine` ("transformers" or "server"); a mode
    the engine cannot apply is refused naming both keys. `receiver_gpus`: whether every receiver
    holds a GPU (None: not known, e.g. servers the user started; taken to follow the learner).
    The broadcast's settings are refused unless the mode is collective (nothing else reads them)."""
    from webrl.config import ConfigError

    if engine not in ENGINE_WEIGHT_SYNC:
        raise ConfigError(f"rollout.engine must be one of {list(ENGINE_WEIGHT_SYNC)}, got {engine!r}")
    allowed = ENGINE_WEIGHT_SYNC[engine]
    mode = config.mode if config.mode != "auto" else allowed[0]
    if mode not in allowed:
        raise ConfigError(f"learner.weight_sync.mode={mode!r} cannot reach rollout.engine={engine!r}; "
                          f"allowed with it: {['auto', *allowed]}")
    if mode != "collective":
        defaults = WeightSyncConfig.__dataclass_fields__
        unread = [k for k in ("backend",) if getattr(config, k) != defaults[k].default]
        if unread:
            raise ConfigError(f"learner.weight_sync.{', '.join(unread)} only act with learner.weight_sync.mode="
                              f"collective (the mode here is {mode!r}); set the mode or leave them at their defaults")
    receivers = learner_gpus if receiver_gpus is None else receiver_gpus
    backend = config.backend if config.backend != "auto" else ("nccl" if learner_gpus and receivers else "gloo")
    if backend == "nccl" and not (learner_gpus and receivers) and mode == "collective":
        raise ConfigError("learner.weight_sync.backend='nccl' needs GPUs on the learner and on every receiver "
                          "(resources.gpus_per_learner_rank > 0, and resources.gpus_per_inference_worker > 0 or "
                          "rollout.server.launch=sglang or vllm with gpus_per_server > 0; webrl serve speaks gloo only); "
                          "allowed here: ['auto', 'gloo']")
    return mode, backend


@dataclass
class PPOValueConfig:
    """PPO's own settings (the policy loss is `learner.loss`, shared with GRPO)."""

    gamma: float = 1.0
    """Discount per turn (agent step)."""
    lam: float = 0.95
    """GAE lambda across turns."""
    whiten_advantages: bool = fixed(True, "PPO's advantages are normalised to mean 0 / std 1 over the rollout")
    """Normalise advantages to mean 0 / std 1 over the rollout's turn samples."""
    value_coef: float = 0.5
    """Weight of the value loss."""
    value_clip_eps: Optional[float] = 0.2
    """Clip range of the value update around the old value; None disables clipping."""

    def __post_init__(self) -> None:
        PPOConfig(**dataclasses.asdict(self))  # the objective's own checks


@dataclass
class LearnerConfig:
    """The DeepSpeed learner: engine, objective and its pieces. The policy it trains and the
    values that must match the rollout come separately, in a `LearnerRun`.

    The objective's settings are flat: `loss` (GRPO and PPO alike), `advantage` and `step`
    (GRPO's group and GiGPO step advantages), `ppo` (GAE and the value head, which objective=ppo
    implies); `objective_config` composes the one `webrl.algos` runs."""

    objective: str = "grpo"
    """Objective dispatched from `webrl.algos.OBJECTIVES`: "grpo" or "ppo" (the SFT stage runs "sft")."""
    zero_stage: int = 1
    """DeepSpeed ZeRO stage 0-3."""
    dtype: str = "auto"
    """Training dtype: "auto" (bfloat16 on GPU, float32 on CPU), "float32" or "bfloat16"."""
    freeze_vision_tower: bool = False
    """Keep the vision encoder (and its merger) fixed; its weights are then never synced."""
    gradient_checkpointing: bool = False
    """Recompute each transformer block's activations in backward instead of keeping them
    (transformers' non-reentrant checkpointing of the language and vision blocks): activation
    memory drops from one set per layer to about one layer's, for about one more forward pass."""
    reference: str = "none"
    """Reference policy for the KL term: "none", "copy" (a frozen copy of the initial policy) or
    the folder of a stored snapshot to load frozen."""
    deepspeed_overrides: dict[str, Any] = field(default_factory=dict)
    """Merged (nested) into the generated DeepSpeed config, e.g.
    {"zero_optimization": {"stage3_param_persistence_threshold": 0}}."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimizer and schedule."""
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    """Micro-batching, epochs and mini-batches."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpoint retention and the Hugging Face export."""
    weight_sync: WeightSyncConfig = field(default_factory=WeightSyncConfig)
    """How the weights reach the rollout's inference workers or servers after each update."""
    loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    """Surrogate, clipping, KL, entropy and aggregation (GRPO and PPO)."""
    advantage: GroupAdvantageConfig = field(default_factory=GroupAdvantageConfig)
    """GRPO: how rewards become group advantages (estimator, zero-variance filter, negative scaling)."""
    step: StepAdvantageConfig = field(default_factory=StepAdvantageConfig)
    """GRPO: step-level advantages from repeated page states (GiGPO); step.weight 0 (default) is off."""
    ppo: PPOValueConfig = field(default_factory=PPOValueConfig)
    """PPO: GAE and the value loss."""
    consistency: ConsistencyConfig = field(default_factory=ConsistencyConfig)
    """Rollout-vs-learner log-prob check of every update (`webrl.learner.consistency`)."""
    sft: Optional[SFTConfig] = fixed(None, "the SFT stage sets it from sft.action_weight / coordinate_factor / direct_fraction")
    """The SFT stage's loss weights (set by that stage from sft.*; None = uniform cross-entropy)."""

    def __post_init__(self) -> None:
        _one_of("LearnerConfig.objective", self.objective, OBJECTIVE_NAMES)
        _one_of("LearnerConfig.zero_stage", self.zero_stage, ZERO_STAGES)
        _one_of("LearnerConfig.dtype", self.dtype, DTYPES)
        if not self.reference:
            raise ValueError('LearnerConfig.reference must be "none", "copy" or a snapshot folder, got ""')
        loss = self.loss
        if self.objective != "sft" and loss.kl_coef > 0 and loss.kl_mode == "loss" and self.reference == "none":
            raise ValueError("LearnerConfig.reference must be 'copy' or a snapshot folder when loss.kl_coef > 0 with "
                             "kl_mode='loss', got 'none'")

    @property
    def value_head(self) -> bool:
        """PPO trains a value head on the last prompt token; nothing else reads one."""
        return self.objective == "ppo"

    @property
    def reference_kind(self) -> str:
        """"none", "copy" or "snapshot" (`reference` names a folder)."""
        return self.reference if self.reference in ("none", "copy") else "snapshot"

    @property
    def backend(self) -> str:
        """torch.distributed backend: nccl on GPU, gloo on CPU (`init_distributed`'s "auto")."""
        return "auto"

    @property
    def objective_config(self):
        """The config `webrl.algos` runs for the active objective (its loss is `self.loss`)."""
        if self.objective == "grpo":
            return GRPOConfig(advantage=self.advantage, loss=self.loss, step=self.step)
        if self.objective == "ppo":
            return PPOConfig(**{f.name: getattr(self.ppo, f.name) for f in dataclasses.fields(self.ppo)}, loss=self.loss)
        return self.sft or SFTConfig(action_weight=1.0, coordinate_factor=1.0, direct_fraction=0.0)

    def resolved_dtype(self, device_type: str) -> str:
        if self.dtype != "auto":
            return self.dtype
        return "bfloat16" if device_type == "cuda" else "float32"


@dataclass(frozen=True)
class LearnerRun:
    """The values a run derives for its learner, given to `LearnerGroup` / `LearnerWorker` next
    to the `LearnerConfig` (they follow from the model and the rollout, so no config repeats them).
    """

    model_path: str
    """Checkpoint folder of the policy (Hugging Face format); also the "copy" reference."""
    seed: int
    """Seed of torch / numpy / random on every rank (rank r seeds with seed + r)."""
    temperature: float
    """Sampling temperature of the rollout; the learner takes log-probs at the same one."""
    image_min_pixels: int
    """smart_resize lower bound on screenshot area; must equal the rollout prompt's
    `PromptConfig.min_pixels` so pixel grids match the prompt's image tokens."""
    image_max_pixels: int
    """smart_resize upper bound on screenshot area; must equal `PromptConfig.max_pixels`."""

    def __post_init__(self) -> None:
        if not isinstance(self.model_path, str) or not self.model_path:
            raise ValueError(f"LearnerRun.model_path must name the policy's checkpoint folder, "
                             f"got {self.model_path!r}")
        if not isinstance(self.seed, int):
            raise ValueError(f"LearnerRun.seed must be an integer, got {self.seed!r}")
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)
                and self.temperature > 0):
            raise ValueError(f"LearnerRun.temperature (the rollout's sampling temperature) must be a finite "
                             f"number > 0, got {self.temperature!r}")
        low, high = self.image_min_pixels, self.image_max_pixels
        if not (isinstance(low, int) and isinstance(high, int) and 0 < low <= high):
            raise ValueError(f"LearnerRun.image_min_pixels / image_max_pixels need integers with 0 < min <= max "
                             f"(the rollout prompt's smart_resize bounds), got {low!r}, {high!r}")

    @property
    def pixel_bounds(self) -> tuple[int, int]:
        """(image_min_pixels, image_max_pixels), the form `collate` takes."""
        return self.image_min_pixels, self.image_max_pixels


def _register_moved_keys() -> None:
    from webrl.config import moved_keys

    moved = {f"learner.{o}.loss.*": "renamed: learner.loss.* (one policy loss for GRPO and PPO)" for o in ("grpo", "ppo")}
    moved.update({
        "learner.grpo.advantage.*": "renamed: learner.advantage.*",
        "learner.grpo.step.*": "renamed: learner.step.*",
        "learner.grpo.*": "split: learner.loss.*, learner.advantage.*, learner.step.*",
        "learner.value_head": "removed: learner.objective=ppo implies its value head (and nothing else reads one)",
        "learner.reference_path": "merged into learner.reference (none | copy | the snapshot's folder)",
        "learner.num_threads": "removed: each rank uses the CPUs of its bundle (resources.cpus_per_learner_rank)",
        "learner.backend": "removed: torch.distributed uses nccl on GPU and gloo on CPU",
        "learner.batching.shuffle_seed": "removed: the mini-batch shuffle is seeded from run.seed",
        "learner.advantage.eps": "removed: fixed at 1e-6 (webrl.algos.advantages.GroupAdvantageConfig.eps)",
        "learner.checkpoint.verify": f"removed: checkpoints are always verified by {VERIFY_ON_LOAD} on load",
        "learner.weight_sync.timeout_s": f"removed: fixed at {WEIGHT_SYNC_TIMEOUT_S:g} s "
                                         "(webrl.learner.config.WEIGHT_SYNC_TIMEOUT_S)",
        "learner.weight_sync.group_name": "removed: the broadcast group is SGLang's default 'weight_update_group'",
    })
    moved_keys(moved)


_register_moved_keys()
