"""The Shop's product catalogue: 240 products in 10 categories, generated from a world seed.

Every product has a brand, a price, a rating, a review count, colours and (for clothes,
shoes, watches, bottles, mugs) sizes. Products are the entities split into train and test
(`common.split_of` on the name): a task's target product is always from its own split.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from webrl.envs.sites.common import fuzzy_score, split_of

PER_CATEGORY = 24
# slug: (title, noun forms, brands, sizes, base price)
CATEGORIES = {
    "running-shoes": ("Running Shoes", ("Running Shoe", "Trail Runner", "Road Racer"),
                      ("Stridex", "Peakline", "Nordvik", "Altura", "Kinetic"),
                      ("38", "39", "40", "41", "42", "43", "44", "45"), 90),
    "t-shirts": ("T-Shirts", ("T-Shirt", "Crew Tee", "V-Neck Tee"),
                 ("Cottonfield", "Urbanite", "Nordvik", "Solene", "Basecamp"),
                 ("XS", "S", "M", "L", "XL"), 22),
    "jackets": ("Jackets", ("Rain Jacket", "Puffer Jacket", "Softshell Jacket"),
                ("Peakline", "Basecamp", "Fjellstad", "Urbanite", "Altura"),
                ("S", "M", "L", "XL", "XXL"), 140),
    "backpacks": ("Backpacks", ("Backpack", "Daypack", "Travel Pack"),
                  ("Basecamp", "Roamwell", "Fjellstad", "Kinetic", "Carryon"), (), 65),
    "headphones": ("Headphones", ("Wireless Headphones", "Earbuds", "Studio Headphones"),
                   ("Sonora", "Audiant", "Klangwerk", "Echo Labs", "Pulsewave"), (), 110),
    "mugs": ("Coffee Mugs", ("Ceramic Mug", "Travel Mug", "Espresso Cup"),
             ("Hearth & Co", "Claywork", "Morningside", "Solene", "Brewhaus"),
             ("250 ml", "350 ml", "450 ml"), 16),
    "lamps": ("Desk Lamps", ("Desk Lamp", "LED Lamp", "Reading Light"),
              ("Lumen", "Brightwell", "Hearth & Co", "Nordlys", "Arcline"), (), 45),
    "watches": ("Smartwatches", ("Smartwatch", "Fitness Tracker", "Sport Watch"),
                ("Pulsewave", "Kinetic", "Chronos", "Audiant", "Tempo"), ("40 mm", "44 mm"), 180),
    "bottles": ("Water Bottles", ("Water Bottle", "Insulated Flask", "Sports Bottle"),
                ("Roamwell", "Hydra", "Basecamp", "Claywork", "Peakline"),
                ("500 ml", "750 ml", "1 L"), 24),
    "hoodies": ("Hoodies", ("Hoodie", "Zip Hoodie", "Fleece Hoodie"),
                ("Cottonfield", "Urbanite", "Solene", "Fjellstad", "Nordvik"),
                ("XS", "S", "M", "L", "XL"), 55),
}
MODELS = ("Aero", "Trail", "Classic", "Urban", "Summit", "Pulse", "Nova", "Drift", "Terra",
          "Vista", "Flux", "Harbor", "Ember", "Glacier", "Metro", "Zephyr", "Orbit", "Canyon",
          "Breeze", "Atlas", "Cobalt", "Juniper", "Solstice", "Tundra", "Ridge", "Lumen")
COLOURS = ("Black", "White", "Navy", "Grey", "Red", "Green", "Blue", "Beige", "Olive", "Pink")
ADJECTIVES = ("lightweight", "durable", "comfortable", "everyday", "premium", "compact")


@dataclass(frozen=True)
class Product:
    id: int
    name: str
    brand: str
    category: str
    price: float
    rating: float
    reviews: int
    colours: tuple[str, ...]
    sizes: tuple[str, ...]
    description: str
    hue: int

    @property
    def split(self) -> str:
        return split_of(self.name, "shop")

    @property
    def category_title(self) -> str:
        return CATEGORIES[self.category][0]

    def search_text(self) -> str:
        return f"{self.name} {self.brand} {self.category_title}"


def _make_product(rng: random.Random, pid: int, slug: str, used: set[str]) -> Product:
    title, nouns, brands, sizes, base = CATEGORIES[slug]
    while True:
        brand, model, noun = rng.choice(brands), rng.choice(MODELS), rng.choice(nouns)
        name = f"{brand} {model} {noun}"
        if name not in used:
            used.add(name)
            break
    price = round(base * rng.uniform(0.55, 1.8)) - 0.01
    colours = tuple(sorted(rng.sample(COLOURS, rng.randint(2, 4)), key=COLOURS.index))
    chosen_sizes = tuple(sizes[i] for i in sorted(rng.sample(range(len(sizes)), max(2, len(sizes) - rng.randint(0, 2))))) if sizes else ()
    adjective = rng.choice(ADJECTIVES)
    article = "an" if adjective[0] in "aeiou" else "a"
    desc = (f"The {name} is {article} {adjective} pick from {brand}'s {title.lower()} range, "
            f"made for {rng.choice(('daily use', 'long trips', 'the office', 'weekends outdoors', 'the gym'))}.")
    return Product(pid, name, brand, slug, price, round(rng.uniform(2.5, 5.0), 1),
                   rng.randint(3, 2400), colours, chosen_sizes, desc, rng.randint(0, 359))


@lru_cache(maxsize=4)
def build_catalog(world_seed: int = 0) -> tuple[Product, ...]:
    rng = random.Random(f"shop-catalog-{world_seed}")
    used: set[str] = set()
    products = []
    for slug in CATEGORIES:
        for _ in range(PER_CATEGORY):
            products.append(_make_product(rng, 1000 + len(products), slug, used))
    return tuple(products)


@lru_cache(maxsize=4)
def catalog_index(world_seed: int = 0) -> dict[int, Product]:
    return {p.id: p for p in build_catalog(world_seed)}


SORTS = {"featured": "Featured", "price_asc": "Price: low to high",
         "price_desc": "Price: high to low", "rating": "Customer rating", "reviews": "Most reviewed"}
RATINGS = {"": "Any rating", "4.5": "4.5 stars & up", "4": "4 stars & up", "3.5": "3.5 stars & up",
           "3": "3 stars & up"}


def sort_products(products: list[Product], sort: str, seed: int = 0) -> list[Product]:
    """Deterministic orders; ties broken by id. "featured" is a per-episode shuffle."""
    if sort == "price_asc":
        return sorted(products, key=lambda p: (p.price, p.id))
    if sort == "price_desc":
        return sorted(products, key=lambda p: (-p.price, p.id))
    if sort == "rating":
        return sorted(products, key=lambda p: (-p.rating, -p.reviews, p.id))
    if sort == "reviews":
        return sorted(products, key=lambda p: (-p.reviews, p.id))
    return list(_featured(tuple(sorted(products, key=lambda p: p.id)), seed))


@lru_cache(maxsize=256)
def _featured(products: tuple[Product, ...], seed: int) -> list[Product]:
    """A per-episode order (shuffled by the episode seed) standing in for "featured"."""
    order = list(products)
    random.Random(f"featured-{seed}").shuffle(order)
    return order


def filter_products(products: list[Product], *, query: str = "", category: str = "",
                    brand: str = "", min_price: float | None = None, max_price: float | None = None,
                    min_rating: float | None = None) -> list[Product]:
    """The listing filters. `query` is fuzzy (case, plurals, small typos); with a query the
    relevance order (more matched tokens first) is kept for "featured"."""
    out = []
    for p in products:
        if category and p.category != category:
            continue
        if brand and p.brand != brand:
            continue
        if min_price is not None and p.price < min_price:
            continue
        if max_price is not None and p.price > max_price:
            continue
        if min_rating is not None and p.rating < min_rating:
            continue
        if query and fuzzy_score(query, p.search_text()) == 0:
            continue
        out.append(p)
    return out
