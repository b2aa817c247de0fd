"""The write path: a shard's writes (``writes``), the write transaction they run in
(``writer``), made of the allocator of new ids, the router of postings to packed trees,
deltas or PB+trees, and the paper's PB+tree insert, split and removal (``tree``)."""
