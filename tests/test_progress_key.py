"""The `progress` config key (logging group): false turns every progress display of the run off, as
NEOX_PROGRESS=0 does for every command; either one turns them off."""
import io
import sys

import pytest

import megatron.progress
from megatron.neox_arguments import NeoXArgs
from megatron.progress import SWITCH, Progress, switched_on
from tests.support.training import REPO_ROOT, TINY


class Terminal(io.StringIO):
    def isatty(self):
        return True


def shown(stream) -> str:
    with Progress("L=64 nonoverlap", total=3, unit="chunk", stream=stream, interval=0.0) as progress:
        for _ in range(3):
            progress.update(1)
    return stream.getvalue()


@pytest.fixture
def entry_point(monkeypatch):
    """consume_args as train.py calls it; the process-wide switch put back afterwards."""
    monkeypatch.setattr(sys.modules["__main__"], "__file__", str(REPO_ROOT / "train.py"), raising=False)
    monkeypatch.setattr(megatron.progress, "_config_wants", True)
    monkeypatch.delenv(SWITCH, raising=False)
    return lambda *flags: NeoXArgs.consume_args([str(TINY), *flags])


def test_progress_is_on_by_default(entry_point):
    assert entry_point().progress is True and switched_on()
    assert "L=64 nonoverlap: " in shown(io.StringIO()) and "chunk" in shown(Terminal())


def test_progress_false_turns_every_display_off(entry_point):
    args = entry_point("--set", "progress=false")
    assert args.progress is False and not switched_on()
    assert shown(io.StringIO()) == "" and shown(Terminal()) == ""


def test_either_switch_turns_them_off(entry_point, monkeypatch):
    entry_point()
    monkeypatch.setenv(SWITCH, "0")
    assert not switched_on()
    monkeypatch.setenv(SWITCH, "1")
    entry_point("--set", "progress=false")
    assert not switched_on()


def test_progress_must_be_true_or_false(entry_point):
    from megatron.neox_arguments import NeoXArgsError
    with pytest.raises(NeoXArgsError, match="command line: progress must be true or false, got 'sometimes'"):
        entry_point("--set", "progress=sometimes")
