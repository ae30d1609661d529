"""The CLI: one config mechanism for every subcommand, errors that name the key."""
import pytest

from tests.chat_stub import chat_reply, chat_server

from webrl.cli import COMMANDS, dashed_overrides, main


def test_dashed_and_key_value_forms_are_the_same_overrides():
    assert dashed_overrides(["--n", "400", "--out=/tmp/d", "--split", "test"]) == ["n=400", "out=/tmp/d", "split=test"]
    assert dashed_overrides(["--resume"]) == ["resume=true"]


def test_every_command_lists_documented_keys(capsys):
    for name in COMMANDS:
        assert main([name, "--keys"]) == 0
        out = capsys.readouterr().out
        assert out.strip(), name


def test_typo_in_a_subcommand_key_names_it(capsys):
    assert main(["demos", "--nn", "3"]) == 2
    err = capsys.readouterr().err
    assert "'nn'" in err and "n" in err


def test_config_shows_overrides(capsys):
    assert main(["config", "--config", "smoke", "trainer.iterations=7"]) == 0
    assert "iterations: 7" in capsys.readouterr().out


@pytest.mark.browser
@pytest.mark.slow
def test_demos_command_records_oracle_episodes(tmp_path, capsys):
    out = tmp_path / "demos"
    assert main(["demos", "--n", "2", "--out", str(out), "--levels", "[0]", "--sites", "[widgets]",
                 "--viewport", "640x480"]) == 0
    assert "saved 2 of 2" in capsys.readouterr().out
    assert len((out / "demos.jsonl").read_text().splitlines()) == 2


def test_train_sft_eval_share_the_run_config(capsys):
    for name in ("train", "sft", "eval"):
        assert main([name, "--config", "smoke", "--trainer.iteratons", "3"]) == 2
        err = capsys.readouterr().err
        assert "'trainer.iteratons'" in err and "trainer.iterations" in err, name  # names the key and the fix
    assert main(["eval", "--config", "smoke", "eval.endpoint=ftp://x"]) == 2
    assert "eval.endpoint must start with http://" in capsys.readouterr().err
    assert main(["train", "--config", "smoke", "tasks.source=file"]) == 2
    assert "tasks.source=file needs tasks.file" in capsys.readouterr().err


def test_a_checkpoint_brings_its_trained_prompt(tmp_path, capsys):
    """`webrl eval CKPT` reads the prompt CKPT learned (hf/webrl_prompt.json) in every
    generator.prompt key the command line leaves alone; keys set there win."""
    import json

    ckpt = tmp_path / "step-00000004"
    (ckpt / "hf").mkdir(parents=True)
    (ckpt / "hf" / "config.json").write_text("{}")
    (ckpt / "hf" / "webrl_prompt.json").write_text(json.dumps(  # differs from the embedded default's prompt
        {"action_format": "compact", "think": True, "max_pixels": 50176, "prompt_version": "v1",
         "written_by": "an older webrl"}))  # unknown keys are ignored
    assert main(["config", str(ckpt)]) == 2  # `config` has no positional: model.path= is the way
    capsys.readouterr()
    assert main(["config", f"model.path={ckpt}", "generator.prompt.max_pixels=4096"]) == 0
    captured = capsys.readouterr()
    assert "action_format: compact" in captured.out and "think: true" in captured.out
    assert "prompt_version: v1" in captured.out
    assert "max_pixels: 4096" in captured.out  # given on the command line: kept
    assert "was trained with" in captured.err and "max_pixels" not in captured.err
    assert main(["config", "model.path=", "generator.prompt.think=true"]) == 0  # no checkpoint: nothing adopted
    assert "think: true" in capsys.readouterr().out


def test_recipe_preset_names_its_required_keys(capsys):
    assert main(["train", "--config", "online_mind2web_qwen3vl_4b", "tasks.file=/data/t.json"]) == 2
    err = capsys.readouterr().err
    assert "model.path" in err and "reward.base_url" in err and "tasks.file," not in err


