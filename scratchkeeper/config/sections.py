"""The schema of the site configuration: one frozen dataclass per ``[section]``, defaults included.

Each field's ``metadata`` (made by :func:`_opt`) holds the key's documentation and constraint,
which :mod:`.loader` checks and ``scratchkeeper config --schema`` lists; :class:`SiteConfig`
holds every section.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import field
from typing import Any

from ..structs import record
from .values import (
    DAY,
    STRIPE_COUNT_MAX,
    STRIPE_SIZE_MAX,
    STRIPE_UNIT,
    _class_name,
    _command,
    _command_line,
    _listen_address,
    _not_the_root,
    _ost_ranges,
    _socket_path,
    _source_patterns,
    _stripe_count,
    _stripe_size,
    _walltime,
)


def _opt(default: Any, doc: str, *, choices: tuple | None = None, minimum: float | None = None,
         maximum: float | None = None, exclusive_minimum: bool = False, factory=None,
         expected: Callable[[Any], str | None] | None = None, path: str | None = None):
    """A config key: default, doc and checks. ``expected(value)`` returns what was expected
    when ``value`` is not acceptable (beyond its type, choices and bounds), else None.
    ``path``: ``"absolute"`` for a key naming a file or folder, ``"absolute or empty"`` where
    empty means unset. Every number key has a ``maximum`` (a test holds the schema to it)."""
    meta = {"doc": doc, "choices": choices, "minimum": minimum, "maximum": maximum,
            "exclusive_minimum": exclusive_minimum, "expected": expected, "path": path}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@record(frozen=True)
class SchedulerConfig:
    kind: str = _opt("slurm", "batch scheduler backend", choices=("slurm", "pbs"))
    batch_queue: str = _opt("batch", "queue (Slurm partition) of compute jobs")
    data_queue: str = _opt("dataxfer", "zero-charge queue of stage-in/stage-out data jobs")
    replica_queue: str = _opt("", "queue of replication data jobs; empty: the daemon's own workers")
    command_timeout: float = _opt(30.0, "seconds any scheduler command may take", minimum=0,
                                  exclusive_minimum=True, maximum=DAY)
    stage_out_dependency: str = _opt("afterany", "how stage-out waits for the compute job",
                                     choices=("afterany", "afterok"))
    data_walltime: str = _opt("01:00:00", "default walltime of a data job (a Slurm time: MM, "
                              "HH:MM:SS, D-HH:MM:SS...)", expected=_walltime)
    kill_on_invalid_dependency: bool = _opt(True, "Slurm: cancel a job whose dependency can never be met")
    submit_retries: int = _opt(2, "extra tries of a submission that failed transiently", minimum=0,
                               maximum=100)
    chain_workers: int = _opt(4, "held jobs the chain service chains at once (each a few "
                              "scheduler commands in a row)", minimum=1, maximum=64)
    submit_via: str = _opt("direct", "how `scratchkeeper submit` submits: 'direct' (it submits "
                           "the data jobs itself, so the user must be allowed on the data "
                           "queue) or 'chain-service' (Slurm: the script goes to sbatch, "
                           "job_submit.lua holds it and root's `scratchkeeper spank chain` "
                           "chains its data jobs; for sites whose data queue only admits root)",
                           choices=("direct", "chain-service"))


@record(frozen=True)
class StorageConfig:
    backend: str = _opt("local", "storage backend", choices=("local", "lustre"))
    scratch_root: str = _opt("/scratch", "root of the scratch file system; nothing is written "
                             "outside it", path="absolute", expected=_not_the_root)
    store_root: str = _opt("/var/lib/scratchkeeper/store", "local backend: where OST directories "
                           "live", path="absolute", expected=_not_the_root)
    ost_count: int = _opt(8, "local backend: number of OSTs created", minimum=1, maximum=4096)
    stripe_count: int = _opt(4, "default stripe count of a staged file (-1: all OSTs)", minimum=-1,
                             maximum=STRIPE_COUNT_MAX, expected=_stripe_count)
    stripe_size: int = _opt(1 << 20, "default stripe size in bytes (multiple of 64 KiB, below 4 GiB)",
                            minimum=STRIPE_UNIT, maximum=STRIPE_SIZE_MAX, expected=_stripe_size)
    lfs: str = _opt("lfs", "lustre backend: the lfs command", expected=_command)
    lctl: str = _opt("lctl", "lustre backend: the lctl command", expected=_command)
    pools: dict[str, str] = _opt(None, "local backend: OST pools, name = \"0-3,8\" (lfs setstripe "
                                 "-p; each OST below ost_count, once)", factory=dict,
                                 expected=_ost_ranges)
    pool_tiers: dict[str, str] = _opt(None, "performance class of a pool, pool name = class "
                                      "(e.g. flash = \"flash\", disk = \"disk\"); pools of one "
                                      "class form one placement bucket (docs/placement.rst)",
                                      factory=dict, expected=_class_name)
    tier_order: list[str] = _opt(None, "performance classes, fastest first (e.g. [\"flash\", "
                                 "\"disk\"]); every class of storage.pool_tiers once",
                                 factory=list)
    placement: str = _opt("least-loaded", "local backend: how a new file's OSTs are chosen when "
                          "no OST list is given: 'least-loaded' (fewest objects) or 'suora' "
                          "(SUORA's stable pseudo-random placement over storage.pool_tiers, "
                          "docs/placement.rst)", choices=("least-loaded", "suora"))


@record(frozen=True)
class StateConfig:
    database: str = _opt("/var/lib/scratchkeeper/state.db", "SQLite state database (the head "
                         "node's own disk: only the head opens it, docs/topology.rst)",
                         path="absolute")
    spool: str = _opt("", "folder of the chains' and replica jobs' scripts and outputs, written "
                      "by data jobs on other hosts: shared with the data-transfer and compute "
                      "nodes; \"\": the state database's folder (one host)",
                      path="absolute or empty")

    @property
    def spool_root(self) -> str:
        """Where spools go: ``spool``, else the state database's folder."""
        return self.spool or os.path.dirname(os.path.abspath(self.database))


