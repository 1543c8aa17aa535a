"""The chain tables in the state store, and the only module that reads or writes them.

Component ``planner``: chains, their jobs, staged files (recovery metadata), declared inputs
and the endpoints data jobs staged from. Component ``chain-ends``: the chains whose stage-in
ended without staging, once the chain service confirmed their dependents ended. Component
``staging``: the transfers stage-ins recorded (what predictions learn from), the just-in-time
decisions, and the offloads at close with how far the mount's ``closes.log`` was read. The
planner, the chain service, recovery and replication call the functions here; the schema is
this module's own.

Also the record of a staged file's sources that recovery trusts (:func:`write_recovery_record`):
``trusted.scratchkeeper.*`` extended attributes on the file's inode, which only root can write
or read (the kernel refuses ``trusted.*`` to anyone without ``CAP_SYS_ADMIN``, through the
mount and on the MDT alike), and the ``scheme://host:port`` of every source a data job staged
from (table ``source_endpoints``, recovery's default allow-list).
"""

from __future__ import annotations

import ipaddress
import json
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import asdict

from ..state import StateStore
from .plan import Plan

COMPONENT = "planner"

MIGRATIONS = [
    """
    CREATE TABLE chains (
        chain_id    TEXT PRIMARY KEY,
        script_path TEXT NOT NULL,
        workdir     TEXT NOT NULL,
        scheduler   TEXT NOT NULL,
        owner_uid   INTEGER NOT NULL,
        state       TEXT NOT NULL,
        reason      TEXT NOT NULL DEFAULT '',
        created     REAL NOT NULL,
        updated     REAL NOT NULL,
        plan_json   TEXT NOT NULL
    );
    CREATE TABLE chain_jobs (
        chain_id    TEXT NOT NULL REFERENCES chains(chain_id) ON DELETE CASCADE,
        job_key     TEXT NOT NULL,
        role        TEXT NOT NULL,
        queue       TEXT NOT NULL,
        position    INTEGER NOT NULL,
        job_id      TEXT,
        state       TEXT NOT NULL,
        reason      TEXT NOT NULL DEFAULT '',
        failed_line INTEGER,
        log_path    TEXT,
        updated     REAL NOT NULL,
        PRIMARY KEY (chain_id, job_key)
    );
    CREATE INDEX chain_jobs_by_job_id ON chain_jobs(job_id);
    CREATE TABLE staged_files (
        chain_id    TEXT NOT NULL REFERENCES chains(chain_id) ON DELETE CASCADE,
        path        TEXT NOT NULL,
        job_key     TEXT NOT NULL,
        source      TEXT NOT NULL,
        line        INTEGER NOT NULL,
        recursive   INTEGER NOT NULL DEFAULT 0,
        state       TEXT NOT NULL,
        size        INTEGER,
        checksum    TEXT,
        owner_uid   INTEGER,
        owner_gid   INTEGER,
        staged_at   REAL,
        PRIMARY KEY (chain_id, path)
    );
    CREATE INDEX staged_files_by_path ON staged_files(path);
    CREATE TABLE job_inputs (
        chain_id    TEXT NOT NULL REFERENCES chains(chain_id) ON DELETE CASCADE,
        path        TEXT NOT NULL,
        PRIMARY KEY (chain_id, path)
    );
    """,
    # where the site's data jobs staged from: recovery's allow-list when the site sets none
    """
    CREATE TABLE source_endpoints (
        endpoint    TEXT PRIMARY KEY,
        first_used  REAL NOT NULL,
        last_used   REAL NOT NULL
    );
    """,
]

#: the chain service's record of a chain it ended (:mod:`scratchkeeper.chain_service.settle`)
CHAIN_ENDS_COMPONENT = "chain-ends"
CHAIN_ENDS_MIGRATIONS = [
    """
    CREATE TABLE chain_ends (
        chain_id    TEXT PRIMARY KEY REFERENCES chains(chain_id) ON DELETE CASCADE,
        outcome     TEXT NOT NULL,
        settled     REAL NOT NULL
    );
    """,
]

#: transfers recorded by stage-ins, just-in-time decisions (:mod:`.jit`), offloads at close
#: (:mod:`scratchkeeper.chain_service.offload`)
STAGING_COMPONENT = "staging"