STOP_REPLY = '<tool_call>{"name": "browser", "arguments": {"action": "stop"}}'  # the endpoint's every answer


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.browser
@pytest.mark.timeout(1500)  # three Ray starts
def test_sft_then_eval_of_its_checkpoint_and_of_an_endpoint(tmp_path, capsys):
    import json
    from pathlib import Path

    assert main(["sft", "--config", "smoke", f"run.run_dir={tmp_path / 'sft'}", "sft.demos=2",
                 "sft.batch_size=2", "sft.curriculum=[[0,2]]"]) == 0
    out = capsys.readouterr().out
    hf = Path(out.split("SFT checkpoint (Hugging Face folder): ")[1].split()[0])
    assert hf == tmp_path / "sft" / "sft" / "hf" and (hf / "config.json").exists()
    assert not (tmp_path / "sft" / "checkpoints").exists()  # only the SFT stage ran
    rows = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    passes = [r for r in rows if r.get("stage") == "sft"]
    assert [r["epoch"] for r in passes] == [1, 2]  # the curriculum's one phase: 2 passes
    for r in passes:  # one optimizer step per 2 turns (2 level-0 demos: 2 turns each, click + stop)
        assert r["optimizer_steps"] == -(-r["samples"] // 2) and r["samples"] >= 2
    assert json.loads((hf / "webrl_prompt.json").read_text())["action_format"] == "som"  # smoke's prompt format

    assert main(["eval", str(hf.parent), "--config", "smoke", f"run.run_dir={tmp_path / 'ev'}",
                 "tasks.eval_tasks=2", "rollout.max_turns=1", "eval.samples_per_task=3"]) == 0
    out = capsys.readouterr().out
    assert "widgets/l0" in out and "overall" in out
    (record,) = [json.loads(line) for line in (tmp_path / "ev" / "eval_outcomes.jsonl").read_text().splitlines()]
    assert [t for t, _ in record["sampled"]] == [t for t, _ in record["outcomes"]]  # the same 2 tasks, in order
    means = [m for _, m in record["sampled"]]
    assert all(m in (0.0, 1 / 3, 2 / 3, 1.0) for m in means)  # 3 sampled episodes per task
    (logged,) = [json.loads(line) for line in (tmp_path / "ev" / "metrics.jsonl").read_text().splitlines()
                 if '"eval"' in line]
    assert logged["success_sampled"] == pytest.approx(sum(means) / 2)
    assert logged["time_eval_s"] > 0 and logged["time_eval_sampled_s"] > 0  # greedy and sampled, apart
    assert f"overall, sampled at temperature 0.8 (3 per task): {100 * sum(means) / 2:.1f}%" in out
    results = sorted((tmp_path / "ev" / "om2w").glob("*/result.json"))
    assert len(results) == 2
    doc = json.loads(results[0].read_text())
    assert doc["schema_version"] == "online-mind2web-v2" and doc["task"] and doc["action_history"]
    assert (tmp_path / "ev" / "viewer" / "index.html").exists()

    bodies = []
    with chat_server(lambda path, body: bodies.append(body) or chat_reply(STOP_REPLY)) as url:
        assert main(["eval", "--config", "smoke", f"run.run_dir={tmp_path / 'ep'}", f"eval.endpoint={url}",
                     "tasks.eval_tasks=2", "rollout.max_turns=1"]) == 0
    out = capsys.readouterr().out
    assert "overall" in out and "0.0%" in out  # stopping at once solves no widget task
    assert len(bodies) == 2 and all(b["temperature"] == 0.0 for b in bodies)  # greedy, one turn each
    docs = [json.loads(p.read_text()) for p in (tmp_path / "ep" / "om2w").glob("*/result.json")]
    assert len(docs) == 2 and all(d["action_history"][0]["action"].startswith("TASK_COMPLETE") for d in docs)


def test_heads_train_is_a_subcommand_with_clear_errors(tmp_path, capsys):
    from webrl.cli import main

    with pytest.raises(SystemExit) as e:  # argparse: the required flag is named
        main(["heads-train"])
    assert e.value.code == 2 and "--generator" in capsys.readouterr().err
    assert main(["heads-train", "--generator", str(tmp_path / "gone")]) == 1  # bad input, as `train`
    assert "model folder not found" in capsys.readouterr().err


def test_train_names_a_missing_heads_folder_before_starting_anything(tmp_path, capsys):
    from webrl.cli import main

    rc = main(["train", "--config", "smoke", "policy.wrappers=[cascade]", f"policy.cascade.heads_dir={tmp_path / 'no-heads'}",
               f"run.run_dir={tmp_path / 'run'}"])
    assert rc == 2 and "policy.cascade.heads_dir" in capsys.readouterr().err  # a config error, before Ray starts
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
