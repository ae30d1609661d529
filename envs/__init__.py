"""webrl.envs: websites wrapped as Gymnasium environments, hosted by Ray actors."""
from webrl.envs.task import BaseTask, Task, TaskSource, TaskSpec

__all__ = ["BaseTask", "Task", "TaskSource", "TaskSpec"]
