"""Policy wrapper stack: config errors (order, typos, settings that do nothing), build_policy's nesting,
and the heads' click written as a computer_use coordinate (hand-worked points)."""
import pytest

from tests.policy.helpers import policy
from webrl.actions import Action
from webrl.config import ConfigError, load_config
from webrl.policy import WRAPPERS, CascadeWrapperConfig, LociConfig, PolicyConfig, build_policy, make_format
from webrl.policy.cascade.policy import CascadePolicy, box_centre, format_action
from webrl.policy.generator import SamplingConfig
from webrl.policy.types import SoMElement
from webrl.policy.cascade.heads import DecisionHeads, HeadsConfig, save_heads
from webrl.policy.images import ImageGeometry
from webrl.policy.loci.policy import LociPolicy
from webrl.policy.loci.roles import EndpointRole, ModelRole


@pytest.fixture
def heads_dir(tmp_path):
    """A folder with heads_config.json (config checks read only that file; hidden size 32 heads)."""
    return str(save_heads(DecisionHeads(32, HeadsConfig(head_dim=8)), tmp_path / "heads"))


# ---------------------------------------------------------------------------------------------
# config
# ---------------------------------------------------------------------------------------------
def test_allowed_stacks_are_the_outermost_first_subsequences(heads_dir):
    assert WRAPPERS == ("skills", "loci", "cascade")
    for wrappers in ([], ["loci"], ["cascade"], ["loci", "cascade"]):
        assert PolicyConfig(wrappers, CascadeWrapperConfig(heads_dir=heads_dir) if "cascade" in wrappers
                            else CascadeWrapperConfig()).wrappers == wrappers


@pytest.mark.parametrize("wrappers, says", [
    (["cascade", "loci"], "outermost first"),  # the cascade cannot wrap LOCI: it needs the generator inside
    (["locci"], "unknown wrapper"),
    (["loci", "loci"], "twice"),
])
def test_bad_stacks_name_the_key_and_the_allowed_values(heads_dir, wrappers, says):
    with pytest.raises(ConfigError, match=says) as e:
        PolicyConfig(wrappers, CascadeWrapperConfig(heads_dir=heads_dir))
    assert "policy.wrappers" in str(e.value) and "['skills', 'loci', 'cascade']" in str(e.value)


def test_cascade_settings_without_the_cascade_are_refused(heads_dir):
    with pytest.raises(ConfigError, match=r"policy\.cascade\.heads_dir is set but 'cascade' is not in"):
        PolicyConfig([], CascadeWrapperConfig(heads_dir=heads_dir))
    with pytest.raises(ConfigError, match=r"policy\.cascade\.threshold is set .* \(changed: threshold\)"):
        PolicyConfig(["loci"], CascadeWrapperConfig(threshold=0.5))


def test_loci_settings_without_loci_are_refused(heads_dir):
    with pytest.raises(ConfigError, match=r"policy\.loci\.max_rounds is set but 'loci' is not in .*"
                                          r"changed: max_rounds, locator"):
        PolicyConfig(["cascade"], CascadeWrapperConfig(heads_dir=heads_dir),
                     LociConfig(max_rounds=1, locator="http://127.0.0.1:1/v1"))
    assert PolicyConfig(["loci"], loci=LociConfig(max_rounds=1)).loci.max_rounds == 1


