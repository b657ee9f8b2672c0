"""megatron/progress.py: one rule for every progress display. A bar on a terminal; elsewhere a plain
line at most every interval (no `\\r` redraws piling up in a log); NEOX_PROGRESS=0: nothing."""
import io
import json

import pytest
import zstandard

from megatron.errors import NeoXArgsError
from megatron.progress import SWITCH, Progress, switched_on


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class Terminal(io.StringIO):
    def isatty(self):
        return True


def run(stream, clock, steps=100, seconds_per_step=1.0, **options):
    with Progress("L=512 nonoverlap", total=steps, unit="chunk", stream=stream, clock=clock, interval=10.0,
                  **options) as progress:
        for _ in range(steps):
            clock.now += seconds_per_step
            progress.update(1, note="1,234 tok/s")
    return stream.getvalue()


def test_off_a_terminal_a_plain_line_per_interval_with_counts_and_rate(monkeypatch):
    monkeypatch.delenv(SWITCH, raising=False)
    out = run(io.StringIO(), Clock())
    assert "\r" not in out
    lines = out.splitlines()
    assert len(lines) == 100 // 10 + 1  # one per 10 s of a 100 s task, and its totals
    assert lines[0] == "L=512 nonoverlap: 10/100 chunk (10%), 1.0 chunk/s, 1,234 tok/s, elapsed 00:10, ETA 01:30"
    assert lines[-1] == "L=512 nonoverlap: done, 100/100 chunk (100%), 1.0 chunk/s, 1,234 tok/s, elapsed 01:40"


@pytest.mark.parametrize("seconds_per_step", [0.01, 0.3, 2.5, 25.0])
def test_never_more_than_a_line_per_interval(monkeypatch, seconds_per_step):
    monkeypatch.delenv(SWITCH, raising=False)
    clock = Clock()
    lines = run(io.StringIO(), clock, steps=200, seconds_per_step=seconds_per_step).splitlines()
    progress_lines = [line for line in lines if ": done, " not in line]
    assert len(progress_lines) <= clock.now // 10.0
    assert len(lines) - len(progress_lines) == (1 if progress_lines else 0)  # a short task stays quiet


def test_unknown_total_and_byte_units(monkeypatch):
    monkeypatch.delenv(SWITCH, raising=False)
    stream, clock = io.StringIO(), Clock()
    with Progress("00.jsonl.zst", unit="B", unit_scale=True, stream=stream, clock=clock, interval=10.0) as progress:
        clock.now = 10.0
        progress.update(5_000_000)
    assert stream.getvalue().splitlines()[0] == "00.jsonl.zst: 5.00MB, 500kB/s, elapsed 00:10"


def test_switched_off_nothing_at_all_on_a_terminal_or_elsewhere(monkeypatch):
    monkeypatch.setenv(SWITCH, "0")
    assert not switched_on()
    assert run(io.StringIO(), Clock()) == ""
    assert run(Terminal(), Clock()) == ""


def test_a_terminal_gets_the_bar(monkeypatch):
    monkeypatch.delenv(SWITCH, raising=False)
    out = run(Terminal(), Clock(), steps=3)
    assert "\r" in out and "3/3" in out


def test_not_shown_and_lines_false_off_a_terminal_write_nothing(monkeypatch):
    monkeypatch.delenv(SWITCH, raising=False)
    assert run(io.StringIO(), Clock(), show=False) == ""
    stream = io.StringIO()
    with Progress("train", total=10, unit="step", stream=stream, lines=False, clock=Clock()) as progress:
        progress.update(1)
        progress.write("step 1/10 | loss 3.2")  # the caller's own lines always go out
    assert stream.getvalue() == "step 1/10 | loss 3.2\n"


def test_a_failed_task_ends_without_a_done_line(monkeypatch):
    monkeypatch.delenv(SWITCH, raising=False)
    stream, clock = io.StringIO(), Clock()
    with pytest.raises(RuntimeError):
        with Progress("tokenizing", unit="docs", stream=stream, clock=clock) as progress:
            clock.now = 11.0
            progress.update(3)
            raise RuntimeError("bad document")
    assert stream.getvalue() == "tokenizing: 3 docs, 0.3 docs/s, elapsed 00:11\n"


def test_an_unknown_switch_value_is_an_error_naming_the_variable(monkeypatch):
    monkeypatch.setenv(SWITCH, "maybe")
    with pytest.raises(NeoXArgsError, match="NEOX_PROGRESS='maybe' is neither on nor off: set it to 0"):
        Progress("x", stream=io.StringIO())


def test_preprocessing_into_a_log_writes_no_carriage_returns(tmp_path, capsys, monkeypatch):
    from megatron.data.preprocess import preprocess
    from megatron.tokenizer import make_tokenizer

    monkeypatch.delenv(SWITCH, raising=False)
    source = tmp_path / "docs.jsonl.zst"
    source.write_bytes(zstandard.ZstdCompressor().compress(
        "".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(200)).encode()))
    preprocess([str(source)], str(tmp_path / "out"), make_tokenizer("ByteLevelTokenizer"), show_progress=True)
    assert "\r" not in capsys.readouterr().err


def test_evaluation_passes_into_a_log_write_no_carriage_returns(capsys, monkeypatch):
    from megatron.evaluation.context import _ProgressBar

    monkeypatch.delenv(SWITCH, raising=False)
    with _ProgressBar("L=64 nonoverlap", 8, show=True) as progress:
        for _ in range(8):
            progress(1, 64)
    assert capsys.readouterr().err == ""  # a pass shorter than the interval prints nothing at all