STAGING_MIGRATIONS = [
    """
    CREATE TABLE transfers (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        chain_id    TEXT NOT NULL,
        job_key     TEXT NOT NULL,
        host        TEXT NOT NULL,
        bytes       INTEGER NOT NULL,
        seconds     REAL NOT NULL,
        started     REAL NOT NULL,
        owner_uid   INTEGER,
        UNIQUE (chain_id, job_key, host)
    );
    CREATE INDEX transfers_by_host ON transfers(host, started);
    CREATE TABLE jit_schedule (
        chain_id        TEXT NOT NULL,
        job_key         TEXT NOT NULL,
        job_id          TEXT NOT NULL,
        compute_id      TEXT NOT NULL,
        scheduler       TEXT NOT NULL,
        bytes           INTEGER,
        predicted       REAL,
        pessimistic     REAL,
        expected_start  REAL,
        estimate_source TEXT NOT NULL DEFAULT '',
        release_at      REAL,
        state           TEXT NOT NULL,
        reason          TEXT NOT NULL DEFAULT '',
        decided         REAL NOT NULL,
        released        REAL,
        PRIMARY KEY (chain_id, job_key)
    );
    CREATE INDEX jit_schedule_by_state ON jit_schedule(state);
    """,
    """
    CREATE TABLE close_log (
        name        TEXT PRIMARY KEY,
        offset      INTEGER NOT NULL
    );
    CREATE TABLE offloads (
        chain_id    TEXT NOT NULL,
        path        TEXT NOT NULL,
        size        INTEGER NOT NULL,
        mtime       TEXT NOT NULL,
        destination TEXT NOT NULL,
        job_name    TEXT NOT NULL,
        job_id      TEXT,
        state       TEXT NOT NULL,
        digest      TEXT,
        reason      TEXT NOT NULL DEFAULT '',
        closed      REAL NOT NULL,
        submitted   REAL,
        ended       REAL,
        PRIMARY KEY (chain_id, path, size, mtime)
    );
    CREATE INDEX offloads_by_state ON offloads(state);
    """,
    # issue 34: each structured transfer of a stage-in as its data job timed it (one directive
    # line: a file, or a folder's files), what predictions fit; ``transfers`` stays as it was
    """
    CREATE TABLE transfer_timings (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        chain_id    TEXT NOT NULL,
        job_key     TEXT NOT NULL,
        line        INTEGER NOT NULL,
        host        TEXT NOT NULL,
        client      TEXT NOT NULL,
        bytes       INTEGER NOT NULL,
        files       INTEGER NOT NULL,
        seconds     REAL NOT NULL,
        finished    REAL NOT NULL,
        owner_uid   INTEGER,
        UNIQUE (chain_id, job_key, line)
    );
    CREATE INDEX transfer_timings_by_host ON transfer_timings(host, client, finished);
    CREATE INDEX transfer_timings_by_client ON transfer_timings(client, finished);
    """,
]

# chain states
PLANNED, SUBMITTING, SUBMITTED, SUBMIT_FAILED = "planned", "submitting", "submitted", "submit-failed"
STAGE_IN_FAILED, STAGE_OUT_FAILED = "stage-in-failed", "stage-out-failed"
#: the state of a chain Slurm's burst buffer runs (burst_buffer.records.CHAIN_STATE): its
#: compute job is the burst-buffer job, which its own data_in ends
BURST_BUFFER = "burst-buffer"
# chain job states
JOB_PLANNED, JOB_SUBMITTED, JOB_CANCELLED = "planned", "submitted", "cancelled"
JOB_DONE, JOB_FAILED = "done", "failed"


def open_records(store: StateStore) -> StateStore:
    before = store.schema_version(COMPONENT)
    store.ensure_schema(COMPONENT, MIGRATIONS)
    if 0 < before < 2:
        # the endpoints of what was committed before the table existed (idempotent: two
        # processes migrating at once insert the same rows)
        sources = {row["source"] for row in store.query(
            "SELECT DISTINCT source FROM staged_files WHERE state = 'staged'")}
        record_endpoints(store, sources)
    return store



def open_chain_ends(store: StateStore) -> StateStore:
    open_records(store)
    store.ensure_schema(CHAIN_ENDS_COMPONENT, CHAIN_ENDS_MIGRATIONS)
    return store


def open_staging(store: StateStore) -> StateStore:
    store.ensure_schema(STAGING_COMPONENT, STAGING_MIGRATIONS)
    return store


def made(store: StateStore, *tables: str) -> bool:
    """Whether every one of ``tables`` exists (default: the JIT schedule), in one query: a
    reader that may not create the tables asks first."""
    tables = tables or ("jit_schedule",)
    marks = ", ".join("?" * len(tables))
    rows = store.query(f"SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' "
                       f"AND name IN ({marks})", tables)
    return rows[0][0] == len(tables)

