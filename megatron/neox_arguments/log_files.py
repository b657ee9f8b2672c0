"""`log-dir`: as in GPT-NeoX, every process of a run also writes what it prints into files there, so
that the output of each rank is kept when the console's is lost or interleaved. GPT-NeoX writes one
pair of files per host, which its ranks share; here each rank has its own pair:

    <log-dir>/<host>_rank<R>_stdout.txt, <log-dir>/<host>_rank<R>_stderr.txt   (appended to, never replaced)

What Python prints (sys.stdout, sys.stderr) is copied; what native code writes to the file descriptors
directly (a C++ library's own messages) reaches the console only."""
import os
import socket
import sys

from .errors import NeoXArgsError
from megatron.quoting import quote


class Tee:
    """A text stream that writes to `stream` (the console) and to `log` (a file)."""

    def __init__(self, stream, log):
        self.stream, self.log = stream, log

    def write(self, text: str) -> int:
        self.stream.write(text)
        self.log.write(text)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()
        self.log.flush()

    def isatty(self) -> bool:
        # Progress displays then print plain lines (megatron/progress.py), which read well in the file,
        # instead of a bar whose `\r` redraws would pile up there.
        return False

    def __getattr__(self, name):  # encoding, fileno, ...: the console's
        return getattr(self.stream, name)


def log_file_names(log_dir: str, rank: int) -> tuple[str, str]:
    prefix = os.path.join(log_dir, f"{socket.gethostname()}_rank{rank}")
    return prefix + "_stdout.txt", prefix + "_stderr.txt"


def start_log_files(args) -> None:
    """Copy this process's stdout and stderr into its files in `log-dir`, when it is set."""
    if args.log_dir is None:
        return
    try:
        os.makedirs(args.log_dir, exist_ok=True)
        out, err = (open(name, "a", buffering=1, encoding="utf-8", errors="replace")
                    for name in log_file_names(args.log_dir, args.rank))
    except OSError as error:
        raise NeoXArgsError(f"{args.where('log_dir')}: log-dir: cannot write this process's log files in "
                            f"{quote(args.log_dir)} ({error.strerror}). Give a folder this process can create and "
                            "write, or remove log-dir.") from None
    sys.stdout, sys.stderr = Tee(sys.stdout, out), Tee(sys.stderr, err)
