"""Shop routes (Flask blueprint, mounted at /shop): home, search and category listings with
filters / sorting / pagination, product pages with size and colour variants, cart, checkout
with validation errors, order confirmation. All state lives in this session's `ShopState`.
`/shop/api/search?q=` is the JSON behind the `search_catalog` tool (`webrl.envs.tools`)."""
from __future__ import annotations

import re
from typing import Optional

from flask import Blueprint, abort, jsonify, redirect, render_template, request, url_for

from webrl.envs.sites.server import current_state
from webrl.envs.sites.shop.catalog import (CATEGORIES, RATINGS, SORTS, build_catalog, catalog_index,
                                           filter_products, sort_products)

blueprint = Blueprint("shop", __name__, url_prefix="/shop", template_folder="templates",
                      static_folder="static")
PAGE_SIZE = 12
API_RESULTS = 10
SHIPPING = {"standard": ("Standard (3-5 days)", 4.99), "express": ("Express (1-2 days)", 14.99)}
CHECKOUT_FIELDS = ("full_name", "email", "address", "city", "postal_code")


def _float(value: Optional[str]) -> Optional[float]:
    try:
        return float(value) if value not in (None, "") else None
    except ValueError:
        return None


def _line_key(pid: int, size: str, colour: str) -> str:
    return f"{pid}|{size}|{colour}"


def cart_lines(cart: dict) -> list[dict]:
    index = catalog_index()
    return [{"key": _line_key(pid, size, colour), "product": index[pid], "size": size,
             "colour": colour, "qty": qty, "total": round(index[pid].price * qty, 2)}
            for (pid, size, colour), qty in cart.items()]


def _common():
    state = current_state()
    return {"cart_count": sum(state.shop.cart.values()), "categories": CATEGORIES}


@blueprint.get("/")
def home():
    state = current_state()
    featured = sort_products(list(build_catalog()), "featured", state.seed)[:8]
    return render_template("shop/home.html", featured=featured, **_common())


