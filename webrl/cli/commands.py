"""The one table of `webrl` subcommands (`COMMANDS`): each entry carries its summary, its
positional argument, its most-used keys, an example and where its config schema and entry live
("module:name" strings, imported only when the command runs or prints its help, so `webrl --help`
is instant and lists exactly what exists)."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Optional


def resolve(dotted: str):
    module, _, name = dotted.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Positional:
    """A bare first argument: `name` in the usage, the config key `key` it sets."""

    name: str
    key: str
    meaning: str


@dataclass(frozen=True)
class Command:
    """One subcommand: what it does, how it is called, the keys people set most, an example.

    Config-driven (the default): `schema` is its config dataclass, built from `--config
    PRESET_OR_YAML` plus `key=value` overrides and handed to `main(config) -> exit code`. With
    `flags=True` the command reads `--flag value` arguments that are no config keys: `schema`
    names a function returning its `argparse.ArgumentParser`, `main` takes the argument list and
    `keys` are flags."""

    summary: str
    schema: str
    """"module:Class" of the config dataclass ("module:function" returning the parser with flags=True)."""
    main: str
    """"module:function" taking the config (the argument list with flags=True)."""
    example: str
    """One command line as a user types it (`--help` prints it; tests/test_cli_help.py loads it)."""
    keys: tuple[str, ...] = ()
    """The most-used keys, in the order `--help` shows them with their type, default and doc from
    the live schema (tests/test_cli_help.py checks that each exists there)."""
    positional: Optional[Positional] = None
    load: Optional[str] = None
    """"module:function(preset, overrides)" building the config; None = `load_config(schema, ...)`."""
    preset_files: bool = True
    """Whether the command reads `--config PRESET_OR_YAML` (and lists `--presets`); commands whose
    few settings are all on the command line offer neither."""
    implied: tuple[str, ...] = ()
    """`key=value` settings the command applies before the command line's (`webrl sft` runs only
    the sft stage: trainer.stages=[sft], so the rules judge its sft.* keys as used)."""
    flags: bool = False
    returns_exit_code: bool = True
    """flags=True: whether `main`'s return value is the exit code (heads-train returns its metrics)."""


TRAIN_SCHEMA = "webrl.run.config:WebRLConfig"
_CHECKPOINT = Positional("CKPT", "model.path", "checkpoint folder, Hugging Face folder or webrl:NAME to evaluate")

