"""The planner's tables in the state store: chains, their jobs, staged files (recovery metadata).

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
from dataclasses import asdict
from typing import Iterable

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

# chain states
PLANNED, SUBMITTING, SUBMITTED, SUBMIT_FAILED = "planned", "submitting", "submitted", "submit-failed"
STAGE_IN_FAILED, STAGE_OUT_FAILED = "stage-in-failed", "stage-out-failed"
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
    if uri.startswith("/") or uri.startswith(LOCAL):
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


def record_endpoints(store: StateStore, sources: Iterable[str]) -> None:
    endpoints = {e for e in map(source_endpoint, sources) if e is not None}
    if not endpoints:
        return
    now = time.time()
    with store.transaction() as conn:
        for endpoint in sorted(endpoints):
            conn.execute("INSERT INTO source_endpoints VALUES (?, ?, ?) ON CONFLICT(endpoint) "
                         "DO UPDATE SET last_used = excluded.last_used", (endpoint, now, now))


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
    with store.transaction() as conn:
        conn.execute("UPDATE chain_jobs SET job_id=?, state=?, updated=? WHERE chain_id=? AND job_key=?",
                     (job_id, JOB_SUBMITTED, time.time(), chain_id, key))


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
    rows = store.query("SELECT chain_id FROM chain_jobs WHERE job_id=?", (job_id,))
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
