"""webrl.envs: websites wrapped as Gymnasium environments, hosted by Ray actors."""
from webrl.envs.browser import BrowserConfig, BrowserSession, InfraError
from webrl.envs.config import EnvWorkerConfig, WebEnvConfig
from webrl.envs.live_web import make_live_web_env
from webrl.envs.observation import ObservationConfig
from webrl.envs.registry import LIVE_WEB_ID, make_env, register_envs
from webrl.envs.safety import SafetyConfig
from webrl.envs.task import BaseTask, FixedTaskSource, LiveWebTask, Task, TaskReward, TaskSource, TaskSpec, as_task
from webrl.envs.web_env import WebEnv
from webrl.envs.worker import EnvWorker, make_env_worker_actor

register_envs()


def _register_task_suites() -> None:
    """The sandbox sites always; MiniWoB++ when its HTML (the `miniwob` package) is installed."""
    import importlib.util

    from webrl.envs.sites.registry import register_site_envs

    register_site_envs()
    if importlib.util.find_spec("miniwob") is not None:
        from webrl.envs.miniwob import register_miniwob_envs

        register_miniwob_envs()


_register_task_suites()

__all__ = [
    "BaseTask", "Task", "TaskReward", "TaskSource", "TaskSpec", "as_task",
    "BrowserConfig", "BrowserSession", "InfraError", "ObservationConfig", "SafetyConfig",
    "WebEnvConfig", "WebEnv", "LiveWebTask", "FixedTaskSource", "make_live_web_env",
    "LIVE_WEB_ID", "make_env", "register_envs", "EnvWorker", "EnvWorkerConfig",
    "make_env_worker_actor",
]
