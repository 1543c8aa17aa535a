"""Hotness-driven tiering (the SUORA paper, §3.3, Algorithms 2 and 3; docs/tiering.rst).

The scratch mount records the reads it serves (``store_root/reads.log``); ``scratchkeeper
tierd`` counts them in SUORA's hotness table (:mod:`scratchkeeper.placement.hotness`), and
gives a file read often enough a replica in a faster performance class (``storage.pool_tiers``)
that the mount reads first, and takes it away again when the file cooled down or the class
filled up. Primaries are never moved.
"""
