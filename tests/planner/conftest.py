import pytest

from scratchkeeper.config import SiteConfig
from scratchkeeper.planner import render


@pytest.fixture
def fixed_callback(monkeypatch):
    """Data jobs call back as plain `scratchkeeper`, so rendered scripts are machine-independent."""
    monkeypatch.setattr(render, "scratchkeeper_argv", lambda config=None: ["scratchkeeper"])


@pytest.fixture
def config():
    return SiteConfig()
