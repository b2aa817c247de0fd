"""The read path: the snapshot a shard pins for matching (``pinning``), what it caches
(``snapshot``), the sources a match searches (``version``) and the search of the trees
(``matcher``, ``flat``), and a shard's reads (``reads``)."""
