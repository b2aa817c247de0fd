"""Every tunable threshold of pbtree, each with the reason for its value.

A threshold here is a number someone might change to trade speed, memory or latency:
when writes fold, merge and purge, which trees the matcher flattens, batch sizes, cache
bounds, idle times, default sizes. Changing one changes no byte of the format: an index
written with other values opens and matches the same.

Modules read them as ``config.NAME`` when they run (``from pbtree import config``), so a
test may ``monkeypatch.setattr(config, "NAME", value)``. Values taken as default
arguments (``NODE_BYTES``, ``DEFAULT_MAP_SIZE``, ``MAX_CONJUNCTIONS``, ``KEEP_NAMES``,
``CACHED_PAYLOADS``) are read once, when their module is imported.

What stays beside its code, on purpose:

- format constants, documented in docs/FORMAT.md: record layouts and structs, version
  numbers, database and meta key names, chunk sizes (``columns.CHUNK_BYTES``,
  ``records.ROW_CHUNK``, ``strids.SIZE``), node size bounds (``lists.MIN_NODE_BYTES``,
  ``lists.MAX_NODE_BYTES``), sid and set id bounds (``storage.meta.MAX_SID``,
  ``overflow.MAX_SET_ID``);
- limits the format or LMDB imposes: ``normalize.MAX_PREDICATES`` (the u16 counter),
  ``normalize.MAX_ATTR_BYTES``, ``ids.MAX_ID_BYTES``, ``records.MAX_KEY`` and
  ``storage.keys.MAX_CONST_BYTES`` (LMDB's 511-byte keys);
- facts rather than choices: ``core.FILES_PER_SHARD``, ``strids.APART_BYTES`` (measured
  costs), ``snapshot.FLATTENED_BEFORE`` and ``clusters.TIE`` (a state and a tie-break, no
  trade);
- checks of input, not trades: ``cli.streams.MAX_INT_DIGITS``, ``core.FILES_SPARE``,
  ``storage.errors.SHOWN`` (how much of a value an error message shows);
- the storage layer's own (``storage.env``: ``GROW_AT``, ``READER_CHECK_SECONDS``,
  ``MAX_READERS``): storage sits below pbtree and imports nothing from it.

This module imports nothing from pbtree or storage: every other module may import it.
"""

# --- write path: pending -> staged runs -> trees -------------------------------------------

#: pending sids from which a write folds them into a staged run: every matcher holds them
FOLD_AT = 10_000
#: staged sids from which a fold merges them into the trees, at the least: folds stay cheap
MERGE_AT = FOLD_AT
#: ... and per trees record: each merge rewrites every small tree, so wide schemas merge less
MERGE_PER_TREE = 32
#: ... but at most this many staged, as matching binary-searches every staged run
MERGE_MOST = 320_000
#: folds per merge when ``fold_at`` is given: a merge then carries a few folds' postings
MERGE_FOLDS = 4
#: removed sids from which a write purges their postings, at the least: a purge passes all trees
PURGE_AT = 1_000
#: ... and per live sid: the dead ones' postings cost matching a little until purged
PURGE_SHARE = 1 / 16
#: list nodes' worth of bytes a packed tree may take: its rewrite costs what node writes would
PACKED_NODES = 4
#: committed sids whose postings this process keeps for its next fold: twice a fold's worth
RECENT_KEPT = 2 * FOLD_AT
#: subs records decoded at a time: bigger pieces pinned new pymalloc arenas, none faster
GROUP_RECORDS = 256
#: the smallest batch normalised in array steps: their ~0.6 ms outweighs ~120 one by one
BATCH_AT = 128
#: attribute names a batch normaliser keeps (~150 bytes each): ~5 MB at the most
KEEP_NAMES = 1 << 15
#: constants' payloads remembered (folds and pending reads meet the same ones over and over)
CACHED_PAYLOADS = 1 << 14
#: ... for strings up to this many characters only, so that cache stays a few MB
CACHED_CHARS = 64

