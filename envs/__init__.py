"""webrl.envs: websites wrapped as Gymnasium environments, hosted by Ray actors."""
from webrl.envs.task import BaseTask, Task, TaskSpec

__all__ = ["BaseTask", "Task", "TaskSpec"]
