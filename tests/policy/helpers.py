"""Episode builders for the policy tests: observations with screenshots and recorded turns."""
from PIL import Image as PILImage

from webrl.actions import Action
from webrl.models import load_model
from webrl.policy import Decision, GeneratorConfig, GeneratorPolicy, Observation, PromptConfig, SamplingConfig
from webrl.types import Image

# Small screenshot budget so CPU tests stay fast: at most 64 * 28 * 28 = 50176 pixels.
PIXELS = dict(min_pixels=1024, max_pixels=64 * 28 * 28)


def screenshot(width=320, height=200, color=(200, 200, 200)) -> Image:
    return Image.from_pil(PILImage.new("RGB", (width, height), color))


def observation(step: int, goal="Buy a blue mug", size=(320, 200), **kw) -> Observation:
    fields = dict(goal=goal, url=f"http://127.0.0.1:8000/page/{step}", title=f"Page {step}",
                  elements_text=f'[0] link "Blue mug {step}"\n[1] textbox "Search"',
                  feedback=f"Succeed: action {step - 1} done" if step else "", step=step,
                  screenshot=screenshot(*size, color=(step * 7 % 256, 100, 150)))
    fields.update(kw)
    return Observation(**fields)


def episode(n_turns: int, fmt, goal="Buy a blue mug", think=True):
    """(turns, current observation): n_turns recorded turns, each a click with reasoning."""
    turns = []
    for t in range(n_turns):
        obs = observation(t, goal)
        action = Action.click(t % 2) if t % 5 else Action.type_text("blue mug", 1)
        reasoning = f"<think>Step {t}: the page shows results, I pick element {t % 2}.</think>" if think else ""
        text = reasoning + fmt.render(action)
        turns.append(Decision(action, text, images=[obs.screenshot]).to_turn(obs))
    return turns, observation(n_turns, goal)


def policy(path, family=None, sampling=None, **prompt_kw) -> GeneratorPolicy:
    model, processor = load_model(path)
    cfg = GeneratorConfig(prompt=PromptConfig(**{**PIXELS, **prompt_kw}),
                          sampling=sampling or SamplingConfig(max_new_tokens=12))
    return GeneratorPolicy(model, processor, cfg, family=family)
