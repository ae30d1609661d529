"""Judge agreement against checker outcomes: confusion counts worked by hand, and the CLI entry."""
import json
import math

import pytest

from webrl.actions import Action
from webrl.reward import (JudgeAgreementConfig, RewardConfig, RewardResult, ScriptedBackend, judge_agreement,
                          judge_agreement_main)
from webrl.reward.agreement import AgreementReport, checker_truth
from webrl.types import save_trajectories

from .helpers import done_trajectory, trajectory


class ByTaskJudge:
    """Judge outcome looked up by task id: 1.0, 0.0 or a drop."""

    name = "by_task"

    def __init__(self, outcomes):
        self.outcomes = outcomes

    def __call__(self, traj):
        out = self.outcomes[traj.task_id]
        return RewardResult.drop("judge_timeout", "slow") if out is None else RewardResult(out)


def test_confusion_matrix_worked_by_hand():
    truth = {"a": 1, "b": 1, "c": 0, "d": 0, "e": 0, "f": 1}
    judged = {"a": 1.0, "b": 0.0, "c": 1.0, "d": 0.0, "e": 0.0, "f": None}
    trajs = [done_trajectory(task_id=k, info={"task_reward": v}) for k, v in truth.items()]
    trajs.append(done_trajectory(task_id="g"))  # no checker outcome
    trajs.append(trajectory([Action.click(1)], task_id="h", info={"task_reward": 1.0}))  # not done
    report = judge_agreement(ByTaskJudge(judged), trajs)
    # a: tp, b: fn, c: fp, d: tn, e: tn, f: dropped
    assert (report.tp, report.fn, report.fp, report.tn) == (1, 1, 1, 2)
    assert (report.dropped, report.no_truth, report.not_done) == (1, 1, 1)
    assert report.judged == 5 and report.agreement == 3 / 5
    assert report.precision == 1 / 2 and report.recall == 1 / 2
    # kappa: p_o = 0.6; judge says 1 for 2/5, truth 1 for 2/5 -> p_e = (2*2 + 3*3) / 25 = 0.52
    assert math.isclose(report.kappa, (0.6 - 0.52) / (1 - 0.52))
    assert report.drop_reasons == {"judge_timeout": 1}
    assert "judge success                1               1" in report.format()


def test_empty_report_is_nan_not_an_error():
    assert math.isnan(AgreementReport().agreement) and math.isnan(AgreementReport().kappa)


def test_judge_agreement_main_on_a_jsonl_file(tmp_path, capsys):
    trajs = [done_trajectory(task_id=f"t{i}", answer=f"answer {i}", info={"task_reward": float(i % 2)})
             for i in range(4)]
    path = tmp_path / "traj.jsonl"
    save_trajectories(path, trajs)
    # the scripted judge says SUCCESS when the answer is odd, so it agrees with the checker everywhere
    backend = ScriptedBackend(lambda m: "Verdict: SUCCESS" if any(
        f"answer {i}" in p for i in (1, 3) for msg in m for p in msg.content if isinstance(p, str))
        else "Verdict: NOT SUCCESS")
    config = JudgeAgreementConfig(trajectories=str(path), reward=RewardConfig(judge="action_history"),
                                  output=str(tmp_path / "report.json"))
    assert judge_agreement_main(config, backend=backend) == 0
    printed = capsys.readouterr().out
    assert "agreement 1.000" in printed and "judge action_history via scripted" in printed
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["tp"], report["tn"], report["judged"]) == (2, 2, 4)


def test_truth_from_the_rollout_reward_field_and_the_hint(tmp_path, capsys):
    trajs = [done_trajectory(task_id="a"), done_trajectory(task_id="b")]
    trajs[0].reward, trajs[1].reward = 1.0, 0.0  # scored by the programmatic reward; info.task_reward unset
    path = tmp_path / "run.jsonl"
    save_trajectories(path, trajs)
    backend = ScriptedBackend(lambda m: "Verdict: SUCCESS")
    assert judge_agreement_main(JudgeAgreementConfig(trajectories=str(path)), backend=backend) == 2
    assert "pass truth_key=reward" in capsys.readouterr().out
    assert judge_agreement_main(JudgeAgreementConfig(trajectories=str(path), truth_key="reward"), backend=backend) == 0
    assert "agreement 0.500" in capsys.readouterr().out  # judge says success twice; truth 1, 0


def test_webrl_judge_agreement_cli_against_a_served_judge(tmp_path, capsys):
    from webrl.cli import main
    from webrl.serve import ServeConfig, ServerThread, create_app

    from .fixtures import STUB_LIMITS
    from .helpers import StubEngine, user_text

    trajs = [done_trajectory(task_id=f"t{i}", answer=f"answer {i}", info={"task_reward": float(i % 2)})
             for i in range(4)]
    path = tmp_path / "traj.jsonl"
    save_trajectories(path, trajs)
    engine = StubEngine(lambda m: "Verdict: SUCCESS" if "answer 1" in user_text(m) else "Verdict: NOT SUCCESS")
    with ServerThread(create_app(engine, ServeConfig(**STUB_LIMITS))) as server:
        code = main(["judge-agreement", str(path), f"reward.base_url={server.url}/v1",
                     "reward.model=stub", "reward.judge=action_history"])
    out = capsys.readouterr().out
    # truth 0,1,0,1; judge 0,1,0,0 -> tn 2, tp 1, fn 1
    assert code == 0 and "agreement 0.750" in out and len(engine.seen) == 4
    assert main(["judge-agreement", "--keys"]) == 0
    keys = capsys.readouterr().out
    assert "reward.temperature" in keys and "reward.api_key_env" in keys


def test_truth_keys_must_name_an_info_field():
    assert checker_truth("task_reward")(done_trajectory(info={"task_reward": 0.5})) is True  # 0.5 >= 0.5
    with pytest.raises(ValueError, match=r"truth key must name a Trajectory.info field, got 'checker_reward'"):
        checker_truth("checker_reward")
    with pytest.raises(ValueError, match=r"JudgeAgreementConfig.truth_key must name a Trajectory.info field, "
                                         r"got 'taskreward'; allowed: \['site'"):
        JudgeAgreementConfig(truth_key="taskreward")
