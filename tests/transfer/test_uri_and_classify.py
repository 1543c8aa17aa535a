import pytest

from scratchkeeper.transfer.classify import grep_pattern, is_permanent
from scratchkeeper.transfer.uri import UnknownScheme, inside, is_host_name, names_data, parse_location


def test_locations():
    assert parse_location("gsiftp://h:2811/a/b").host == "h:2811"
    assert parse_location("file:///a/b").path == "/a/b"
    assert parse_location("u@h:/a").uri == "scp://u@h/a"
    assert parse_location("h:rel/a").uri == "scp://h/~/rel/a"
    assert parse_location("x/y", cwd="/w").path == "/w/x/y"
    assert parse_location("/d/", cwd="/w").text.endswith("/")
    with pytest.raises(UnknownScheme):
        parse_location("s3://b/k")
    with pytest.raises(ValueError):
        parse_location("file://host/a")
    with pytest.raises(ValueError):
        parse_location("http://h/")


@pytest.mark.parametrize("host, ok", [
    ("h", True), ("data.example.org", True), ("destination_host", True), ("127.0.0.1", True),
    ("[::1]", True), ("node-1.", True), ("-oProxyCommand=sh", False), ("-v", False), ("h=x", False),
    ("h h", False), ("h$(id)", False), ("a..b", False), ("", False), ("x" * 64, False),
    ("[::1;id]", False), ("h-", False),
])
def test_host_names(host, ok):
    assert is_host_name(host) is ok


@pytest.mark.parametrize("token, data", [
    ("gsiftp://h/a", True), ("/abs", True), ("./rel", True), ("a/b", True), ("~", True),
    ("~alice", True), ("h:params.nml", True), ("u@h:x", True), ("hsi", False),
    ("globus-url-copy", False), ("--all", False), ("", False),
])
def test_names_data(token, data):
    assert names_data(token) is data


@pytest.mark.parametrize("token, path", [
    ("/s/a/", "/s/a/"), ("/s/a/.", "/s/a/"), ("/s/a/b/..", "/s/a/"), ("/s/./a//b", "/s/a/b"),
    ("//s/a", "/s/a"), ("/", "/"), ("file:///s/a/.", "/s/a/"), ("file:///s/%2e%2e/etc", "/etc"),
    (".", "/w/"), ("..", "/"),
])
def test_local_paths_are_normalised_and_folders_keep_one_slash(token, path):
    location = parse_location(token, cwd="/w")
    assert location.path == path and location.is_folder is path.endswith("/")


def test_inside_is_by_whole_components():
    assert inside("/scratch/a", "/scratch") and inside("/scratch", "/scratch/")
    assert not inside("/scratch2/a", "/scratch") and not inside("/scratchy", "/scratch")
    assert not inside("/scratch/../etc", "/scratch")


@pytest.mark.parametrize("message, permanent", [
    ("curl: (22) The requested URL returned error: 404", True),
    ("curl: (22) The requested URL returned error: 403", True),
    ("curl: (22) The requested URL returned error: 429", False),
    ("curl: (22) The requested URL returned error: 408", False),
    ("curl: (22) The requested URL returned error: 503", False),
    ("curl: (7) Failed to connect to 127.0.0.1 port 9 after 0 ms: Connection refused", False),
    ("error: globus_ftp_client: the server responded with an error\n550 550-Command failed", True),
    ("500 Command failed. : globus_l_gfs_file_open failed.\nNo such file or directory", True),
    ("cp: cannot open '/a' for reading: Permission denied", True),
    ("error: globus_xio: Unable to connect to 127.0.0.1:1", False),
    ("transfer of 1550 bytes timed out", False),
])
def test_permanent_errors(message, permanent):
    assert is_permanent(message) is permanent


def test_grep_pattern_agrees_with_python(tmp_path):
    import subprocess

    for message, expected in [("returned error: 404", True), ("returned error: 500", False),
                              ("550 File unavailable", True), ("port 15501", False)]:
        (tmp_path / "err").write_text(message + "\n")
        found = subprocess.run(["grep", "-Eq", "--", grep_pattern(), str(tmp_path / "err")]).returncode == 0
        assert found is expected is is_permanent(message)
