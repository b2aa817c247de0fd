"""Where subscriptions wait for the trees, and how they reach them: pending subscriptions
(``pending``), staged runs (``staged``), postings as columns (``postings``), and a shard's
fold, merge and purge (``folds``)."""
