#!/usr/bin/env python
"""Launch a NeoX script on every rank: `python deepy.py train.py [-d DIR] CONFIG... [--set K=V]...`

Merges and validates the YAML configs, checks that every file SCRIPT will read exists (data, tokenizer
files, the `load` checkpoint: megatron/run/preflight.py), then hands SCRIPT and the merged config to
DeepSpeed's launcher: on this machine in a private temporary file (`SCRIPT --megatron_config_file
FILE`), which no command-line length limit applies to; to ranks on other machines (a
hostfile) as base64 JSON in `--megatron_config`. Without GPUs it runs on DeepSpeed's CPU accelerator
(gloo) and `num_gpus` counts processes. `--dry-run` prints the config, the DeepSpeed JSON, the launcher
command and what the input check found, and launches nothing.
"""
import argparse
import contextlib
import json
import os
import pathlib
import shlex
import shutil
import signal
import sys
import tempfile
import time
import typing

from megatron.neox_arguments.to_length_schedule import length_schedule_of
from megatron.model.layer_pattern import describe_layers, per_layer_modules, training_plans
from megatron.neox_arguments import NeoXArgs, NeoXArgsError, encode_config, parse_overrides, run_cli
from megatron.neox_arguments.run_folder import describe_outputs
from megatron.run.preflight import READS, PreflightError, check_inputs, reads
from megatron.progress import switched_on

# Upstream deepy.py's own overrides, kept for users' scripts.
CLI_OVERRIDES = ("wandb_group", "wandb_run_name", "iteration", "hostfile", "eval_tasks")
CONFIG_FILE = "CONFIG_FILE"  # stands for the temporary file in --dry-run's command
ARGUMENT_LIMIT = 128 * 1024  # Linux's MAX_ARG_STRLEN: the longest one command-line argument may be


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Validate NeoX configs and launch SCRIPT on every rank with DeepSpeed.")
    parser.add_argument("script", help="the program every rank runs, e.g. train.py or evaluate.py")
    parser.add_argument("configs", nargs="+", help="YAML config files, merged in order (later wins)")
    parser.add_argument("-d", "--conf_dir", help="directory prefixed to every config name")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key (repeatable); beats every file")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the merged config, DeepSpeed JSON and launcher command; launch nothing")
    parser.add_argument("-H", "--hostfile", help="MPI-style hostfile (`host slots=N` per line)")
    parser.add_argument("--wandb_group")
    parser.add_argument("--wandb_run_name")
    parser.add_argument("--iteration", type=int, help="checkpoint step to load")
    parser.add_argument("--eval_tasks", nargs="+", help="lm-evaluation-harness tasks for eval.py")
    return parser.parse_intermixed_args(argv)


def config_paths(names, conf_dir):
    paths = []
    for name in names:
        path = pathlib.Path(conf_dir, name) if conf_dir else pathlib.Path(name)
        if path.suffix not in (".yml", ".yaml", ".json") and not path.is_dir():  # a folder: say so, not "x.yml"
            path = path.with_name(path.name + ".yml")
        paths.append(path)
    return paths


def read_hostfile(path):
    """{host: slots} from an MPI-style hostfile; None when there is none."""
    if not path or not os.path.isfile(path):
        return None
    hosts = {}
    for number, line in enumerate(open(path), 1):
        line = line.split("#")[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].startswith("slots="):
            raise NeoXArgsError(f"{path} line {number}: '{line}' is not `HOST slots=N`. Fix the hostfile.")
        hosts[parts[0]] = int(parts[1].split("=", 1)[1])
    return hosts


def launch_world_size(values, hostfile):
    """How many ranks the launcher will start, for deriving batch sizes before launch."""
    num_gpus, num_nodes = values.get("num_gpus"), values.get("num_nodes", -1)
    hosts = read_hostfile(hostfile)
    if hosts:
        slots = list(hosts.values())[: num_nodes if num_nodes and num_nodes > 0 else None]
        return sum(num_gpus or s for s in slots)
    if num_gpus:
        return num_gpus * max(num_nodes, 1)
    import torch
    return torch.cuda.device_count() or 1