# --- access predicates: selectivity estimates ----------------------------------------------

#: the chance an equality holds for want of statistics: one of an attribute's ~100 values
EQ_SHARE = 0.01
#: ... that a range (<, <=, >, >=) holds: a third of the domain
RANGE_SHARE = 0.3
#: payloads an estimate samples per attribute and family: shares in steps of ~1/1000
SAMPLE_KEYS = 1024
#: estimates kept made, at most: writes meet the same predicates often
KNOWN_MOST = 1 << 16
#: candidates an event's value must bring fewer for its attribute's interval levels to pay
#: one more tree search (``clusters.worth_levels``): on 1M ``ranges`` levels this rule
#: gave 200-350 a search matched no faster; on ``products`` (2,600-4,400) 1.61x faster
LEVEL_SEARCH = 1000

# --- read path: snapshots and matching -----------------------------------------------------

#: commits a write may follow a pinned snapshot by and keep it: renewing beats ~20 ms re-reads
KEEP_PINNED = 8
#: seconds a snapshot that commits have followed may stay pinned unused (it pins old pages)
IDLE_SECONDS = 2.0
#: commits of other processes after which an unused snapshot is released sooner ...
RELEASE_BEHIND = 4
#: ... once unused this many seconds (a reader between two matches is not idle)
BEHIND_IDLE_SECONDS = 0.1
#: seconds between two looks at the shards for idle snapshots: cheap, and well under those
IDLE_TICK = 0.05
#: seconds between two looks at whether the index directory was replaced (a stat each)
REPLACED_CHECK_SECONDS = 1.0
#: walks of a tree in one snapshot before it is flattened: flattening costs a few walks
FLATTEN_AFTER = 8
#: trees a snapshot flattens, at most: ~3 KB each keeps the matcher's memory small
MAX_FLAT = 2048
#: overflow EQ sets a snapshot keeps in flattened trees, at most: ~500 bytes each
MAX_EQUAL = 8192
#: candidates left from which rows are checked in one go: each row step costs ~12 array calls
FEW_CANDIDATES = 512
#: the most integers per value that ``pending.ranked_distinct`` spans with a table, not a sort
TABLE_SPAN = 8
#: share of sids more a per-sid table takes when grown: copied once per eighth, not per chunk
TABLE_ROOM = 1 / 8
#: share of string ids a string id table's width may leave to be held apart
APART_SHARE = 1 / 64
#: levels of nested objects read below an event's own keys: bounds what one event costs
MAX_DEPTH = 16

# --- storage -------------------------------------------------------------------------------

#: a new index's list node capacity: a hot list comes in a quarter the arrays of 4 KiB nodes
NODE_BYTES = 16384
#: a new shard's LMDB map: small for small indexes, as writes double it when nearly full
DEFAULT_MAP_SIZE = 64 << 20

# --- expressions ---------------------------------------------------------------------------

#: conjunctions an expression may expand to (DNF), by default: each is stored as an entry
MAX_CONJUNCTIONS = 64
#: levels of parentheses, 'not' and tuple groups an expression may nest: the parser recurses
MAX_NESTING = 100
#: literal texts the expression parser remembers parsed, at most: parsing one costs a regex
LITERALS_CACHED = 4096
#: ... of this many characters at most, so that cache stays well under 1 MB
LITERAL_CHARS = 100

# --- the pbtree command --------------------------------------------------------------------

#: subscriptions per transaction (``--batch``): a commit's fixed cost (a sync) shared by many
SUB_BATCH = 10_000
#: events matched together (``--batch``): the array steps' fixed cost shared by many
EVENT_BATCH = 1000
#: Parquet rows decoded at a time: the memory of a batch, not of the file
READ_ROWS = 1000
#: events ``recluster --events`` reads at most (``--sample``): estimates need no more
SAMPLE_EVENTS = 10_000
