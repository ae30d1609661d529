"""Train a web agent with online multi-turn RL (the main job).

With no arguments: the embedded default (local sandbox sites, tiny Qwen-VL, CPU).
With `--config PRESET key=value ...`: any preset plus overrides (see `webrl config --keys`).

Status: the foundation is in place (config, actions, types); the stages of the loop are wired
in here as they land. This script says what it can run and runs it.
"""
import argparse

from webrl.config import WebRLConfig, load_config, to_yaml


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="default")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    config = load_config(WebRLConfig, args.config, args.overrides)
    print(to_yaml(config))
    print("webrl: no training stage is implemented yet; only configuration was resolved.")


if __name__ == "__main__":
    main()