def on_other_machines(neox_args, hostfile) -> bool:
    """Whether ranks may run on other machines (a hostfile, force_multi): they may see other file systems."""
    return bool(read_hostfile(hostfile) or neox_args.force_multi)


def runner_arguments(args: NeoXArgs, hostfile, script, config_file=None):
    """The argv for `deepspeed.launcher.runner`, from the launcher keys; the ranks read the config from
    `config_file` when given, else from the command line."""
    argv = []
    if hostfile:
        argv += ["--hostfile", hostfile]
    if args.include:
        argv += ["--include", args.include]
    if args.exclude:
        argv += ["--exclude", args.exclude]
    if not (args.include or args.exclude):
        argv += ["--num_nodes", str(args.num_nodes)]
        if args.num_gpus is not None:
            argv += ["--num_gpus", str(args.num_gpus)]
    # DeepSpeed's own log lines repeat the whole command, config blob included (its one ERROR line, when a
    # rank fails, carries nothing else but the status, which `launch` reports in words); `--dry-run`
    # prints the command once.
    argv += ["--master_port", str(args.master_port), "--launcher", args.launcher, "--log_level", "critical"]
    master_addr = args.master_addr or os.environ.get("MASTER_ADDR")
    if master_addr:
        argv += ["--master_addr", master_addr]
    if args.force_multi:
        argv.append("--force_multi")
    if args.no_ssh_check:
        argv.append("--no_ssh_check")
    if config_file:
        return argv + [script, "--megatron_config_file", config_file]
    return argv + [script, "--megatron_config", command_line_config(args)]


def command_line_config(args: NeoXArgs) -> str:
    """The config as one command-line argument, for ranks on other machines; a config longer than one
    argument may be is refused here, naming its longest value, instead of failing to launch."""
    encoded = encode_config(args)
    if len(encoded) < ARGUMENT_LIMIT:
        return encoded
    key, value = max(args.user_values().items(), key=lambda item: len(json.dumps(item[1], default=str)))
    raise NeoXArgsError(
        f"the merged config takes {len(encoded):,} bytes on the command line (compressed, base64), more than the "
        f"{ARGUMENT_LIMIT:,} one argument may hold, and ranks on other machines (hostfile or force_multi) get it "
        f"only there. Its longest value is {key.replace('_', '-')} ({len(json.dumps(value, default=str)):,} bytes, "
        f"{args.config_sources.get(key, 'the config')}): shorten it, or launch on one machine, where the config "
        "travels in a file.")


