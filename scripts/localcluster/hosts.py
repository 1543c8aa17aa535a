"""The hosts of the local cluster: each a network namespace on a bridge, with its own hostname
and its own mount namespace for host-local state (docs/local-cluster.rst, "Hosts").

The head is the machine itself (its root namespaces); every other host (login, data-transfer,
compute) is a network namespace ``sk-NAME`` joined to the bridge by a veth pair, with a
persistent mount and UTS namespace bound to files under ``NS_DIR``. A host's processes are
started with ``nsenter`` into those three namespaces, never with ``ip netns exec``, which
remounts ``/sys`` and hides this machine's cgroup v1 mounts (slurmd then refuses to start:
"Hybrid mode is not supported").

Plain Python 3 standard library only, like the script.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .base import ClusterError, run, say, wait_until

# RFC 2544's benchmarking range: nothing of this machine's own network uses it (its eth0 is
# 192.0.2.0/24), and no host gets a default route, so no traffic leaves the bridge.
SUBNET = "198.18.77"
PREFIX_LENGTH = 24
HEAD_ADDRESS = f"{SUBNET}.1"
BRIDGE = "skbr0"
NETNS_DIR = Path("/run/netns")
NETNS_PREFIX = "sk-"
# The files the hosts' mount and UTS namespaces are bound to: a private mount of its own,
# as the kernel refuses to bind a mount namespace's file in a mount that propagates into it.
NS_DIR = Path("/run/sk-hosts")
HEAD = "head"
LOGIN = "login"
ROLES = ("head", "login", "dtn", "compute")
# What each host has of its own (a tmpfs in its mount namespace), as a machine of a site has:
# munged's socket, temporary files, the runtime directory of scratchkeeper's node processes.
# path -> (mode, owner)
PRIVATE_DIRS = {"/tmp": ("1777", "root"), "/run/munge": ("0755", "munge"),
                "/run/scratchkeeper": ("0755", "root")}
# The head's own folders under the local cluster's directory (SK_LOCAL_DIR): the state
# database's (only the head opens it, docs/topology.rst). Every other host finds an empty,
# root-owned folder there, as a login or compute node of a site has no such file.
HEAD_ONLY = ("state",)


def private_dirs() -> dict[str, tuple[str, str]]:
    """PRIVATE_DIRS and the head-only folders: what each host other than the head has of its
    own, path -> (mode, owner)."""
    local = Path(os.environ.get("SK_LOCAL_DIR", "/var/lib/scratchkeeper-local"))
    return {**PRIVATE_DIRS, **{str(local / name): ("0755", "root") for name in HEAD_ONLY}}


# the last byte of the first compute host's address: node K is SUBNET.(COMPUTE_BASE + K)
COMPUTE_BASE = 10
FIXED_ADDRESSES = {HEAD: 1, LOGIN: 2}
DTN_BASE = 2  # dtnK is SUBNET.(DTN_BASE + K)


@dataclass(frozen=True)
class Host:
    """One machine of the local site."""

    name: str
    address: str
    role: str          # head, login, dtn or compute

    @property
    def is_head(self) -> bool:
        return self.role == "head"

    @property
    def slurm_node(self) -> bool:
        """A slurmd runs here (a data-transfer or compute host)."""
        return self.role in ("dtn", "compute")

    netns = property(lambda self: NETNS_DIR / f"{NETNS_PREFIX}{self.name}")
    mount_ns = property(lambda self: NS_DIR / f"{self.name}.mnt")
    uts_ns = property(lambda self: NS_DIR / f"{self.name}.uts")
    # the bridge's end of the host's veth pair (interface names: at most 15 characters)
    veth = property(lambda self: f"{NETNS_PREFIX}{self.name}"[:15])


def topology(compute_nodes: list[str], dtn_count: int = 1) -> list[Host]:
    """The hosts of a cluster whose compute nodes are ``compute_nodes`` (node1 ... nodeN)."""
    hosts = [Host(HEAD, f"{SUBNET}.{FIXED_ADDRESSES[HEAD]}", "head"),
             Host(LOGIN, f"{SUBNET}.{FIXED_ADDRESSES[LOGIN]}", "login")]
    hosts += [Host(f"dtn{k}", f"{SUBNET}.{DTN_BASE + k}", "dtn") for k in range(1, dtn_count + 1)]
    for node in compute_nodes:
        number = int("".join(c for c in node if c.isdigit()) or 0)
        if not 1 <= number <= 200:
            raise ClusterError(f"compute node {node}: expected node1 to node200")
        hosts.append(Host(node, f"{SUBNET}.{COMPUTE_BASE + number}", "compute"))
    return hosts


def roles(hosts: list[Host]) -> dict[str, list[str]]:
    return {role: [h.name for h in hosts if h.role == role] for role in ROLES}


def enter(host: Host, argv: list[str], *, user: str | None = None,
          cwd: str | None = None) -> list[str]:
    """The argv that runs ``argv`` on ``host`` (as ``user``: its uid, gid and groups, a login's
    environment). nsenter and setpriv exec the command, so its pid is the command's."""
    as_user: list[str] = []
    if user is not None:
        try:
            pwd.getpwnam(user)
        except KeyError as err:
            raise ClusterError(f"no user {user}") from err
        as_user = ["setpriv", f"--reuid={user}", f"--regid={pwd.getpwnam(user).pw_gid}",
                   "--init-groups", "--reset-env", "--"]
        # the user's PATH (--reset-env's) may not hold it: named as the caller finds it
        found = shutil.which(argv[0], path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        argv = [found or argv[0], *argv[1:]]
        slurm_bin = os.environ.get("SK_SLURM_BIN")
        if slurm_bin:
            # a cluster on a Slurm of its own prefix (local-cluster use_slurm): the user's
            # sbatch, squeue... are that release's, not Debian's, whose 22.05 client it refuses
            argv = ["env", f"PATH={slurm_bin}:/usr/local/bin:/usr/bin:/bin", *argv]
    if host.is_head:
        return as_user + argv
    # Entering a mount namespace moves the cwd to its root: name it again, unless it lies in
    # a directory the host has of its own (where it would not be the same folder).
    wd = cwd if cwd is not None else "/"
    if any(Path(wd).is_relative_to(p) for p in private_dirs()):
        wd = "/"
    return ["nsenter", f"--mount={host.mount_ns}", f"--uts={host.uts_ns}",
            f"--net={host.netns}", f"--wdns={wd}", "--"] + as_user + argv


# ---------------------------------------------------------------------------- mounts

def _mountinfo() -> list[list[str]]:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as info:
        return [line.split() for line in info]


def _mount_fields(path: Path) -> list[list[str]]:
    """mountinfo's lines of the mounts at ``path`` (the last one is on top)."""
    target = str(path).replace(" ", "\\040")
    return [f for f in _mountinfo() if len(f) > 4 and f[4] == target]


def ensure_shared(path: Path) -> None:
    """Make ``path`` a shared mount (a bind onto itself), so that mounts made under it later on
    the head (the scratch mount, its kill -9 and remount) propagate into the hosts, whose
    mount namespaces are its slaves. This machine has no systemd: ``/`` may be private."""
    mounts = _mount_fields(path)
    if mounts and any(field.startswith("shared:") for field in mounts[-1][6:mounts[-1].index("-")]):
        return
    if not mounts:
        # rbind: a scratch mount already under it stays visible
        run(["mount", "--rbind", str(path), str(path)])
    run(["mount", "--make-rshared", str(path)])
    say(f"hosts: {path} is a shared mount (the hosts see what the head mounts there)")


def release_shared(path: Path) -> None:
    """Undo :func:`ensure_shared` once nothing is mounted under ``path`` any more."""
    if not _mount_fields(path):
        return
    below = [f[4] for f in _mountinfo() if len(f) > 4 and f[4].startswith(f"{path}/")]
    if below:
        say(f"hosts: {path} stays a bind mount ({below[0]} is still mounted under it)")
        return
    # lazily: `down` itself holds the cluster's lock file open in it; the bind shows the
    # same directory, so what is still open there stays the same file
    result = run(["umount", "--lazy", str(path)], check=False)
    if result.returncode != 0:
        say(f"hosts: {path} stays a bind mount: {result.stderr.strip()}")


def _ensure_ns_dir() -> None:
    NS_DIR.mkdir(parents=True, exist_ok=True)
    mounts = _mount_fields(NS_DIR)
    if not mounts:
        run(["mount", "--bind", str(NS_DIR), str(NS_DIR)])
    run(["mount", "--make-private", str(NS_DIR)])


def _is_ns_file(path: Path) -> bool:
    return any(f[f.index("-") + 1] == "nsfs" for f in _mount_fields(path) if "-" in f)


# ---------------------------------------------------------------------------- network

def ensure_bridge() -> None:
    """The bridge in the head's namespace, with the head's address; IPv6 off, so nothing but
    the hosts' IPv4 addresses is ever sent on it."""
    if not Path(f"/sys/class/net/{BRIDGE}").exists():
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    _ipv6_off(BRIDGE)
    addresses = run(["ip", "-4", "-o", "addr", "show", "dev", BRIDGE]).stdout
    if f" {HEAD_ADDRESS}/{PREFIX_LENGTH} " not in addresses:
        run(["ip", "addr", "add", f"{HEAD_ADDRESS}/{PREFIX_LENGTH}", "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"])


def remove_bridge() -> None:
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        run(["ip", "link", "del", BRIDGE])
        say(f"hosts: bridge {BRIDGE} removed")


def _ipv6_off(interface: str, netns: Path | None = None) -> None:
    setting = f"/proc/sys/net/ipv6/conf/{interface}/disable_ipv6"
    if netns is None:
        if Path(setting).exists():
            Path(setting).write_text("1\n")
        return
    run(["nsenter", f"--net={netns}", "--", "sh", "-c",
         f"[ ! -e {setting} ] || echo 1 > {setting}"])


# ---------------------------------------------------------------------------- one host

def problem(host: Host) -> str | None:
    """What is missing of ``host``'s set-up (None: complete): its namespaces, its link to the
    bridge, its address, its hostname and its private directories."""
    if not host.netns.exists():
        return f"no network namespace {host.netns}"
    for path in (host.mount_ns, host.uts_ns):
        if not _is_ns_file(path):
            return f"no namespace bound at {path}"
    link = run(["ip", "-o", "link", "show", "dev", host.veth], check=False)
    if link.returncode != 0 or f"master {BRIDGE}" not in link.stdout or \
            "state UP" not in link.stdout and "LOWER_UP" not in link.stdout:
        return f"{host.veth} not up on {BRIDGE}"
    inside = run(["ip", "-n", host.netns.name, "-4", "-o", "addr", "show"], check=False)
    if f" {host.address}/{PREFIX_LENGTH} " not in inside.stdout or " lo " not in inside.stdout:
        return f"{host.address} not set in {host.netns}"
    checks = " && ".join([f'[ "$(hostname)" = {host.name} ]'] +
                         [f"mountpoint -q {p}" for p in private_dirs()])
    inner = run(enter(host, ["sh", "-c", checks]), check=False)
    if inner.returncode != 0:
        return "hostname or private directories not set"
    return None


def create(host: Host) -> None:
    """Make ``host`` from nothing: network namespace, veth into the bridge, address, mount and
    UTS namespaces (slaves of the head's mounts) with its hostname and private directories."""
    ns = host.netns.name
    run(["ip", "netns", "add", ns])
    # IPv6 off before the link exists: the veth's end in there gets the default
    for key in ("all", "default"):
        _ipv6_off(key, host.netns)
    run(["ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
    _ipv6_off(host.veth)
    run(["ip", "link", "set", host.veth, "master", BRIDGE, "up"])
    run(["ip", "-n", ns, "addr", "add", f"{host.address}/{PREFIX_LENGTH}", "dev", "eth0"])
    run(["ip", "-n", ns, "link", "set", "eth0", "up"])
    run(["ip", "-n", ns, "link", "set", "lo", "up"])
    _ensure_ns_dir()
    for path in (host.mount_ns, host.uts_ns):
        path.touch()
    for path in private_dirs():
        Path(path).mkdir(parents=True, exist_ok=True)  # the mount points, on the head
    steps = [f"hostname {host.name}"]
    for path, (mode, owner) in private_dirs().items():
        steps.append(f"mount -t tmpfs -o mode={mode},size=256m sk-{host.name} {path}")
        steps.append(f"chown {owner}: {path}")
    run(["unshare", f"--mount={host.mount_ns}", f"--uts={host.uts_ns}", "--propagation",
         "slave", "--", "sh", "-ec", "; ".join(steps)])
    say(f"hosts: {host.name} at {host.address}")


def remove(host: Host) -> None:
    """Take ``host`` away: what still runs in it is stopped (a machine switched off takes its
    job steps with it), then its namespaces and veth are removed. Idempotent."""
    _stop_processes_in(host)
    for path in (host.mount_ns, host.uts_ns):
        if _is_ns_file(path):
            run(["umount", str(path)])
        path.unlink(missing_ok=True)
    if host.netns.exists():
        run(["ip", "netns", "del", host.netns.name])
    # the namespace's end goes with the namespace, and the pair with it, but not at once
    if Path(f"/sys/class/net/{host.veth}").exists():
        gone = run(["ip", "link", "del", host.veth], check=False)
        if gone.returncode != 0 and Path(f"/sys/class/net/{host.veth}").exists():
            raise ClusterError(f"ip link del {host.veth}: {gone.stderr.strip()}")


def processes_in(host: Host) -> list[int]:
    """Processes in the host's network or mount namespace."""
    keys = set()
    for path in (host.netns, host.mount_ns):
        try:
            if path == host.netns or _is_ns_file(path):
                stat = os.stat(path)
                keys.add((stat.st_dev, stat.st_ino))
        except OSError:
            continue
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        for kind in ("net", "mnt"):
            try:
                stat = os.stat(entry / "ns" / kind)
            except OSError:
                continue
            if (stat.st_dev, stat.st_ino) in keys:
                found.append(int(entry.name))
                break
    return found


def _stop_processes_in(host: Host, grace: float = 10.0) -> None:
    pids = processes_in(host)
    if not pids:
        return
    say(f"hosts: {host.name}: stopping {len(pids)} process(es) left in it")
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if wait_until(lambda: not _alive(pids), grace if sig == signal.SIGTERM else 5):
            return
    raise ClusterError(f"host {host.name}: processes {pids} do not stop")


def _alive(pids: list[int]) -> bool:
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
            return True
    return False


# ---------------------------------------------------------------------------- all hosts

def set_up(hosts: list[Host], shared: Path, stop_daemons) -> None:
    """Every host of ``hosts`` complete: a host whose set-up is missing something (a killed run
    left it half made, or its namespace files were unmounted) is made again from nothing,
    after ``stop_daemons(host)`` stopped what was recorded as running on it."""
    started = time.monotonic()
    ensure_shared(shared)
    ensure_bridge()
    wanted = {host.name for host in hosts}
    for name in leftover_hosts():
        if name not in wanted:  # a host of a bigger cluster a killed run left behind
            say(f"hosts: removing {name}, not a host of this cluster")
            remove(Host(name, "", "compute"))
    made = 0
    for host in hosts:
        if host.is_head:
            continue
        missing = problem(host)
        if missing is None:
            continue
        if host.netns.exists() or host.mount_ns.exists():
            say(f"hosts: {host.name} incomplete ({missing}): making it again")
            stop_daemons(host)
            remove(host)
        create(host)
        made += 1
    if made:
        say(f"hosts: {made} made in {time.monotonic() - started:.1f}s")


def tear_down(hosts: list[Host], shared: Path) -> None:
    for host in hosts:
        if not host.is_head:
            remove(host)
    remove_bridge()
    release_shared(shared)
    if NS_DIR.exists() and not any(NS_DIR.iterdir()):
        if _mount_fields(NS_DIR):
            run(["umount", str(NS_DIR)], check=False)
        NS_DIR.rmdir()


def leftover_hosts() -> list[str]:
    """Names of host namespaces present on this machine (ours: the sk- prefix)."""
    names = set()
    if NETNS_DIR.is_dir():
        names |= {p.name[len(NETNS_PREFIX):] for p in NETNS_DIR.iterdir()
                  if p.name.startswith(NETNS_PREFIX)}
    if NS_DIR.is_dir():
        names |= {p.name.rsplit(".", 1)[0] for p in NS_DIR.iterdir()}
    return sorted(names)


def exec_on_named(hosts: list[Host], name: str, user: str | None, argv: list[str]) -> None:
    """`local-cluster exec HOST [--user USER] -- CMD...`: this process becomes CMD there."""
    if not argv:
        raise ClusterError("exec: no command given (after --)")
    known = {host.name: host for host in hosts}
    if name not in known:
        raise ClusterError(f"exec: no host {name} (hosts: {', '.join(known)})")
    exec_on(known[name], argv, user)


def exec_on(host: Host, argv: list[str], user: str | None) -> None:
    """Replace this process with ``argv`` run on ``host``: its exit status, standard input,
    output and error are the command's."""
    if not host.is_head:
        missing = problem(host)
        if missing is not None:
            raise ClusterError(f"host {host.name} is not up ({missing}): run "
                               f"`local-cluster up`")
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = "/"
    full = enter(host, argv, user=user, cwd=cwd)
    try:
        os.execvp(full[0], full)
    except OSError as err:
        raise ClusterError(f"cannot run {full[0]}: {err.strerror}") from err


def munge_round_trip(host: Host | None = None) -> bool:
    """A credential made by this host's munged decodes there (its munged answers)."""
    prefix = enter(host, []) if host is not None else []
    try:
        encoded = subprocess.run(prefix + ["munge", "-n"], capture_output=True, timeout=10)
        if encoded.returncode != 0:
            return False
        decoded = subprocess.run(prefix + ["unmunge"], input=encoded.stdout,
                                 capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return decoded.returncode == 0
