"""Task sources of a run: `tasks` config -> (training source, evaluation source).

    sandbox   SandboxTaskSource, train split for training, `tasks.eval_split` for eval (test:
              unseen entities; train: fresh seeds over the training entities)
    miniwob   MiniWoBTaskSource over `tasks.miniwob` names (fresh seeds; eval draws other seeds)
    file      a live-web tasks file (envs/loaders.py), with `tasks.file_format=synth` the
              tasks.jsonl of `webrl synth` (webrl.synth), or with `tasks.file_format=webarena`
              WebArena task configs (envs/webarena.py, their own evaluators as checkers): all draw
              from it; eval takes the file's first `tasks.eval_tasks` tasks in order, each once
              (a benchmark run, not a sample)
    env       a registered env name (`ray.tune.registry.register_env` or a Gymnasium id): the
              env's own `tasks` source, for training and evaluation alike

Sources are built in the driver and the drawn tasks are shipped to the env workers (Tasks are
picklable; `Task.prepare()` runs in the worker). A user's site that lives in the driver's
process (examples/custom_site.py) is reached over 127.0.0.1 from the workers.

`check_start_urls` runs before Ray starts: a tasks file whose start URL the live-web network
policy refuses (a site on loopback or a private network) fails at load naming
`env.network.local_sites`, instead of every episode failing in the env workers.

Choice where the issue is silent: a registered env is built once in the driver only to read its
`tasks` attribute (WebEnv does not start a browser before `reset`), then closed.
"""
from __future__ import annotations

from typing import Any

from webrl.config import ConfigError
from webrl.run.config import TasksConfig


def _env_task_source(env_id: str, env_config: dict) -> Any:
    from webrl.envs.registry import make_env

    env = make_env(env_id, env_config)
    try:
        source = getattr(getattr(env, "unwrapped", env), "tasks", None)
    finally:
        env.close()
    if source is None or not hasattr(source, "sample"):
        raise ValueError(f"tasks.env_id={env_id!r}: the registered env has no `tasks` source "
                         "(build it as WebEnv(config, tasks=YourTaskSource()))")
    return source


class ChatJudge:
    """A picklable judge callable (system, user, max_tokens) -> reply text over a chat backend
    (`webrl.reward.backends`) or an OpenAI endpoint config, whose client is built on first use
    (in the env worker that scores the task) and never pickled."""

    def __init__(self, backend: Any):
        self.backend, self._client = backend, None

    def __getstate__(self) -> dict:
        return {"backend": self.backend, "_client": None}

    def __call__(self, system: str, user: str, max_tokens: int) -> str:
        from webrl.chat.messages import ChatMessage

        if self._client is None:
            if hasattr(self.backend, "chat"):
                self._client = self.backend
            else:
                from webrl.reward.backends import OpenAIChatBackend

                self._client = OpenAIChatBackend(self.backend)
        messages = [ChatMessage("system", system), ChatMessage("user", user)]
        return self._client.chat(messages, max_tokens=max_tokens, temperature=0.0).text


def webarena_judge(reward: Any) -> Any:
    """The judge endpoint WebArena tasks grade fuzzy_match answers with: the run's served judge
    (`reward.base_url` and `reward.model`, kind judge or recipe), else None (see webrl.envs.webarena_eval)."""
    if reward is None or reward.kind == "programmatic" or not (reward.base_url and reward.model):
        return None
    return ChatJudge(reward.openai_config())


def task_sources(tasks: TasksConfig, max_steps: int = 30, reward: Any = None) -> tuple[Any, Any]:
    """(train source, eval source) for `tasks`; `max_steps` bounds live-web file tasks; `reward`
    (the run's `RewardConfig`) lends WebArena tasks its judge endpoint for fuzzy_match."""
    if tasks.source == "sandbox":
        from webrl.envs.sites.source import SandboxTaskSource, task_kinds

        def source(levels, split: str) -> SandboxTaskSource:
            kinds = [k for k in tasks.kinds if k in task_kinds(tasks.sites, levels)]  # checked by TasksConfig
            return SandboxTaskSource(sites=tuple(tasks.sites), levels=tuple(levels), split=split,
                                     start_server=False, kinds=tuple(kinds))

        return source(tasks.train_levels, "train"), source(tasks.eval_levels, tasks.eval_split)
    if tasks.source == "miniwob":
        from webrl.envs.miniwob import MiniWoBTaskSource

        source = MiniWoBTaskSource(names=tuple(tasks.miniwob))
        return source, source
    if tasks.source == "file" and tasks.file_format == "synth":
        from webrl.envs.loaders import LiveWebTaskSource
        from webrl.synth import load_synth_tasks

        source = LiveWebTaskSource(load_synth_tasks(tasks.file))  # a fixed list: eval takes each once
        return source, source
    if tasks.source == "file" and tasks.file_format == "webarena":
        from webrl.envs.loaders import LiveWebTaskSource
        from webrl.envs.webarena import load_webarena_tasks

        source = LiveWebTaskSource(load_webarena_tasks(
            tasks.file, tasks.webarena_sites, split=tasks.webarena_split or None,
            auth_dir=tasks.webarena_auth_dir or None, skip_reset=tasks.webarena_skip_reset,
            max_steps=max_steps, judge=webarena_judge(reward)))
        return source, source
    if tasks.source == "file":
        from webrl.envs.loaders import LiveWebTaskSource, load_tasks

        source = LiveWebTaskSource(load_tasks(tasks.file, tasks.file_format or None, max_steps=max_steps))
        return source, source
    source = _env_task_source(tasks.env_id, dict(tasks.env_config))
    return source, source


def check_start_urls(tasks: TasksConfig, env: Any, max_steps: int = 30) -> None:
    """Refuse (ConfigError) a tasks file whose start URL the run's network policy (`env`, an
    `EnvWorkerConfig`) refuses, naming the run key that lets it through. Only the "public"
    policy checks addresses; the other policies allow every task its own start host."""
    if tasks.source != "file" or env.subresource_policy != "public":
        return
    from urllib.parse import urlsplit

    from webrl.envs.network import AddressPolicy

    policy = AddressPolicy(env.network)
    refused: dict[str, tuple[str, str]] = {}  # netloc -> (a task id, why)
    for task in task_sources(tasks, max_steps=max_steps)[0].tasks:
        url = task.spec.start_url
        netloc = urlsplit(url).netloc
        if netloc not in refused:
            reason = policy.refusal(url)
            if reason:
                refused[netloc] = (task.spec.id, reason)
    if refused:
        sites = ",".join(sorted(refused))
        first, (task_id, reason) = next(iter(refused.items()))
        raise ConfigError(
            f"the live-web network policy refuses the start URL of task {task_id!r} ({first}: {reason}); "
            f"{len(refused)} site(s) of tasks.file={tasks.file!r} are on loopback or a private network. "
            f"To run tasks on your own sites, list them: env.network.local_sites=[{sites}] "
            f"(every other internal address stays refused)")
