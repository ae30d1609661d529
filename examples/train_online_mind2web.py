"""Train a visual web agent with online multi-turn RL: the main job.

    python examples/train_online_mind2web.py                      # the embedded CPU default
    python examples/train_online_mind2web.py --config smoke       # a 2-minute end-to-end check
    python examples/train_online_mind2web.py trainer.iterations=8 rollout.group_size=8
    ray job submit --working-dir . -- python examples/train_online_mind2web.py --config NAME
    webrl train --config smoke                                    # the same, from the CLI

The embedded default runs on a 2-core CPU in about 20 minutes (1,178 s measured on 2026-12-07): local Ray, the project's sandbox
websites, GRPO iterations from the shipped SFT checkpoint `webrl:tiny-webagent-pointer` (a tiny
Qwen2.5-VL that chooses elements with an element pointer, trained by
`webrl sft --config tiny_webagent_pointer_sft`; see its MODEL_CARD.md) on the widgets site's
level-1 tab_button tasks, and evaluation on 96 held-out tasks (one greedy and 4 sampled episodes
each) before and after; the sampled line rose beyond its noise in each of seeds 0-3.
`model.path= model.tiny_element_tokens=128 trainer.stages=[sft,rl]`
redoes SFT from random weights inside the run instead.
It prints a before/after success table and the run folder (config, metrics.jsonl, TensorBoard,
trajectory viewer, checkpoints). `webrl config --keys` documents every setting.
"""
import argparse
import sys

from webrl.config import ConfigError, load_config
from webrl.run.config import WebRLConfig
from webrl.run.trainer import Trainer


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=None, help="preset name (webrl/configs/) or YAML path; "
                        "none = the embedded default")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    try:
        config = load_config(WebRLConfig, args.config, args.overrides)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    Trainer(config).fit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
