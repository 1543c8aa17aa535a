"""The one site-config schema: defaults, validation errors naming file, line and key."""

import subprocess
import sys
from pathlib import Path

import pytest

from scratchkeeper.config import SiteConfig, describe_schema, load_config, parse_config, slurm_time_seconds
from scratchkeeper.errors import ConfigError


def test_defaults_without_a_file(monkeypatch, tmp_path):
    monkeypatch.delenv("SCRATCHKEEPER_CONFIG", raising=False)
    monkeypatch.setattr("scratchkeeper.config.loader.DEFAULT_PATH", str(tmp_path / "absent.toml"))
    assert load_config() == SiteConfig()


def test_a_named_file_that_is_missing_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_config(tmp_path / "nope.toml")


def test_values_and_nested_partitions():
    config = parse_config("""
[scheduler]
kind = "pbs"
[retry]
attempts = 5
delay = 2
[replication]
alpha = 0.25
[replication.partitions.big]
threshold = 0.05
""", "site.toml")
    assert config.scheduler.kind == "pbs" and config.retry.attempts == 5
    assert config.retry.delay == 2.0 and isinstance(config.retry.delay, float)
    assert config.replication.partitions["big"].threshold == 0.05
    assert config.replication.partitions["big"].alpha is None
    assert config.source == "site.toml"


@pytest.mark.parametrize("text, message, line", [
    ('[scheduler]\nkind = "lsf"\n', "key 'scheduler.kind': expected one of 'slurm', 'pbs', got 'lsf'", 2),
    ('[storage]\n\nbogus = 1\n', "unknown key 'storage.bogus'", 3),
    ('[retry]\nattempts = 0\n', "key 'retry.attempts': expected a value >= 1, got 0", 2),
    ('[retry]\nattempts = 1.5\n', "expected an integer", 2),
    ('[replication]\nalpha = "x"\n', "key 'replication.alpha': expected a number, got 'x'", 2),
    ('[replication]\nalpha = 0\n', "expected a value > 0", 2),
    ('[replication]\nthreshold = 2\n', "expected a value <= 1", 2),
    ('[scheduler]\nkill_on_invalid_dependency = "yes"\n', "expected true or false", 2),
    ('[transfer]\ncurl_options = "-k"\n', "expected a list of strings", 2),
    ('scheduler = 3\n', "key 'scheduler': expected a table", 1),
    ('[scheduler\n', "not valid TOML", 1),
])
def test_errors_name_file_line_and_key(text, message, line):
    with pytest.raises(ConfigError) as info:
        parse_config(text, "site.toml")
    assert message in str(info.value)
    assert str(info.value).startswith(f"site.toml:{line}: ")
    assert info.value.exit_code == 2


def test_schema_lists_every_key_with_a_doc():
    rows = describe_schema()
    names = [r[0] for r in rows]
    assert "scheduler.kind" in names and "recovery.probe_timeout" in names
    assert all(doc for *_, doc in rows)


def test_example_site_config_is_valid():
    from pathlib import Path
    example = Path(__file__).parent.parent / "site-config" / "site.toml.example"
    config = load_config(example)
    assert config.scheduler.data_queue == "dataxfer"


# --- bad input: every key of a kind is held to the kind's rule --------------------------------

def _keys(cls=SiteConfig, prefix=""):
    """``(dotted key, type hint, metadata)`` of every key, a partition override included."""
    import dataclasses
    import typing

    from scratchkeeper.config import PartitionReplication

    hints = typing.get_type_hints(cls)
    for fld in dataclasses.fields(cls):
        if fld.metadata.get("internal"):
            continue
        hint = hints[fld.name]
        if dataclasses.is_dataclass(hint):
            yield from _keys(hint, f"{prefix}{fld.name}.")
        elif typing.get_origin(hint) is dict and typing.get_args(hint)[1] is PartitionReplication:
            yield from _keys(PartitionReplication, f"{prefix}{fld.name}.big.")
        elif typing.get_origin(hint) is dict:
            yield f"{prefix}{fld.name}.fast", typing.get_args(hint)[1], fld.metadata
        else:
            yield prefix + fld.name, hint, fld.metadata


def _kind(hint) -> str:
    import typing
    if typing.get_origin(hint) is list:
        return "list"
    inner = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    return getattr(inner[0], "__name__", str(inner[0]))


