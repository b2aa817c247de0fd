"""Sample data to play with: an e-commerce catalogue, shoppers' alerts and product events.

``ecommerce(n_subs, n_events, seed)`` is deterministic. Each alert is derived from one catalogue
product (so events of that product, or similar ones, match it); events are product listings
with a fresh price. ``write_subscriptions`` / ``write_events`` save them as Parquet or JSON Lines.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Sample", "ecommerce", "is_parquet_path", "write_events", "write_subscriptions"]

SubId = int | str
_LETTER = ("XS", "S", "M", "L", "XL", "XXL")
# category -> (brands, title words, sizes, price range)
_CATALOGUE: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple, tuple[int, int]]] = {
    "shoes": (("acme", "stride", "zeta", "northpeak", "kuro"),
              ("Trail Runner", "Road Racer", "Court Classic", "Hiking Boot", "Sandal"),
              tuple(range(36, 48)), (25, 240)),
    "jackets": (("northpeak", "fjell", "acme", "urbane"),
                ("Rain Shell", "Down Parka", "Fleece", "Softshell", "Denim Jacket"),
                _LETTER, (40, 420)),
    "t-shirts": (("urbane", "acme", "basics", "kuro"),
                 ("Crew Tee", "V-Neck Tee", "Graphic Tee", "Running Tee"),
                 _LETTER, (8, 60)),
    "headphones": (("sonique", "bassline", "acme", "kuro"),
                   ("Studio Over-Ear", "Sport Earbuds", "Noise Cancelling", "DJ Monitor"),
                   (), (15, 450)),
    "backpacks": (("fjell", "northpeak", "urbane"),
                  ("Daypack", "Travel Pack", "Laptop Backpack", "Trail Pack"),
                  (), (20, 260)),
}
_COLORS = ("black", "white", "grey", "navy", "red", "green", "blue", "pink", "beige", "orange")


@dataclass
class Sample:
    """Subscriptions as ``(id, expression text)`` and events as attribute -> value dicts."""

    subscriptions: list[tuple[SubId, str]]
    events: list[dict]


def _product(rng: random.Random) -> dict:
    category = rng.choice(list(_CATALOGUE))
    brands, titles, sizes, (low, high) = _CATALOGUE[category]
    item = {
        "category": category,
        "brand": rng.choice(brands),
        "title": f"{rng.choice(titles)} {rng.choice(('', 'Pro ', 'Lite ', 'X '))}"
                 f"{rng.randint(1, 9)}".replace("  ", " "),
        "price": round(rng.uniform(low, high), 2),
        "rating": round(rng.triangular(1.0, 5.0, 4.3), 1),
        "color": rng.choice(_COLORS),
        "in_stock": rng.random() < 0.85,
        "discount": rng.choice((0, 0, 0, 10, 15, 20, 30, 50)),
    }
    if sizes:
        item["shoe_size" if category == "shoes" else "size"] = rng.choice(sizes)
    return item


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _alert(rng: random.Random, item: dict) -> str:
    """An alert on the product's category and price plus three or four looser conditions."""
    preds = [f"category = {_quote(item['category'])}"]
    brands = _CATALOGUE[item["category"]][0]
    price = item["price"]
    picks = ["price", *rng.sample(("brand", "rating", "size", "color", "title", "stock",
                                   "discount"), rng.randint(3, 4))]
    for pick in picks:
        if pick == "brand":
            others = rng.sample([b for b in brands if b != item["brand"]], rng.randint(0, 2))
            names = ", ".join(_quote(b) for b in [item["brand"], *others])
            preds.append(f"brand in ({names})" if others else f"brand = {_quote(item['brand'])}")
        elif pick == "price":
            top = int(price * rng.uniform(1.0, 1.4)) + 1
            if rng.random() < 0.5:
                preds.append(f"price < {top}")
            else:
                preds.append(f"price between {int(price * rng.uniform(0.6, 1.0))} and {top}")
        elif pick == "rating":
            preds.append(f"rating >= {min(item['rating'], rng.choice((3.5, 4.0, 4.5)))}")
        elif pick == "size" and "shoe_size" in item:
            sizes = ", ".join(str(item["shoe_size"] + d) for d in (-1, 0, 1))
            preds.append(f"shoe_size in ({sizes})")
        elif pick == "size" and "size" in item:
            preds.append(f"size = {_quote(item['size'])}")
        elif pick == "color":
            avoid = rng.sample([c for c in _COLORS if c != item["color"]], rng.randint(1, 3))
            preds.append(f"color not in ({', '.join(map(_quote, avoid))})")
        elif pick == "title":
            preds.append(f"title prefix {_quote(item['title'].split()[0])}")
        elif pick == "stock":
            preds.append("in_stock = true")
        elif pick == "discount":
            preds.append(f"discount >= {item['discount'] or 10}")
    return " and ".join(preds)


