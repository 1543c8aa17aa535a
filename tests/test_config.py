"""The one site-config schema: defaults, validation errors naming file, line and key."""

import pytest

from scratchkeeper.config import SiteConfig, describe_schema, load_config, parse_config
from scratchkeeper.errors import ConfigError


def test_defaults_without_a_file(monkeypatch, tmp_path):
    monkeypatch.delenv("SCRATCHKEEPER_CONFIG", raising=False)
    monkeypatch.setattr("scratchkeeper.config.DEFAULT_PATH", str(tmp_path / "absent.toml"))
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