@record(frozen=True)
class TransferConfig:
    globus_url_copy: str = _opt("globus-url-copy", "GridFTP client", expected=_command)
    globus_url_copy_options: list[str] = _opt(None, "extra globus-url-copy options", factory=list)
    verify_checksum: bool = _opt(True, "ask GridFTP servers for a checksum of what was sent")
    curl: str = _opt("curl", "HTTP client", expected=_command)
    curl_options: list[str] = _opt(None, "extra curl options", factory=list)
    scp: str = _opt("scp", "scp client", expected=_command)
    scp_options: list[str] = _opt(None, "extra scp options", factory=lambda: ["-B", "-q"])
    cp: str = _opt("cp", "local copy command", expected=_command)
    timeout: float = _opt(3600.0, "seconds one transfer attempt may take", minimum=0,
                          exclusive_minimum=True, maximum=7 * DAY)


@record(frozen=True)
class RetryConfig:
    attempts: int = _opt(3, "tries of a transfer, the first included", minimum=1, maximum=100)
    delay: float = _opt(5.0, "seconds before the first retry", minimum=0, maximum=DAY)
    backoff: float = _opt(2.0, "factor applied to the delay after each retry", minimum=1,
                          maximum=100)
    max_delay: float = _opt(300.0, "upper bound of one delay", minimum=0, maximum=DAY)


@record(frozen=True)
class TemplatesConfig:
    directory: str = _opt("", "a folder searched before the built-in job-templates (site "
                          "overrides)", path="absolute or empty")
    command: str = _opt("", "how data jobs call scratchkeeper, a shell-quoted command line "
                        "(e.g. /usr/local/bin/scratchkeeper); it must run for every user whose "
                        "data jobs use it. Empty: the interpreter that plans the chain, with "
                        "-m scratchkeeper", expected=_command_line)


@record(frozen=True)
class PartitionReplication:
    alpha: float | None = _opt(None, "alpha for this partition", minimum=0, exclusive_minimum=True,
                               maximum=1000)
    threshold: float | None = _opt(None, "shortcut threshold T for this partition", minimum=0,
                                   maximum=1)


