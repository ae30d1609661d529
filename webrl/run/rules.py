"""The run config's cross-section rules: one table, checked at load, printed by `--explain`.

A component's config checks its own keys (`__post_init__`: ranges, choices, one section's
consistency). What relates keys of different sections lives here, one `Rule` each: the keys it
is about, why it exists, and a check that returns the refusal (naming every key involved and
what to set instead) or None. `WebRLConfig.__post_init__` runs `check_rules`; `webrl config
--explain KEY` prints `rules_for(KEY)`.

Rules only refuse. What follows from another key by default (a live-web tasks file runs under
the live-web network policy and the judge recipe; PPO implies its value head) is derived at
load (`WebRLConfig.derived_overrides`), and a section a later layer switches off drops what an
earlier layer set there (`WebRLConfig.switched_off`), so neither needs a rule.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

from webrl.config import ConfigError

if TYPE_CHECKING:
    from webrl.run.config import WebRLConfig

RL_OBJECTIVES = ("grpo", "ppo")
"""Objectives the trainer runs end to end (`webrl.learner.credit.ADVANTAGE_STAGES`)."""


@dataclass(frozen=True)
class Rule:
    keys: tuple[str, ...]
    """The keys (or sections) the rule relates; `--explain K` lists it for each, and for every key
    under a listed section."""
    why: str
    """One line: what would go wrong without the rule."""
    check: Callable[["WebRLConfig"], Optional[str]]
    """The config -> the refusal text, or None when the rule holds."""


RULES: list[Rule] = []


def rule(*keys: str, why: str) -> Callable:
    """Register the decorated check in RULES (in definition order, which is checking order)."""
    def register(check: Callable[["WebRLConfig"], Optional[str]]) -> Callable:
        RULES.append(Rule(keys, why, check))
        return check
    return register


def check_rules(config: "WebRLConfig") -> None:
    """Raise the first broken rule's refusal as a ConfigError."""
    for r in RULES:
        message = r.check(config)
        if message:
            raise ConfigError(message)


def rules_for(key: str) -> list[Rule]:
    """The rules about `key`: those listing it, a section above it, or a key below it."""
    return [r for r in RULES if any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in r.keys)]


def _changed(section: object) -> bool:
    """Whether a config section differs from its class's defaults."""
    return section != type(section)()


# --- tasks and reward ------------------------------------------------------------------------

@rule("tasks.source", "tasks.file_format", "reward.kind",
      why="a live-web tasks file has no checker: programmatic rewards would drop every trajectory unscored")
def _live_web_file_needs_a_judge(c: "WebRLConfig") -> Optional[str]:
    checked = c.tasks.file_format in ("synth", "webarena")  # these formats carry checkers
    if c.tasks.source == "file" and not checked and c.reward.kind == "programmatic":
        return ("reward.kind=programmatic cannot score a live-web tasks file (tasks.source=file has no checker: "
                "every trajectory would be dropped as no_checker); use reward.kind=recipe or judge with a judge "
                "server (reward.base_url)")
    return None


@rule("reward.kind", "reward.model", "reward.base_url",
      why="a judge request names its model; without one the judge fails after Ray started")
def _judge_needs_a_model(c: "WebRLConfig") -> Optional[str]:
    reward = c.reward
    if reward.kind != "programmatic" and not reward.model:
        where = (f"the name of the model the server at reward.base_url={reward.base_url} serves (GET "
                 f"{reward.base_url.rstrip('/')}/models lists them)" if reward.base_url
                 else "a judge checkpoint folder (loaded in process), or set reward.base_url and the served model's name")
        return f"reward.kind={reward.kind} scores with a judge, which needs reward.model: set reward.model to {where}"
    return None


JUDGE_KEYS = ("judge", "base_url", "model", "api_key_env", "timeout_s", "max_retries", "max_concurrency",
              "max_tokens", "temperature", "cache_dir")
"""The reward keys only a judge reads (kind judge or recipe); the checker reads success_threshold."""


@rule("reward.kind", *(f"reward.{k}" for k in JUDGE_KEYS),
      why="reward.kind=programmatic builds no judge: its settings would be ignored")
def _programmatic_has_no_judge(c: "WebRLConfig") -> Optional[str]:
    from webrl.reward import RewardConfig

    if c.reward.kind != "programmatic":
        return None
    default = RewardConfig()
    changed = [k for k in JUDGE_KEYS if getattr(c.reward, k) != getattr(default, k)]
    if changed:
        return (f"reward.{changed[0]}={getattr(c.reward, changed[0])!r} has no effect: reward.kind=programmatic "
                f"scores with the tasks' checkers and builds no judge; set reward.kind=recipe (checker where a task "
                f"has one, judge elsewhere) or judge, or leave {', '.join('reward.' + k for k in changed)} unset")
    return None