COMMANDS: dict[str, Command] = {
    "train": Command(
        "run the main job: evaluate, (SFT,) GRPO iterations, evaluate (Trainer.fit); without --config the "
        "embedded default (GRPO from webrl:tiny-webagent-pointer)", TRAIN_SCHEMA, "webrl.cli:train_main",
        "webrl train --config smoke trainer.iterations=2",
        keys=("model.path", "run.run_dir", "tasks.source", "tasks.sites", "trainer.iterations", "rollout.group_size",
              "learner.optim.lr", "resources.num_env_workers")),
    "sft": Command(
        "run only the SFT stage (oracle demos or sft.demos_dir) and save its checkpoint", TRAIN_SCHEMA,
        "webrl.cli:sft_main", "webrl sft --config tiny_webagent_pointer_sft sft.demos_dir=runs/demos",
        keys=("model.path", "sft.demos_dir", "sft.demos", "sft.epochs", "sft.batch_size", "sft.lr", "run.run_dir"),
        implied=("trainer.stages=[sft]",)),
    "eval": Command(
        "evaluate a checkpoint (model.path, or the first argument) or an OpenAI-compatible endpoint (eval.endpoint) "
        "on a task suite; prints success per site and level, writes Online-Mind2Web result folders", TRAIN_SCHEMA,
        "webrl.cli:eval_main", "webrl eval webrl:tiny-webagent-pointer tasks.eval_tasks=48 rollout.max_turns=4",
        keys=("model.path", "eval.endpoint", "tasks.source", "tasks.eval_tasks", "tasks.eval_split",
              "eval.samples_per_task", "run.run_dir"), positional=_CHECKPOINT),
    "config": Command(
        "show the resolved training config, its presets or its documented keys", TRAIN_SCHEMA,
        "webrl.cli:show_config", "webrl config --config smoke trainer.iterations=7",
        keys=("model.path", "trainer.stages", "run.output_dir")),
    "plan": Command(
        "print a run's placement and per-GPU memory plan (weights, gradients, optimizer, activations, KV cache) "
        "against a described cluster; exit 1 when it does not fit", "webrl.run.plan_report:PlanCommandConfig",
        "webrl.run.plan_report:plan_main",
        "webrl plan --config online_mind2web_qwen3vl_4b plan.model=qwen3-vl-4b plan.gpus_per_node=8 "
        "plan.gpu_memory_gb=80",
        keys=("plan.model", "plan.nodes", "plan.gpus_per_node", "plan.gpu_memory_gb", "plan.cluster",
              "plan.prompt_tokens", "resources.learner_ranks", "learner.zero_stage"),
        load="webrl.run.plan_report:load_plan_config"),
    "serve": Command(
        "serve a local Qwen-VL checkpoint over an OpenAI-compatible /v1/chat/completions API",
        "webrl.serve.app:ServeConfig", "webrl.serve.app:serve_main", "webrl serve webrl:tiny-webagent-pointer port=8000",
        keys=("model_path", "port", "host", "dtype", "device", "served_model_name"),
        positional=Positional("CKPT", "model_path", "checkpoint folder of a Qwen2.5-VL / Qwen3-VL model"), preset_files=False),
    "view": Command(
        "write the static HTML trajectory viewer of a run folder", "webrl.cli:ViewConfig", "webrl.cli:view_main",
        "webrl view runs/smoke-20260101-120000", keys=("run_dir",),
        positional=Positional("RUN_DIR", "run_dir", "run folder holding trajectories/trajectories.jsonl"), preset_files=False),
    "sites": Command(
        "serve the sandbox websites on 127.0.0.1 for a person to browse", "webrl.cli:SitesConfig",
        "webrl.cli:sites_main", "webrl sites port=8765", keys=("port",), preset_files=False),
    "demos": Command(
        "record oracle demonstrations on sandbox tasks (successful episodes only)", "webrl.cli:DemosConfig",
        "webrl.cli:demos_main", "webrl demos n=200 out=runs/demos levels=[0,1] sites=[widgets] viewport=640x480",
        keys=("n", "out", "sites", "levels", "split", "viewport", "seed")),
    "resim": Command(
        "write Dyna-Mind ReSim traces (search trees from real sandbox interactions) as SFT demonstrations for "
        "sft.demos_dir", "webrl.recipes.data_commands:ResimCommandConfig", "webrl.recipes.data_commands:resim_main",
        "webrl resim n=32 out=runs/resim sites=[widgets]",
        keys=("n", "out", "sites", "levels", "resim.branching", "resim.depth")),
    "segments": Command(
        "write credit-assignment SFT demonstrations (successes and the productive segments of failed trajectories) "
        "from a run's trajectory log", "webrl.recipes.data_commands:SegmentCommandConfig",
        "webrl.recipes.data_commands:segments_main", "webrl segments runs/smoke out=runs/segments",
        keys=("source", "out", "segments.min_segment_turns", "segments.include_successes"),
        positional=Positional("SOURCE", "source", "a run folder or a trajectories .jsonl file")),
    "skills": Command(
        "mine, abstract and validate WebXSkill skills from successful trajectories into a skill library "
        "(env.skills_dir for grounded mode, policy.skills.library_dir for guided mode)",
        "webrl.skills.commands:SkillsCommandConfig", "webrl.skills.commands:skills_main",
        "webrl skills extract source=runs/demos out=skills", keys=("action", "source", "out", "min_support", "validate"),
        positional=Positional("ACTION", "action", "what to do: extract (mine, abstract, validate; write the library)")),
    "synth": Command(
        "synthesize tasks (tasks.jsonl) and SFT demonstrations (demos.jsonl) for a site by categorised exploration "
        "(SynthAgent)", "webrl.synth.commands:SynthCommandConfig", "webrl.synth.commands:synth_main",
        "webrl synth --start-url http://127.0.0.1:8765/shop/ out=data/synth",
        keys=("start_url", "out", "n_tasks", "max_pages", "endpoint")),
    "sparse-search": Command(
        "search per-head MMInference sparse-prefill patterns on calibration prompts and write sparse_patterns.json "
        "beside the checkpoint (generator.sparse_prefill=auto reads it)",
        "webrl.policy.sparse_attention:SparseSearchConfig", "webrl.policy.sparse_attention:search_main",
        "webrl sparse-search runs/sft/hf config.budget=0.25", keys=("checkpoint", "out", "config.budget", "min_recall"),
        positional=Positional("CKPT", "checkpoint", "model folder to search patterns for")),
    "judge-agreement": Command(
        "run a judge over trajectories with known outcomes; print agreement and confusion",
        "webrl.reward.main:JudgeAgreementConfig", "webrl.reward.main:judge_agreement_main",
        "webrl judge-agreement runs/smoke/trajectories/trajectories.jsonl reward.kind=judge "
        "reward.base_url=http://127.0.0.1:8000/v1",
        keys=("trajectories", "reward.kind", "reward.judge", "reward.base_url", "reward.model", "output"),
        positional=Positional("TRAJECTORIES", "trajectories", "trajectories with checker outcomes (a JSONL file)")),
    "browser-server": Command(
        "run a Playwright browser server (Chromium with webrl's flags) that env workers join with env.connect_url",
        "webrl.envs.remote_browser:BrowserServerConfig", "webrl.envs.remote_browser:main",
        "webrl browser-server port=3000", keys=("host", "port", "ws_path", "executable_path", "api_key_env"),
        preset_files=False),
    "heads-train": Command(
        "train decision heads on logged steps with the generator frozen",
        "webrl.policy.cascade.train:heads_train_parser", "webrl.policy.cascade.train:heads_train_main",
        "webrl heads-train --generator webrl:tiny-webagent-pointer --data demos/train --target-features text",
        keys=("--generator", "--data", "--out", "--synthetic", "--epochs", "--target-features"),
        flags=True, returns_exit_code=False),
}
