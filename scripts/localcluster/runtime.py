"""The scratchkeeper runtime every user runs: a virtualenv with a non-editable install of the
checkout, reinstalled when the checkout's sources change (scripts/local-cluster up, runtime).

Plain Python 3 standard library only, like the script.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .base import ClusterError, run, say

REPO = Path(__file__).resolve().parents[2]
RUNTIME_DIR = Path(os.environ.get("SK_RUNTIME_DIR", "/opt/scratchkeeper"))
RUNTIME_LINK = Path(os.environ.get("SK_RUNTIME_LINK", "/usr/local/bin/scratchkeeper"))
# The interpreter of the runtime: the system's, which every user can run (root's pyenv cannot).
RUNTIME_PYTHON = os.environ.get("SK_RUNTIME_PYTHON", "/usr/bin/python3")
# What a non-editable install is built from; a change of any of these files reinstalls.
RUNTIME_SOURCES = ("scratchkeeper", "job-templates", "setup.py", "setup.cfg", "pyproject.toml",
                   "README.rst")
CLIENT = "scratchkeeper-client"  # what the link points at (scratchkeeper/cli/_client.py)
RUNTIME_RELEASES_KEPT = 2  # the current one and the one before (jobs may still run it)


def runtime_source_files(repo: Path = REPO) -> list[Path]:
    """The files a non-editable install is built from (caches and build output left out)."""
    files = []
    for name in RUNTIME_SOURCES:
        top = repo / name
        if top.is_file():
            files.append(top)
            continue
        for folder, dirs, names in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.endswith(".egg-info"))
            files += [Path(folder) / n for n in sorted(names)
                      if not n.endswith((".pyc", ".so")) and not n.startswith(".")]
    return files


def source_digest(repo: Path = REPO) -> str:
    """SHA-256 of the runtime's sources: every file's path relative to ``repo`` and content."""
    digest = hashlib.sha256()
    for path in runtime_source_files(repo):
        digest.update(str(path.relative_to(repo)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass
class Runtime:
    """The scratchkeeper every user can run: ``root``/releases/DIGEST is a virtualenv with a
    non-editable install of the checkout, ``root``/current points at the one in use and
    ``link`` (/usr/local/bin/scratchkeeper) at its command. A new install goes into a new
    release and ``current`` is switched in one rename, so a job starting meanwhile runs
    either the old install or the new one, never half of one."""

    root: Path = RUNTIME_DIR
    link: Path = RUNTIME_LINK
    repo: Path = REPO

    current = property(lambda self: self.root / "current")
    digest_file = property(lambda self: self.root / "current" / ".source-digest")

    def installed_digest(self) -> str | None:
        try:
            return self.digest_file.read_text().strip()
        except OSError:
            return None

    def ensure(self) -> dict:
        """Install the checkout when its sources differ from the installed ones; the link."""
        digest = source_digest(self.repo)
        if self.installed_digest() != digest or not (self.current / "bin" / CLIENT).exists():
            self.root.mkdir(parents=True, exist_ok=True)
            os.chmod(self.root, 0o755)
            with open(self.root / ".lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # another `up` or test session installing
                if self.installed_digest() != digest:
                    self._install(digest)
        self._link()
        say(f"runtime: {self.link} -> {os.path.realpath(self.current)} "
            f"(sources {digest[:12]})")
        return {"command": str(self.link), "release": os.path.realpath(self.current),
                "source_digest": digest}

    def _install(self, digest: str) -> None:
        release = self.root / "releases" / digest[:16]
        say(f"runtime: installing the checkout into {release}")
        shutil.rmtree(release, ignore_errors=True)  # a half-made install of the same sources
        release.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(release.parent, 0o755)
        previous_umask = os.umask(0o022)  # every user reads and runs what is installed
        build = Path(tempfile.mkdtemp(prefix="sk-runtime-build-"))
        try:
            # Built from a copy: an in-tree build/ may hold modules the checkout no longer has.
            for path in runtime_source_files(self.repo):
                target = build / path.relative_to(self.repo)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
            run([RUNTIME_PYTHON, "-m", "venv", str(release)], timeout=120)
            run([str(release / "bin" / "python"), "-m", "pip", "install", "-q",
                 "--disable-pip-version-check", "--no-warn-script-location", str(build)],
                timeout=900)
        finally:
            os.umask(previous_umask)
            shutil.rmtree(build, ignore_errors=True)
        for folder, dirs, names in os.walk(release):
            for name in dirs + names:
                path = os.path.join(folder, name)
                if not os.path.islink(path):
                    os.chmod(path, os.stat(path).st_mode | 0o444 |
                             (0o111 if os.stat(path).st_mode & 0o100 else 0))
        # The job templates compiled beside them, as pip compiled the modules: users only
        # read the caches (scratchkeeper/planner/compiled_templates.py, template_cache.py).
        run([str(release / "bin" / "python"), "-I", "-c",  # -I: not the checkout in the cwd
             "from scratchkeeper.planner.render import compile_templates; compile_templates()"],
            timeout=120)
        # The command users type: the C client of the command server (docs/deployment.rst),
        # which runs the console script above for all it does not hand to the server.
        run([str(release / "bin" / "python"), "-I", "-m", "scratchkeeper.cli._client",
             str(release / "bin" / CLIENT)], timeout=180)
        # Proof that a user other than root can run it (not a venv under a 0700 home).
        for command in ("scratchkeeper", CLIENT):
            run(["runuser", "-u", "nobody", "--", str(release / "bin" / command), "--version"],
                timeout=60)
        (release / ".source-digest").write_text(digest + "\n")
        os.chmod(release / ".source-digest", 0o644)
        switch = self.root / ".current.new"
        switch.unlink(missing_ok=True)
        switch.symlink_to(release.relative_to(self.root))
        os.replace(switch, self.current)
        self._prune(release)

    def _prune(self, keep: Path) -> None:
        """Remove old releases, but never one a process runs (a service started before the
        switch, a data job): it may still import from it."""
        releases = sorted((self.root / "releases").iterdir(), key=lambda p: p.stat().st_mtime,
                          reverse=True)
        kept = [keep] + [r for r in releases if r != keep][:RUNTIME_RELEASES_KEPT - 1]
        running = _interpreters_running()
        for release in releases:
            if release not in kept and not any(Path(i).is_relative_to(release) for i in running):
                shutil.rmtree(release, ignore_errors=True)

    def _link(self) -> None:
        target = self.current / "bin" / CLIENT
        if self.link.is_symlink() and Path(os.readlink(self.link)) == target:
            return
        if self.link.exists() or self.link.is_symlink():
            if not (self.link.is_symlink() and
                    Path(os.readlink(self.link)).is_relative_to(self.root)):
                raise ClusterError(f"{self.link} exists and was not installed by local-cluster; "
                                   f"move it away first")
        self.link.parent.mkdir(parents=True, exist_ok=True)
        new = self.link.with_name(f".{self.link.name}.new")
        new.unlink(missing_ok=True)
        new.symlink_to(target)
        os.replace(new, self.link)


def _interpreters_running() -> set[str]:
    """argv[0] of every process: a console script's interpreter is its shebang's path, which
    names the virtualenv (release) it runs from."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.add((entry / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace"))
            except OSError:
                continue
    return found