# --- stages and evaluation -------------------------------------------------------------------

@rule("sft", "trainer.stages", why="the sft settings act only when trainer.stages runs the sft stage")
def _sft_needs_its_stage(c: "WebRLConfig") -> Optional[str]:
    if "sft" in c.trainer.stages:
        return None
    default = type(c.sft)()
    changed = [f.name for f in dataclasses.fields(c.sft) if getattr(c.sft, f.name) != getattr(default, f.name)]
    if changed:
        return (f"sft.{changed[0]}={getattr(c.sft, changed[0])!r} has no effect: trainer.stages="
                f"{list(c.trainer.stages)} runs no sft stage; add sft to trainer.stages (e.g. [sft,rl]), run "
                f"`webrl sft`, or leave {', '.join('sft.' + k for k in changed)} unset")
    return None


@rule("tasks.eval_tasks", "eval.samples_per_task", "trainer.eval_every", "eval.max_dropped_share",
      why="with no evaluation tasks no evaluation runs: its settings would be ignored")
def _evaluation_needs_tasks(c: "WebRLConfig") -> Optional[str]:
    if c.tasks.eval_tasks:
        return None
    for key, value, default in (("eval.samples_per_task", c.eval.samples_per_task, 0),
                                ("trainer.eval_every", c.trainer.eval_every, 0),
                                ("eval.max_dropped_share", c.eval.max_dropped_share, 1.0)):
        if value != default:
            return (f"{key}={value} has no effect: tasks.eval_tasks=0 runs no evaluation; set tasks.eval_tasks "
                    f"(held-out tasks per evaluation) or leave {key} at {default}")
    return None


# --- reproducibility -------------------------------------------------------------------------

@rule("run.deterministic", "rollout.mode",
      why="an async collector's turns race the learner: which weights sample a turn depends on timing")
def _deterministic_needs_sync(c: "WebRLConfig") -> Optional[str]:
    if c.run.deterministic and c.rollout.mode == "async":
        return ("run.deterministic=true needs rollout.mode=sync: in async mode which policy version samples a "
                "turn depends on timing, so no two runs match; set rollout.mode=sync or run.deterministic=false")
    return None


@rule("run.deterministic", "inference.max_batch_size", "rollout.engine",
      why="in process, which requests share a batch moves the forward's numerics and so the sampled tokens")
def _deterministic_batches_one(c: "WebRLConfig") -> Optional[str]:
    if c.run.deterministic and c.rollout.engine == "transformers" and c.inference.max_batch_size > 1:
        return (f"run.deterministic=true runs one request per forward in process, but inference.max_batch_size="
                f"{c.inference.max_batch_size}: a batch's composition depends on timing and moves the numerics; "
                f"leave inference.max_batch_size unset (it becomes 1) or set run.deterministic=false")
    return None


# --- the learner's objective and its sections ------------------------------------------------

@rule("learner.objective", why="the RL stage trains grpo or ppo; the sft stage has its own learner")
def _rl_objective(c: "WebRLConfig") -> Optional[str]:
    if c.learner.objective not in RL_OBJECTIVES:
        return (f"learner.objective must be one of {RL_OBJECTIVES} (the RL objective; the sft stage runs SFT), "
                f"got {c.learner.objective!r}")
    return None


@rule("learner.objective", "learner.advantage", "learner.step", "learner.ppo",
      why="each objective reads only its own sections: GRPO learner.advantage and learner.step, PPO learner.ppo")
def _sections_of_the_objective(c: "WebRLConfig") -> Optional[str]:
    sections = {"grpo": ("advantage", "step"), "ppo": ("ppo",)}
    for objective, names in sections.items():
        for name in names:
            if objective != c.learner.objective and _changed(getattr(c.learner, name)):
                return (f"learner.{name}={getattr(c.learner, name)!r} has no effect: only objective={objective} "
                        f"reads it and learner.objective is {c.learner.objective!r}; leave learner.{name} at its "
                        f"defaults")
    return None


@rule("learner.loss.kl_mode", "learner.loss.kl_coef", "learner.reference",
      why="a KL penalty in the reward needs a reference policy to take the KL to")
def _kl_needs_a_reference(c: "WebRLConfig") -> Optional[str]:
    loss = c.learner.loss
    if loss.kl_mode == "reward" and loss.kl_coef > 0 and c.learner.reference == "none":
        return ("learner.loss.kl_mode='reward' has no effect: with learner.reference=none there is no reference to "
                "take a KL to; set learner.reference=copy (or a snapshot folder)")
    return None