# -- the record recovery trusts -------------------------------------------------------------------
#: only root reads or writes these (CAP_SYS_ADMIN); the user.scratchkeeper.* copies are for users
TRUSTED_PREFIX = "trusted.scratchkeeper."
#: the names recovery reads: primary source, further sources (whitespace-separated), digest, size
RECORD_NAMES = ("source", "sources", "sha256", "size")
#: ports of a scheme when a URI names none
DEFAULT_PORTS = {"ftp": 21, "gsiftp": 2811, "http": 80, "https": 443}
LOCAL = "file://"


def recovery_record(source: str, sha256: str | None, size: int,
                    sources: Iterable[str] = ()) -> dict[str, bytes]:
    """The trusted attributes of a staged file (what :func:`write_recovery_record` sets)."""
    record = {TRUSTED_PREFIX + "source": source.encode(), TRUSTED_PREFIX + "size": str(size).encode()}
    if sha256:
        record[TRUSTED_PREFIX + "sha256"] = sha256.encode()
    extra = [s for s in sources if s and s != source]
    if extra:
        record[TRUSTED_PREFIX + "sources"] = "\n".join(extra).encode()
    return record


def write_recovery_record(backend, store: StateStore | None, path: str, *, source: str,
                          sha256: str | None, size: int, sources: Iterable[str] = ()) -> None:
    """Record, as root, where ``path`` came from: the attributes recovery reads (and nothing a
    user can change), and the sources' endpoints in ``store``. ``stage commit`` calls it; so
    do tools and tests that stage a file the way it does."""
    sources = list(sources)
    backend.set_xattrs(path, recovery_record(source, sha256, size, sources))
    if store is not None:
        record_endpoints(store, [source, *sources])


def source_endpoint(uri: str) -> str | None:
    """``scheme://host:port`` of a source URI (lower case, the scheme's port when it names
    none); ``file://`` for a local file; None for what recovery cannot fetch from."""
    if uri.startswith(("/", LOCAL)):
        return LOCAL
    try:
        parts = urllib.parse.urlsplit(uri)
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), parts.hostname
    if scheme not in DEFAULT_PORTS or not host:
        return None
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port or DEFAULT_PORTS[scheme]}"


def is_loopback(endpoint: str) -> bool:
    """Whether an endpoint names this machine (a data job's loopback is its node's, not the
    head node's)."""
    host = urllib.parse.urlsplit(endpoint).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified or address.is_link_local


#: endpoints kept in ``source_endpoints`` (the least recently used beyond are forgotten)
MAX_ENDPOINTS = 4096


def record_endpoints(store: StateStore, sources: Iterable[str]) -> None:
    endpoints = {e for e in map(source_endpoint, sources) if e is not None}
    if not endpoints:
        return
    now = time.time()
    with store.transaction() as conn:
        for endpoint in sorted(endpoints):
            conn.execute("INSERT INTO source_endpoints VALUES (?, ?, ?) ON CONFLICT(endpoint) "
                         "DO UPDATE SET last_used = excluded.last_used", (endpoint, now, now))
        # users name the endpoints: the table keeps the MAX_ENDPOINTS used last, not all
        conn.execute("DELETE FROM source_endpoints WHERE endpoint IN (SELECT endpoint FROM "
                     "source_endpoints ORDER BY last_used DESC, endpoint LIMIT -1 OFFSET ?)",
                     (MAX_ENDPOINTS,))


def endpoint_used(store: StateStore, endpoint: str) -> bool:
    """Whether a data job of the site staged from ``endpoint`` (recorded by stage commit)."""
    return bool(store.query("SELECT 1 FROM source_endpoints WHERE endpoint = ?", (endpoint,)))


def staged_record(store: StateStore, path: str, uid: int, size: int):
    """The newest committed row of ``path`` (source, checksum) for a file of ``uid`` of
    ``size`` bytes, or None: what recovery takes for a file committed before the trusted
    attributes existed (a row only root's commit writes; the owner and size must still match)."""
    rows = store.query("SELECT source, checksum FROM staged_files WHERE path = ? AND "
                       "state = 'staged' AND owner_uid = ? AND size = ? "
                       "ORDER BY staged_at DESC LIMIT 1", (path, uid, size))
    return rows[0] if rows else None