def _setting(dotted: str, value: str) -> str:
    section, _, key = dotted.rpartition(".")
    return f"# a comment first\n[{section}]\n{key} = {value}\n"


def _rejected(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "site.toml")
    assert info.value.exit_code == 2 and "\n" not in str(info.value)
    return str(info.value)


NUMBER_KEYS = [(k, _kind(h)) for k, h, _ in _keys() if _kind(h) in ("int", "float")]
STRING_KEYS = [k for k, h, _ in _keys() if _kind(h) == "str"]
PATH_KEYS = [k for k, _, meta in _keys() if meta.get("path")]


def test_the_schema_has_the_keys_the_rules_are_about():
    assert {"retry.delay", "replication.partitions.big.alpha"} <= {k for k, _ in NUMBER_KEYS}
    assert {"storage.scratch_root", "storage.store_root", "state.database", "recovery.socket",
            "templates.directory"} <= set(PATH_KEYS)


@pytest.mark.parametrize("dotted", [k for k, kind in NUMBER_KEYS if kind == "float"])
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "+inf", "1e400"])
def test_every_float_key_refuses_what_is_not_finite(dotted, value):
    message = _rejected(_setting(dotted, value))
    assert message.startswith(f"site.toml:3: key '{dotted}': expected a finite number")


@pytest.mark.parametrize("dotted, kind", NUMBER_KEYS)
def test_every_number_key_has_a_sane_upper_bound(dotted, kind):
    message = _rejected(_setting(dotted, str(10 ** 30)))
    assert message.startswith(f"site.toml:3: key '{dotted}': expected ")
    assert "got 1000000000000000000000000000000" in message


@pytest.mark.parametrize("dotted", STRING_KEYS)
@pytest.mark.parametrize("value", [r'"a\u0000b"', r'"a\nb"', r'"a\rb"', r'"\u001b[2J"',
                                   # C1 controls and Unicode line breaks (issue 30): NEL, CSI,
                                   # line and paragraph separators, a right-to-left override
                                   r'"a\u0085b"', r'"a\u009bb"', r'"a\u2028b"', r'"a\u2029b"',
                                   r'"x\u202ehs.bat"'])
def test_no_string_key_takes_control_characters(dotted, value):
    message = _rejected(_setting(dotted, value))
    assert message.startswith(f"site.toml:3: key '{dotted}': expected ")
    assert "control or line-breaking characters" in message


@pytest.mark.parametrize("dotted", [k for k, h, _ in _keys() if _kind(h) == "list"])
@pytest.mark.parametrize("item", [r'"x\ny"', r'"x\u0085y"', r'"x\u2028y"'])
def test_no_option_list_takes_control_characters(dotted, item):
    message = _rejected(_setting(dotted, f'["-q", {item}]'))
    assert message.startswith(f"site.toml:3: key '{dotted}': expected strings without control")


def test_ordinary_unicode_is_still_a_string():
    config = parse_config('[scheduler]\ndata_queue = "daten-\u00fcbertragung"\n', "site.toml")
    assert config.scheduler.data_queue == "daten-\u00fcbertragung"


@pytest.mark.parametrize("root", ["/", "//", "///", "/.", "/./", "//./.", "/./."])
@pytest.mark.parametrize("dotted", ["storage.scratch_root", "storage.store_root"])
def test_no_spelling_of_the_root_is_a_scratch_or_store_root(dotted, root):
    """``//`` once passed the ``/`` check and turned confinement to the scratch root off."""
    message = _rejected(_setting(dotted, f'"{root}"'))
    assert message.startswith(f"site.toml:3: key '{dotted}': expected a folder other than /")


@pytest.mark.parametrize("dotted", PATH_KEYS)
def test_every_path_key_is_held_normalised(dotted):
    section, _, key = dotted.rpartition(".")
    value = "//run/./sk//x.sock/" if dotted == "recovery.socket" else "//srv/./sk//data/"
    config = parse_config(_setting(dotted, f'"{value}"'), "site.toml")
    held = getattr(getattr(config, section), key)
    assert held == ("/run/sk/x.sock" if dotted == "recovery.socket" else "/srv/sk/data")


@pytest.mark.parametrize("dotted", PATH_KEYS)
@pytest.mark.parametrize("value", ["relative/path", "./x", "x", "/var/../etc/x"])
def test_every_path_key_wants_an_absolute_path(dotted, value):
    message = _rejected(_setting(dotted, f'"{value}"'))
    assert message.startswith(f"site.toml:3: key '{dotted}': expected ")
    assert "absolute" in message or "'..'" in message