@record(frozen=True)
class ReplicationConfig:
    alpha: float = _opt(0.5, "eagerness of replication: window covers max(R, alpha*S) nodes",
                        minimum=0, exclusive_minimum=True, maximum=1000)
    threshold: float = _opt(0.1, "shortcut T: jobs of at most T*S nodes are replicated at once",
                            minimum=0, maximum=1)
    interval: float = _opt(30.0, "seconds between decision cycles", minimum=0, exclusive_minimum=True,
                           maximum=DAY)
    workers: int = _opt(2, "replica copies made at once by the daemon's own pool", minimum=1,
                        maximum=1024)
    system_nodes: int = _opt(0, "S of the replication window, the nodes compute jobs run on; 0: "
                             "asked from the scheduler (Slurm: scheduler.batch_queue's nodes; "
                             "PBS: every node pbsnodes lists, data-transfer nodes included, so "
                             "a PBS site with such nodes sets it)", minimum=0,
                             maximum=10_000_000)
    partitions: dict[str, PartitionReplication] = _opt(None, "per-partition overrides", factory=dict)
    max_space_fraction: float = _opt(0.25, "replicas may fill at most this fraction of scratch; "
                                     "further creations wait", minimum=0, maximum=1,
                                     exclusive_minimum=True)
    backoff_max: float = _opt(300.0, "longest pause (seconds) between cycles while the scheduler "
                              "fails", minimum=0, exclusive_minimum=True, maximum=DAY)
    create_attempts: int = _opt(3, "tries of one replica creation before it is left failed",
                                minimum=1, maximum=100)
    retry_delay: float = _opt(60.0, "seconds before a failed replica creation is tried again",
                              minimum=0, maximum=DAY)
    unknown_grace: float = _opt(3600.0, "seconds a job unknown to both the queue and accounting "
                                "keeps its replica before it is treated as ended", minimum=0,
                                maximum=30 * DAY)
    close_events: str = _opt("auto", "source of file-close events: auto (local: inotify, lustre: "
                             "changelog when changelog_mdt is set), inotify, changelog, none "
                             "(removal at job end only)",
                             choices=("auto", "inotify", "changelog", "none"))
    close_quiet: float = _opt(2.0, "seconds with no open of a replicated input after its last "
                              "close before it counts as closed", minimum=0, maximum=DAY)
    changelog_mdt: str = _opt("", "lustre: MDT whose changelog is read (e.g. scratch-MDT0000)")
    changelog_user: str = _opt("", "lustre: changelog user registered for the daemon (e.g. cl1)")
    hybrid: bool = _opt(False, "hybrid replicas (the layout paper's §5): a replica is laid out for "
                        "the requests its file's recorded workload (#STAGEIN -layout auto) has "
                        "that the primary's layout serves worst; the mount reads each request "
                        "from the mirror the layout model finds cheapest")


