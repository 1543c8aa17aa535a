"""Dry-run trace replay: what recovery and temporal replication would have done on a site's history.

Data flows one way: ``traces`` (text → records) → ``workload`` (records → jobs with input
size and stripes) and ``outages`` (failure records → OST outages) → ``scheduler`` (the
schedule and its event log) → ``replication`` (window decisions over that log) → ``metrics``
→ ``sweep`` / ``report``. ``run`` ties one configuration together.
"""

import os

#: Small trace excerpts shipped for the demo and the tests (provenance in data/README).
DATA_DIR = os.path.join(os.path.dirname(__file__), "data")
