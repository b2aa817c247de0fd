"""The write path: a shard's writes (``writes``), the write transaction they run in
(``writer``), made of the allocator of new ids (``allocator``), the router of postings to
packed trees or PB+trees (``router``, and ``limits``: how large a packed tree may
grow), and the paper's PB+tree insert, split and removal (``tree``); ``wholetree`` builds
a tree whole, for writes and bulk builds."""