@record(frozen=True)
class RecoveryConfig:
    socket: str = _opt("/run/scratchkeeper/recoveryd.sock", "Unix socket of the recovery service",
                       path="absolute", expected=_socket_path)
    probe_timeout: float = _opt(25.0, "seconds an OST probe may take (all OSTs probed at once)",
                                minimum=0, exclusive_minimum=True, maximum=DAY)
    check_interval: float = _opt(300.0, "seconds between availability checks of staged inputs",
                                 minimum=0, exclusive_minimum=True, maximum=7 * DAY)
    workers: int = _opt(4, "ranges patched at once", minimum=1, maximum=1024)
    file_workers: int = _opt(8, "files recovered at once by recoveryd: their probes, rebuild "
                             "starts and layout switches are made together, and at most "
                             "patch_streams of them transfer and write at a time",
                             minimum=1, maximum=1024)
    patch_streams: int = _opt(2, "files patched (transferred, checked and written) at once",
                              minimum=1, maximum=1024)
    patch_budget: int = _opt(32 << 20, "bytes of lost ranges in flight at once (asked of the "
                             "sources and not yet written) for all of recoveryd's patches, and "
                             "so the most memory received bytes waiting for the disk take: the "
                             "files of a batch (an OST failure's, claimed together) patch as "
                             "many at once as it holds, each transfer taking at least 16 MiB "
                             "of it (or its file's lost bytes, if fewer); raise it where the "
                             "sources and disks gain from more transfers at once",
                             minimum=1 << 20, maximum=1 << 40)
    chunk_size: int = _opt(4 << 20, "largest piece of a lost range fetched in one request",
                           minimum=65536, maximum=1 << 30)
    ftp_method: str = _opt("eret", "how ftp:// ranges are fetched: 'eret' (one control "
                           "connection, all ranges of a request in one MODE E transfer, ERET P "
                           "per range where the server refuses that), 'eret-per-range' (ERET P "
                           "per range only) or 'globus-url-copy' "
                           "(-partial-offset/-partial-length per range)",
                           choices=("eret", "eret-per-range", "globus-url-copy"))
    scope: str = _opt("all", "what the periodic check recovers: 'all' files with a source on a "
                      "failed OST (inputs of queued jobs first) or only 'queued-inputs'",
                      choices=("all", "queued-inputs"))
    probe_reuse: float = _opt(10.0, "seconds a probe of every OST serves the recoveries that "
                              "start after it, for the OSTs outside their file only (the choice "
                              "of substitutes): a file's own OSTs and any OST a request names are "
                              "probed anew right before its rebuild, so a reused probe never "
                              "decides what is rebuilt or that a file is whole; 0: every "
                              "recovery probes every OST", minimum=0,
                              maximum=DAY)
    substitute_attempts: int = _opt(3, "substitute OSTs tried when one fails during patching",
                                    minimum=1, maximum=100)
    wait_timeout: float = _opt(3600.0, "seconds a reader or the pre-execution hook waits for a "
                               "patch", minimum=0, exclusive_minimum=True, maximum=7 * DAY)
    sync_bytes: int = _opt(16 << 20, "least bytes patched between two journal updates of a "
                           "rebuild's progress (with journal_interval: what a crash may make it "
                           "fetch again); the substitute objects are synced before the layout "
                           "switch", minimum=1, maximum=1 << 40)
    journal_interval: float = _opt(1.0, "least seconds between two journal updates of a "
                                   "rebuild's progress (each costs a few fsyncs; a patch that "
                                   "ends sooner is recorded by its commit alone; 0: every "
                                   "sync_bytes)", minimum=0, maximum=DAY)
    range_checksum: str = _opt("ADLER32", "GridFTP CKSM algorithm verifying each patched range "
                               "(the whole source is checked with SHA-256)",
                               choices=("ADLER32", "MD5"))
    hook_user: str = _opt("slurm", "user besides root whose pre-execution hook may ask recoveryd "
                          "to check a job's inputs (Slurm's SlurmUser)")
    verify_source: bool = _opt(True, "before patching, ask servers that can (GridFTP CKSM) "
                               "whether the source still has the SHA-256 recorded at stage-in "
                               "(files without block digests only)")
    digest_block: int = _opt(1 << 20, "stage-in records the CRC-32C of every block of this many "
                             "bytes; a patch checks each block it fetched against them instead "
                             "of asking the server (0: record none)", minimum=0,
                             maximum=1 << 30)
    allowed_sources: list[str] = _opt(None, "where recovery may fetch from, as "
                                      "\"scheme://host[:port]\" (ftp, gsiftp, http, https; a "
                                      "host may hold '*' wildcards, a port '*' for any; without "
                                      "a port the scheme's default) or \"file://\" (local "
                                      "files, read with the owner's rights). Empty: the "
                                      "scheme://host:port of the sources the site's data jobs "
                                      "staged from (recorded by stage commit)",
                                      factory=list, expected=_source_patterns)
    # what one user may make recoveryd spend (docs/recovery.rst "Bounds per user"); root (the
    # mount, an administrator) and hook_user are bounded by request_threads alone
    request_threads: int = _opt(32, "threads answering recoveryd's socket; the last quarter of "
                                "them only take the first request of a user who holds none, so "
                                "users already served cannot take them all",
                                minimum=1, maximum=1024)
    connections_per_uid: int = _opt(8, "requests of one user recoveryd answers at once (a "
                                    "'wait' or 'recover' holds one until it ends); beyond, the "
                                    "client is told the service is busy and tries again",
                                    minimum=1, maximum=1024)
    requests_per_minute: int = _opt(600, "requests one user may send recoveryd a minute, "
                                    "after a burst of request_burst (one every 60/N seconds); "
                                    "beyond, the client is told the service is busy and when "
                                    "to try again (a 'reads' beyond is dropped, not retried)",
                                    minimum=1, maximum=1 << 20)
    request_burst: int = _opt(30, "requests one user may send recoveryd at once before "
                              "requests_per_minute paces them (as slurmctld's rl_bucket_size)",
                              minimum=1, maximum=1 << 20)
    workers_per_uid: int = _opt(2, "of the file_workers, most that recover one user's requests "
                                "at once (root's, the periodic check's among them, may take "
                                "them all); a free worker takes the request of the user with "
                                "the fewest running", minimum=1, maximum=1024)
    pending_per_uid: int = _opt(256, "recovery requests of one user queued or running at once; "
                                "a report or recover beyond is refused as busy (a request for a "
                                "file already queued joins it and costs nothing)", minimum=1,
                                maximum=1 << 20)
    request_retention: float = _opt(3 * DAY, "seconds a finished recovery request is kept "
                                    "(`recovery list` shows it) before the periodic check "
                                    "removes it", minimum=0, exclusive_minimum=True,
                                    maximum=365 * DAY)
    requests_kept_per_uid: int = _opt(1000, "finished recovery requests of one user kept at "
                                      "most: the periodic check removes the oldest beyond, "
                                      "whatever their age", minimum=1, maximum=1 << 20)


