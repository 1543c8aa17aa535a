"""The directive parser, on example scripts and on every malformed form."""

from pathlib import Path

import pytest

from scratchkeeper.errors import DirectiveError
from scratchkeeper.planner.directives import STAGE_IN, STAGE_OUT, parse_script

SCRIPTS = Path(__file__).parent / "scripts"


def parse(name):
    path = SCRIPTS / name
    return parse_script(path.read_text(), str(path), cwd="/home/alice/work")


def test_seed_example_literal_commands_and_continuation():
    parsed = parse("seed004.pbs")
    stage_in = parsed.stage_steps(STAGE_IN)
    assert len(stage_in) == 1
    assert stage_in[0].line == 6
    assert stage_in[0].command == ('hsi -q -A keytab -k my_keytab_file -l user '
                                   '"get /scratch/user/destination_file : input_file"')
    assert parsed.options[STAGE_IN].retries == 2
    assert parsed.options[STAGE_IN].walltime == "00:30:00"
    stage_out = parsed.stage_steps(STAGE_OUT)
    assert stage_out[0].command == "scp /scratch/user/output/ user@destination_host:/home/user/"
    assert parsed.options[STAGE_OUT].job_name == "myjob.offload"
    # the continuation line left the compute script with its directive
    assert parsed.compute_lines == ["#!/bin/bash", "#PBS -N myjob",
                                    "#PBS -l nodes=128,walltime=12:00",
                                    "mpirun -np 128 ~/programs/myapp"]
    assert parsed.dialect == "pbs"
    assert parsed.compute_job["name"] == "myjob"


def test_continuation_with_directive_prefix():
    text = "#!/bin/bash\n#STAGEIN globus-url-copy \\\n#STAGEIN   ftp://h/a \\\n#STAGEIN file:///s/a\nrun\n"
    parsed = parse_script(text, "x.sh", cwd="/w")
    assert parsed.steps[0].command == "globus-url-copy ftp://h/a file:///s/a"
    assert parsed.compute_lines == ["#!/bin/bash", "run"]


def test_structured_transfers_resolve_schemes():
    parsed = parse("structured.sbatch")
    transfers = [s.transfer for s in parsed.stage_steps(STAGE_IN)]
    assert [t.source.scheme for t in transfers] == ["gsiftp", "https", "scp", "path"]
    assert transfers[1].destination.text.endswith("/")
    assert parsed.options[STAGE_IN].retries == 3
    assert parsed.options[STAGE_IN].retry_delay == 1.0
    assert parsed.options[STAGE_OUT].dependency == "afterok"
    assert parsed.compute_job == {"name": "sim", "qos": "normal"}


def test_datawarp_lines():
    parsed = parse("datawarp.sbatch")
    stage_in = parsed.stage_steps(STAGE_IN)
    assert [(s.transfer.source.path, s.transfer.recursive) for s in stage_in] == [
        ("/lus/alice/inputs", True), ("/lus/alice/config.yaml", False)]
    assert parsed.stage_steps(STAGE_OUT)[0].transfer.destination.path == "/lus/alice/results"
    # other #DW lines belong to the compute job
    assert "#DW jobdw type=scratch access_mode=striped capacity=10GiB" in parsed.compute_lines


def test_pbs_w_stagein_and_stageout():
    parsed = parse("pbs-w.pbs")
    stage_in = parsed.stage_steps(STAGE_IN)
    assert [(s.transfer.source.text, s.transfer.destination.path) for s in stage_in] == [
        ("fileserver:/export/bob/in.dat", "/scratch/bob/in.dat"),
        ("fileserver:/export/bob/b.dat", "/scratch/bob/b.dat")]
    assert parsed.stage_steps(STAGE_OUT)[0].transfer.destination.text == "fileserver:/export/bob/out.dat"
    assert not any("stagein" in line or "stageout" in line for line in parsed.compute_lines)


def test_pbs_w_keeps_other_attributes():
    text = "#!/bin/sh\n#PBS -W depend=afterok:12,stagein=/s/a@h:/r/a\nrun\n"
    parsed = parse_script(text, "x.pbs", cwd="/w")
    assert "#PBS -W depend=afterok:12" in parsed.compute_lines
    assert len(parsed.steps) == 1


def test_relative_paths_resolve_against_the_submit_directory():
    text = "#!/bin/sh\n#STAGEIN http://h/x.dat data/x.dat\nrun\n"
    parsed = parse_script(text, "x.sh", cwd="/home/a/w")
    assert parsed.steps[0].transfer.destination.path == "/home/a/w/data/x.dat"


@pytest.mark.parametrize("line, message", [
    ("#STAGEIN", "with nothing after it"),
    ("#STAGEIN -retry", "-retry needs a value"),
    ("#STAGEIN -retry two", "-retry expects a whole number"),
    ("#STAGEIN -retry 2 -retry 3", "given twice"),
    ("#STAGEIN -bogus 1", "unknown option '-bogus'"),
    ("#STAGEIN -retry-delay -1", "-retry-delay expects seconds"),
    ("#STAGEIN -walltime soon", "-walltime expects a time"),
    ("#STAGEIN -name 'a b'", "-name expects letters"),
    ("#STAGEIN -qos $(id)", "-qos expects letters"),
    ("#STAGEIN -dependency afterok", "-dependency applies to #STAGEOUT only"),
    ("#STAGEOUT -dependency before", "-dependency expects afterok or afterany"),
    ("#STAGEIN -retry 2 cp a b", "expected an option, got 'cp'"),
    ("#STAGEIN s3://bucket/key /scratch/x", "unknown URI scheme 's3://'"),
    ("#STAGEIN http://h/x http://h/y", "the destination must be a path on this cluster"),
    ("#STAGEOUT http://h/x /scratch/y", "the source must be a path on this cluster"),
    ("#STAGEIN http:///nohost /scratch/x", "URI without a host"),
    ("#STAGEIN /a/b /a/b", "same file"),
    ("#STAGEIN cp 'unclosed /a /b", "cannot split the command"),
    ("#DW stage_in source=/a type=file", "missing destination="),
    ("#DW stage_in source=/a destination=/b type=fifo", "type must be file or directory"),
    ("#DW stage_in source=/a destination=/b type=file mode=x", "unknown key 'mode'"),
    ("#DW stage_in /a /b", "expected key=value"),
    ("#PBS -W stagein=/scratch/x", "expected local_file@host:remote_file"),
    ("#STAGEIN ~/in.dat /scratch/x", "'~' is not expanded"),
    ("#STAGEIN http://h/dir/ /scratch/d/ \\", "continues past the end"),
])
def test_malformed_directive_names_file_and_line(line, message):
    text = f"#!/bin/bash\n#SBATCH -N 1\n{line}\nsrun app\n"
    if line.endswith("\\"):
        text = f"#!/bin/bash\n#SBATCH -N 1\nsrun app\n{line}"
    with pytest.raises(DirectiveError) as info:
        parse_script(text, "job.sh", cwd="/w")
    assert message in str(info.value)
    assert str(info.value).startswith("job.sh:")
    assert info.value.line in (3, 4)


def test_script_with_only_directives_is_refused():
    with pytest.raises(DirectiveError, match="no commands for the compute job"):
        parse_script("#!/bin/bash\n#STAGEIN http://h/a /s/a\n", "only.sh", cwd="/w")


def test_nul_byte_is_refused_with_its_line():
    with pytest.raises(DirectiveError) as info:
        parse_script("#!/bin/bash\nrun\nx\x00y\n", "bin.sh", cwd="/w")
    assert info.value.line == 3
