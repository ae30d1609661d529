"""Set-of-Mark box -> merged visual token mapping, hand-computed, for Qwen2.5-VL and Qwen3-VL."""
import pytest
from PIL import Image as PILImage

from webrl.policy.cascade.heads import HeadsConfig, box_cells, box_token_indices, image_token_spans, merged_grid
from webrl.policy.images import smart_resize


def test_merged_grid():
    # image_grid_thw counts 14/16-px patches; merged tokens are 2 x 2 patches.
    assert merged_grid((1, 16, 24)) == (1, 8, 12)
    with pytest.raises(ValueError):
        merged_grid((1, 15, 24))


def test_box_cells_qwen25_by_hand():
    # 336 x 224 screenshot, factor 28: resized 336 x 224 itself -> 8 rows x 12 cols of 28 px.
    assert smart_resize(224, 336, 28, 1024, 96 * 28 * 28) == (224, 336)
    # Box x 60..110, y 30..70. Overlap: cols 60//28 = 2 .. ceil(110/28)-1 = 3; rows 30//28 = 1 ..
    # ceil(70/28)-1 = 2 -> cells 1*12+2 = 14, 15, 2*12+2 = 26, 27.
    assert box_cells([60, 30, 50, 40], (336, 224), (8, 12), "overlap") == [14, 15, 26, 27]
    # Centre mode: cell centres x = 28c + 14 in [60, 110) -> c = 2 (70), 3 (98); y = 28r + 14 in
    # [30, 70) -> r = 1 (42) only (70 is outside) -> cells 14, 15.
    assert box_cells([60, 30, 50, 40], (336, 224), (8, 12), "center") == [14, 15]
    # A 5-px box inside cell (r=0, c=0) covers no centre: falls back to the cell under its centre.
    assert box_cells([2, 2, 5, 5], (336, 224), (8, 12), "center") == [0]
    # Off-screen and clipped boxes.
    assert box_cells([400, 10, 20, 20], (336, 224), (8, 12)) == []
    assert box_cells([330, 220, 50, 50], (336, 224), (8, 12)) == [95]  # last cell, 7*12+11


def test_box_cells_qwen3_scaled_by_hand():
    # 640 x 384 screenshot, factor 32, max_pixels 320*192: beta = sqrt(640*384/61440) = 2
    # -> resized 320 x 192 -> 6 rows x 10 cols; a cell is 64 screenshot px.
    assert smart_resize(384, 640, 32, 1024, 320 * 192) == (192, 320)
    # Screenshot box x 140..200, y 80..180 = resized x 70..100, y 40..90:
    # cols 70//32 = 2 .. ceil(100/32)-1 = 3, rows 40//32 = 1 .. ceil(90/32)-1 = 2 -> 12, 13, 22, 23.
    assert box_cells([140, 80, 60, 100], (640, 384), (6, 10), "overlap") == [12, 13, 22, 23]
    # Centres (resized) x = 32c + 16 in [70, 100) -> c = 2 (80); y in [40, 90) -> r = 1 (48), 2 (80).
    assert box_cells([140, 80, 60, 100], (640, 384), (6, 10), "center") == [12, 22]


def test_image_token_spans_and_indices():
    # ids: 3 text tokens, 6 visual (grid 1 x 4 x 6 patches -> 2 x 3 merged), 2 text, 4 visual (1 x 4 x 4).
    V = 99
    ids = [1, 2, 3] + [V] * 6 + [4, 5] + [V] * 4 + [6]
    spans = image_token_spans(ids, V, [[1, 4, 6], [1, 4, 4]])
    assert spans == [(3, 6), (11, 4)]
    # Second image 2 x 2 cells over a 64 x 64 screenshot; box in the bottom-right quarter -> cell 3
    # -> prompt position 11 + 3 = 14.
    assert box_token_indices([[40, 40, 10, 10]], (64, 64), 11, [1, 4, 4]) == [[14]]
    with pytest.raises(ValueError):
        image_token_spans(ids, V, [[1, 4, 6]])  # four visual tokens unaccounted for


def _painted_tokens(processor, image, merge=2):
    """Merged tokens whose patches differ from a background patch (pixel_values rows 4k..4k+3)."""
    ip = processor.image_processor
    size = image.size[0] * image.size[1]
    px = ip(images=[image], size={"shortest_edge": size, "longest_edge": size}, return_tensors="pt")
    rows = px["pixel_values"]  # (patches, C * T * p * p), merged token k = patches 4k .. 4k+3
    bg = rows[0]  # the top-left patch is background in every image below
    differs = (rows - bg).abs().amax(-1) > 1e-6
    return px["image_grid_thw"][0].tolist(), sorted({i // merge ** 2 for i in differs.nonzero().flatten().tolist()})


@pytest.mark.parametrize("family,size,box", [
    ("qwen2.5-vl", (336, 224), (60, 30, 50, 40)),
    ("qwen2.5-vl", (336, 224), (150, 100, 20, 90)),
    ("qwen3-vl", (320, 192), (70, 40, 30, 50)),
    ("qwen3-vl", (320, 192), (200, 10, 90, 20)),
])
def test_box_cells_match_processor_patches(tiny_model_paths, family, size, box):
    """Paint a box on a plain screenshot (already a multiple of the factor: no resampling);
    the merged tokens whose pixels change are exactly the box's overlap cells."""
    from webrl.models import load_model

    _, processor = load_model(tiny_model_paths[family])
    image = PILImage.new("RGB", size, (240, 240, 240))
    x, y, w, h = box
    image.paste((200, 30, 30), (x, y, x + w, y + h))
    grid_thw, painted = _painted_tokens(processor, image)
    _, rows, cols = merged_grid(grid_thw)
    factor = {"qwen2.5-vl": 28, "qwen3-vl": 32}[family]
    assert (rows, cols) == (size[1] // factor, size[0] // factor)
    assert box_cells(box, size, (rows, cols), "overlap") == painted


def test_heads_config_validation():
    with pytest.raises(ValueError, match="query"):
        HeadsConfig(query="first")
    with pytest.raises(ValueError, match="kinds"):
        HeadsConfig(kinds=("click", "type"))