@record(frozen=True)
class MountConfig:
    recovery_timeout: float = _opt(600.0, "seconds a read through the scratch mount waits for "
                                   "recoveryd to patch a stripe no mirror holds before it fails "
                                   "with EIO", minimum=0, exclusive_minimum=True, maximum=7 * DAY)
    dispatch_min_bytes: int = _opt(1 << 20, "reads through the mount at least this large that "
                                   "span stripes several mirrors hold are dispatched over the "
                                   "mirrors by the replica-selection solver (0: never)",
                                   minimum=0, maximum=1 << 30)
    threads: int = _opt(16, "most request threads of the mount", minimum=1, maximum=1024)
    attr_timeout: float = _opt(1.0, "seconds the kernel may cache a file's attributes and names "
                               "(FUSE attr_timeout/entry_timeout; bindfs and libfuse use 1)",
                               minimum=0, maximum=DAY)
    max_request: int = _opt(1 << 20, "largest read or write request the kernel sends the mount "
                            "(FUSE max_read/max_write)", minimum=4096, maximum=16 << 20)
    read_log_interval: float = _opt(5.0, "seconds between the mount's read records in "
                                    "store_root/reads.log, which feed tiering (scratchkeeper "
                                    "tierd; 0: record none)", minimum=0, maximum=DAY)
    log_max_bytes: int = _opt(64 << 20, "most bytes of store_root/closes.log and of "
                              "store_root/reads.log each; records beyond it, beyond a user's "
                              "1/16 share of it (for each writer: the mount, recoveryd's "
                              "'reads'), or that would leave less than this much free for users "
                              "are dropped (docs/mount.rst \"Bounded logs\")",
                              minimum=4096, maximum=1 << 40)