# --- rollout planning and the SFT stage ------------------------------------------------------

@rule("rollout.balanced", why="balanced rollout's settings act only when rollout.balanced.enabled is true")
def _balanced_needs_enabled(c: "WebRLConfig") -> Optional[str]:
    balanced = c.rollout.balanced
    if not balanced.enabled and _changed(balanced):
        return (f"rollout.balanced={balanced!r} has no effect: rollout.balanced.enabled is false; set it true or "
                f"leave the other rollout.balanced keys at their defaults")
    return None


@rule("rollout.dynamic_sampling.enabled", "learner.objective", "learner.advantage.filter_zero_variance", "rollout.mode",
      why="dynamic sampling refills groups the GRPO filter drops in a sync iteration; elsewhere it would do nothing")
def _dynamic_sampling_needs_filtering(c: "WebRLConfig") -> Optional[str]:
    if not c.rollout.dynamic_sampling.enabled:
        return None
    if c.rollout.mode != "sync":
        return ("rollout.dynamic_sampling.enabled=true has no effect with rollout.mode=async (the collector draws on "
                "its own thread); set rollout.mode=sync or rollout.dynamic_sampling.enabled=false")
    if c.learner.objective != "grpo" or not c.learner.advantage.filter_zero_variance:
        why = ("learner.objective=ppo trains on every group" if c.learner.objective != "grpo"
               else "learner.advantage.filter_zero_variance=false trains on every group")
        return (f"rollout.dynamic_sampling.enabled=true has no effect: {why}, so there is no filtered group to "
                f"refill; set learner.objective=grpo with learner.advantage.filter_zero_variance=true, or "
                f"rollout.dynamic_sampling.enabled=false")
    return None


@rule("rollout.dynamic_sampling",
      why="dynamic sampling's settings act only when rollout.dynamic_sampling.enabled is true")
def _dynamic_sampling_needs_enabled(c: "WebRLConfig") -> Optional[str]:
    sampling = c.rollout.dynamic_sampling
    if not sampling.enabled and _changed(dataclasses.replace(sampling, enabled=True)):
        return (f"rollout.dynamic_sampling={sampling!r} has no effect: rollout.dynamic_sampling.enabled is false; set "
                f"it true or leave the other rollout.dynamic_sampling keys at their defaults")
    return None


@rule("sft.direct_fraction", "sft.data", "sft.demos_dir",
      why="oracle demonstrations carry no reasoning to strip; direct_fraction acts on reasoning turns")
def _direct_fraction_needs_reasoning(c: "WebRLConfig") -> Optional[str]:
    if c.sft.direct_fraction > 0 and not c.sft.data and not c.sft.demos_dir:
        return (f"sft.direct_fraction={c.sft.direct_fraction!r} has no effect: recorded oracle demonstrations have "
                f"no reasoning to strip; it acts on reasoning turns from sft.data or sft.demos_dir")
    return None


# --- Dyna-GRPO -------------------------------------------------------------------------------

@rule("dyna", why="dyna's settings act only when dyna.every turns Dyna-GRPO on")
def _dyna_off_means_defaults(c: "WebRLConfig") -> Optional[str]:
    if not c.dyna.enabled and _changed(c.dyna):
        return (f"dyna={c.dyna!r} has no effect: dyna.every is 0 (off); set dyna.every (2: the paper's "
                f"alternation) or leave the other dyna keys at their defaults")
    return None


@rule("dyna.every", "learner.objective",
      why="Dyna-GRPO's plain phase is GRPO and its refinement advantages are group-relative")
def _dyna_needs_grpo(c: "WebRLConfig") -> Optional[str]:
    if c.dyna.enabled and c.learner.objective != "grpo":
        return (f"dyna.every (Dyna-GRPO) needs learner.objective=grpo (Dyna-GRPO's plain phase is GRPO and its "
                f"refinement advantages are group-relative), got learner.objective={c.learner.objective!r}")
    return None


@rule("dyna.every", "rollout.mode",
      why="a SimRollout iteration refines states of the batch it just collected, which async mode does not hand over")
def _dyna_needs_sync(c: "WebRLConfig") -> Optional[str]:
    if c.dyna.enabled and c.rollout.mode != "sync":
        return ("dyna.every (Dyna-GRPO) needs rollout.mode=sync: a SimRollout iteration replays and refines states "
                "of the batch it just collected, which async collection does not hand over as one batch")
    return None


@rule("dyna.every", "policy.wrappers", "policy.cascade.head_turns",
      why="a refined action the heads decide keeps no response ids, so there would be nothing to train")
