"""Screenshots of every site's main pages, stored as test artifacts under
<run_dir>/artifacts/sites/ (1280x1000, the recipe's viewport; a few at 640x480). The test
checks they rendered (HTTP 200, styled, not blank); a person looks at them."""
import os

import numpy as np
import pytest
from PIL import Image

from webrl.envs.sites.source import make_task
from webrl.envs.sites.travel.world import flights_for

PAGES = {
    "shop": ["/shop/", "/shop/c/running-shoes", "/shop/search?q=backpack&sort=price_asc", "/shop/p/1005",
             "ACTION:add", "/shop/cart", "ACTION:checkout-errors", "ACTION:order"],
    "travel": ["/travel/", "ACTION:autocomplete", "ACTION:calendar",
               "/travel/flights?from=LIS&to=OSL&date=2026-07-14&pax=2&cabin=economy&sort=price",
               "/travel/book/{fid}?pax=2&cabin=economy", "ACTION:booking"],
    "wiki": ["/wiki/", "/wiki/search?q=mount", "/wiki/page/{city}", "/wiki/page/{country}", "/wiki/category/city"],
    "widgets": ["/widgets/", "ACTION:widgets-form"],
}


def _act(page, name, base):
    if name == "add":
        page.goto(base + "/shop/p/1005")
        page.select_option("#size", index=1)
        page.select_option("#colour", index=1)
        page.fill("#quantity", "2")
        page.click("#add-to-cart")
    elif name == "checkout-errors":
        page.goto(base + "/shop/checkout")
        page.fill("#full_name", "Ana Silva")
        page.fill("#email", "ana-at-example")
        page.click("#place-order")
    elif name == "order":
        for field, value in (("#email", "ana@example.com"), ("#address", "12 Mill Road"), ("#city", "Porto"),
                             ("#postal_code", "4050-123")):
            page.fill(field, value)
        page.click("#place-order")
    elif name == "autocomplete":
        page.goto(base + "/travel/")
        page.locator("#from").press_sequentially("Li")
    elif name == "calendar":
        page.click("#from-option-LIS")
        page.click("#open-calendar")
    elif name == "booking":
        page.fill("#first_name", "Ana")
        page.fill("#last_name", "Silva")
        page.fill("#email", "ana@example.com")
        page.click("#confirm-booking")
    elif name == "widgets-form":
        task = make_task("widgets", 2, "train", 4)
        task.setup(page)
    page.wait_for_load_state("load")


@pytest.mark.browser
@pytest.mark.parametrize("site", list(PAGES))
def test_screenshots_of_main_pages(browser_session, run_dir, site):
    from webrl.envs.sites.wiki.world import build_world

    world = build_world()
    fills = {"fid": flights_for("LIS", "OSL", "2026-07-14")[0].id,
             "city": next(a.slug for a in world.values() if a.kind == "city"),
             "country": next(a.slug for a in world.values() if a.kind == "country")}
    out = os.path.join(run_dir, "artifacts", "sites")
    os.makedirs(out, exist_ok=True)
    for size in ((1280, 1000), (640, 480)):
        context = browser_session.new_context(size)
        page = context.new_page()
        task = make_task(site, 1, "train", 3)
        task.setup(page)  # a session of this site (seed 3)
        base = task.spec.start_url.split(f"/{site}/")[0]
        try:
            for k, entry in enumerate(PAGES[site]):
                if entry.startswith("ACTION:"):
                    _act(page, entry[7:], base)
                else:
                    response = page.goto(base + entry.format(**fills))
                    assert response.status == 200, entry
                path = os.path.join(out, f"{site}-{k:02d}-{size[0]}x{size[1]}.png")
                page.screenshot(path=path)
                pixels = np.asarray(Image.open(path).convert("L"), dtype=np.float32)
                # a blank or unstyled page has one or two grey levels; ours have text, borders, colour
                assert pixels.std() > 3 and len(np.unique(pixels)) > 30, f"{path} looks blank"
                assert page.evaluate("getComputedStyle(document.body).fontFamily") != "", path
        finally:
            task.teardown(page)
            context.close()
