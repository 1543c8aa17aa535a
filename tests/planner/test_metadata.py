"""Recovery metadata read from the literal commands users already write."""

import pytest

from scratchkeeper.planner.metadata import extract_transfers


@pytest.mark.parametrize("command, expected", [
    ('hsi -q -A keytab -k my_keytab_file -l user "get /scratch/user/destination_file : input_file"',
     [("hpss://~/input_file", "/scratch/user/destination_file", "hsi")]),
    ("hsi -q 'cget /scratch/u/a : /hpss/u/a; get /scratch/u/b: /hpss/u/b'",
     [("hpss:///hpss/u/a", "/scratch/u/a", "hsi"), ("hpss:///hpss/u/b", "/scratch/u/b", "hsi")]),
    ("globus-url-copy -p 4 -tcp-bs 4M -vb gsiftp://dtn.org/data/x file:///scratch/u/x",
     [("gsiftp://dtn.org/data/x", "/scratch/u/x", "globus-url-copy")]),
    ("globus-url-copy -r gsiftp://dtn.org/data/dir/ file:///scratch/u/dir/",
     [("gsiftp://dtn.org/data/dir/", "/scratch/u/dir/dir", "globus-url-copy")]),
    ("scp -P 2222 -i ~/.ssh/id alice@dtn:/home/alice/in.dat /scratch/alice/",
     [("scp://alice@dtn/home/alice/in.dat", "/scratch/alice/in.dat", "scp")]),
    ("cp -p /home/u/a /home/u/b /scratch/u/",
     [("file:///home/u/a", "/scratch/u/a", "cp"), ("file:///home/u/b", "/scratch/u/b", "cp")]),
    ("cp -t /scratch/u /home/u/a", [("file:///home/u/a", "/scratch/u/a", "cp")]),
    ("rsync -av --bwlimit 1000 -e ssh dtn:/src/ /scratch/u/src/",
     [("scp://dtn/src/", "/scratch/u/src/", "rsync")]),
    ("curl -fsSL -o /scratch/u/in.dat https://h.org/in.dat",
     [("https://h.org/in.dat", "/scratch/u/in.dat", "curl")]),
    ("cd /scratch/u && curl -O https://h.org/f/table.dat",
     [("https://h.org/f/table.dat", "/scratch/u/table.dat", "curl")]),
    ("wget -q -P /scratch/u http://h.org/a.tar",
     [("http://h.org/a.tar", "/scratch/u/a.tar", "wget")]),
    ("wget --output-document=in.dat http://h.org/a",
     [("http://h.org/a", "/work/in.dat", "wget")]),
    ("module load hsi; echo starting", []),
    ("curl https://h.org/a | tar x", []),
])
def test_stage_in_sources(command, expected):
    found = extract_transfers(command, cwd="/work", stage_in=True)
    assert [(f.source, f.destination, f.tool) for f in found] == expected


def test_stage_out_destinations():
    found = extract_transfers("scp /scratch/user/output/ user@destination_host:/home/user/",
                              cwd="/w", stage_in=False)
    assert [(f.source, f.destination) for f in found] == [
        ("/scratch/user/output/", "scp://user@destination_host/home/user/")]
    found = extract_transfers("hsi 'put /scratch/u/out : /hpss/u/out'", cwd="/w", stage_in=False)
    assert [(f.source, f.destination) for f in found] == [("/scratch/u/out", "hpss:///hpss/u/out")]


def test_unparseable_command_yields_nothing():
    assert extract_transfers("cp 'unclosed", cwd="/w", stage_in=True) == []
