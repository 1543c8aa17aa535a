"""A transfer touches exactly the path the planner checked, whatever its name holds.

Every client the planner renders runs here against a real server the test starts on 127.0.0.1
(curl: an HTTP server in a thread; globus-url-copy: ``globus-gridftp-server``; scp: the real
scp in its legacy protocol, whose far side is a shell and a real ``scp -f/-t`` run by a stand-in
for ssh, since no sshd is installed), with names holding ``{..}``, ``[1-9]``, ``#1``, ``*``,
``?``, ``%2e%2e`` and spaces. Each test plans a script with the real planner (which confines
local paths under the scratch root by name), runs each action's argv as the data job does, and
checks that exactly the planned local paths were written or read and that nothing outside the
scratch root changed. Names a client would expand and cannot be told not to (a wildcard in a
GridFTP URL, anything scp's far side would expand) are refused at plan time as ``script:LINE``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from scratchkeeper.config import SiteConfig, StorageConfig, TransferConfig
from scratchkeeper.errors import DirectiveError, TransferError
from scratchkeeper.planner.directives import parse_script
from scratchkeeper.planner.plan import build_plan
from scratchkeeper.planner.render import render_plan
from scratchkeeper.storage.layout import Extent
from scratchkeeper.transfer.ranged import open_ranged

from .loopback import GridFtpServer, HttpServer


@dataclass
class World:
    """``base/scratch`` (the scratch root), ``base/srv`` (the servers' folder) and files
    outside the root a wrong transfer would touch: a login file and a secret."""

    base: Path
    root: Path
    srv: Path

    def outside(self) -> dict[str, bytes]:
        """Every file outside the scratch root and the servers' folder, with its content."""
        found = {}
        for folder, dirs, files in os.walk(self.base):
            here = Path(folder)
            dirs[:] = [d for d in dirs if here / d not in (self.root, self.srv)]
            for name in files:
                found[str(here / name)] = (here / name).read_bytes()
        return found

    def files_under(self, folder: Path) -> dict[str, bytes]:
        return {str(Path(d) / n): (Path(d) / n).read_bytes()
                for d, _, names in os.walk(folder) for n in names}

    def put(self, path: Path, data: bytes, mode: int = 0o644) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.chmod(path, mode)
        return path


@pytest.fixture
def world():
    base = Path(tempfile.mkdtemp(prefix="sk-names-"))
    os.chmod(base, 0o755)  # the GridFTP server's anonymous sessions run as nobody
    world = World(base, base / "scratch", base / "srv")
    world.root.mkdir()
    world.srv.mkdir(mode=0o755)
    world.put(base / "home" / ".profile", b"PROFILE: the user's login file\n")
    world.put(base / "secret.txt", b"SECRET outside the scratch root\n")
    yield world
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def http(world):
    server = HttpServer(world.srv)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def gridftp(world):
    if shutil.which("globus-gridftp-server") is None or shutil.which("globus-url-copy") is None:
        pytest.skip("globus-gridftp-server and globus-url-copy are not installed")
    work = world.base / "gridftp-work"
    work.mkdir()
    server = GridFtpServer(world.srv, work)
    server.start()
    yield server
    server.stop()


def plan(world: World, lines: list[str], transfer: TransferConfig | None = None):
    config = SiteConfig(storage=StorageConfig(scratch_root=str(world.root)),
                        transfer=transfer or TransferConfig())
    text = "#!/bin/bash\n" + "\n".join(lines) + "\nrun\n"
    parsed = parse_script(text, "job.sh", cwd=str(world.root), scratch_root=str(world.root))
    result = build_plan(parsed, config, chain_id="sknames", workdir=str(world.root))
    render_plan(result, "", "", config)
    return result


def run_job(result, role: str, env: dict | None = None) -> list:
    """Run every action of the ``role`` job as its data job does (``mkdir -p`` of the folder
    a stage-in writes into, then the client's argv); the actions run."""
    job = result.jobs_with_role(role)[0]
    for action in job.actions:
        # the data job runs exactly this argv: its script holds it, shell-quoted
        assert f"-- {shlex.join(action.argv)} ||" in job.script
        if role == "stage-in":
            os.makedirs(action.prepare_dir, exist_ok=True)
        done = subprocess.run(action.argv, capture_output=True, timeout=120,
                              env=env, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, (action.argv, done.stderr.decode(errors="replace"))
    return job.actions


def quoted(*words: str) -> str:
    return " ".join(shlex.quote(w) for w in words)


# -- curl ------------------------------------------------------------------------------------
def test_curl_stage_in_writes_exactly_the_checked_paths(world, http):
    served = world.srv / "d"
    literal = {"a{b,c}.dat": b"braces", "x[1-2]": b"brackets", "h#1": b"hash",
               "s*t": b"star", "q?r": b"question", "sp ace": b"space"}
    for name, data in literal.items():
        world.put(served / name, b"literal " + data)
    for decoy in ("ab.dat", "ac.dat", "x1", "x2"):   # what a glob of the names above reads
        world.put(served / decoy, b"DECOY " + decoy.encode())
    before = world.outside()
    r, u = world.root, http.url
    lines = [
        "#STAGEIN " + quoted(f"{u}/d/a{{b,c}}.dat", f"{r}/in/"),
        "#STAGEIN " + quoted(f"{u}/d/x[1-2]", f"{r}/in/got[1-9] #1"),
        "#STAGEIN " + quoted(f"{u}/d/h%231", f"{r}/in/{{..,x}}/{{..,y}}/h#1"),
        "#STAGEIN " + quoted(f"{u}/d/s*t", f"{r}/in/s*t"),
        "#STAGEIN " + quoted(f"{u}/d/q%3Fr", f"{r}/in/"),
        "#STAGEIN " + quoted(f"{u}/d/sp ace", f"{r}/in/"),
        # curl's glob would make #1 "../../home/.profile": the login file outside the root
        "#STAGEIN " + quoted(f"{u}/echo/a/b/{{../../home/.profile}}", f"{r}/in/#1"),
    ]
    actions = run_job(plan(world, lines), "stage-in")
    expected = [f"{r}/in/a{{b,c}}.dat", f"{r}/in/got[1-9] #1", f"{r}/in/{{..,x}}/{{..,y}}/h#1",
                f"{r}/in/s*t", f"{r}/in/q?r", f"{r}/in/sp ace", f"{r}/in/#1"]
    assert [a.local_path for a in actions] == expected
    written = world.files_under(world.root)
    assert sorted(written) == sorted(expected)
    for path, name in zip(expected, ["a{b,c}.dat", "x[1-2]", "h#1", "s*t", "q?r", "sp ace"]):
        assert written[path] == b"literal " + literal[name]
    assert written[f"{r}/in/#1"].startswith(b"echo:/echo/")
    assert world.outside() == before


def test_curl_stage_out_reads_exactly_the_checked_paths(world, http):
    r = world.root
    # by name inside the root; a glob of it reads ../../secret.txt, outside the root
    sources = {
        r / "out" / "{..,q}" / "{..,q}" / "secret.txt": "secret.txt",
        r / "out" / "x[1-2]": "x[1-2]",
        r / "out" / "h#1": "h#1",
        r / "out" / "s*t": "s*t",
        r / "out" / "q?r": "q?r",
    }
    for number, path in enumerate(sources):
        world.put(path, f"LOCAL {number}".encode())
    for decoy in ("x1", "x2"):
        world.put(r / "out" / decoy, b"DECOY")
    world.put(r / "out" / "sp ace", b"LOCAL spaced")
    before = world.outside()
    lines = ["#STAGEOUT " + quoted(str(p), f"{http.url}/put/") for p in sources]
    lines.append("#STAGEOUT " + quoted(f"{r}/out/sp ace", f"{http.url}/put/re named"))
    run_job(plan(world, lines), "stage-out")
    received = {Path(p).name: data for p, data in world.files_under(world.srv / "put").items()}
    assert received == {**{name: f"LOCAL {n}".encode() for n, name in
                           enumerate(sources.values())}, "re named": b"LOCAL spaced"}
    assert world.outside() == before


def test_curl_ignores_a_curlrc_that_would_move_the_output(world, http):
    world.put(world.srv / "d" / "f.dat", b"data")
    curl_home = world.base / "curl-home"
    world.put(curl_home / ".curlrc", f'output-dir = "{world.base}/elsewhere"\n'.encode())
    result = plan(world, ["#STAGEIN " + quoted(f"{http.url}/d/f.dat", f"{world.root}/in/f.dat")])
    run_job(result, "stage-in", env=dict(os.environ, CURL_HOME=str(curl_home)))
    assert world.files_under(world.root) == {f"{world.root}/in/f.dat": b"data"}
    assert not (world.base / "elsewhere").exists()


def test_the_ranged_reader_fetches_the_named_http_file(world, http):
    world.put(world.srv / "d" / "x[1-2]", b"0123456789literal")
    world.put(world.srv / "d" / "x1", b"DECOY-ONE")
    world.put(world.srv / "d" / "x2", b"DECOY-TWO")
    with open_ranged(f"{http.url}/d/x[1-2]", TransferConfig(), timeout=30) as reader:
        assert reader.size() == len(b"0123456789literal")
        got = {p.extent: bytes(p.data) for p in reader.fetch([Extent(2, 3), Extent(10, 7)])}
    assert got == {Extent(2, 3): b"234", Extent(10, 7): b"literal"}
    asked = {path for method, path in http.requests}
    assert asked == {"/d/x[1-2]"}


# -- globus-url-copy -------------------------------------------------------------------------
def test_globus_url_copy_stage_in_writes_exactly_the_checked_paths(world, gridftp):
    served = world.srv / "g"
    world.put(served / "s*t", b"literal star")
    world.put(served / "sXt", b"DECOY")
    world.put(served / "x[1-2]", b"literal brackets")
    world.put(served / "x1", b"DECOY")
    world.put(served / "sp ace", b"literal space")
    world.put(served / "n#1", b"literal hash")
    world.put(served / "b{1,2}", b"literal braces")
    world.put(served / "tree" / "a*b", b"tree star")
    # flat: globus-url-copy 6.x fails "-verify-checksum -r" on a tree with subfolders
    world.put(served / "tree" / "x[1]", b"tree brackets")
    for folder in (served, served / "tree"):
        os.chmod(folder, 0o755)
    before = world.outside()
    r, f = world.root, f"{gridftp.url}{served}"
    tree = f"{r}/in/deep/%2e%2e/%2e%2e/%2e%2e/tree"  # decoded, that is base/tree: outside
    lines = [
        # globus-url-copy decodes %XX in a file:// URL: %2e%2e/%2e%2e climbs to base/home
        "#STAGEIN " + quoted(f"{f}/s%2At", f"{r}/in/%2e%2e/%2e%2e/home/.profile"),
        "#STAGEIN " + quoted(f"{f}/x%5B1-2%5D", f"{r}/in/"),
        "#STAGEIN " + quoted(f"{f}/sp ace", f"{r}/in/a b*c?[1-9]{{x,y}}#1"),
        "#STAGEIN " + quoted(f"{f}/n%231", f"{r}/in/"),
        "#STAGEIN " + quoted(f"{f}/b%7B1,2%7D", f"{r}/in/"),
        f"#DW stage_in source={f}/tree destination={tree} type=directory",
    ]
    actions = run_job(plan(world, lines), "stage-in")
    expected = {
        f"{r}/in/%2e%2e/%2e%2e/home/.profile": b"literal star",
        f"{r}/in/x[1-2]": b"literal brackets",
        f"{r}/in/a b*c?[1-9]{{x,y}}#1": b"literal space",
        f"{r}/in/n#1": b"literal hash",
        f"{r}/in/b{{1,2}}": b"literal braces",
        f"{tree}/a*b": b"tree star",
        f"{tree}/x[1]": b"tree brackets",
    }
    assert [a.local_path for a in actions] == [*list(expected)[:5], tree]
    assert world.files_under(world.root) == expected
    assert world.outside() == before


def test_globus_url_copy_stage_out_reads_exactly_the_checked_paths(world, gridftp):
    r = world.root
    put = world.srv / "put"
    put.mkdir(mode=0o777)
    os.chmod(put, 0o777)  # anonymous sessions write as nobody
    sources = [r / "out" / "%2e%2e" / "%2e%2e" / "secret.txt",  # decoded: base/secret.txt
               r / "out" / "x[1-2]", r / "out" / "a b*c?#1{x,y}"]
    for number, path in enumerate(sources):
        world.put(path, f"LOCAL {number}".encode())
    world.put(r / "out" / "x1", b"DECOY")
    # a folder written as one (its files): by name inside the root, decoded base/
    folder = r / "res" / "%2e%2e" / "%2e%2e"
    world.put(folder / "f[1] *", b"FOLDER FILE")
    put_folder = world.srv / "put-folder"
    put_folder.mkdir(mode=0o777)
    os.chmod(put_folder, 0o777)
    before = world.outside()
    lines = ["#STAGEOUT " + quoted(str(p), f"{gridftp.url}{put}/") for p in sources]
    lines.append("#STAGEOUT " + quoted(f"{folder}/", f"{gridftp.url}{put_folder}/"))
    run_job(plan(world, lines), "stage-out")
    received = {Path(p).name: data for p, data in world.files_under(put).items()}
    assert received == {p.name: f"LOCAL {n}".encode() for n, p in enumerate(sources)}
    assert world.files_under(put_folder) == {f"{put_folder}/f[1] *": b"FOLDER FILE"}
    assert world.outside() == before


@pytest.mark.parametrize("line, why", [
    ("#STAGEIN ftp://h/g/s*t /R/in/", "'*' (write %2A)"),
    ("#STAGEIN ftp://h/g/x[1-2] /R/in/", "'[' (write %5B)"),
    ("#STAGEIN 'gsiftp://h/g/q?r' /R/in/", "'?' (write %3F)"),
    ("#STAGEIN 'gsiftp://h/g/b{1,2}' /R/in/", "'{' (write %7B)"),
    ("#STAGEIN 'ftp://h/g/n#1' /R/in/", "'#' (write %23)"),
    ("#STAGEIN ftp://h/g/folder/ /R/in/x", "names a folder"),
    ("#STAGEOUT /R/out/f 'ftp://h/put/*'", "'*' (write %2A)"),
    ("#DW stage_in source=ftp://h/g/t* destination=/R/in/t type=directory", "'*' (write %2A)"),
])
def test_globus_url_copy_refuses_names_it_would_expand(world, line, why):
    (world.root / "out").mkdir()
    (world.root / "out" / "f").write_text("x")
    with pytest.raises(DirectiveError) as caught:
        plan(world, ["#SBATCH -N 1", line.replace("/R/", f"{world.root}/")])
    assert str(caught.value).startswith("job.sh:3: ") and why in str(caught.value)


def test_the_ranged_globus_reader_reads_the_named_file_into_its_spool(world, gridftp):
    served = world.srv / "g"
    world.put(served / "s*t", b"0123456789")
    world.put(served / "sXt", b"DECOY-DECOY")
    os.chmod(served, 0o755)
    spool = world.root / "%2e%2e"   # a literal folder; decoded, the parent of the root
    spool.mkdir()
    config = TransferConfig()
    with open_ranged(f"{gridftp.url}{served}/s%2At", config, ftp_method="globus-url-copy",
                     spool_dir=str(spool), timeout=60) as reader:
        got = [bytes(p.data) for p in reader.fetch([Extent(3, 4)])]
    assert got == [b"3456"]
    with open_ranged(f"{gridftp.url}{served}/s*t", config, ftp_method="globus-url-copy",
                     spool_dir=str(spool), timeout=60) as reader:
        with pytest.raises(TransferError) as caught:
            list(reader.fetch([Extent(0, 1)]))
    assert caught.value.permanent and "wildcard" in str(caught.value)
    assert not any(n.startswith(".sk-ranged-") for n in os.listdir(world.base))


# -- scp -------------------------------------------------------------------------------------
@pytest.fixture
def scp_config(world):
    """scp in its legacy protocol (``-O``: the far side runs the path through a shell) with a
    stand-in for ssh that runs the remote command in a local shell, as sshd would."""
    if shutil.which("scp") is None:
        pytest.skip("scp is not installed")
    fake = world.put(world.base / "bin" / "ssh", b'#!/bin/sh\nfor last; do :; done\n'
                     b'exec /bin/sh -c "$last"\n', mode=0o755)
    return TransferConfig(scp_options=["-B", "-q", "-O", "-S", str(fake)])


def test_scp_stage_in_and_out_touch_exactly_the_checked_paths(world, scp_config):
    r = world.root
    world.put(world.srv / "s" / "plain.dat", b"remote data")
    put = world.srv / "scpput"
    put.mkdir()
    sources = [r / "out" / "{..,q}" / "{..,q}" / "secret.txt", r / "out" / "x[1-2]",
               r / "out" / "a b*c?#1{x,y}"]
    for number, path in enumerate(sources):
        world.put(path, f"LOCAL {number}".encode())
    world.put(r / "out" / "x1", b"DECOY")
    before = world.outside()
    target = f"{r}/in/{{..,x}}/got[1-9] #1*?.dat"
    lines = ["#STAGEIN " + quoted(f"localhost:{world.srv}/s/plain.dat", target)]
    lines += ["#STAGEOUT " + quoted(str(p), f"localhost:{put}/") for p in sources]
    result = plan(world, lines, scp_config)
    assert result.jobs_with_role("stage-in")[0].actions[0].argv == (
        "scp", "-B", "-q", "-O", "-S", scp_config.scp_options[-1], "--",
        f"localhost:{world.srv}/s/plain.dat", target)
    run_job(result, "stage-in")
    run_job(result, "stage-out")
    assert world.files_under(r / "in") == {target: b"remote data"}
    received = {Path(p).name: data for p, data in world.files_under(put).items()}
    assert received == {p.name: f"LOCAL {n}".encode() for n, p in enumerate(sources)}
    assert world.outside() == before


@pytest.mark.parametrize("remote", [
    "a*b", "x[1-2]", "{a,b}", "sp ace", "q?r", "$(touch PWNED)", "`touch PWNED`", "a;touch PWNED",
    "'q'", '"q"', "a\\b", "h#1", "a|b", "a&b", "a>b", "!x", "-oProxyCommand=x",
])
@pytest.mark.parametrize("stage", ["#STAGEIN", "#STAGEOUT", "#PBS -W"])
def test_scp_refuses_remote_names_its_far_side_would_expand(world, scp_config, remote, stage):
    (world.root / "out").mkdir()
    (world.root / "out" / "f").write_text("x")
    path = remote if remote.startswith("-") else f"{world.srv}/{remote}"
    if stage == "#STAGEIN":
        line = "#STAGEIN " + quoted(f"localhost:{path}", f"{world.root}/in/f")
    elif stage == "#STAGEOUT":
        line = "#STAGEOUT " + quoted(f"{world.root}/out/f", f"localhost:{path}")
    else:
        if any(c in remote for c in " ,"):
            pytest.skip("#PBS -W takes no space or comma in a value")
        line = f"#PBS -W stagein={world.root}/in/f@localhost:{path}"
    with pytest.raises(DirectiveError) as caught:
        plan(world, ["#SBATCH -N 1", line], scp_config)
    assert str(caught.value).startswith("job.sh:3: ") and "scp's far side" in str(caught.value)
    assert not list(world.base.rglob("PWNED"))


def test_scp_keeps_plain_remote_names_and_the_remote_home(world, scp_config):
    result = plan(world, ["#STAGEIN " + quoted("alice@localhost:~/data/run_1,v2=x+y@z%.dat",
                                               f"{world.root}/in/")], scp_config)
    assert result.jobs[0].actions[0].argv[-2:] == (
        "alice@localhost:~/data/run_1,v2=x+y@z%.dat", f"{world.root}/in/run_1,v2=x+y@z%.dat")


# -- cp --------------------------------------------------------------------------------------
def test_cp_copies_exactly_the_checked_paths(world):
    source = world.put(world.base / "src" / "a{b,c} [1-9]*?#1.dat", b"local literal")
    world.put(world.base / "src" / "ab", b"DECOY")
    before = world.outside()
    target = f"{world.root}/in/{{..,x}}/#1 [1-9]*?"
    run_job(plan(world, ["#STAGEIN " + quoted(str(source), target)]), "stage-in")
    assert world.files_under(world.root) == {target: b"local literal"}
    assert world.outside() == before
