"""The main job end to end under the smoke preset: Ray, Chromium, sandbox sites, tiny model,
SFT -> GRPO -> evaluation, checkpoints that `run.resume=true` continues from, a viewer page."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from webrl.config import ConfigError, load_config
from webrl.train_config import WebRLConfig

ROOT = Path(__file__).resolve().parents[1]


def test_trainer_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="trainer.stages entries must be among"):
        load_config(WebRLConfig, "smoke", ["trainer.stages=[sft,dance]"])
    with pytest.raises(ConfigError, match="learner.model_path is set by the trainer"):
        load_config(WebRLConfig, "smoke", ["learner.model_path=/x"])
    with pytest.raises(ConfigError, match="closest|Closest"):
        load_config(WebRLConfig, "smoke", ["rollout.group_sise=3"])
    with pytest.raises(ConfigError, match="learner.temperature=0.5 is set by the trainer from "
                                          "generator.sampling.temperature=0.8"):
        load_config(WebRLConfig, "smoke", ["learner.temperature=0.5"])
    assert load_config(WebRLConfig, "smoke", ["learner.temperature=0.8"]).learner.temperature == 0.8
    with pytest.raises(ConfigError, match="eval.samples_per_task must be >= 0, got -1"):
        load_config(WebRLConfig, "smoke", ["eval.samples_per_task=-1"])
    with pytest.raises(ConfigError, match="eval.samples_per_task needs the checkpoint's own sampler"):
        load_config(WebRLConfig, "smoke", ["eval.samples_per_task=2", "eval.endpoint=http://127.0.0.1:9/v1"])


def _task(site: str, level: int, task_id: str = "t"):
    from webrl.envs import BaseTask, TaskSpec

    return BaseTask(TaskSpec(id=task_id, goal="g", start_url="http://127.0.0.1:1/", site=site, level=level))


def test_summary_counts_scored_trajectories_per_site_and_level():
    from webrl.evaluation import success_table, summarize
    from webrl.types import Trajectory

    tasks = [_task("shop", 0), _task("shop", 0), _task("shop", 1), _task("wiki", 0), _task("wiki", 0)]
    trajs = [Trajectory("a", reward=1.0), Trajectory("b", reward=0.0), Trajectory("c", reward=0.5),
             Trajectory("d", reward=0.0), Trajectory("e", status="dropped", drop_reason="infra: x")]
    s = summarize(tasks, trajs)
    # scored: shop/l0 {1, 0} -> 50%; shop/l1 {0.5 > 0} -> 100%; wiki/l0 {0} -> 0% (the dropped one
    # is not a failure); overall 2 successes of 4 scored = 50%
    assert s.per_site_level == {"shop/l0": (0.5, 2), "shop/l1": (1.0, 1), "wiki/l0": (0.0, 1)}
    assert s.success == 0.5 and s.dropped == 1 and s.tasks == 5
    table = success_table(s)
    assert "shop/l0                              2    50.0%" in table
    assert "overall                              4    50.0%" in table and "1 of 5 trajectories dropped" in table


def test_om2w_export_makes_task_ids_folder_safe_and_distinct(tmp_path):
    from webrl.actions import Action
    from webrl.evaluation import export_om2w
    from webrl.types import Image, Trajectory, Turn

    shot = Image(b"\x89PNG-not-decoded", "png")
    def traj():
        return Trajectory("widgets/l0/test/click/7", goal="Click OK",
                          turns=[Turn(images=[shot], action=Action(kind="stop"))], reward=1.0)
    folders = export_om2w([traj(), traj(), Trajectory("empty/one")], tmp_path)
    assert [f.name for f in folders] == ["widgets_l0_test_click_7", "widgets_l0_test_click_7-2"]  # no turns: skipped
    doc = json.loads((folders[1] / "result.json").read_text())
    assert doc["task_id"] == "widgets_l0_test_click_7-2" and doc["task"] == "Click OK"
    assert doc["action_history"][0]["action"].startswith("TASK_COMPLETE")


def test_sandbox_eval_split_draws_held_out_tasks_over_test_or_train_entities():
    import numpy as np

    from webrl.config import ConfigError
    from webrl.task_sources import draw_tasks, task_sources

    for split in ("test", "train"):
        train, held_out = task_sources(load_config(WebRLConfig, "smoke", [f"tasks.eval_split={split}"]).tasks)
        ids = [t.spec.id for t in draw_tasks(held_out, np.random.default_rng(0), 3)]
        assert all(f"/{split}/" in i for i in ids), ids  # widgets/l0/<split>/<kind>/<seed>
        assert all("/train/" in t.spec.id for t in draw_tasks(train, np.random.default_rng(0), 3))
    with pytest.raises(ConfigError, match="tasks.eval_split must be one of"):
        load_config(WebRLConfig, "smoke", ["tasks.eval_split=valid"])


def test_tasks_kinds_filter_training_and_evaluation_and_name_the_allowed_kinds():
    import numpy as np

    from webrl.task_sources import draw_tasks, task_sources

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
    from webrl.task_sources import draw_tasks, task_sources

    rows = [{"task_id": f"t{i}", "confirmed_task": f"goal {i}", "website": "https://example.com/"} for i in range(3)]
    (tmp_path / "tasks.json").write_text(json.dumps(rows))
    cfg = load_config(WebRLConfig, "smoke", ["tasks.source=file", f"tasks.file={tmp_path / 'tasks.json'}"]).tasks
    train, held_out = task_sources(cfg)
    # evaluation on a file takes its first tasks in file order, each once
    assert [t.spec.goal for t in draw_tasks(held_out, np.random.default_rng(0), 2, in_order=True)] == ["goal 0", "goal 1"]
    assert {t.spec.goal for t in draw_tasks(train, np.random.default_rng(0), 20)} <= {"goal 0", "goal 1", "goal 2"}

    miniwob = load_config(WebRLConfig, "smoke", ["tasks.source=miniwob", "tasks.miniwob=[click-button]"]).tasks
    assert draw_tasks(task_sources(miniwob)[0], np.random.default_rng(0), 1)[0].spec.id.startswith("miniwob/click-button")

    class OneTask:
        def sample(self, rng):
            return _task("mine", 0, "mine/1")

    register_env("webrl-test-mine", lambda env_config: WebEnv(tasks=OneTask()))
    cfg = load_config(WebRLConfig, "smoke", ["tasks.source=env", "tasks.env_id=webrl-test-mine"]).tasks
    train, _ = task_sources(cfg)
    assert draw_tasks(train, np.random.default_rng(0), 1)[0].spec.id == "mine/1"
    register_env("webrl-test-bare", lambda env_config: WebEnv())  # no task source
    with pytest.raises(ValueError, match="has no `tasks` source"):
        task_sources(load_config(WebRLConfig, "smoke", ["tasks.source=env", "tasks.env_id=webrl-test-bare"]).tasks)


def _run(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "examples" / "train_online_mind2web.py"), "--config", "smoke",
           f"run.run_dir={run_dir}", *overrides]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1500, cwd=ROOT)


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.browser
@pytest.mark.timeout(1500)  # two full runs (~8 min each on 2 loaded cores)
def test_smoke_run_checkpoints_resumes_and_writes_the_viewer(run_dir):
    folder = Path(run_dir) / "smoke"
    first = _run(folder)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "held-out success (greedy)" in first.stdout
    checkpoints = sorted((folder / "checkpoints").glob("step-*"))
    assert [c.name for c in checkpoints] == ["step-00000001", "step-00000002"]
    assert (checkpoints[-1] / "hf" / "config.json").exists()
    trained = json.loads((checkpoints[-1] / "hf" / "webrl_prompt.json").read_text())  # `webrl eval CKPT` adopts it
    assert trained["action_format"] == load_config(WebRLConfig, "smoke").generator.prompt.action_format
    assert (folder / "viewer" / "index.html").exists()
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records if "iteration" in r and r.get("stage") is None] == [1, 2]
    outcomes = [json.loads(line) for line in (folder / "eval_outcomes.jsonl").read_text().splitlines()]
    assert outcomes[0]["label"] == "before" and len(outcomes) == 2  # before and after (or the last eval_every)
    ids = [[task_id for task_id, _ in r["outcomes"]] for r in outcomes]
    assert len(ids[0]) == 2 and ids[0] == ids[1]  # the same eval_tasks=2 tasks, in the same order
    assert all(v in (0.0, 1.0, None) for r in outcomes for _, v in r["outcomes"])
    # one optimizer step per iteration: the learner's log-probs before it equal the rollout's,
    # which were sampled at temperature 0.8 (smoke preset), so the ratio is 1 up to float noise
    first = next(r for r in records if r.get("iteration") == 1 and r.get("stage") is None)
    assert first["ratio_max"] < 1.01 and abs(first["approx_kl"]) < 1e-3, first

    second = _run(folder, "run.resume=true", "trainer.iterations=3", "eval.samples_per_task=2")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    last = json.loads((folder / "eval_outcomes.jsonl").read_text().splitlines()[-1])
    assert [t for t, _ in last["sampled"]] == ids[0]  # 2 episodes per task at the rollout temperature
    assert all(m in (0.0, 0.5, 1.0) for _, m in last["sampled"])
    assert "overall, sampled" in second.stdout
    assert "resumed from" in second.stdout and "iteration 2" in second.stdout
    assert sorted(c.name for c in (folder / "checkpoints").glob("step-*"))[-1] == "step-00000003"
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in records if "iteration" in r and r.get("stage") is None]
    assert [r["iteration"] for r in rl] == [1, 2, 3]
    # smoke keeps zero-variance groups, so every iteration is one learner update: the resumed
    # iteration trained on top of version 2 and produced version 3; rollouts were never stale
    assert [r["policy_version"] for r in rl] == [1.0, 2.0, 3.0]
    assert all(r["staleness"] == 0.0 for r in rl)
