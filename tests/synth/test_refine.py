"""Trajectory refinement on hand-built trajectories: exactly the no-op, failed and loop turns go."""
from webrl.actions import Action
from webrl.synth.refine import refine_steps
from webrl.types import Trajectory, Turn, TurnObservation

PAGES = {"A": ("http://s.test/", '[0] link "B"\n[1] link "C"'),
         "B": ("http://s.test/b", '[0] link "Home"'),
         "C": ("http://s.test/c", '[0] textbox "Name"'),
         "C+": ("http://s.test/c", '[0] textbox "Name" value="Ada"')}


def _trajectory(steps):
    """steps: (page the turn starts on, action, error reported after the previous turn)."""
    turns = [Turn(action=action, response_text=action.to_compact(),
                  observation=TurnObservation(url=PAGES[page][0], elements_text=PAGES[page][1],
                                              last_action_error=error))
             for page, action, error in steps]
    return Trajectory("t", goal="g", turns=turns)


def test_removes_the_no_op_and_the_a_b_a_loop():
    traj = _trajectory([
        ("A", Action.click(7), ""),               # 0: nothing changed (next turn starts on A too) -> no_op
        ("A", Action.click(0), ""),               # 1: A -> B       } back where it started:
        ("B", Action("back"), ""),                # 2: B -> A       } loop
        ("A", Action.click(1), ""),               # 3: A -> C
        ("C", Action.type_text("Ada", 0), ""),    # 4: C -> C+ (the value changed: not a no-op)
        ("C+", Action.stop(), ""),                # 5: terminal, always kept
    ])
    assert refine_steps(traj) == {0: "no_op", 1: "loop", 2: "loop"}


def test_failed_actions_go_and_content_edits_never_form_a_loop():
    traj = _trajectory([
        ("C", Action.type_text("Ada", 0), ""),    # 0: C -> C+
        ("C+", Action.click(9), ""),              # 1: reported an error -> failed_action
        ("C+", Action.type_text("", 0), "no element 9"),  # 2: C+ -> C: back to turn 0's state, but by typing
        ("C", Action.stop(), ""),
    ])
    assert refine_steps(traj) == {1: "failed_action"}


def test_a_loop_before_the_final_stop_and_a_clean_trajectory():
    traj = _trajectory([("A", Action.click(0), ""), ("B", Action.click(0), ""), ("A", Action.stop(), "")])
    # A -> B -> A then stop: the loop is turns 0 and 1; the terminal stop on A stays
    assert refine_steps(traj) == {0: "loop", 1: "loop"}
    assert refine_steps(_trajectory([("A", Action.click(1), ""), ("C", Action.stop(), "")])) == {}
