"""What deepy.py starts on every rank of a launch on this machine, in place of SCRIPT:

    python -u megatron/config_file_main.py [--local_rank=N] CONFIG_FILE SCRIPT

The merged config does not always fit on a command line (Linux refuses one argument over 128 KiB with
"Argument list too long", and a config file's long value makes one), so deepy.py writes what it would
have put in `--megatron_config` to CONFIG_FILE, a file in a private temporary folder it removes after
the launch. This reads it and runs SCRIPT exactly as `python SCRIPT [--local_rank=N] --megatron_config
<config>` would (its own __main__, sys.argv and sys.path[0]), so the ranks decode the config as before.
"""
import os
import sys

if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]  # this file's folder (megatron/): its modules must not shadow the ones SCRIPT imports

import runpy  # noqa: E402


def main() -> None:
    rank_flags = [a for a in sys.argv[1:] if a.startswith("--local_rank")]  # DeepSpeed's, for SCRIPT
    config_file, script = [a for a in sys.argv[1:] if not a.startswith("--local_rank")]
    with open(config_file) as f:
        config = f.read()
    sys.argv = [script, *rank_flags, "--megatron_config", config]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as `python SCRIPT` puts it
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