def ecommerce(n_subs: int = 5000, n_events: int = 1000, seed: int = 0) -> Sample:
    """Shoppers' price/brand/size alerts over a product catalogue, and product events."""
    rng = random.Random(seed)
    catalogue = [_product(rng) for _ in range(max(50, n_subs // 10))]
    subs: list[tuple[SubId, str]] = [(n, _alert(rng, rng.choice(catalogue)))
                                     for n in range(1, n_subs + 1)]
    events = []
    for _ in range(n_events):
        item = dict(rng.choice(catalogue))
        item["price"] = round(item["price"] * rng.uniform(0.7, 1.1), 2)
        item["in_stock"] = rng.random() < 0.9
        events.append(item)
    return Sample(subs, events)


# ---------------------------------------------------------------------------------------
# writers


def is_parquet_path(path: str | Path) -> bool:
    return Path(path).suffix.lower() in (".parquet", ".pq")


def _id_type(ids: Sequence[SubId]):
    import pyarrow as pa

    kinds = {isinstance(i, str) for i in ids}
    if len(kinds) > 1:
        raise ValueError("a Parquet id column needs ids of one type (all ints or all strings)")
    return pa.string() if kinds == {True} else pa.int64()


def write_subscriptions(subs: Sequence[tuple[SubId, str]], path: str | Path) -> Path:
    """``(id, expression)`` pairs as Parquet (columns id, expr) or JSON Lines, by suffix."""
    path = Path(path)
    if is_parquet_path(path):
        import pyarrow as pa
        import pyarrow.parquet as pq

        ids = [s for s, _ in subs]
        table = pa.table({"id": pa.array(ids, _id_type(ids)),
                          "expr": pa.array([e for _, e in subs], pa.string())})
        pq.write_table(table, path)
        return path
    _write_jsonl(({"id": s, "expr": e} for s, e in subs), path)
    return path


def _column_type(name: str, values: Iterable[object]):
    import pyarrow as pa

    kinds = {type(v) for v in values if v is not None}
    if kinds <= {bool}:
        return pa.bool_()
    if kinds <= {int}:
        return pa.int64()
    if kinds <= {int, float}:
        return pa.float64()
    if kinds <= {str}:
        return pa.string()
    types = ", ".join(sorted(k.__name__ for k in kinds))
    raise ValueError(f"event attribute {name!r} mixes value types ({types}); Parquet needs one "
                     "type per column (write JSON Lines instead)")


def write_events(events: Sequence[Mapping], path: str | Path) -> Path:
    """Events as Parquet (one nullable column per attribute) or JSON Lines, by suffix."""
    path = Path(path)
    if is_parquet_path(path):
        import pyarrow as pa
        import pyarrow.parquet as pq

        names = list(dict.fromkeys(k for e in events for k in e))
        columns = {}
        for name in names:
            values = [e.get(name) for e in events]
            columns[name] = pa.array(values, _column_type(name, values))
        pq.write_table(pa.table(columns), path)
        return path
    _write_jsonl(events, path)
    return path


def _write_jsonl(rows: Iterable[Mapping], path: Path) -> None:
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