@record(frozen=True)
class QosConfig:
    admission: str = _opt("off", "read QoS on the scratch mount (the flash QoS paper): 'deterministic' "
                          "admits at most (c-1)M^2 + cM stripe pieces per interval, "
                          "'statistical' more while the risk stays below qos.epsilon, 'off' "
                          "none", choices=("off", "deterministic", "statistical"))
    copies: int = _opt(3, "copies c of the files read under QoS (their mirrors); files with "
                       "fewer are read without admission", minimum=2, maximum=16)
    accesses: int = _opt(1, "accesses M per device the guarantee allows in one interval",
                         minimum=1, maximum=64)
    interval: float = _opt(0.05, "seconds of one interval T: at least the time M accesses take",
                           minimum=0, exclusive_minimum=True, maximum=60)
    epsilon: float = _opt(0.01, "statistical admission: the share of intervals allowed to miss "
                          "the guarantee", minimum=0, maximum=1)
    batch: float = _opt(0.002, "seconds the first of the requests admitted together waits for "
                        "the others, so that their pieces' copies are chosen together (at most "
                        "a quarter of qos.interval; 0: each request on its own)", minimum=0,
                        maximum=1)
    retrieval: str = _opt("online", "'online': an admitted request is read at once, its "
                          "pieces given copies with those admitted within qos.batch (faster, "
                          "the M-access guarantee not kept when a full interval's requests "
                          "arrive spread out); 'interval': the flash QoS paper's design-theoretic "
                          "retrieval, the requests admitted in an interval given copies "
                          "together and read at the start of the next one (the guarantee "
                          "whatever the arrivals, up to T later)",
                          choices=("online", "interval"))
    samples: int = _opt(2000, "statistical admission: random draws per size k when P_k is "
                        "sampled at mount start", minimum=10, maximum=1000000)
    users: list[str] = _opt(None, "the users (names or uids) whose reads are admitted; empty: "
                            "every user", factory=list)


@record(frozen=True)
class TieringConfig:
    interval: float = _opt(30.0, "seconds between tierd's cycles (read records counted, moves "
                           "decided and made)", minimum=0, exclusive_minimum=True, maximum=DAY)
    hot_reads: int = _opt(16, "reads (decayed) a file needs for a replica one performance class "
                          "up; k classes up need k times as many", minimum=1, maximum=1 << 30)
    half_life: float = _opt(600.0, "seconds in which a file's read count halves",
                            minimum=0, exclusive_minimum=True, maximum=365 * DAY)
    budget: int = _opt(8, "most replicas moved in one cycle", minimum=0, maximum=100000)
    upper_watermark: float = _opt(0.9, "share of a class's room tierd may fill; past it the "
                                  "coldest replicas go down (the SUORA paper's W_u)", minimum=0,
                                  exclusive_minimum=True, maximum=1)
    lower_watermark: float = _opt(0.8, "share of a class's room it sheds down to (W_l)",
                                  minimum=0, exclusive_minimum=True, maximum=1)
    counters: int = _opt(1 << 16, "counters of the hotness table (each file uses 4)",
                         minimum=1, maximum=1 << 26)


@record(frozen=True)
class StagingConfig:
    start: str = _opt("now", "when a stage-in job starts unless its #STAGEIN -start says: 'now' "
                      "(as soon as the data queue runs it) or 'jit' (held back until the compute "
                      "job's expected start minus the predicted transfer time and the margin)",
                      choices=("now", "jit"))
    jit_margin: float = _opt(120.0, "seconds a just-in-time stage-in is meant to end before the "
                             "compute job's expected start, beside the prediction's own "
                             "uncertainty", minimum=0, maximum=DAY)
    jit_max_delay: float = _opt(1800.0, "longest wait for its data that holding a stage-in "
                                "back may cost a compute job that starts earlier than expected; "
                                "a stage-in whose pessimistic transfer time is longer starts at "
                                "once", minimum=0, maximum=7 * DAY)
    jit_quantile: float = _opt(0.9, "quantile of the transfer model's relative residuals "
                               "added to a file's predicted time: its pessimistic bound, which "
                               "JIT plans with", minimum=0.5, maximum=1)
    jit_min_spread: float = _opt(0.1, "least fraction of the predicted time the pessimistic "
                                 "bound adds, whatever the residuals", minimum=0, maximum=10)
    min_samples: int = _opt(5, "timed transfers from a source host with one client before "
                            "their own fit is used (fewer: the fit of that client's transfers "
                            "from every host; fewer still: the stage-in starts at once)",
                            minimum=1, maximum=10000)
    history: int = _opt(50, "most recent timed transfers per source host and client the "
                        "prediction fits", minimum=1, maximum=1000)
    change_window: int = _opt(5, "newest timed transfers of a host compared with the fit of "
                              "its older ones: when they disagree the host changed and is "
                              "refitted on them alone (0: never)", minimum=0, maximum=1000)
    timing_slack: float = _opt(10.0, "seconds of a stage-in job's start-to-commit time (as its "
                               "scheduler reports it) its own transfer timings may leave "
                               "unaccounted for; a job whose timings leave more (a retry, or "
                               "timings not to be believed) is not learned from", minimum=0,
                               maximum=DAY)
    changelog_mdt: str = _opt("", "lustre: MDT whose changelog CLOSE records drive offload at "
                              "close (e.g. scratch-MDT0000); empty: no offload at close on "
                              "Lustre (the local store's mount records closes itself)")
    changelog_user: str = _opt("", "lustre: changelog user registered for the chain service "
                               "(lctl --device MDT changelog_register; not replicad's own)")
    max_source_wait: float = _opt(3600.0, "longest #STAGEIN -wait-for-source a script may ask "
                                  "for, in seconds: a data job waiting for a source not there "
                                  "yet holds its data-queue slot (0: the option is refused)",
                                  minimum=0, maximum=7 * DAY)


