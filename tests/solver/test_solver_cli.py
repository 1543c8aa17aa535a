"""``scratchkeeper solve``: output formats and one-line errors with exit code 2."""

from __future__ import annotations

import json

import pytest

from scratchkeeper.cli import main


def _write(tmp_path, document, name="request.json"):
    path = tmp_path / name
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return str(path)


REQUEST = {"disks": [{"cost": 8.3, "delay": 2, "load": 1}, {"cost": 13.2, "delay": 1, "load": 0},
                     {"cost": 6.1, "delay": 1, "load": 0}],
           "buckets": [[0, 1], [1, 2], [2, 0], [0], [2, 2]]}


@pytest.mark.parametrize("algorithm", ["auto", "blackbox", "integrated", "parallel", "slotsearch"])
def test_json_output(tmp_path, capsys, algorithm):
    path = _write(tmp_path, REQUEST)
    assert main(["solve", path, "--json", "--algorithm", algorithm, "--threads", "2"]) == 0
    result = json.loads(capsys.readouterr().out)
    # disk 0 serves two (19.6) or disk 2 three (19.3); disk 1 one (14.2): 19.3 is optimal
    assert result["response_time"] == pytest.approx(19.3)
    assert result["counts"] == [2, 0, 3] or result["counts"][2] == 3
    assert all(disk in replicas for disk, replicas in zip(result["assignment"], REQUEST["buckets"]))