def record_plan(store: StateStore, plan: Plan, owner_uid: int, log_paths: dict[str, str]) -> None:
    """Write the chain, its jobs and its staged files as planned, in one transaction."""
    now = time.time()
    with store.transaction() as conn:
        conn.execute("INSERT INTO chains VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (plan.chain_id, plan.script_path, plan.workdir, plan.scheduler, owner_uid,
                      SUBMITTING, "", now, now, json.dumps(_plan_summary(plan))))
        for position, job in enumerate(plan.jobs):
            conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position, state,"
                         " log_path, updated) VALUES (?,?,?,?,?,?,?,?)",
                         (plan.chain_id, job.key, job.role, job.queue, position, JOB_PLANNED,
                          log_paths.get(job.key), now))
        for staged in plan.staged_files:
            conn.execute("INSERT OR REPLACE INTO staged_files(chain_id, path, job_key, source, line,"
                         " recursive, state) VALUES (?,?,?,?,?,?,?)",
                         (plan.chain_id, staged.path, staged.job_key, staged.source, staged.line,
                          int(staged.recursive), "planned"))
        for path in plan.inputs:
            conn.execute("INSERT OR IGNORE INTO job_inputs VALUES (?, ?)", (plan.chain_id, path))


def _plan_summary(plan: Plan) -> dict:
    return {"offloaded_files": [asdict(f) for f in plan.offloaded_files],
            "jobs": [{"key": j.key, "role": j.role, "name": j.name, "start": j.start,
                      "depends_on": [asdict(d) for d in j.depends_on]} for j in plan.jobs]}


def set_job_submitted(store: StateStore, chain_id: str, key: str, job_id: str) -> None:
    """Record ``job_id`` as the chain's job ``key``. An outcome the job recorded already stays:
    a job submitted unheld (Slurm's burst-buffer path) can run and record it before its
    submitter, slower (niced, a busy head node), records its id; written over, the outcome
    was lost and the stage-in waited for it for ever."""
    with store.transaction() as conn:
        conn.execute("UPDATE chain_jobs SET job_id=?, state=CASE WHEN state IN (?, ?) THEN state "
                     "ELSE ? END, updated=? WHERE chain_id=? AND job_key=?",
                     (job_id, JOB_DONE, JOB_FAILED, JOB_SUBMITTED, time.time(), chain_id, key))


def set_chain_state(store: StateStore, chain_id: str, state: str, reason: str = "") -> None:
    with store.transaction() as conn:
        conn.execute("UPDATE chains SET state=?, reason=?, updated=? WHERE chain_id=?",
                     (state, reason, time.time(), chain_id))


def set_jobs_state(store: StateStore, chain_id: str, keys: Iterable[str], state: str,
                   reason: str = "", failed_line: int | None = None) -> None:
    with store.transaction() as conn:
        for key in keys:
            conn.execute("UPDATE chain_jobs SET state=?, reason=?, failed_line=?, updated=? "
                         "WHERE chain_id=? AND job_key=?",
                         (state, reason, failed_line, time.time(), chain_id, key))


def chain(store: StateStore, chain_id: str):
    rows = store.query("SELECT * FROM chains WHERE chain_id=?", (chain_id,))
    return rows[0] if rows else None


def chain_of_job(store: StateStore, job_id: str):
    """The newest chain holding ``job_id``: a compute job the chain service chained again (its
    first chaining interrupted) is in the abandoned chain and in the one that replaced it."""
    rows = store.query("SELECT j.chain_id FROM chain_jobs j JOIN chains c ON c.chain_id = "
                       "j.chain_id WHERE j.job_id=? ORDER BY c.created DESC, c.rowid DESC "
                       "LIMIT 1", (job_id,))
    return rows[0]["chain_id"] if rows else None


def chain_jobs(store: StateStore, chain_id: str):
    return store.query("SELECT * FROM chain_jobs WHERE chain_id=? ORDER BY position", (chain_id,))


def staged_files(store: StateStore, chain_id: str, job_key: str | None = None):
    if job_key is None:
        return store.query("SELECT * FROM staged_files WHERE chain_id=? ORDER BY line, path",
                           (chain_id,))
    return store.query("SELECT * FROM staged_files WHERE chain_id=? AND job_key=? ORDER BY line, path",
                       (chain_id, job_key))


def recent_chains(store: StateStore, owner_uid: int | None, limit: int = 20):
    if owner_uid is None:
        return store.query("SELECT * FROM chains ORDER BY created DESC LIMIT ?", (limit,))
    return store.query("SELECT * FROM chains WHERE owner_uid=? ORDER BY created DESC LIMIT ?",
                       (owner_uid, limit))


def chains_in_state(store: StateStore, state: str):
    return store.query("SELECT * FROM chains WHERE state=?", (state,))


def declared_inputs(store: StateStore, chain_id: str) -> list[str]:
    """The paths a chain declared as its compute job's inputs (``#STAGEIN -input``,
    ``submit --input``)."""
    return [row["path"] for row in store.query("SELECT path FROM job_inputs WHERE chain_id = ?",
                                               (chain_id,))]


