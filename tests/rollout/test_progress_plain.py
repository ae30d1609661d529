"""The progress bar off a terminal (issue 54): plain lines, at most one per interval, never `\r`."""
import io
from types import SimpleNamespace

from webrl.rollout import ProgressBar


def _stats(done, dropped=0, successes=0):
    return SimpleNamespace(trajectories=done, dropped=dropped, successes=successes, steps_per_s=2.0)


def test_a_log_file_gets_the_first_line_then_one_per_interval_and_the_last():
    out = io.StringIO()  # not a terminal
    bar = ProgressBar(out, width=4, plain_every_s=3600.0)
    for done in range(1, 5):
        bar(_stats(done, successes=done), total=4)
    lines = out.getvalue().split("\n")
    # 1/4 (the first) and 4/4 (the last); 2/4 and 3/4 fall within the hour
    assert lines == ["[#---] 1/4 trajectories | 2.0 steps/s | success 100% | dropped 0",
                     "[####] 4/4 trajectories | 2.0 steps/s | success 100% | dropped 0", ""]
    bar(_stats(1), total=2)  # the next collection starts afresh: its first line is written
    assert out.getvalue().count("\n") == 3 and "\r" not in out.getvalue()


def test_a_terminal_gets_the_bar_redrawn_in_place():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    out = Terminal()
    bar = ProgressBar(out, width=4)
    bar(_stats(1), total=2)
    bar(_stats(2, dropped=1), total=2)
    # 2 done, 1 dropped: success over the 1 scored = 0 successes / 1
    assert out.getvalue() == ("\r[##--] 1/2 trajectories | 2.0 steps/s | success 0% | dropped 0"
                              "\r[####] 2/2 trajectories | 2.0 steps/s | success 0% | dropped 1\n")