def _dyna_needs_tokens(c: "WebRLConfig") -> Optional[str]:
    if c.dyna.enabled and "cascade" in c.policy.wrappers and c.policy.cascade.head_turns == "exclude":
        return ("dyna.every (Dyna-GRPO) with policy.cascade.head_turns=exclude: a refined action the heads decide "
                "keeps no response ids, so there is nothing to train on the plain prompt; use "
                "head_turns=generator_logprobs (the default) or leave cascade out of policy.wrappers")
    return None


# --- the server engine (webrl.policy.backend.ENGINE_CAPABILITIES) ----------------------------

def _server(c: "WebRLConfig") -> bool:
    return c.rollout.engine == "server"


@rule("rollout.engine", "generator.sparse_prefill",
      why="sparse prefill runs in the in-process model's prefill; a server has its own attention settings")
def _server_has_no_sparse_prefill(c: "WebRLConfig") -> Optional[str]:
    if _server(c) and c.generator.sparse_prefill:
        from webrl.policy.backend import ENGINE_CAPABILITIES

        return (f"generator.sparse_prefill runs in the in-process model's prefill; with rollout.engine=server sparse "
                f"prefill is {ENGINE_CAPABILITIES['server'].sparse_prefill}: leave generator.sparse_prefill empty")
    return None


@rule("rollout.engine", "resources.gpus_per_inference_worker",
      why="with servers the servers hold the GPUs; the inference worker only sends requests")
def _server_workers_hold_no_gpu(c: "WebRLConfig") -> Optional[str]:
    if _server(c) and c.resources.gpus_per_inference_worker:
        return ("resources.gpus_per_inference_worker must be 0 with rollout.engine=server (the servers hold the "
                "GPUs; the inference worker only sends requests)")
    return None


@rule("rollout.engine", "rollout.server.max_concurrency", "inference.max_batch_size",
      why="a worker sends at most one batch at a time, so more requests in flight than a batch never happen")
def _server_concurrency_fits_a_batch(c: "WebRLConfig") -> Optional[str]:
    server = c.rollout.server
    if _server(c) and server.max_concurrency > c.inference.max_batch_size:
        return (f"rollout.server.max_concurrency={server.max_concurrency} exceeds inference.max_batch_size="
                f"{c.inference.max_batch_size}: a worker sends at most one batch at a time, so raise "
                f"inference.max_batch_size or lower rollout.server.max_concurrency")
    return None


@rule("rollout.engine", "rollout.server.api_key_env", "rollout.server.admin_api_key_env",
      why="a named key variable that is unset would send every request without its key")
def _server_keys_are_set(c: "WebRLConfig") -> Optional[str]:
    for key in ("api_key_env", "admin_api_key_env"):
        name = getattr(c.rollout.server, key)
        if _server(c) and name and not os.environ.get(name):
            return (f"rollout.server.{key}={name!r} names an environment variable that is not set (or empty) here; "
                    f"export it or leave rollout.server.{key} empty")
    return None


@rule("rollout.engine", "resources.num_inference_workers",
      why="one worker spreads requests over every server; several would reload the same servers")
def _server_has_one_worker(c: "WebRLConfig") -> Optional[str]:
    if _server(c) and c.resources.num_inference_workers != 1:
        return (f"resources.num_inference_workers must be 1 with rollout.engine=server (one worker spreads requests "
                f"over every URL in rollout.server.urls), got {c.resources.num_inference_workers}")
    return None


# --- weight sync -----------------------------------------------------------------------------

@rule("learner.weight_sync", "rollout.engine", "resources.gpus_per_learner_rank",
      "resources.gpus_per_inference_worker", "rollout.server.launch", "rollout.server.gpus_per_server",
      why="the weights must reach the engine by a way it can receive (webrl.learner.config.ENGINE_WEIGHT_SYNC)")
def _weight_sync_reaches_the_engine(c: "WebRLConfig") -> Optional[str]:
    from webrl.run.config import weight_sync

    try:
        weight_sync(c)
    except ConfigError as e:
        return str(e)
    return None


@rule("learner.weight_sync.mode", "rollout.server.launch", "rollout.server.max_restarts",
      why="a restarted server has left the broadcast group and holds the launch weights")
def _collective_survives_no_restart(c: "WebRLConfig") -> Optional[str]:
    from webrl.run.config import weight_sync

    server = c.rollout.server
    if _server(c) and server.launch != "none" and server.max_restarts and weight_sync(c)[0] == "collective":
        return ("learner.weight_sync.mode=collective with rollout.server.launch cannot survive a server restart (a "
                "restarted server left the broadcast group and holds the launch weights): set "
                "rollout.server.max_restarts=0 or learner.weight_sync.mode=disk")
    return None