def mark_staged(store: StateStore, chain_id: str, path: str) -> None:
    """A staged row of a directory (``#STAGEIN -r``) whose files were all committed."""
    with store.transaction() as conn:
        conn.execute("UPDATE staged_files SET state='staged' WHERE chain_id=? AND path=?",
                     (chain_id, path))


def record_staged(store: StateStore, chain_id: str, path: str, *, job_key: str, line: int,
                  source: str, size: int, checksum: str, owner_uid: int, owner_gid: int) -> None:
    """A file a stage-in committed: its source, size, ``sha256:`` checksum and owner."""
    with store.transaction() as conn:
        conn.execute(
            "INSERT INTO staged_files(chain_id, path, job_key, source, line, recursive, state, size,"
            " checksum, owner_uid, owner_gid, staged_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT(chain_id, path) DO UPDATE SET state=excluded.state, size=excluded.size,"
            " checksum=excluded.checksum, owner_uid=excluded.owner_uid,"
            " owner_gid=excluded.owner_gid, staged_at=excluded.staged_at, source=excluded.source",
            (chain_id, path, job_key, source, line, 0, "staged", size, checksum, owner_uid,
             owner_gid, time.time()))


# -- what the chain service's sweep reads and records --------------------------------------------
def watched_chains(store: StateStore) -> list[str]:
    """Chains whose stage-in job was submitted and has not recorded its files, or that ended
    (stage-in failed) and are not yet in ``chain_ends``; oldest first."""
    rows = store.query(
        "SELECT DISTINCT c.chain_id FROM chains c JOIN chain_jobs j ON j.chain_id = c.chain_id "
        "WHERE j.role = 'stage-in' AND j.job_id IS NOT NULL "
        "AND ((c.state = ? AND j.state = ?) OR c.state = ?) "
        "AND c.chain_id NOT IN (SELECT chain_id FROM chain_ends) ORDER BY c.created",
        (SUBMITTED, JOB_SUBMITTED, STAGE_IN_FAILED))
    return [row["chain_id"] for row in rows]


def record_chain_end(store: StateStore, chain_id: str, outcome: str) -> None:
    """The chain's end is settled (its dependents confirmed ended): the sweep drops it."""
    with store.transaction() as conn:
        conn.execute("INSERT OR IGNORE INTO chain_ends VALUES (?, ?, ?)",
                     (chain_id, outcome, time.time()))


def record_stage_in_failed(store: StateStore, chain_id: str, failed: dict[str, str],
                           cancelled: Iterable[str], reason: str) -> bool:
    """In one transaction: the stage-in jobs ``failed`` (key -> why) failed, the jobs
    ``cancelled`` were cancelled, the chain's stage-in failed; unless the chain is no longer
    submitted (a ``stage fail`` recorded its end first: its reason is the better one).
    Whether it was recorded."""
    with store.transaction() as conn:
        state = conn.execute("SELECT state FROM chains WHERE chain_id = ?", (chain_id,)).fetchone()
        if state is None or state["state"] != SUBMITTED:
            return False
        for key, failure in failed.items():
            set_jobs_state(store, chain_id, [key], JOB_FAILED, failure)
        set_jobs_state(store, chain_id, cancelled, JOB_CANCELLED, "cancelled: " + reason)
        set_chain_state(store, chain_id, STAGE_IN_FAILED, reason)
    return True


# -- what `status` and `status --backlog` read -------------------------------------------------
#: chain states that end a chain: its data jobs have nothing left to do
ENDED_STATES = (SUBMIT_FAILED, STAGE_IN_FAILED, STAGE_OUT_FAILED)
# a chain replaced by a later one: the chain service chained its compute job again after the
# first chaining failed or was interrupted (attach._undo). The same owner, the same script, and
# a submit-failed first chain: a job id the scheduler handed out again since (a reset of its
# state) is not taken for a replacement.
_REPLACEMENTS = """
SELECT oj.chain_id AS chain_id, nc.chain_id AS replaced_by
  FROM chain_jobs oj
  JOIN chains oc ON oc.chain_id = oj.chain_id
  JOIN chain_jobs nj ON nj.job_id = oj.job_id AND nj.role = 'compute' AND nj.chain_id != oj.chain_id
  JOIN chains nc ON nc.chain_id = nj.chain_id
 WHERE oj.role = 'compute' AND oj.job_id IS NOT NULL AND oc.state = 'submit-failed'
   AND nc.owner_uid = oc.owner_uid AND nc.script_path = oc.script_path
   AND (nc.created > oc.created OR (nc.created = oc.created AND nc.rowid > oc.rowid))
   AND oj.chain_id IN ({marks})
 ORDER BY nc.created, nc.rowid
"""
#: ids per query: SQLite's default limit of host parameters is far above it
_QUERY_CHUNK = 500