@contextlib.contextmanager
def config_file(neox_args):
    """The config's path for this launch's ranks: a file in a private folder (mode 700), removed after."""
    folder = tempfile.mkdtemp(prefix="neox-config-")
    try:
        path = pathlib.Path(folder) / "megatron_config"
        path.write_text(encode_config(neox_args))
        yield str(path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv=None):
    cli = parse_args(sys.argv[1:] if argv is None else argv)
    switched_on()  # a mistyped NEOX_PROGRESS stops here, not in every rank
    overrides = parse_overrides(cli.set)
    for key in CLI_OVERRIDES:
        if getattr(cli, key) is not None:
            if key in overrides:
                raise NeoXArgsError(f"--{key} and --set {key}=... both set {key}; give it once.")
            overrides[key] = getattr(cli, key)

    from megatron.neox_arguments.yaml_loader import load_config_files
    values, _, _ = load_config_files(config_paths(cli.configs, cli.conf_dir))
    values.update(overrides)
    hostfile = values.get("hostfile") or os.environ.get("DLTS_HOSTFILE")
    world_size = launch_world_size(values, hostfile)
    neox_args = NeoXArgs.from_ymls(config_paths(cli.configs, cli.conf_dir), overrides, world_size)
    if not os.path.isfile(cli.script):
        raise NeoXArgsError(f"Script {cli.script} does not exist; give the program to launch first, "
                            "e.g. `python deepy.py train.py configs/tiny.yml`.")
    local = not on_other_machines(neox_args, hostfile)
    runner_argv = runner_arguments(neox_args, hostfile, cli.script, CONFIG_FILE if local else None)
    if neox_args.upstream_notice():  # once, here: the ranks get the translated config
        print(neox_args.upstream_notice() + "\n", flush=True)
    inputs = input_report(neox_args, cli.script, hostfile)

    if cli.dry_run:
        # The model's positional modules and attention plans first: a method that refuses its options (or the
        # attention a wrapper needs) says so before anything is printed, as it would stop the launch.
        model = neox_args.model  # its layers: the embedding rows are the tokenizer's, built by the ranks
        layers = describe_layers(model) if neox_args.layer_pattern or per_layer_modules(model) else None
        plans = training_plans(model, neox_args.seq_length, neox_args.train_micro_batch_size_per_gpu or 1,
                               neox_args.reset_attention_mask)
        print("# NeoX config (key, value, where it was set)")
        print(neox_args.describe())
        if layers:  # a pattern, or a gate per layer (fox)
            print("\n# Layers (layer-pattern, or a method with each layer's own parameters: each layer's method, "
                  "options away from their defaults, window)")
            print(layers)
        documents = " with packed documents masked (reset-attention-mask)" if neox_args.reset_attention_mask else ""
        print(f"\n# Attention at seq-length {neox_args.seq_length} in training{documents}, as chosen on this "
              "machine's CPU:")
        print("\n".join(f"# {line}" for line in plans))
        if (schedule := length_schedule_of(neox_args)) is not None:
            print(f"\n# Length schedule (length-schedule): steps as the log numbers them; a sample of seq-length "
                  f"{neox_args.seq_length} is split into sequences of the stage's length, so the tokens stay the same"
                  + ("; train-data-weights: the blend of train-data-paths the stage draws from" if schedule.mixes
                     else ""))
            print("\n".join(f"# {line}" for line in schedule.table(
                neox_args.train_iters, neox_args.train_micro_batch_size_per_gpu or 1)))
        print("\n# DeepSpeed config")
        print(json.dumps(neox_args.deepspeed_config(), indent=2))
        print("\n# Launcher command")
        print(shlex.join([sys.executable, "-m", "deepspeed.launcher.runner"] + runner_argv))
        if local:
            print(f"# {CONFIG_FILE}: the merged config, in a private temporary file written at launch, removed after")
        # Reported, not refused: a dry run also inspects a cluster's config on a machine without its data.
        print(f"\n# Inputs\n{inputs.problem or inputs.found}")
        print(f"\n# Outputs (checkpoints read and written, logs, results: where each folder came from)\n"
              f"{describe_outputs(neox_args)}")
        return 0

    if inputs.problem:
        raise PreflightError(inputs.problem)
    if not local:
        return launch(runner_argv)
    with config_file(neox_args) as path:
        return launch(runner_arguments(neox_args, hostfile, cli.script, path))


class InputReport(typing.NamedTuple):
    problem: str | None  # the paragraph that stops the launch
    found: str           # what was checked, for --dry-run


def input_report(neox_args, script, hostfile) -> InputReport:
    """Check, before any rank starts, every file `script` will read (megatron/run/preflight.py); ranks on other
    machines (a hostfile) may see other file systems, so there each rank checks for itself at start-up."""
    if on_other_machines(neox_args, hostfile):
        return InputReport(None, "not checked here: the ranks run on the hostfile's machines and check at start-up")
    run = neox_args.preflight_run()
    if not reads(script, run):
        return InputReport(None, f"not checked: deepy.py knows what {', '.join(READS)} read, not {script}")
    try:
        checked = check_inputs(run, script)
    except NeoXArgsError as err:
        return InputReport(str(err), "")
    return InputReport(None, "; ".join(i.describe() for i in checked) or "no files besides the `load` checkpoint")