def test_text_output(tmp_path, capsys):
    assert main(["solve", _write(tmp_path, REQUEST)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("response time: 19.3\n") and "assignment: " in out


@pytest.mark.parametrize("document,message", [
    ({"disks": [{"cost": 1}], "buckets": [[0], []]}, "bucket 1: has no replica"),
    ({"disks": [{"cost": 1}], "buckets": [[0, 1]]}, "bucket 0: disk id 1 out of range"),
    ({"disks": [{"cost": 0}], "buckets": [[0]]}, "disk 0: cost must be > 0"),
    ({"disks": [{"cost": 1}, {"cost": 1, "delay": -1}], "buckets": [[0]]},
     "disk 1: delay must be >= 0"),
    ({"disks": [{"cost": 1, "load": -2}], "buckets": [[0]]}, "disk 0: load must be >= 0"),
    ('{"disks": [{"cost": NaN}], "buckets": [[0]]}', "NaN is not a valid number"),
    ({"disks": [{"cost": "fast"}], "buckets": [[0]]}, "disk 0: cost must be a number"),
    ({"disks": [{"cost": 1}], "buckets": [[0], ["0"]]}, "bucket 1: disk id '0' is not an integer"),
    ({"disks": [{"cost": 1}], "buckets": [[0], 0]}, "bucket 1: expected a list of disk ids"),
    ({"disks": [{"cost": 1}], "buckets": [[True]]}, "bucket 0: disk id True is not an integer"),
    ({"disks": [{"delay": 1}], "buckets": [[0]]}, "disk 0: missing \"cost\""),
    ({"disks": [{"cost": 1, "speed": 2}], "buckets": [[0]]}, "disk 0: unknown key 'speed'"),
    ({"disks": {}, "buckets": [[0]]}, "\"disks\" must be a list"),
    ({"disks": [], "bucket": []}, "unknown key 'bucket'"),
    ([1, 2], "expected an object"),
])
def test_malformed_input_one_line_exit_2(tmp_path, capsys, document, message):
    path = _write(tmp_path, document)
    assert main(["solve", path, "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(path + ":") and message in lines[0], lines


def test_json_syntax_error_names_line(tmp_path, capsys):
    path = _write(tmp_path, '{"disks": [{"cost": 1}],\n "buckets": [[0],, ]}')
    assert main(["solve", path]) == 2
    assert capsys.readouterr().err.startswith(f"{path}:2: invalid JSON")


def test_missing_file(tmp_path, capsys):
    assert main(["solve", str(tmp_path / "absent.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_bad_thread_count(tmp_path, capsys):
    path = _write(tmp_path, REQUEST)
    assert main(["solve", path, "--algorithm", "parallel", "--threads", "0"]) == 2
    assert "threads must be an integer in 1..1024" in capsys.readouterr().err


# --- numbers and nesting no request can hold ---------------------------------------------------

NINES = "9" * 401


@pytest.mark.parametrize("document, message", [
    ('{"disks": [{"cost": %s}], "buckets": [[0]]}' % NINES,
     "number 99999999999999999999... has 401 characters (at most 100): out of range"),
    ('{"disks": [{"cost": 1.%s}], "buckets": [[0]]}' % NINES, "has 403 characters"),
    ('{"disks": [{"cost": 1}], "buckets": [[%s]]}' % NINES, "has 401 characters"),
    ('{"disks": [{"cost": 1, "delay": -%s}], "buckets": [[0]]}' % NINES, "has 402 characters"),
    ('{"disks": [{"cost": 1e400}], "buckets": [[0]]}', "number 1e400 is out of range"),
    ('{"disks": [{"cost": 1, "load": -1e999}], "buckets": [[0]]}', "number -1e999 is out of range"),
])
def test_numbers_beyond_a_double_are_one_line_naming_the_line(tmp_path, capsys, document, message):
    path = _write(tmp_path, document)
    assert main(["solve", path]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(f"{path}:1: ") and message in captured.err
    assert captured.err.count("\n") == 1


@pytest.mark.parametrize("algorithm", ["auto", "blackbox", "integrated", "parallel", "slotsearch"])
@pytest.mark.parametrize("document, message", [
    # each value is a valid double; three slots of disk 0 are not
    ({"disks": [{"cost": 1e308}, {"cost": 1}], "buckets": [[0], [0], [0], [1]]},
     "disk 0: delay + load + 3 bucket(s) x cost overflows a double"),
    ({"disks": [{"cost": 1}, {"cost": 9e307, "delay": 9e307}], "buckets": [[0, 1], [1, 0]]},
     "disk 1: delay + load + 2 bucket(s) x cost overflows a double"),
    ({"disks": [{"cost": 1, "delay": 1.5e308, "load": 1.5e308}], "buckets": [[0]]},
     "disk 0: delay + load (1.5e+308 + 1.5e+308) is too large to represent"),
])
def test_sums_of_valid_values_that_overflow_are_input_errors(tmp_path, capsys, algorithm,
                                                             document, message):
    path = _write(tmp_path, document)
    assert main(["solve", path, "--algorithm", algorithm, "--threads", "2"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"{path}: {message}: costs or times too large\n" \
        if "bucket(s)" in message else captured.err == f"{path}: {message}\n"


@pytest.mark.parametrize("document", ["[" * 100_000, '{"disks": ' + "[" * 100_000 + "]" * 100_000
                                      + ', "buckets": []}', '{"a":' * 100_000])
def test_deep_nesting_is_one_line(tmp_path, capsys, document):
    path = _write(tmp_path, document)
    assert main(["solve", path]) == 2
    assert capsys.readouterr().err == (f"{path}: invalid JSON: arrays or objects nested too "
                                       "deeply (a request nests three levels)\n")


def test_deep_nesting_through_the_command_has_no_traceback(tmp_path):
    import subprocess
    import sys
    path = _write(tmp_path, "[" * 100_000)
    done = subprocess.run([sys.executable, "-m", "scratchkeeper", "solve", path],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"{path}: invalid JSON")


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_a_device_or_fifo_is_refused_not_read(tmp_path, special):
    import os
    import subprocess
    import sys
    if special == "fifo":
        special = str(tmp_path / "fifo")
        os.mkfifo(special)
    # in a child with a deadline: reading either would never end
    done = subprocess.run([sys.executable, "-m", "scratchkeeper", "solve", special],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr == f"{special}: cannot read: not a regular file\n"
