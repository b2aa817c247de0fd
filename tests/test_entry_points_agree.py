"""Every way of loading subscriptions stores the same thing.

One seeded set of random subscriptions goes in through each entry point: the API
(``Index.subscribe_many`` of expression text, the reference), ``pbtree subscribe --file``
on JSON Lines and on Parquet in both layouts, ``pbtree.bulk.build`` of text and of the
tuple form, and the Spark job ``pbtree build`` on predicate-layout Parquet. Every index
must hold the reference's (id, normalised expression) items and match random events as
the oracle does. Many subscriptions have several conjunctions ('or'; in the predicate
layout a ``group`` column), so a path that drops or misreads an input column (as
``subscribe --file`` once ignored ``group``, storing 'and' for 'or') stores other items.

A Parquet column has one type, so the subscriptions come in two parts, each written to
files of its own: integer ids with numeric constants, string ids with string constants.
Spark, slow to start, builds one part only: the string one (its predicate-layout path
writes plain strings into expression text itself, and sends quoted ones another way;
tests/test_spark.py builds numeric predicate layouts).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from oracle import oracle_match
from test_cli import jsonl, run

import pbtree
from pbtree import bulk
from pbtree.expr import format_predicates

SEED = 2024
SHARDS = 2
#: two nested (dotted) names; every attribute takes numbers and strings alike
ATTRS = ["price", "size", "brand", "user.age", "user.name"]
NUMBERS = [-2, -0.5, 0, 1, 2, 2.5, 3, 7, 10.25]
#: a quote and a space make the Spark job's predicate layout take its slow path
STRINGS = ["", "a", "ab", "abc", "b", "é", "it's", "x y"]
COMPARE = ["=", "!=", "<", "<=", ">", ">="]
FAMILIES = {"numbers": (NUMBERS, pa.float64()), "strings": (STRINGS, pa.string())}
SUBS_PER_PART = 40
EVENTS = 30

Id = int | str
Predicate = tuple[str, str, object]
Conjunctions = list[list[Predicate]]


@dataclass
class Dataset:
    """The subscriptions, per part (``FAMILIES``), as conjunctions of predicates."""

    parts: dict[str, dict[Id, Conjunctions]]
    directory: Path

    def all(self) -> dict[Id, Conjunctions]:
        return {i: conjs for part in self.parts.values() for i, conjs in part.items()}


def random_predicate(rng: random.Random, family: str) -> Predicate:
    """Any operator of the family (prefix for strings only), constants of its family."""
    values = FAMILIES[family][0]
    op = rng.choice(COMPARE * 2 + ["in", "not in", "between"] + ["prefix"] * (family == "strings"))
    if op in ("in", "not in"):
        value: object = tuple(rng.sample(values, rng.randint(1, 3)))
    elif op == "between":  # now and then low > high: never true, yet stored
        value = (rng.choice(values), rng.choice(values))
    elif op == "prefix":
        value = rng.choice(["", "a", "ab", "é"])
    else:
        value = rng.choice(values)
    return rng.choice(ATTRS), op, value


def random_dataset(directory: Path) -> Dataset:
    """About half the subscriptions of each part have 2 or 3 conjunctions."""
    rng = random.Random(SEED)
    int_ids = rng.sample(range(-1000, 1000), SUBS_PER_PART - 2) + [2**63 - 1, -(2**63 - 1)]
    str_ids = ["", "42", "é-1", "with space"] + [f"s{n}" for n in range(SUBS_PER_PART - 4)]
    parts = {}
    for family, ids in (("numbers", int_ids), ("strings", str_ids)):
        parts[family] = {sub_id: [[random_predicate(rng, family)
                                   for _ in range(rng.randint(1, 3))]
                                  for _ in range(rng.choice([1, 1, 2, 3]))]
                         for sub_id in ids}
    return Dataset(parts, directory)


def text(conjs: Conjunctions) -> str:
    """Expression text: the conjunctions joined by 'or', each in parentheses."""
    if len(conjs) == 1:
        return format_predicates(conjs[0])
    return " or ".join(f"({format_predicates(conj)})" for conj in conjs)


def tuple_form(conjs: Conjunctions) -> list:
    """The (attribute, op, value) list form, several conjunctions as an ("or", …) item."""
    return list(conjs[0]) if len(conjs) == 1 else [("or", *conjs)]


def predicate_table(subs: dict[Id, Conjunctions], family: str,
                    rng: random.Random) -> pa.Table:
    """The predicate layout with a ``group`` column: one row per predicate, a group
    number per conjunction (not 0, 1, …), the rows of all ids shuffled together."""
    rows = []
    for sub_id, conjs in subs.items():
        for group, conj in zip(rng.sample(range(100), len(conjs)), conjs, strict=True):
            rows += [(sub_id, attr, op, list(value) if isinstance(value, tuple) else [value],
                      group) for attr, op, value in conj]
    rng.shuffle(rows)
    columns = list(zip(*rows, strict=True))
    return pa.table({"id": columns[0], "attr": columns[1], "op": columns[2],
                     "value": pa.array(columns[3], pa.list_(FAMILIES[family][1])),
                     "group": columns[4]})


def random_event(rng: random.Random) -> dict:
    """Each attribute absent now and then, else a number or a string; a dotted one mostly
    as a nested object, sometimes as a literal dotted key."""
    event: dict = {"other": rng.choice(NUMBERS)}
    for attr in ATTRS:
        if rng.random() < 0.3:
            continue
        value = rng.choice(NUMBERS + STRINGS)
        if "." in attr and rng.random() < 0.8:
            outer, inner = attr.split(".")
            event.setdefault(outer, {})[inner] = value
        else:
            event[attr] = value
    return event


# ---------------------------------------------------------------------------------------
# the entry points: each loads the dataset (the Spark build one part) into a new index at
# ``path``


def created(path: Path) -> Path:
    """A new empty index for ``pbtree subscribe --file``."""
    pbtree.create(path, shards=SHARDS).close()
    return path


def load_api(data: Dataset, path: Path) -> None:
    with pbtree.create(path, shards=SHARDS) as index:
        index.subscribe_many((i, text(c)) for i, c in data.all().items())


def load_cli_jsonl(data: Dataset, path: Path) -> None:
    """Ids of both types in one file; every other line in the tuple form (JSON lists)."""
    rows = [{"id": i, "expr": tuple_form(c) if n % 2 else text(c)}
            for n, (i, c) in enumerate(data.all().items())]
    run("subscribe", created(path), "--file", jsonl(data.directory / "subs.jsonl", rows),
        "--batch", 16)


def load_cli_expression_parquet(data: Dataset, path: Path) -> None:
    created(path)
    for family, subs in data.parts.items():
        src = data.directory / f"expr-{family}.parquet"
        pq.write_table(pa.table({"id": list(subs), "expr": [text(c) for c in subs.values()]}),
                       src)
        run("subscribe", path, "--file", src, "--batch", 16)


def predicate_file(data: Dataset, family: str) -> Path:
    """One part in the predicate layout, in several row groups."""
    src = data.directory / f"preds-{family}.parquet"
    rng = random.Random(f"{SEED}-{family}")
    pq.write_table(predicate_table(data.parts[family], family, rng), src, row_group_size=50)
    return src


def load_cli_predicate_parquet(data: Dataset, path: Path) -> None:
    created(path)
    for family in data.parts:
        run("subscribe", path, "--file", predicate_file(data, family), "--batch", 16)


def load_bulk_text(data: Dataset, path: Path) -> None:
    bulk.build(path, [(i, text(c)) for i, c in data.all().items()], shards=SHARDS)


def load_bulk_tuples(data: Dataset, path: Path) -> None:
    bulk.build(path, [(i, tuple_form(c)) for i, c in data.all().items()], shards=SHARDS)


def load_spark_predicate_parquet(data: Dataset, path: Path) -> None:
    run("-q", "build", predicate_file(data, "strings"), "-o", path, "--shards", SHARDS,
        "--spark-conf", "spark.sql.shuffle.partitions=2")


LOADERS: dict[str, Callable[[Dataset, Path], None]] = {
    "api": load_api,
    "cli-jsonl": load_cli_jsonl,
    "cli-parquet-expression": load_cli_expression_parquet,
    "cli-parquet-predicate": load_cli_predicate_parquet,
    "bulk-text": load_bulk_text,
    "bulk-tuples": load_bulk_tuples,
    "spark-parquet-predicate": load_spark_predicate_parquet,
}


@dataclass
class Loaded:
    path: Path
    ids: set[Id]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    data = random_dataset(tmp_path_factory.mktemp("inputs"))
    for part in data.parts.values():  # enough 'or' for a path that drops it to show
        assert sum(len(conjs) > 1 for conjs in part.values()) >= SUBS_PER_PART // 3
    return data


def _load(name: str, data: Dataset, tmp_path_factory: pytest.TempPathFactory) -> Loaded:
    """The index of an entry point, and the ids it was given: Spark builds one part."""
    path = tmp_path_factory.mktemp(name) / "index.pbt"
    LOADERS[name](data, path)
    return Loaded(path, set(data.parts["strings"] if "spark" in name else data.all()))


@pytest.fixture(scope="module")
def reference(dataset: Dataset, tmp_path_factory: pytest.TempPathFactory) -> Loaded:
    return _load("api", dataset, tmp_path_factory)


@pytest.fixture(scope="module", params=[
    *(name for name in LOADERS if name != "api" and "spark" not in name),
    *(pytest.param(name, marks=pytest.mark.slow) for name in LOADERS if "spark" in name)])
def loaded(request: pytest.FixtureRequest, dataset: Dataset,
           tmp_path_factory: pytest.TempPathFactory) -> Loaded:
    """The index of one entry point, built once for the tests of this module."""
    return _load(request.param, dataset, tmp_path_factory)


def stored(path: Path) -> list[tuple[Id, str]]:
    """(id, normalised expression) of every subscription, integer ids first."""
    with pbtree.open(path, readonly=True) as index:
        return sorted(index.items(), key=lambda item: (isinstance(item[0], str), item[0]))


def test_every_entry_point_stores_what_the_api_stores(loaded: Loaded, reference: Loaded) -> None:
    """Same ids, same normalised expressions ('or' kept as 'or')."""
    expected = [item for item in stored(reference.path) if item[0] in loaded.ids]
    assert stored(loaded.path) == expected


def check_matches(loaded: Loaded, dataset: Dataset) -> None:
    """Events over the same attributes, some missing, some nested, match the subscriptions
    an index was given as a brute-force evaluation of their text does."""
    model = {i: text(c) for i, c in dataset.all().items() if i in loaded.ids}
    rng = random.Random(SEED + 1)
    events = [random_event(rng) for _ in range(EVENTS)]
    with pbtree.open(loaded.path, readonly=True) as index:
        found = [index.match(event) for event in events]
    expected = [oracle_match(model, event) for event in events]
    wrong = [(event, got, want) for event, got, want in zip(events, found, expected, strict=True)
             if got != want]
    assert not wrong, (f"{len(wrong)} of {EVENTS} events match otherwise; the first "
                       f"(event, matched, oracle): {json.dumps(wrong[0])}")
    assert any(expected), "no event matches anything: the check would be vacuous"


def test_the_api_index_matches_as_the_oracle(reference: Loaded, dataset: Dataset) -> None:
    check_matches(reference, dataset)


def test_every_entry_point_matches_as_the_oracle(loaded: Loaded, dataset: Dataset) -> None:
    check_matches(loaded, dataset)
