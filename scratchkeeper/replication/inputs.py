"""The known inputs of compute jobs, read from the planner's tables.

Two sources (issue 5): files a stage-in job staged (``staged_files`` in state ``staged``, with
size and checksum) and explicit declarations (``#STAGEIN -input PATH``, ``submit --input PATH``:
``job_inputs``). Only files under the scratch root can be replicated; others are left out.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

from ..planner import records
from ..state import StateStore
from .decisions import InputFile, JobInputs

_QUERY = """
SELECT cj.job_id AS job_id, c.owner_uid AS owner_uid, sf.path AS path, sf.size AS size,
       sf.checksum AS checksum
  FROM temp.replication_jobs w
  JOIN chain_jobs cj ON cj.job_id = w.job_id AND cj.role = 'compute'
  JOIN chains c ON c.chain_id = cj.chain_id
  JOIN staged_files sf ON sf.chain_id = cj.chain_id
 WHERE sf.state = 'staged' AND sf.size IS NOT NULL
UNION ALL
SELECT cj.job_id, c.owner_uid, ji.path, NULL, NULL
  FROM temp.replication_jobs w
  JOIN chain_jobs cj ON cj.job_id = w.job_id AND cj.role = 'compute'
  JOIN chains c ON c.chain_id = cj.chain_id
  JOIN job_inputs ji ON ji.chain_id = cj.chain_id
"""


def job_inputs(store: StateStore, job_ids: Iterable[str], scratch_root: str
               ) -> tuple[dict[str, JobInputs], dict[str, str]]:
    """Inputs of each given job that has any, and the planner's checksum of each staged path."""
    records.open_records(store)
    root = posixpath.normpath(scratch_root).rstrip("/") + "/"
    with store.transaction() as tx:
        tx.execute("CREATE TEMP TABLE IF NOT EXISTS replication_jobs (job_id TEXT PRIMARY KEY)")
        tx.execute("DELETE FROM temp.replication_jobs")
        tx.executemany("INSERT OR IGNORE INTO temp.replication_jobs VALUES (?)",
                       [(str(j),) for j in job_ids])
        rows = tx.execute(_QUERY).fetchall()
        tx.execute("DELETE FROM temp.replication_jobs")
    files: dict[str, dict[str, InputFile]] = {}
    owners: dict[str, int] = {}
    checksums: dict[str, str] = {}
    for row in rows:
        path = posixpath.normpath(row["path"])
        if not path.startswith(root):
            continue
        owners[row["job_id"]] = row["owner_uid"]
        known = files.setdefault(row["job_id"], {})
        if path not in known or known[path].size is None:
            known[path] = InputFile(path, row["size"])
        if row["checksum"]:
            checksums[path] = row["checksum"]
    return ({job_id: JobInputs(job_id, owners[job_id], tuple(sorted(by_path.values(),
                                                                    key=lambda f: f.path)))
             for job_id, by_path in files.items()}, checksums)
