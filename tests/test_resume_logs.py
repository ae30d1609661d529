"""Exact resume of the run folder's logs (issue #36): a checkpoint keeps the byte sizes of
metrics.jsonl, trajectories/trajectories.jsonl and eval_outcomes.jsonl, and `run.resume=true`
cuts them back, so what an attempt logged after its last checkpoint is not counted twice once the
resumed run redoes it. The loop runs over the in-process stand-ins of tests/test_trainer.py."""
import json
from collections import Counter
from pathlib import Path

import pytest

from tests.test_trainer import LocalActors, RecordingLearner
from webrl.config import load_config
from webrl.learner.checkpoint import write_manifest
from webrl.run.config import WebRLConfig

CLIENT_STATE = "client_state.json"


class FileLearner(RecordingLearner):
    """RecordingLearner whose checkpoints round-trip the client state (`extra`) and the policy
    version through a file, with the manifest `resume_checkpoint` looks for."""

    def save(self, path, extra):
        out = super().save(path, extra)
        Path(path, CLIENT_STATE).write_text(json.dumps({"policy_version": self.policy_version, "client": extra}))
        write_manifest(path)
        return out

    def load(self, path):
        state = json.loads(Path(path, CLIENT_STATE).read_text())
        self.policy_version = state["policy_version"]
        return state["client"]


class FileActors(LocalActors):
    def start_learner(self, section, run):
        self.learners.append(FileLearner(run))
        return self.learners[-1]


def _fit(run_dir: Path, *overrides: str) -> None:
    from webrl.run.trainer import Trainer

    config = load_config(WebRLConfig, None, [f"run.run_dir={run_dir}", "tasks.tasks_per_iteration=2",
                                              "rollout.group_size=2", "tasks.eval_tasks=2",
                                              "trainer.checkpoint_every=1", *overrides])
    Trainer(config, actors=FileActors()).fit()


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_resumed_run_logs_each_group_and_iteration_once(tmp_path, capsys):
    """Run 1: iterations 1-2, a checkpoint after each, then the "after" evaluation. Then an attempt
    at iteration 3 dies after collecting and logging it: what a straight 3-iteration run of the
    same seed logs for iteration 3 (the same groups, ids "2:..."), its 4th trajectory line cut
    short mid-line, and its metrics line. Resuming to 3 iterations from step-00000002 cuts what
    came after that checkpoint: metrics 2 lines (run 1's "after" event + the aborted iteration 3),
    trajectories 4 lines, eval outcomes 1 line (run 1's "after")."""
    straight = tmp_path / "straight"
    _fit(straight, "trainer.iterations=3")
    run = tmp_path / "run"
    _fit(run, "trainer.iterations=2")
    log = run / "trajectories" / "trajectories.jsonl"
    aborted = [line for line in (straight / "trajectories" / "trajectories.jsonl").read_text().splitlines()
               if json.loads(line)["group_id"].startswith("2:")]
    assert len(aborted) == 4  # 2 groups x group_size 2
    with open(log, "a") as f:
        f.write("\n".join(aborted[:3]) + "\n" + aborted[3][:40])  # the 4th line cut short by the crash
    with open(run / "metrics.jsonl", "a") as f:
        f.write(next(line for line in (straight / "metrics.jsonl").read_text().splitlines()
                     if json.loads(line).get("iteration") == 3) + "\n")
    capsys.readouterr()

    _fit(run, "trainer.iterations=3", "run.resume=true")

    out = capsys.readouterr().out
    assert ("webrl: resume cut 2 metrics lines, 4 trajectory lines and 1 eval outcome line written after "
            "step-00000002") in out
    trajectories = _rows(log)  # every line parses: no partial line left before the redo's
    # iterations 1-3 (group ids "0:", "1:", "2:"), 2 groups each, each group exactly group_size times,
    # in the straight run's order
    counts = Counter(row["group_id"] for row in trajectories)
    assert sorted(gid.split(":")[0] for gid in counts) == ["0", "0", "1", "1", "2", "2"]
    assert set(counts.values()) == {2} and len(trajectories) == 12
    assert [row["group_id"] for row in trajectories] == [row["group_id"] for row in _rows(
        straight / "trajectories" / "trajectories.jsonl")]
    rows = _rows(run / "metrics.jsonl")
    assert [r["iteration"] for r in rows if "iteration" in r and "stage" not in r] == [1, 2, 3]
    assert [r["label"] for r in rows if r.get("stage") == "eval"] == ["before", "after"]
    assert [(r["label"], r["iteration"]) for r in _rows(run / "eval_outcomes.jsonl")] == [("before", 0), ("after", 3)]
    # step-3's sizes are the logs as of iteration 3 (saved after its metrics line, before "after")
    sizes = json.loads((run / "checkpoints" / "step-00000003" / CLIENT_STATE).read_text())["client"]["log_sizes"]
    metrics = (run / "metrics.jsonl").read_bytes()
    assert metrics[:sizes["metrics.jsonl"]].splitlines()[-1] == json.dumps(rows[-2]).encode()
    assert sizes["trajectories/trajectories.jsonl"] == log.stat().st_size
    assert sizes["eval_outcomes.jsonl"] == len((run / "eval_outcomes.jsonl").read_text().splitlines()[0]) + 1