def replacements(store: StateStore, chain_ids: Iterable[str]) -> dict[str, str]:
    """Chain id -> the newest chain that took over its compute job, for those replaced."""
    found: dict[str, str] = {}
    for chunk in _chunks(list(chain_ids)):
        for row in store.query(_REPLACEMENTS.format(marks=", ".join("?" * len(chunk))), chunk):
            found[row["chain_id"]] = row["replaced_by"]  # ordered oldest first: newest wins
    return found


def jobs_by_id(store: StateStore, job_ids: Iterable[str]):
    """Rows (job_id, chain_id, job_key, role, job_state, chain_state, chain_created,
    chain_updated, owner_uid, settled) of the chain jobs with these ids; ``settled``: when the
    chain service recorded the chain's end (``chain_ends``), None if not (or no such table)."""
    ends = made(store, "chain_ends")
    settled = ("(SELECT settled FROM chain_ends e WHERE e.chain_id = c.chain_id)" if ends
               else "NULL")
    out = []
    for chunk in _chunks([str(j) for j in job_ids]):
        out += store.query(
            f"SELECT j.job_id AS job_id, j.chain_id AS chain_id, j.job_key AS job_key, "
            f"j.role AS role, j.state AS job_state, c.state AS chain_state, "
            f"c.created AS chain_created, c.updated AS chain_updated, "
            f"c.owner_uid AS owner_uid, {settled} AS settled "
            f"FROM chain_jobs j JOIN chains c ON c.chain_id = j.chain_id "
            f"WHERE j.job_id IN ({', '.join('?' * len(chunk))})", chunk)
    return out


def offload_jobs_by_id(store: StateStore, job_ids: Iterable[str]):
    """Rows (job_id, chain_id, state) of the offload jobs with these ids."""
    if not made(store, "offloads"):
        return []
    out = []
    for chunk in _chunks([str(j) for j in job_ids]):
        out += store.query(f"SELECT job_id, chain_id, state FROM offloads WHERE job_id IN "
                           f"({', '.join('?' * len(chunk))})", chunk)
    return out


def chains_unfinished_submission(store: StateStore):
    """(state, count, oldest created) of chains still being planned or submitted: a chaining
    in progress, or one a crash left half done."""
    return store.query("SELECT state, COUNT(*) AS count, MIN(created) AS oldest FROM chains "
                       "WHERE state IN (?, ?) GROUP BY state ORDER BY state",
                       (PLANNED, SUBMITTING))


def jit_backlog(store: StateStore):
    """(count, next release) of the just-in-time stage-ins held back; None when no chain ever
    asked for one (the table does not exist)."""
    if not made(store, "jit_schedule"):
        return None
    return store.query("SELECT COUNT(*) AS count, MIN(release_at) AS next_release "
                       "FROM jit_schedule WHERE state = ?",
                       (WAITING,))[0]


def _chunks(values: list) -> list[list]:
    return [values[i:i + _QUERY_CHUNK] for i in range(0, len(values), _QUERY_CHUNK)]


# -- what replication reads: the inputs of compute jobs ------------------------------------------
_COMPUTE_INPUTS = """
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
# jobs whose chain changed since a time: a job id recorded (chain_jobs.updated) or a staged file
# committed (staged_files.staged_at); both are written with time.time()
_CHANGED_COMPUTE_JOBS = """
SELECT cj.job_id FROM chain_jobs cj
 WHERE cj.role = 'compute' AND cj.job_id IS NOT NULL
   AND (cj.updated >= :since
        OR cj.chain_id IN (SELECT chain_id FROM staged_files WHERE staged_at >= :since))
"""
_INPUT_COUNTS = """
SELECT (SELECT COUNT(*) FROM chain_jobs), (SELECT COUNT(*) FROM staged_files),
       (SELECT COUNT(*) FROM job_inputs)