def test_a_cascade_needs_a_heads_folder(tmp_path):
    with pytest.raises(ConfigError, match="policy.cascade.heads_dir is empty"):
        PolicyConfig(["cascade"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"policy\.cascade\.heads_dir=.*empty: no heads_config\.json there"):
        PolicyConfig(["cascade"], CascadeWrapperConfig(heads_dir=str(tmp_path / "empty")))


def test_dotlist_overrides_reach_the_sections_and_errors_stay_config_errors(heads_dir):
    cfg = load_config(PolicyConfig, overrides=["wrappers=[loci,cascade]", f"cascade.heads_dir={heads_dir}",
                                               "cascade.threshold=0.5", "loci.max_rounds=2"])
    assert cfg.wrappers == ["loci", "cascade"] and cfg.cascade.threshold == 0.5 and cfg.loci.max_rounds == 2
    assert isinstance(cfg.cascade, CascadeWrapperConfig) and isinstance(cfg.loci, LociConfig)
    with pytest.raises(ConfigError, match="policy.wrappers"):
        load_config(PolicyConfig, overrides=["wrappers=[cascade,loci]"])
    with pytest.raises(ConfigError, match="threshold"):  # the section's own validation
        load_config(PolicyConfig, overrides=["wrappers=[cascade]", f"cascade.heads_dir={heads_dir}",
                                             "cascade.threshold=2"])


# ---------------------------------------------------------------------------------------------
# build_policy
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def generator(tiny_qwen25vl_path):
    return policy(tiny_qwen25vl_path, sampling=SamplingConfig(greedy=True, max_new_tokens=6), action_format="som",
                  think=False)


@pytest.fixture
def real_heads_dir(generator, tmp_path):
    heads = DecisionHeads(generator.model.config.text_config.hidden_size, HeadsConfig())
    return str(save_heads(heads, tmp_path / "real-heads"))


def test_build_policy_nests_the_stack_outermost_first(generator, real_heads_dir):
    cascade_cfg = CascadeWrapperConfig(threshold=0.25, heads_dir=real_heads_dir)
    assert build_policy(generator, PolicyConfig()) is generator

    cascade = build_policy(generator, PolicyConfig(["cascade"], cascade_cfg))
    assert isinstance(cascade, CascadePolicy) and cascade.generator is generator
    assert cascade.config.threshold == 0.25
    assert cascade.heads.hidden_size == generator.model.config.text_config.hidden_size

    loci_cfg = LociConfig(max_rounds=2, critic="http://127.0.0.1:9/v1")
    loci = build_policy(generator, PolicyConfig(["loci"], loci=loci_cfg))
    assert isinstance(loci, LociPolicy) and loci.inner is generator and loci.config.max_rounds == 2
    # "policy" roles are played by the generator's own model; a URL role by that endpoint
    assert isinstance(loci.locator, ModelRole) and loci.locator.model is generator.model
    assert isinstance(loci.critic, EndpointRole) and loci.critic.base_url == "http://127.0.0.1:9/v1"

    both = build_policy(generator, PolicyConfig(["loci", "cascade"], cascade_cfg))
    assert isinstance(both, LociPolicy) and isinstance(both.inner, CascadePolicy)
    assert both.inner.generator is generator and both.locator.model is generator.model


def test_heads_of_another_model_are_refused_by_name(generator, heads_dir):
    with pytest.raises(ValueError, match=r"heads_dir=.*hidden size 32, the generator has"):
        build_policy(generator, PolicyConfig(["cascade"], CascadeWrapperConfig(heads_dir=heads_dir)))


# ---------------------------------------------------------------------------------------------
# the heads' actions in a coordinate format
# ---------------------------------------------------------------------------------------------
BOX = SoMElement(7, (100.0, 40.0, 60.0, 20.0))  # x=100, y=40, w=60, h=20: centre (130, 50)


def test_a_heads_click_becomes_a_click_at_the_box_centre_in_each_family():
    # 640x480 screenshot, default PromptConfig bounds (min 56*56, max 28*28*1280 pixels).
    # Qwen2.5-VL (factor 28, "resized"): H' = round(480/28)*28 = 17*28 = 476, W' = round(640/28)*28 = 23*28
    # = 644; 476*644 = 306544 lies within the bounds. Centre (130, 50) -> (round(130*644/640), round(50*476/480))
    # = (round(130.81), round(49.58)) = (131, 50).
    # Qwen3-VL ("normalized_1000"): (round(130*1000/640), round(50*1000/480)) = (round(203.1), round(104.2))
    # = (203, 104), whatever the resize.
    click = Action.click(7)
    for family, factor, point, back in (("qwen2.5-vl", 28, [131, 50], (131 * 640 / 644, 50 * 480 / 476)),
                                        ("qwen3-vl", 32, [203, 104], (203 * 640 / 1000, 104 * 480 / 1000))):
        fmt = make_format("computer_use", family)
        geometry = ImageGeometry.of(640, 480, factor, 56 * 56, 28 * 28 * 1280)
        action = format_action(click, BOX, fmt, geometry)
        assert action == Action.click_at(130.0, 50.0)
        text = fmt.render(action, geometry)
        assert text == ('<tool_call>{"name": "computer_use", "arguments": {"action": "left_click", '
                        f'"coordinate": {point}}}}}</tool_call>')
        # what executes is the text read back: the model point in screenshot pixels, within half a unit
        parsed = fmt.parse(text, geometry)
        assert (parsed.kind, parsed.x, parsed.y) == ("click_at", pytest.approx(back[0]), pytest.approx(back[1]))


def test_format_action_keeps_element_formats_and_drops_what_coordinates_cannot_say():
    fmt, som = make_format("computer_use", "qwen2.5-vl"), make_format("som")
    geometry = ImageGeometry.of(640, 480, 28, 56 * 56, 28 * 28 * 1280)
    assert format_action(Action.click(7), BOX, som, geometry) == Action.click(7)  # element ids stay
    assert format_action(Action.type_text("mug", 7), BOX, fmt, geometry) is None  # no "type into element k"
    assert format_action(Action.select(7, "L"), BOX, fmt, geometry) is None
    assert format_action(Action.scroll("down"), None, fmt, geometry) == Action.scroll("down")
    assert format_action(Action.click(7), None, fmt, geometry) is None  # no box to click on
    off_screen = SoMElement(8, (700.0, 10.0, 5.0, 5.0))
    assert format_action(Action.click(8), off_screen, fmt, geometry) is None


def test_box_centre_is_the_centre_of_the_visible_part():
    assert box_centre((100, 40, 60, 20), 640, 480) == (130.0, 50.0)
    # (600..680, 460..500) clipped to (600..640, 460..480): centre (620, 470)
    assert box_centre((600, 460, 80, 40), 640, 480) == (620.0, 470.0)
    assert box_centre((-20, -10, 40, 20), 640, 480) == (10.0, 5.0)  # (0..20, 0..10)
    assert box_centre((640, 0, 10, 10), 640, 480) is None  # touches the edge only