def test_a_log_shorter_than_its_checkpoint_size_stops_the_resume_naming_it(tmp_path):
    """The trajectory log lost its last line after step-00000001: resuming refuses, naming it,
    before any log is cut (metrics.jsonl, which the aborted attempt did lengthen, is untouched)."""
    _fit(tmp_path, "trainer.iterations=1")
    log = tmp_path / "trajectories" / "trajectories.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:-1]))
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"iteration": 2}) + "\n")
    metrics = (tmp_path / "metrics.jsonl").read_bytes()
    with pytest.raises(ValueError, match=r"trajectories/trajectories\.jsonl holds \d+ bytes, fewer than the \d+ it "
                                         r"held at step-00000001"):
        _fit(tmp_path, "trainer.iterations=2", "run.resume=true")
    assert (tmp_path / "metrics.jsonl").read_bytes() == metrics


@pytest.mark.parametrize("checkpoint, state, said", [
    ("checkpoints/step-00000003", {"iteration": 3}, "step-00000003 keeps no log sizes (an older checkpoint)"),
    ("../elsewhere/step-00000003", {"iteration": 3, "log_sizes": {"metrics.jsonl": 0}}, "lies outside the run folder"),
])
def test_logs_are_left_whole_by_an_old_checkpoint_or_one_of_another_folder(tmp_path, capsys, checkpoint, state, said):
    """An old checkpoint (no sizes) or another folder's (a PBT exploit): one line, nothing cut."""
    from webrl.run.trainer import Trainer

    class Loading:
        policy_version = 3

        def load(self, path):
            return state

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"iteration": 4}\n')
    trainer = Trainer(load_config(WebRLConfig, None, [f"run.run_dir={run_dir}"]), actors=LocalActors())
    trainer.learner = Loading()
    trainer.load(run_dir / checkpoint)
    assert (run_dir / "metrics.jsonl").read_text() == '{"iteration": 4}\n'
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("webrl:")]
    assert len(lines) == 1 and said in lines[0]


def _table(out: str) -> list[str]:
    """The before/after table `fit` printed: its header line through the paired-change lines."""
    lines = out.splitlines()
    start = lines.index("held-out success (greedy)      before    after")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("run folder:"))
    return lines[start:end]


def test_a_resumed_run_prints_the_table_of_a_straight_run(tmp_path, capsys):
    """A run stopped after iteration 1 and resumed to 2 prints the same final table as a straight
    2-iteration run of the same seed: the "before" column and the paired change are read back from
    its logs, not "-". The stand-ins' learner never changes the policy, so before and after both
    read 50.0% (CountEnv with target 2: of each group's two members, the engine's first-move
    counter lets one click twice and succeed, the other stop at once) and the change is 0 up, 0 down
    (both sampled evaluations' 2 tasks x 2 episodes: 1 success of 2 per task each time)."""
    _fit(tmp_path / "straight", "trainer.iterations=2", "eval.samples_per_task=2")
    straight = _table(capsys.readouterr().out)
    run = tmp_path / "run"
    _fit(run, "trainer.iterations=1", "eval.samples_per_task=2")
    capsys.readouterr()
    _fit(run, "trainer.iterations=2", "eval.samples_per_task=2", "run.resume=true")
    resumed = _table(capsys.readouterr().out)
    assert resumed == straight
    overall = next(line for line in resumed if line.startswith("overall "))
    assert overall.split()[1:] == ["50.0%", "50.0%"]
    assert any(line.startswith("change, greedy: 0 tasks up, 0 down") for line in resumed)
    assert any(line.startswith("change, sampled") for line in resumed)