@blueprint.get("/search")
@blueprint.get("/c/<category>")
def listing(category: str = ""):
    if category and category not in CATEGORIES:
        abort(404)
    args = request.args
    query = args.get("q", "").strip()
    category = category or (args.get("category", "") if args.get("category", "") in CATEGORIES else "")
    brand, sort = args.get("brand", ""), args.get("sort", "featured")
    sort = sort if sort in SORTS else "featured"
    min_price, max_price = _float(args.get("min_price")), _float(args.get("max_price"))
    min_rating = _float(args.get("min_rating"))
    state = current_state()
    base = filter_products(list(build_catalog()), query=query, category=category)
    brands = sorted({p.brand for p in base})
    items = sort_products(filter_products(base, brand=brand, min_price=min_price, max_price=max_price,
                                          min_rating=min_rating), sort, state.seed)
    pages = max(1, -(-len(items) // PAGE_SIZE))
    page = min(max(1, int(args.get("page", "1")) if args.get("page", "1").isdigit() else 1), pages)
    state.shop.listings.append({"q": query, "category": category, "brand": brand, "sort": sort,
                                "min_price": args.get("min_price", ""), "max_price": args.get("max_price", ""),
                                "min_rating": args.get("min_rating", ""), "page": str(page)})
    keep = {k: v for k, v in args.items() if k != "page" and v}
    title = CATEGORIES[category][0] if category else (f'Results for "{query}"' if query else "All products")
    return render_template("shop/listing.html", items=items[(page - 1) * PAGE_SIZE: page * PAGE_SIZE],
                           total=len(items), page=page, pages=pages, title=title, query=query,
                           category=category, brand=brand, brands=brands, sort=sort, sorts=SORTS,
                           ratings=RATINGS, min_rating=args.get("min_rating", ""),
                           min_price=args.get("min_price", ""), max_price=args.get("max_price", ""),
                           keep=keep, endpoint=request.path, **_common())


@blueprint.get("/api/search")
def api_search():
    """The search tool's result: the first API_RESULTS products matching `q` (the listing's own
    filter, featured order), with their page URLs. Not logged as a listing visit."""
    query = request.args.get("q", "").strip()
    items = sort_products(filter_products(list(build_catalog()), query=query), "featured", current_state().seed)
    return jsonify(query=query, total=len(items), products=[
        {"name": p.name, "brand": p.brand, "category": p.category, "price": p.price, "rating": p.rating,
         "url": url_for("shop.product", pid=p.id, _external=True)} for p in items[:API_RESULTS]])


@blueprint.get("/p/<int:pid>")
def product(pid: int):
    item = catalog_index().get(pid)
    if item is None:
        abort(404)
    current_state().shop.viewed.append(pid)
    errors = request.args.getlist("error")
    return render_template("shop/product.html", p=item, errors=errors, **_common())


@blueprint.post("/cart/add")
def cart_add():
    form = request.form
    item = catalog_index().get(int(form.get("product_id", "0") or 0))
    if item is None:
        abort(400)
    size, colour, qty = form.get("size", ""), form.get("colour", ""), form.get("quantity", "1").strip()
    errors = []
    if item.sizes and size not in item.sizes:
        errors.append("Please choose a size.")
    if colour not in item.colours:
        errors.append("Please choose a colour.")
    if not qty.isdigit() or not 1 <= int(qty) <= 10:
        errors.append("Quantity must be a whole number from 1 to 10.")
    if errors:
        return redirect(url_for("shop.product", pid=item.id, error=errors))
    cart = current_state().shop.cart
    key = (item.id, size, colour)
    cart[key] = min(10, cart.get(key, 0) + int(qty))
    return redirect(url_for("shop.cart", added=item.name))


@blueprint.get("/cart")
def cart():
    lines = cart_lines(current_state().shop.cart)
    subtotal = round(sum(line["total"] for line in lines), 2)
    return render_template("shop/cart.html", lines=lines, subtotal=subtotal,
                           added=request.args.get("added", ""), **_common())


def _find_line(key: str) -> Optional[tuple[int, str, str]]:
    for line in current_state().shop.cart:
        if _line_key(*line) == key:
            return line
    return None


@blueprint.post("/cart/update")
def cart_update():
    line, qty = _find_line(request.form.get("key", "")), request.form.get("quantity", "").strip()
    if line is not None and qty.isdigit():
        if int(qty) == 0:
            current_state().shop.cart.pop(line)
        else:
            current_state().shop.cart[line] = min(10, int(qty))
    return redirect(url_for("shop.cart"))


@blueprint.post("/cart/remove")
def cart_remove():
    line = _find_line(request.form.get("key", ""))
    if line is not None:
        current_state().shop.cart.pop(line)
    return redirect(url_for("shop.cart"))


def validate_checkout(form: dict) -> dict[str, str]:
    """Field -> error message; empty when the order can be placed."""
    errors = {}
    labels = {"full_name": "Full name", "email": "Email", "address": "Street address",
              "city": "City", "postal_code": "Postal code"}
    for name in CHECKOUT_FIELDS:
        if not form.get(name, "").strip():
            errors[name] = f"{labels[name]} is required."
    if "email" not in errors and not re.fullmatch(r"[^@\s]+@[^@\s]+\.[a-z]{2,}", form["email"].strip(), re.I):
        errors["email"] = "Enter a valid email address."
    if "postal_code" not in errors and not re.fullmatch(r"[A-Za-z0-9 -]{3,10}", form["postal_code"].strip()):
        errors["postal_code"] = "Enter a valid postal code."
    if form.get("shipping", "standard") not in SHIPPING:
        errors["shipping"] = "Choose a shipping method."
    return errors


@blueprint.route("/checkout", methods=["GET", "POST"])
def checkout():
    state = current_state()
    lines = cart_lines(state.shop.cart)
    if not lines:
        return redirect(url_for("shop.cart"))
    form, errors = {name: "" for name in CHECKOUT_FIELDS} | {"shipping": "standard"}, {}
    if request.method == "POST":
        form = {k: request.form.get(k, "") for k in form}
        errors = validate_checkout(form)
        if not errors:
            order_id = f"NW{10000 + len(state.shop.orders) * 37 + state.seed % 997}"
            state.shop.orders.append({
                "id": order_id, "lines": [(pid, s, c, q) for (pid, s, c), q in state.shop.cart.items()],
                "fields": {k: form[k].strip() for k in CHECKOUT_FIELDS}, "shipping": form["shipping"]})
            state.shop.cart.clear()
            return redirect(url_for("shop.order", order_id=order_id))
    subtotal = round(sum(line["total"] for line in lines), 2)
    return render_template("shop/checkout.html", lines=lines, subtotal=subtotal, form=form,
                           errors=errors, shipping=SHIPPING, **_common())


@blueprint.get("/order/<order_id>")
def order(order_id: str):
    found = [o for o in current_state().shop.orders if o["id"] == order_id]
    if not found:
        abort(404)
    index = catalog_index()
    lines = [{"product": index[pid], "size": s, "colour": c, "qty": q} for pid, s, c, q in found[0]["lines"]]
    return render_template("shop/order.html", order=found[0], lines=lines,
                           shipping=SHIPPING[found[0]["shipping"]][0], **_common())
