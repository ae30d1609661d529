"""What bounds the rise (issue #52 item 3): sampled success after RL against the greedy success
before it, for every kept run of the tab_button recipe (the learning benchmark's 16-iteration runs
of 2026-12-05 and the default's 8-iteration runs of 2026-12-07).

    python3 benchmarks/results/default_gain_2026-12-07/ceiling.py

Reads each run's eval_outcomes.jsonl (first and last evaluation; means over the tasks scored in
both, per task: greedy 0/1, sampled the mean of its episodes) and prints one row per run: greedy
before, sampled before, their gap (the room sharpening toward the argmax has), sampled after, the
rise, and sampled after minus greedy before."""
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
LEARNING = HERE.parent / "learning_2026-12-05"


def runs():
    for objective in ("grpo", "ppo"):
        for seed in (0, 1, 2):
            yield f"learning {objective} seed {seed} (64 x 4, 16 it)", LEARNING / f"{objective}-seed{seed}" / "eval_outcomes.jsonl"
    for seed in (0, 1, 2, 3, 4, 5):
        for name in (f"tab8k4e96crn_seed{seed}", f"default_seed{seed}"):
            path = HERE / f"{name}_eval_outcomes.jsonl"
            if path.exists():
                yield f"default seed {seed} (96 x 4, 8 it)", path


def paired_means(first: dict, last: dict) -> tuple[float, float, float, float]:
    greedy_b, greedy_a = dict(first["outcomes"]), dict(last["outcomes"])
    sampled_b, sampled_a = dict(first["sampled"]), dict(last["sampled"])
    both = [t for t in greedy_b if None not in (greedy_b[t], sampled_b.get(t), sampled_a.get(t), greedy_a.get(t))]
    mean = lambda d: sum(d[t] for t in both) / len(both)  # noqa: E731
    return mean(greedy_b), mean(sampled_b), mean(sampled_a), mean(greedy_a)


def main() -> None:
    print("| run | greedy before | sampled before | gap | sampled after | rise | after - greedy before | greedy after |")
    print("|---|---|---|---|---|---|---|---|")
    for name, path in runs():
        records = [json.loads(line) for line in path.read_text().splitlines()]
        gb, sb, sa, ga = paired_means(records[0], records[-1])
        print(f"| {name} | {gb:.3f} | {sb:.3f} | {gb - sb:+.3f} | {sa:.3f} | {sa - sb:+.3f} | {sa - gb:+.3f} | {ga:.3f} |")


if __name__ == "__main__":
    main()
