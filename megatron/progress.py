"""Progress of a long loop (training steps, evaluation chunks, preprocessed documents, downloaded bytes),
one rule for every display:

    a terminal         a bar redrawn in place (tqdm)
    anything else      a plain line every INTERVAL seconds (count, rate, ETA), and one when it ends:
                       a log file or a pipe keeps lines, where a bar's `\\r` redraws would pile up
    NEOX_PROGRESS=0    no progress display at all (results, reports and errors are printed as usual)
    progress: false    the same for one run: the config key, which an entry point hands to `follow_config`
"""
import os
import sys
import time

from tqdm import tqdm

from megatron.errors import NeoXArgsError

SWITCH = "NEOX_PROGRESS"
INTERVAL = 10.0  # seconds between two plain lines
ON, OFF = ("1", "on", "true", "yes"), ("0", "off", "false", "no")


_config_wants = True  # the run's `progress` key, once an entry point has read its config


def follow_config(progress: bool) -> None:
    """What the config's `progress` key says for this process's displays (NeoXArgs.consume_args)."""
    global _config_wants
    _config_wants = progress


def switched_on() -> bool:
    """Whether progress displays are wanted: NEOX_PROGRESS (default on) and the config's `progress` key
    both allow them; either one turns them off. A NEOX_PROGRESS value it does not know is an error."""
    value = os.environ.get(SWITCH, "1").strip().lower()
    if value in ON or value in OFF:
        return value in ON and _config_wants
    raise NeoXArgsError(f"environment variable {SWITCH}={os.environ[SWITCH]!r} is neither on nor off: set it to 0 "
                        f"to turn every progress display off, or 1 (the default) to keep them; or unset it.")


def is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


class Progress:
    """`with Progress("L=512 nonoverlap", total=64, unit="chunk") as progress: progress.update(1, note="...")`.
    `show=False` (another rank, a --no-progress flag) displays nothing; `lines=False` keeps the bar on a
    terminal but prints no plain lines elsewhere (training, whose report lines are its log already).
    `write(line)` prints a line of the caller's own to the same stream without tearing the bar."""

    def __init__(self, desc: str, total: float | None = None, unit: str = "it", *, show: bool = True,
                 stream=None, initial: float = 0, unit_scale: bool = False, lines: bool = True,
                 interval: float = INTERVAL, clock=time.monotonic):
        self.stream = stream or sys.stderr
        self.desc, self.total, self.unit, self.unit_scale = desc, total, unit, unit_scale
        self.count, self.initial, self.note = initial, initial, ""
        self.interval, self.clock = interval, clock
        self.began = self.last_line = clock()
        self.lines_written = 0
        self.bar = None
        wanted = show and switched_on()
        if wanted and is_terminal(self.stream):
            self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, unit_scale=unit_scale,
                            dynamic_ncols=True, file=self.stream)
        self.plain = wanted and self.bar is None and lines

    def __enter__(self):
        return self

    def __exit__(self, error_type, *exc):
        self.close(finished=error_type is None)

    def update(self, n: float = 1, note: str | None = None) -> None:
        """`n` more done; `note` (e.g. "1,234 tok/s") replaces the previous one."""
        self.count += n
        if note is not None:
            self.note = note
        if self.bar is not None:
            self.bar.update(n)
            if note is not None:
                self.bar.set_postfix_str(note, refresh=False)
        elif self.plain and self.clock() - self.last_line >= self.interval:
            self._line()

    def write(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def close(self, finished: bool = True) -> None:
        """End the display; a long task's plain lines end with its totals (a short one's stay quiet, and a
        failed one's error says the rest)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.plain and self.lines_written and finished:
            self._line(done=True)
        self.plain = False

    def _line(self, done: bool = False) -> None:
        now = self.clock()
        elapsed = now - self.began
        rate = (self.count - self.initial) / elapsed if elapsed > 0 else 0.0
        unit = self.unit if self.unit_scale else " " + self.unit  # 5.00MB, 12 docs
        done_of = f"{self._number(self.count)}/{self._number(self.total)}" if self.total else self._number(self.count)
        fields = [done_of + unit + (f" ({100 * self.count / self.total:.0f}%)" if self.total else ""),
                  f"{self._number(rate, rate=True)}{unit}/s"]
        if self.note:
            fields.append(self.note)
        fields.append(f"elapsed {tqdm.format_interval(elapsed)}")
        if self.total and rate > 0 and not done:
            fields.append(f"ETA {tqdm.format_interval((self.total - self.count) / rate)}")
        print(f"{self.desc}: {'done, ' if done else ''}{', '.join(fields)}", file=self.stream, flush=True)
        self.last_line = now
        self.lines_written += 1

    def _number(self, value: float, rate: bool = False) -> str:
        if self.unit_scale:
            return tqdm.format_sizeof(value)
        return f"{value:,.1f}" if rate and value < 10 else f"{value:,.0f}"