"""


def compute_job_inputs(store: StateStore, job_ids: Iterable[str]):
    """One query: rows (job_id, owner_uid, path, size, checksum) of every staged file
    (size and checksum known) and declared input (both None) of the given compute jobs."""
    with store.transaction() as tx:
        tx.execute("CREATE TEMP TABLE IF NOT EXISTS replication_jobs (job_id TEXT PRIMARY KEY)")
        tx.execute("DELETE FROM temp.replication_jobs")
        tx.executemany("INSERT OR IGNORE INTO temp.replication_jobs VALUES (?)",
                       [(str(j),) for j in job_ids])
        rows = tx.execute(_COMPUTE_INPUTS).fetchall()
        tx.execute("DELETE FROM temp.replication_jobs")
    return rows


def compute_jobs_changed_since(store: StateStore, since: float) -> set[str]:
    """Compute jobs whose chain changed since ``since`` (a job id recorded, a file staged)."""
    return {row[0] for row in store.query(_CHANGED_COMPUTE_JOBS, {"since": since})}


def input_row_counts(store: StateStore) -> tuple[int, int, int]:
    """Rows of chain_jobs, staged_files and job_inputs: a count that falls means rows were
    deleted."""
    return tuple(store.query(_INPUT_COUNTS)[0])


# -- staging: recorded transfers and just-in-time decisions --------------------------------------
#: a held-back stage-in (its begin time in the future) / one the scheduler may start now
WAITING, RELEASED = "waiting", "released"


def record_transfer(store: StateStore, chain_id: str, job_key: str, host: str, size: int,
                    seconds: float, started: float, owner_uid: int | None) -> None:
    with store.transaction() as conn:
        conn.execute("INSERT OR REPLACE INTO transfers(chain_id, job_key, host, bytes, seconds,"
                     " started, owner_uid) VALUES (?,?,?,?,?,?,?)",
                     (chain_id, job_key, host, size, seconds, started, owner_uid))


def recent_transfers(store: StateStore, host: str, limit: int):
    return store.query("SELECT bytes, seconds FROM transfers WHERE host=? AND bytes > 0 AND "
                       "seconds > 0 ORDER BY started DESC LIMIT ?", (host, limit))


def record_timings(store: StateStore, rows: Iterable[dict]) -> None:
    """Rows (chain_id, job_key, line, host, client, bytes, files, seconds, finished,
    owner_uid) of timed transfers, in one transaction (a commit run again replaces its own)."""
    columns = ("chain_id", "job_key", "line", "host", "client", "bytes", "files", "seconds",
               "finished", "owner_uid")
    with store.transaction() as conn:
        conn.executemany(f"INSERT OR REPLACE INTO transfer_timings({', '.join(columns)}) "
                         f"VALUES ({', '.join('?' * len(columns))})",
                         [tuple(row[c] for c in columns) for row in rows])


def recent_timings(store: StateStore, client: str, limit: int, host: str | None = None):
    """(bytes, seconds) of the newest ``limit`` single-file transfers by ``client`` (from
    ``host``, or from any host), newest first; none while the table is not made."""
    if not made(store, "transfer_timings"):
        return []
    where = "client=? AND files=1 AND bytes > 0 AND seconds > 0"
    values: tuple = (client,)
    if host is not None:
        where, values = "host=? AND " + where, (host, client)
    return store.query(f"SELECT bytes, seconds FROM transfer_timings WHERE {where} "
                       "ORDER BY finished DESC, id DESC LIMIT ?", (*values, limit))


def timings_of(store: StateStore, chain_id: str):
    return store.query("SELECT * FROM transfer_timings WHERE chain_id=? ORDER BY line",
                       (chain_id,))


def transfers_of(store: StateStore, chain_id: str):
    return store.query("SELECT * FROM transfers WHERE chain_id=? ORDER BY started", (chain_id,))


def save_decision(store: StateStore, row: dict) -> None:
    columns = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    with store.transaction() as conn:
        conn.execute(f"INSERT OR REPLACE INTO jit_schedule({columns}) VALUES ({marks})",
                     tuple(row.values()))


def decisions(store: StateStore, *, state: str | None = None, chain_id: str | None = None):
    if chain_id is not None:
        return store.query("SELECT * FROM jit_schedule WHERE chain_id=?", (chain_id,))
    return store.query("SELECT * FROM jit_schedule WHERE state=? ORDER BY release_at", (state,))


def set_decision_state(store: StateStore, chain_id: str, job_key: str, state: str, *,
                       release_at: float | None = None, expected_start: float | None = None,
                       estimate_source: str | None = None, reason: str | None = None) -> None:
    now = time.time()
    with store.transaction() as conn:
        conn.execute(
            "UPDATE jit_schedule SET state=?, release_at=COALESCE(?, release_at),"
            " expected_start=COALESCE(?, expected_start),"
            " estimate_source=COALESCE(?, estimate_source), reason=COALESCE(?, reason),"
            " decided=?, released=CASE WHEN ?='released' THEN ? ELSE released END"
            " WHERE chain_id=? AND job_key=?",
            (state, release_at, expected_start, estimate_source, reason, now, state, now,
             chain_id, job_key))


# -- offloads at close (keyed by chain, path, size, mtime) ---------------------------------------
def offloads(store: StateStore, *, state: str | None = None, chain_id: str | None = None):
    """The offloads in ``state``, or those of ``chain_id`` in the order their files closed."""
    if chain_id is not None:
        return store.query("SELECT * FROM offloads WHERE chain_id=? ORDER BY closed", (chain_id,))
    return store.query("SELECT * FROM offloads WHERE state=?", (state,))


def offload_known(store: StateStore, key: tuple) -> bool:
    return bool(store.query("SELECT 1 FROM offloads WHERE chain_id=? AND path=? AND size=? AND "
                            "mtime=?", key))


def add_offload(store: StateStore, key: tuple, *, destination: str, job_name: str, state: str,
                closed: float) -> None:
    with store.transaction() as conn:
        conn.execute("INSERT INTO offloads(chain_id, path, size, mtime, destination, job_name, "
                     "state, closed) VALUES (?,?,?,?,?,?,?,?)",
                     (*key, destination, job_name, state, closed))


def set_offload_submitted(store: StateStore, key: tuple, job_id: str, state: str) -> None:
    with store.transaction() as conn:
        conn.execute("UPDATE offloads SET job_id=?, state=?, submitted=? WHERE chain_id=? AND "
                     "path=? AND size=? AND mtime=?", (job_id, state, time.time(), *key))


def set_offload_state(store: StateStore, key: tuple, state: str, *, digest: str | None = None,
                      reason: str = "") -> None:
    with store.transaction() as conn:
        conn.execute("UPDATE offloads SET state=?, digest=COALESCE(?, digest), reason=?, "
                     "ended=? WHERE chain_id=? AND path=? AND size=? AND mtime=?",
                     (state, digest, reason, time.time(), *key))


def offload_job_ids(store: StateStore, chain_id: str, state: str) -> list[str]:
    return [r["job_id"] for r in store.query(
        "SELECT job_id FROM offloads WHERE chain_id=? AND state=? AND job_id IS NOT NULL",
        (chain_id, state))]


def listed_offloads(store: StateStore, chain_id: str, states: tuple[str, str]):
    """(path, size, mtime, digest, state) of the chain's offloads in either of ``states``, in
    the order their files closed."""
    return store.query("SELECT path, size, mtime, digest, state FROM offloads WHERE chain_id=? "
                       "AND state IN (?, ?) ORDER BY closed", (chain_id, *states))


# -- what the chain service's metrics read: counts by state, the chaining delay ------------------
# A chain's delay: from its record (``chains.created``: when `scratchkeeper submit` submitted
# it, or when the chain service chained the held job) to the start of its first stage-in job
# (``transfers.started``, the job's start time stage commit records). Chains with a
# just-in-time stage-in are left out: they start late on purpose (jit_schedule).
_STAGE_IN_DELAYS = """
SELECT MIN(t.started) - c.created
  FROM chains c
  JOIN chain_jobs j ON j.chain_id = c.chain_id AND j.role = 'stage-in'
  JOIN transfers t ON t.chain_id = j.chain_id AND t.job_key = j.job_key
 WHERE c.created >= ?
   AND NOT EXISTS (SELECT 1 FROM jit_schedule s WHERE s.chain_id = c.chain_id)
 GROUP BY c.chain_id