def launch(runner_argv):
    """Run DeepSpeed's runner in its own process group and pass SIGTERM/SIGINT to the whole group, so
    that a scheduler signalling deepy.py alone still reaches the ranks and they save a checkpoint
    (the runner forwards nothing by itself). Returns once every process of the launch has exited:
    the runner's status, or 128 + the signal after a forwarded one (the shell's convention for "stopped
    by that signal"; the runner itself dies of it, which would read as a failure). The ranks learn
    this process's identity (NEOX_LAUNCHER) and stop, saving, if it is killed outright."""
    import psutil

    from megatron.run.launcher_watch import VARIABLE, launcher_identity
    from megatron.run.process_group import living_members

    child = _start_runner(runner_argv, {VARIABLE: launcher_identity()})
    forwarded = []

    def forward(signum, _frame):
        """To the ranks only, once they run: DeepSpeed's runner and launch.py exit when their ranks do, and
        a SIGINT of their own would print a KeyboardInterrupt traceback beside the ranks' clean message."""
        forwarded.append(signum)
        group = living_members(child.pid)
        ranks = [p for p in group
                 if p.pid != child.pid and "deepspeed.launcher" not in " ".join(p.info["cmdline"] or [])]
        try:
            if ranks:
                for rank in ranks:
                    rank.send_signal(signum)
            else:  # not started yet: stop the launch itself
                os.killpg(child.pid, signum)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    code = child.wait()
    # Ranks may outlive the runner while they save after a signal: wait for the rest of the group.
    while living_members(child.pid):
        time.sleep(0.5)
    if code and not forwarded:
        failed(code)
    if forwarded:
        name = signal.Signals(forwarded[0]).name
        print(f"deepy.py: stopped by {name}, passed on to every rank (training ranks save a checkpoint before "
              f"they exit; the same command resumes). Exit status {128 + forwarded[0]} = 128 + {name}.",
              file=sys.stderr, flush=True)
        return 128 + forwarded[0]
    return code


class _Runner:
    """DeepSpeed's runner in a forked copy of this process, in a session of its own: the same
    `deepspeed.launcher.runner.main` as `python -m deepspeed.launcher.runner ARGV`, without a second interpreter
    importing torch and DeepSpeed again before every launch (this process has imported torch already, to check
    the config). `wait()` returns its exit status as `subprocess.Popen.wait` would."""

    def __init__(self, pid: int):
        self.pid = pid

    def wait(self) -> int:
        return os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])  # retried after a signal's handler (PEP 475)


def _start_runner(runner_argv, env: dict) -> _Runner:
    import deepspeed.launcher.runner as runner  # before the fork: the child starts with it imported

    sys.stdout.flush(), sys.stderr.flush()
    pid = os.fork()
    if pid:
        return _Runner(pid)
    code = 1
    try:  # the child: never returns into deepy.py's own code
        os.setsid()
        os.environ.update(env)
        runner.main(list(runner_argv))
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)


def failed(code):
    """One line for a failed launch, in place of DeepSpeed's (silenced by runner_arguments). Status 2 is a
    rank's config mistake, already said in one paragraph by the rank itself: nothing to add."""
    if code == 2:
        return
    # DeepSpeed's launcher exits with a killed rank's negative status, which the shell sees as 256 - signal.
    killed = next((s for s in signal.Signals if s.value == 256 - code), None) if code > 128 else None
    why = f" (a rank killed by {killed.name})" if killed else ""
    if killed == signal.SIGKILL:
        why = why[:-1] + ", often the out-of-memory killer)"
    print(f"deepy.py: a rank stopped with status {code}{why}; its own messages are above.", file=sys.stderr,
          flush=True)


if __name__ == "__main__":
    sys.exit(run_cli(main))