@record(frozen=True)
class LayoutConfig:
    # Defaults: the layout paper's Table 3, InfiniBand column, MB read as 10**6
    # bytes; `scratchkeeper layout calibrate DIR` measures them on the target store.
    connect_seconds: float = _opt(0.0002, "layout model e: seconds to establish one network "
                                  "connection", minimum=0, maximum=60)
    network_bandwidth: float = _opt(1.0e9, "layout model 1/v: network bytes per second of one "
                                    "connection", minimum=0, exclusive_minimum=True,
                                    maximum=1e13)
    startup_sequential_seconds: float = _opt(0.0001, "layout model alpha of sequential "
                                             "requests: seconds to start one disk operation",
                                             minimum=0, maximum=60)
    startup_random_seconds: float = _opt(0.0003, "layout model alpha of random requests: "
                                         "seconds to start one disk operation (a seek)",
                                         minimum=0, maximum=60)
    read_bandwidth: float = _opt(120e6, "layout model 1/beta of reads: bytes per second one "
                                 "OST reads", minimum=0, exclusive_minimum=True, maximum=1e13)
    write_bandwidth: float = _opt(120e6, "layout model 1/beta of writes: bytes per second one "
                                  "OST writes", minimum=0, exclusive_minimum=True, maximum=1e13)
    groups: int = _opt(0, "storage groups g of the 2-D layout (1..OST count); 0: every g that "
                       "divides the OST count is tried", minimum=0, maximum=4096)
    calibrated: str = _opt("", "when and how the values above were measured (written by "
                           "`scratchkeeper layout calibrate`); empty: the layout paper's values")