@pytest.mark.parametrize("text, message, line", [
    ('[storage]\nstripe_size = 100000\n', "key 'storage.stripe_size': expected a multiple of "
     "65536 (64 KiB), got 100000", 2),
    ('[storage]\nstripe_size = 4294967296\n', "key 'storage.stripe_size': expected a value <=", 2),
    ('[storage]\nstripe_count = 0\n', "key 'storage.stripe_count': expected -1 (all OSTs)", 2),
    ('[scheduler]\ndata_walltime = "1 hour"\n', "key 'scheduler.data_walltime': expected a "
     "Slurm time limit", 2),
    ('[scheduler]\ndata_walltime = "01:61:00"\n', "key 'scheduler.data_walltime'", 2),
    ('[scheduler]\ndata_walltime = "1-25:00"\n', "key 'scheduler.data_walltime'", 2),
    ('[scheduler]\ndata_walltime = "0"\n', "key 'scheduler.data_walltime'", 2),
    ('[scheduler]\ndata_walltime = "400-00:00:00"\n', "key 'scheduler.data_walltime'", 2),
    ('[scheduler]\ndata_walltime = "UNLIMITED"\n', "key 'scheduler.data_walltime'", 2),
    ('[scheduler]\ndata_walltime = "01:00:00 --uid=0"\n', "key 'scheduler.data_walltime'", 2),
    ('[storage]\nost_count = 8\npools = { fast = "4-9" }\n', "key 'storage.pools.fast': OSTs "
     "[8, 9] beyond storage.ost_count = 8", 3),
    ('[storage]\n\n[storage.pools]\nfast = "8"\n', "OSTs [8] beyond storage.ost_count = 8", 4),
    ('[storage]\nost_count = 4\n[storage.pools]\nfast = "0-3"\nslow = "3,4"\n',
     "key 'storage.pools.slow': OSTs [4] beyond storage.ost_count = 4", 5),
    ('[storage.pools]\nfast = "7-4"\n', "key 'storage.pools.fast': expected OST indices like "
     "\"0-3,8\" (range '7-4' runs backwards)", 2),
    ('[storage.pools]\nfast = ""\n', "key 'storage.pools.fast': expected OST indices", 2),
    ('[storage.pools]\nfast = "1,,2"\n', "key 'storage.pools.fast': expected OST indices", 2),
    ('[storage.pools]\nfast = "0x3"\n', "key 'storage.pools.fast': expected OST indices", 2),
    ('[storage.pools]\nfast = "-1"\n', "key 'storage.pools.fast': expected OST indices", 2),
    ('[storage.pools]\nfast = "1-2-3"\n', "key 'storage.pools.fast': expected OST indices", 2),
    ('[storage.pools]\nfast = "1,1"\n', "key 'storage.pools.fast': expected each OST once", 2),
    ('[storage.pools]\n"a b" = "1"\n', "key 'storage.pools.a b': expected a name", 2),
    ('[storage]\nscratch_root = "/"\n', "key 'storage.scratch_root': expected a folder other "
     "than /", 2),
    (f'[recovery]\nsocket = "/run/{"s" * 120}.sock"\n', "key 'recovery.socket': expected a "
     "socket path of at most 107 bytes", 2),
    ('[replication]\npartitions = { big = { threshold = nan } }\n',
     "key 'replication.partitions.big.threshold': expected a finite number, got nan", 2),
    ('storage.stripe_size = 100000\n', "key 'storage.stripe_size': expected a multiple", 1),
    ('[retry]\ndelay = 1' + '0' * 400 + '\n', "key 'retry.delay': expected a number of at most "
     "2**53, got 1" + "0" * 59 + "... "
     "(401 characters)", 2),
    ('[retry]\nattempts = 1' + '0' * 400 + '\n', "key 'retry.attempts': expected a value <= 100",
     2),
])
def test_bad_values_are_one_line_naming_file_line_and_key(text, message, line):
    error = _rejected(text)
    assert error.startswith(f"site.toml:{line}: ") and message in error


@pytest.mark.parametrize("walltime", ["30", "90", "45:30", "01:00:00", "100:00:00", "2-12",
                                      "2-12:30", "1-00:00:00", "365-00:00:00"])
