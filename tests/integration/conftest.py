"""The broker tests' helpers live in tests/conftest.py, shared with the container and TUI tests;
they are re-exported here for the modules that import them from this package."""

from __future__ import annotations

from tests.conftest import CLI as CLI
from tests.conftest import CliRun as CliRun
from tests.conftest import port_listening as port_listening
from tests.conftest import run_cli as run_cli
from tests.conftest import run_json as run_json
