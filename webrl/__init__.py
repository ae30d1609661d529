"""webrl: Ray-native online multi-turn RL for visual web agents (Qwen2.5-VL / Qwen3-VL).

Importing webrl sets the no-phone-home defaults (`RAY_USAGE_STATS_ENABLED=0`,
`HF_HUB_OFFLINE=1`) unless the user already set them.
"""
import os as _os

_os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
_os.environ.setdefault("HF_HUB_OFFLINE", "1")

from webrl.actions import Action, ParseError, format_compact, parse_compact  # noqa: E402
from webrl.types import Batch, Image, Trajectory, Turn  # noqa: E402

__version__ = "0.1.0"
__all__ = ["Action", "ParseError", "format_compact", "parse_compact", "Batch", "Image", "Trajectory", "Turn"]
