"""The run: the Trainer's loop, the Ray actors it starts, placement and resources, the memory plan, the run log, trackers, Ray Tune, task sources and the run's composed config."""
