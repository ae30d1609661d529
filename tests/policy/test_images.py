"""smart_resize and visual-token counts."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as hf_smart_resize

from webrl.policy.images import ImageGeometry, image_token_count, smart_resize


def test_smart_resize_by_hand():
    # 1280x720 (W x H), factor 28, default max 1003520: 26*28=728, 46*28=1288, area 937664 fits.
    assert smart_resize(720, 1280, 28, 56 * 56, 28 * 28 * 1280) == (728, 1288)
    # factor 32: round(22.5)=22 -> 704, 40 -> 1280: area 901120 <= max 1003520.
    assert smart_resize(720, 1280, 32, 56 * 56, 28 * 28 * 1280) == (704, 1280)
    # above max: 1000x1000 with max 64*28*28 = 50176: beta = sqrt(1e6/50176) = 4.464,
    # 1000/4.464 = 224.0 -> floor(8.0)*28 = 224 on both sides (224*224 = 50176).
    assert smart_resize(1000, 1000, 28, 3136, 50176) == (224, 224)
    # below min: 10x10 with min 3136: beta = sqrt(3136/100) = 5.6 -> ceil(56/28)*28 = 56.
    assert smart_resize(10, 10, 28, 3136, 50176) == (56, 56)
    with pytest.raises(ValueError):
        smart_resize(1, 300, 28)


@given(h=st.integers(1, 4000), w=st.integers(1, 4000), factor=st.sampled_from([28, 32]),
       lo=st.integers(1, 300_000), span=st.integers(0, 3_000_000))
@settings(max_examples=300, deadline=None)
def test_smart_resize_matches_transformers(h, w, factor, lo, span):
    if max(h, w) / min(h, w) > 200:
        return
    mine = smart_resize(h, w, factor, lo, lo + span)
    assert mine == hf_smart_resize(h, w, factor, lo, lo + span)
    assert mine[0] % factor == 0 and mine[1] % factor == 0


def test_image_token_count_and_geometry():
    # 1288x728 resized, factor 28: (728/28) * (1288/28) = 26 * 46 = 1196 tokens
    assert image_token_count(1280, 720, 28, 3136, 28 * 28 * 1280) == 1196
    g = ImageGeometry.of(1280, 720, 28, 3136, 28 * 28 * 1280)
    assert g.to_model(640, 360, "resized") == (644, 364)
    assert g.to_screen(644, 364, "resized") == (640.0, 360.0)
    assert g.to_model(640, 360, "normalized_1000") == (500, 500)
    with pytest.raises(ValueError, match="coordinate space"):
        g.to_model(1, 1, "pixels")