def test_slurm_time_forms_are_accepted(walltime):
    config = parse_config(f'[scheduler]\ndata_walltime = "{walltime}"\n', "site.toml")
    assert config.scheduler.data_walltime == walltime


@pytest.mark.parametrize("walltime", ["\u0663\u0660", "1-\u0661\u0662", "9" * 5000,
                                      "9" * 5000 + ":00:00", "1-99:99:99"])
def test_slurm_times_in_other_scripts_digits_or_too_long_to_convert_are_refused(walltime):
    error = _rejected(f'[scheduler]\ndata_walltime = "{walltime}"\n')
    assert error.startswith("site.toml:2: key 'scheduler.data_walltime': expected a Slurm time")
    assert slurm_time_seconds(walltime) is None


def test_pools_of_a_lustre_site_are_not_held_to_the_local_ost_count():
    config = parse_config('[storage]\nbackend = "lustre"\n[storage.pools]\nflash = "100-103"\n',
                          "site.toml")
    assert config.storage.pools == {"flash": "100-103"}
    assert "beyond storage.ost_count" in _rejected(
        '[storage]\nbackend = "local"\n[storage.pools]\nflash = "100-103"\n')


def test_good_pools_and_an_empty_template_folder_pass():
    config = parse_config('[storage]\nost_count = 16\n[storage.pools]\nflash = "0-3, 8"\n'
                          'all = "0-15"\n[templates]\ndirectory = ""\n', "site.toml")
    assert config.storage.pools == {"flash": "0-3, 8", "all": "0-15"}


def test_nesting_too_deep_for_the_parser_is_an_input_error():
    error = _rejected("[storage]\nstripe_size = 65536\nx = " + "[" * 100_000 + "\n")
    assert error.startswith("site.toml:3: not valid TOML: arrays or tables nested too deeply")


def test_bytes_that_are_not_utf8_name_line_and_key(tmp_path):
    path = tmp_path / "site.toml"
    path.write_bytes(b'[scheduler]\nkind = "slurm"\nbatch_queue = "b\xff\xfeq"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (f"{path}:3: key 'scheduler.batch_queue': not UTF-8: byte 0xff "
                               "at column 17")


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/null", "fifo", "folder"])
def test_only_a_regular_file_is_read(tmp_path, special):
    import os
    if special == "fifo":
        special = str(tmp_path / "fifo")
        os.mkfifo(special)  # nobody writes: opening it for reading would block
    elif special == "folder":
        special = str(tmp_path)
    # in a child with a deadline: reading a device or a FIFO would never end
    done = subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", special, "config"],
                          capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).parent.parent)
    assert done.returncode == 2 and done.stderr == f"{special}: cannot read: not a regular file\n"


def test_a_file_far_larger_than_a_config_is_refused(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text("# padding\n" * 200_000)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    # named by the line the 1 MiB limit falls on: 10 bytes a line
    assert str(info.value) == (f"{path}:{(1 << 20) // 10 + 1}: larger than 1 MiB: not a site "
                               "configuration")


@pytest.mark.parametrize("content, expected", [
    (b'[retry]\ndelay = inf\n', ":2: key 'retry.delay': expected a finite number, got inf"),
    (b'[storage]\nstripe_size = 100000\n', ":2: key 'storage.stripe_size': expected a multiple"),
    (b'[state]\ndatabase = "state.db"\n', ":2: key 'state.database': expected an absolute"),
    (b'[scheduler]\ndata_queue = "q\xe9"\n', ":2: key 'scheduler.data_queue': not UTF-8"),
    (b'[scheduler]\ndata_walltime = "soon"\n', ":2: key 'scheduler.data_walltime': expected"),
])
def test_the_config_command_exits_2_with_one_line(tmp_path, content, expected):
    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    done = subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", str(path), "config"],
                          capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parent.parent)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and done.stderr.startswith(str(path) + expected)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_an_integer_too_long_to_convert_is_an_input_error():
    error = _rejected("[retry]\nattempts = 3\n\ndelay = 1" + "0" * 5000 + "\n")
    assert error == ("site.toml:4: not valid TOML: Exceeds the limit (4300 digits) for integer "
                     "string conversion")


COMMAND_KEYS = ["storage.lfs", "storage.lctl", "transfer.globus_url_copy", "transfer.curl",
                "transfer.scp", "transfer.cp"]


