"""A rank program that fails as RANK_FAILURE says, for the launcher-output test: `mistake` raises a
config error (one paragraph, exit 2, as every entry point does), `killed` dies of SIGKILL (as the
out-of-memory killer kills)."""
import os
import signal
import sys

sys.path.insert(0, os.getcwd())
from megatron.neox_arguments import NeoXArgs, NeoXArgsError, run_cli  # noqa: E402


def main():
    NeoXArgs.consume_args()
    if os.environ["RANK_FAILURE"] == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    raise NeoXArgsError("configs/tiny.yml:3: made-up-key: a config mistake only a rank can see.")


if __name__ == "__main__":
    sys.exit(run_cli(main))
