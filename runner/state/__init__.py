"""Everything runner keeps on disk: the content-addressed object store, the SQLite journal and
its migrations, the paid-call ledger, records, the remote cache, collections, user edits,
thumbnail iterations and run folders, the canonical JSON every hash is taken of, and the
commands that look after it all (gc, verify, repair). Nothing here decides what to run."""
