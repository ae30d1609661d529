"""Importing webrl.envs registers every Gymnasium id the project ships."""
import gymnasium

import webrl.envs  # noqa: F401
from webrl.envs.miniwob import miniwob_task_names


def test_import_registers_live_web_sandbox_and_all_miniwob_ids():
    ids = {i for i in gymnasium.registry if i.startswith("webrl/")}
    assert {"webrl/LiveWeb-v0", "webrl/Shop-v0", "webrl/Travel-v0", "webrl/Wiki-v0", "webrl/Widgets-v0",
            "webrl/Sandbox-v0"} <= ids
    miniwob = {i for i in ids if i.startswith("webrl/miniwob.")}
    # 125 standard tasks + 3 flight tasks, one id each
    assert len(miniwob) == len(miniwob_task_names()) == 128
    assert "webrl/miniwob.click-button-v0" in miniwob and "webrl/miniwob.flight.AA-v0" in miniwob
