"""Names that a client or the data job's shell would expand are never taken for the file they
spell: not as recovery metadata of a literal command, not as a URI (control characters)."""

import pytest

from scratchkeeper.errors import ScratchkeeperError
from scratchkeeper.planner.metadata import extract_transfers
from scratchkeeper.transfer.clients import UnsupportedTransfer
from scratchkeeper.transfer.uri import parse_location


@pytest.mark.parametrize("command", [
    "curl -o '/s/u/#1' 'http://h/[1-2]'",            # curl's glob: writes /s/u/1 and /s/u/2
    "curl -o /s/u/x 'http://h/{a,b}'",
    "globus-url-copy 'gsiftp://h/d/*' file:///s/u/",  # the server's files matching *
    "globus-url-copy gsiftp://h/d/a file:///s/u/x?",
    "cp /data/*.dat /s/u/",                           # bash expands it before cp runs
    "scp 'h:/d/{a,b}' /s/u/",
    "rsync -a 'h:/d/x[12]' /s/u/",
])
def test_a_literal_command_with_an_expanded_name_records_nothing(command):
    assert extract_transfers(command, cwd="/s/u", stage_in=True) == []


@pytest.mark.parametrize("command, expected", [
    ("curl -o /s/u/x 'http://h/a?b=1'", [("http://h/a?b=1", "/s/u/x")]),   # a query, no glob
    ("globus-url-copy gsiftp://h/d/a%2Ab file:///s/u/x", [("gsiftp://h/d/a%2Ab", "/s/u/x")]),
    ("scp h:/d/a.dat /s/u/", [("scp://h/d/a.dat", "/s/u/a.dat")]),
])
def test_plain_names_are_still_recorded(command, expected):
    found = extract_transfers(command, cwd="/s/u", stage_in=True)
    assert [(f.source, f.destination) for f in found] == expected


@pytest.mark.parametrize("uri", ["ftp://h/a%0D%0ADELE%20b", "http://h/a%0Ab", "gsiftp://h/a%00"])
def test_a_uri_with_a_control_character_is_refused(uri):
    with pytest.raises(ValueError, match="control character"):
        parse_location(uri)


def test_an_unsupported_transfer_is_a_permanent_scratchkeeper_error():
    # the chain service's offload sweep catches ScratchkeeperError: a refused name fails that
    # one offload instead of the sweep
    err = UnsupportedTransfer("x")
    assert isinstance(err, ScratchkeeperError) and isinstance(err, ValueError) and err.permanent
