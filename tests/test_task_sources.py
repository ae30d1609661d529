"""Task sources of a run (`webrl.run.tasks`): sandbox splits and kinds, tasks files, registered envs."""
import json

import pytest

from tests.helpers import sandbox_task
from webrl.config import ConfigError, load_config
from webrl.run.config import WebRLConfig

def test_sandbox_eval_split_draws_held_out_tasks_over_test_or_train_entities():
    import numpy as np

    from webrl.config import ConfigError
    from webrl.envs.task import draw_tasks
    from webrl.run.tasks import task_sources

    for split in ("test", "train"):
        train, held_out = task_sources(load_config(WebRLConfig, "smoke", [f"tasks.eval_split={split}"]).tasks)
        ids = [t.spec.id for t in draw_tasks(held_out, np.random.default_rng(0), 3)]
        assert all(f"/{split}/" in i for i in ids), ids  # widgets/l0/<split>/<kind>/<seed>
        assert all("/train/" in t.spec.id for t in draw_tasks(train, np.random.default_rng(0), 3))
    with pytest.raises(ConfigError, match="tasks.eval_split must be one of"):
        load_config(WebRLConfig, "smoke", ["tasks.eval_split=valid"])


def test_tasks_kinds_filter_training_and_evaluation_and_name_the_allowed_kinds():
    import numpy as np

    from webrl.envs.task import draw_tasks
    from webrl.run.tasks import task_sources

    cfg = load_config(WebRLConfig, "smoke", ["tasks.kinds=[click_link,slider]", "tasks.train_levels=[0,1]"])
    train, held_out = task_sources(cfg.tasks)  # slider is a level-1 kind: evaluation (level 0) keeps click_link
    assert {t.spec.params["kind"] for t in draw_tasks(train, np.random.default_rng(1), 30)} == {"click_link", "slider"}
    assert {t.spec.params["kind"] for t in draw_tasks(held_out, np.random.default_rng(1), 10)} == {"click_link"}
    with pytest.raises(ConfigError, match=r"tasks.kinds: unknown \['click'\]; allowed for sites \['widgets'\]: "
                                          r"\['choose_option', 'choose_radio', 'click_button'"):
        load_config(WebRLConfig, "smoke", ["tasks.kinds=[click_button,click]"])
    with pytest.raises(ConfigError, match=r"none of \['slider'\] is a kind of sites \['widgets'\] at tasks.eval_levels"):
        load_config(WebRLConfig, "smoke", ["tasks.kinds=[slider]", "tasks.train_levels=[1]"])
    with pytest.raises(ConfigError, match="tasks.kinds applies to source=sandbox only"):
        load_config(WebRLConfig, "smoke", ["tasks.kinds=[click_link]", "tasks.source=miniwob"])


def test_task_sources_file_and_registered_env(tmp_path):
    import numpy as np
    from ray.tune.registry import register_env

    from webrl.envs import WebEnv
    from webrl.envs.task import draw_tasks
    from webrl.run.tasks import task_sources

    rows = [{"task_id": f"t{i}", "confirmed_task": f"goal {i}", "website": "https://example.com/"} for i in range(3)]
    (tmp_path / "tasks.json").write_text(json.dumps(rows))
    cfg = load_config(WebRLConfig, "smoke", ["tasks.source=file", f"tasks.file={tmp_path / 'tasks.json'}",
                                            "reward.model=judge-model"]).tasks
    train, held_out = task_sources(cfg)
    # evaluation on a file takes its first tasks in file order, each once
    assert [t.spec.goal for t in draw_tasks(held_out, np.random.default_rng(0), 2, in_order=True)] == ["goal 0", "goal 1"]
    assert {t.spec.goal for t in draw_tasks(train, np.random.default_rng(0), 20)} <= {"goal 0", "goal 1", "goal 2"}

    miniwob = load_config(WebRLConfig, "smoke", ["tasks.source=miniwob", "tasks.miniwob=[click-button]"]).tasks
    assert draw_tasks(task_sources(miniwob)[0], np.random.default_rng(0), 1)[0].spec.id.startswith("miniwob/click-button")

    class OneTask:
        def sample(self, rng):
            return sandbox_task("mine", 0, "mine/1")

    register_env("webrl-test-mine", lambda env_config: WebEnv(tasks=OneTask()))
    cfg = load_config(WebRLConfig, "smoke", ["tasks.source=env", "tasks.env_id=webrl-test-mine"]).tasks
    train, _ = task_sources(cfg)
    assert draw_tasks(train, np.random.default_rng(0), 1)[0].spec.id == "mine/1"
    register_env("webrl-test-bare", lambda env_config: WebEnv())  # no task source
    with pytest.raises(ValueError, match="has no `tasks` source"):
        task_sources(load_config(WebRLConfig, "smoke", ["tasks.source=env", "tasks.env_id=webrl-test-bare"]).tasks)




def test_a_synth_tasks_file_is_a_task_source_and_evaluation_takes_each_task_once(tmp_path):
    import numpy as np

    from webrl.synth.tasks import SynthTask, write_tasks
    from webrl.envs.task import draw_tasks
    from webrl.run.tasks import task_sources

    site = "http://127.0.0.1:9000"
    write_tasks(tmp_path / "tasks.jsonl", [
        SynthTask("synth/item/000", 'Open the page of "Blue Mug".', f"{site}/shop/", "item",
                  {"kind": "url_contains", "value": "/shop/p/12"}),
        SynthTask("synth/action/000", 'Add "Blue Mug" to the cart.', f"{site}/shop/p/12", "action", None)])
    cfg = load_config(WebRLConfig, "smoke", ["tasks.source=file", f"tasks.file={tmp_path / 'tasks.jsonl'}",
                                             "tasks.file_format=synth"])
    train, held_out = task_sources(cfg.tasks)
    assert [t.spec.id for t in draw_tasks(held_out, np.random.default_rng(0), 5, in_order=True)] == [
        "synth/item/000", "synth/action/000"]
    assert {t.spec.start_url for t in draw_tasks(train, np.random.default_rng(0), 6)} <= {
        f"{site}/shop/", f"{site}/shop/p/12"}


def test_file_settings_without_the_file_source_are_refused():
    for key in ("tasks.file=tasks.jsonl", "tasks.file_format=synth"):
        with pytest.raises(ConfigError, match="apply to tasks.source=file only"):
            load_config(WebRLConfig, "smoke", [key])