@pytest.mark.parametrize("dotted", COMMAND_KEYS)
@pytest.mark.parametrize("value", ["./cp", "bin/cp", "", "-rf", "cp -r"])
def test_command_keys_take_a_name_or_an_absolute_path(dotted, value):
    message = _rejected(_setting(dotted, f'"{value}"'))
    assert message.startswith(f"site.toml:3: key '{dotted}': expected a command name (found on "
                              "PATH) or an absolute path")


@pytest.mark.parametrize("dotted", COMMAND_KEYS)
def test_command_keys_accept_names_and_absolute_paths(dotted):
    for value in ("tool", "/opt/bin/tool"):
        config = parse_config(_setting(dotted, f'"{value}"'), "site.toml")
        section, key = dotted.split(".")
        assert getattr(getattr(config, section), key) == value


def test_templates_command_starts_with_a_name_or_an_absolute_path():
    assert _rejected('[templates]\ncommand = "./venv/bin/scratchkeeper"\n').startswith(
        "site.toml:2: key 'templates.command': expected a command line starting with a command")
    config = parse_config('[templates]\ncommand = "/usr/bin/env scratchkeeper"\n', "site.toml")
    assert config.templates.command == "/usr/bin/env scratchkeeper"


@pytest.mark.parametrize("command", [["status"], ["store", "df"], ["plan", "/etc/hostname"],
                                     ["replay", "trace.swf"]])
def test_every_command_stops_on_a_bad_config_alike(tmp_path, command):
    path = tmp_path / "bad.toml"
    path.write_text('[storage]\nscratch_root = "/scratch"\n[retry]\ndelay = inf\n')
    done = subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", str(path), *command],
                          capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parent.parent)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"{path}:4: key 'retry.delay': expected a finite number, got inf\n"


def test_pools_as_tiers():
    from scratchkeeper.config import tier_pools

    config = parse_config('[storage]\nost_count = 16\ntier_order = ["flash", "disk"]\n'
                          '[storage.pools]\nssd = "0-3"\nhdd = "4-11"\nhdd2 = "12-15"\n'
                          '[storage.pool_tiers]\nssd = "flash"\nhdd = "disk"\nhdd2 = "disk"\n',
                          "site.toml")
    assert config.storage.tier_order == ["flash", "disk"]
    # slowest first: the order of placement buckets
    assert tier_pools(config.storage) == [("disk", ["hdd", "hdd2"]), ("flash", ["ssd"])]
    # pools without a class stay as they were
    assert tier_pools(parse_config('[storage.pools]\nflash = "0-3"\n', "site.toml").storage) == []


@pytest.mark.parametrize("text, message, line", [
    ('[storage]\ntier_order = ["flash"]\n[storage.pools]\nssd = "0-3"\n'
     '[storage.pool_tiers]\nnvme = "flash"\n',
     "key 'storage.pool_tiers.nvme': no pool 'nvme' in storage.pools (pools: ssd)", 6),
    ('[storage]\ntier_order = ["disk"]\n[storage.pools]\nssd = "0-3"\n'
     '[storage.pool_tiers]\nssd = "flash"\n',
     "key 'storage.pool_tiers.ssd': class 'flash' is not in storage.tier_order (['disk'])", 6),
    ('[storage]\ntier_order = ["flash", "flash"]\n[storage.pools]\nssd = "0-3"\n'
     '[storage.pool_tiers]\nssd = "flash"\n',
     "key 'storage.tier_order': expected each class once, got 'flash'", 2),
    ('[storage]\ntier_order = ["flash", "tape"]\n[storage.pools]\nssd = "0-3"\n'
     '[storage.pool_tiers]\nssd = "flash"\n',
     "key 'storage.tier_order': expected a class some pool has in storage.pool_tiers, got 'tape'",
     2),
    ('[storage]\ntier_order = ["fl ash"]\n', "key 'storage.tier_order': expected a performance "
     "class of 1 to 64 letters", 2),
    ('[storage.pools]\nssd = "0-3"\n[storage.pool_tiers]\nssd = "fl/ash"\n',
     "key 'storage.pool_tiers.ssd': expected a performance class of 1 to 64 letters", 4),
])
def test_bad_tiers_name_file_line_and_key(text, message, line):
    error = _rejected(text)
    assert error.startswith(f"site.toml:{line}: {message}"), error
