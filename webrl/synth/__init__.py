"""SynthAgent-style synthesis for a user's own site: categorised exploration, task proposal
(templates and an LLM), collection with task refinement, trajectory refinement, and the task
source + SFT demonstrations it writes (`webrl synth`; see `webrl.synth.commands`)."""
from webrl.synth.commands import SynthCommandConfig, SynthReport, synth_main, synthesize
from webrl.synth.explore import ExplorationMap, categorise, explore
from webrl.synth.tasks import SynthTask, SynthWebTask, load_synth_tasks

__all__ = ["ExplorationMap", "SynthCommandConfig", "SynthReport", "SynthTask", "SynthWebTask", "categorise",
           "explore", "load_synth_tasks", "synth_main", "synthesize"]
