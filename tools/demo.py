"""`make demo`: subscribe a few alerts through the API and match sample events."""

from __future__ import annotations

import tempfile
import time

import pbtree

SUBSCRIPTIONS = [
    ("cheap-acme", "price < 100 and brand = 'acme'"),
    ("running-shoes", "category = 'shoes' and title prefix 'Run' and size in (42, 43)"),
    ("mid-range", "price between 50 and 150 and rating >= 4"),
    ("not-red", "category = 'shoes' and color not in ('red', 'pink')"),
]
EVENTS = [
    {"price": 79, "brand": "acme", "rating": 4.5, "category": "shoes", "color": "red"},
    {"price": 120, "brand": "zeta", "rating": 4.1, "category": "shoes",
     "title": "Runner X", "size": 43, "color": "blue"},
]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, pbtree.create(f"{tmp}/demo.pbt") as index:
        index.subscribe_many(SUBSCRIPTIONS)
        for event in EVENTS:
            start = time.perf_counter()
            matches = index.match(event)
            took = (time.perf_counter() - start) * 1e3
            print(f"event {event}\n  matched in {took:.2f} ms:")
            for sub_id in matches:
                print(f"    {sub_id}: {index.get(sub_id)}")


if __name__ == "__main__":
    main()