@record(frozen=True)
class LoggingConfig:
    level: str = _opt("INFO", "log level", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    file: str = _opt("", "file the daemons (recoveryd, replicad, spank chain --watch) log to, "
                     "'{daemon}' replaced by the daemon's name (recoveryd, replicad, "
                     "spank-chain); empty: standard error (the journal under systemd)",
                     path="absolute or empty")


def _metrics_opt(port: int, service: str):
    return _opt(f"127.0.0.1:{port}", f"where {service} serves its Prometheus/OpenMetrics "
                "metrics (HTTP GET /metrics), HOST:PORT; loopback by default, so that only the "
                "site's own scraper on the host (or a proxy it puts in front) reads it; \"\" or "
                "\"0\": no endpoint (docs/operations.rst)", expected=_listen_address)


@record(frozen=True)
class MetricsConfig:
    recoveryd: str = _metrics_opt(9671, "recoveryd (OST health, recoveries, patches, and the "
                                  "counters of the scratch mount on its host)")
    replicad: str = _metrics_opt(9672, "replicad (replicas and their space)")
    chain_service: str = _metrics_opt(9673, "the chain service (`spank chain --watch`: chains, "
                                      "chaining delay, offloads)")
    tierd: str = _metrics_opt(9674, "tierd (tier replicas, moves)")
    mount: str = _metrics_opt(9675, "`scratchkeeper metrics` (the counters of the scratch "
                              "mount of its host, for nodes where no recoveryd runs)")
    scrape_timeout: float = _opt(10.0, "seconds one scrape's connection may stay open (the "
                                 "endpoint answers one scraper at a time)", minimum=0,
                                 exclusive_minimum=True, maximum=300)


@record(frozen=True)
class BurstBufferConfig:
    """Slurm's burst-buffer path (slurm-plugins/burst_buffer.lua, docs/slurm-plugins.rst)."""

    stage_in_failure: str = _opt(
        "cancel", "what becomes of a job whose stage-in failed: \"cancel\" ends it at once, "
        "its reason in its comment (sacct -o Comment) and its output; \"hold\" leaves it "
        "pending with Slurm's reason (squeue) until its owner or an operator cancels it",
        choices=("cancel", "hold"))
    stage_in_timeout: float = _opt(
        86400.0, "seconds data-in waits for its stage-in data jobs (keep it below "
        "burst_buffer.conf's StageInTimeout, which kills data-in without a reason)", minimum=1,
        maximum=30 * 86400)
    stage_out_timeout: float = _opt(
        86400.0, "seconds data-out waits for its stage-out data jobs (below StageOutTimeout)",
        minimum=1, maximum=30 * 86400)


@record(frozen=True)
class HeadConfig:
    address: str = _opt("", "HOST:PORT where processes on other hosts (login, data-transfer and "
                        "compute nodes) reach the head node's service (recoveryd) with a MUNGE "
                        "credential (docs/topology.rst); \"\": this host is the head, the Unix "
                        "socket recovery.socket is used", expected=_listen_address)
    listen: str = _opt("", "HOST:PORT recoveryd listens on for other hosts' requests (e.g. "
                       "0.0.0.0:6830); \"\": the Unix socket only", expected=_listen_address)
    munge_socket: str = _opt("", "munged's socket; \"\": libmunge's default "
                             "(/run/munge/munge.socket.2)", path="absolute or empty",
                             expected=_socket_path)
    timeout: float = _opt(60.0, "seconds a request to the head may take, retries after a refused "
                          "or lost connection included, before the command says the head is "
                          "unreachable", minimum=1, maximum=DAY)
    refused_wait: float = _opt(10.0, "seconds connections the head refuses (the host is up, its "
                               "service is stopped or restarting) are tried again before the "
                               "command says the service is down; a head that does not answer "
                               "at all is tried for head.timeout", minimum=0, maximum=DAY)


@record(frozen=True)
class SiteConfig:
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    state: StateConfig = field(default_factory=StateConfig)
    transfer: TransferConfig = field(default_factory=TransferConfig)
    retry: RetryConfig = field(default_factory=RetryConfig)
    templates: TemplatesConfig = field(default_factory=TemplatesConfig)
    replication: ReplicationConfig = field(default_factory=ReplicationConfig)
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)
    mount: MountConfig = field(default_factory=MountConfig)
    staging: StagingConfig = field(default_factory=StagingConfig)
    layout: LayoutConfig = field(default_factory=LayoutConfig)
    tiering: TieringConfig = field(default_factory=TieringConfig)
    qos: QosConfig = field(default_factory=QosConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    burst_buffer: BurstBufferConfig = field(default_factory=BurstBufferConfig)
    head: HeadConfig = field(default_factory=HeadConfig)
    source: str = field(default="(defaults)", metadata={"internal": True})


def tier_pools(storage: StorageConfig) -> list[tuple[str, list[str]]]:
    """``[(class, [pool, ...]), ...]`` slowest first, the order placement buckets go in
    (docs/placement.rst); classes and pools as the configuration names them."""
    return [(tier, [pool for pool, of in storage.pool_tiers.items() if of == tier])
            for tier in reversed(storage.tier_order)]
