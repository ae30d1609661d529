"""webrl.envs: websites wrapped as Gymnasium environments, hosted by Ray actors."""
from webrl.envs.browser import BrowserConfig, BrowserSession, InfraError
from webrl.envs.config import WebEnvConfig
from webrl.envs.observation import ObservationConfig
from webrl.envs.registry import LIVE_WEB_ID, make_env, register_envs
from webrl.envs.safety import SafetyConfig
from webrl.envs.task import BaseTask, Task, TaskSource, TaskSpec
from webrl.envs.web_env import FixedTaskSource, LiveWebTask, WebEnv, make_live_web_env
from webrl.envs.worker import EnvWorker, EnvWorkerConfig, make_env_worker_actor

register_envs()

__all__ = [
    "BaseTask", "Task", "TaskSource", "TaskSpec",
    "BrowserConfig", "BrowserSession", "InfraError", "ObservationConfig", "SafetyConfig",
    "WebEnvConfig", "WebEnv", "LiveWebTask", "FixedTaskSource", "make_live_web_env",
    "LIVE_WEB_ID", "make_env", "register_envs", "EnvWorker", "EnvWorkerConfig",
    "make_env_worker_actor",
]