"""


def chain_counts(store: StateStore) -> list[tuple[str, int]] | None:
    """(state, chains) per chain state; None while the planner's tables are not made (a
    reader that may not create them: the chain service's metrics before the first chain)."""
    if not made(store, "chains"):
        return None
    return [(row[0], row[1]) for row in store.query(
        "SELECT state, COUNT(*) FROM chains GROUP BY state")]


def chain_job_counts(store: StateStore) -> list[tuple[str, str, int]]:
    """(role, state, jobs) of the chains' jobs (the table is made with ``chains``)."""
    return [(row[0], row[1], row[2]) for row in store.query(
        "SELECT role, state, COUNT(*) FROM chain_jobs GROUP BY role, state")]


def stage_in_delays(store: StateStore, since: float) -> list[float] | None:
    """The chaining delay (seconds) of each chain recorded since ``since`` whose stage-in
    started, JIT chains left out; None while the planner's or staging tables are not made."""
    if not made(store, "chains", "chain_jobs", "transfers", "jit_schedule"):
        return None
    return [float(row[0]) for row in store.query(_STAGE_IN_DELAYS, (since,))
            if row[0] is not None]


def offload_counts(store: StateStore) -> list[tuple[str, int, float]] | None:
    """(state, offloads, bytes) per offload state; None while the staging tables are not made."""
    if not made(store, "offloads"):
        return None
    return [(row[0], row[1], row[2]) for row in store.query(
        "SELECT state, COUNT(*), TOTAL(size) FROM offloads GROUP BY state")]
