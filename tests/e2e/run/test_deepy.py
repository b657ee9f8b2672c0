"""deepy.py: dry run output, launcher arguments from config keys, and a real 2-process CPU launch."""
import json
import os
import signal
import subprocess
import sys

import pytest

from tests.support.training import (
    KERPLE_LOG, REPO_ROOT, TINY, child_environment, free_port, set_flags, tiny_overrides)


def deepy(repo_root, *argv, env=None):
    return subprocess.run([sys.executable, "deepy.py", *argv], cwd=repo_root, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)


def launcher_line(stdout):
    return stdout.split("# Launcher command\n", 1)[1].strip()


def test_dry_run_prints_the_162m_config_deepspeed_json_and_command(repo_root):
    result = deepy(repo_root, "train.py", "configs/kerple_log.yml", "--dry-run")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    config_part, rest = out.split("# DeepSpeed config\n")
    assert any(line.startswith("pos_emb ") and '"kerple_log"' in line and "configs/kerple_log.yml:4" in line
               for line in config_part.splitlines())
    assert any(line.startswith("num_layers ") and " 12 " in line for line in config_part.splitlines())
    ds = json.loads(rest.split("# Launcher command")[0])
    assert ds["train_micro_batch_size_per_gpu"] == 32 and ds["torch_autocast"] == {"enabled": True, "dtype": "bfloat16"}
    cmd = launcher_line(out)
    # The config reaches ranks on this machine in a file (no command-line limit): tests/e2e/hostile/test_hostile_launch.py.
    assert "-m deepspeed.launcher.runner" in cmd and "train.py --megatron_config_file CONFIG_FILE" in cmd


# deepy.py's own code in this process (a dry run launches nothing; the launch above shows its printing through the
# entry point, test_missing_script_is_a_clear_error a refusal's one paragraph and exit status).
def dry_run(capsys, *argv) -> str:
    import deepy as script
    capsys.readouterr()
    assert script.main([str(REPO_ROOT / "train.py"), *argv, "--dry-run"]) == 0
    return capsys.readouterr().out


def test_conf_dir_and_implicit_yml_suffix(capsys):
    out = dry_run(capsys, "-d", str(REPO_ROOT / "configs"), "alibi", "--set", "seed=7")
    assert any(line.startswith("seed ") and "command line" in line for line in out.splitlines())


def test_launcher_keys_and_hostfile_reach_the_runner(tmp_path, capsys, monkeypatch):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1 slots=4\nnode2 slots=4\n")
    monkeypatch.setenv("DLTS_HOSTFILE", str(hostfile))
    out = dry_run(capsys, str(KERPLE_LOG), "--set", "master_port=29999",
                  "--set", "launcher=slurm", "--set", "no_ssh_check=true")
    cmd = launcher_line(out)
    assert f"--hostfile {hostfile}" in cmd and "--master_port 29999" in cmd and "--launcher slurm" in cmd
    assert "--no_ssh_check" in cmd
    ds = json.loads(out.split("# DeepSpeed config\n")[1].split("# Launcher command")[0])
    assert ds["train_batch_size"] == 32 * 8  # micro x 8 slots

    monkeypatch.delenv("DLTS_HOSTFILE")
    cmd = launcher_line(dry_run(capsys, str(KERPLE_LOG), "-H", str(hostfile),
                                "--set", "include=node1:0,1"))
    assert "--include node1:0,1" in cmd and "--num_gpus" not in cmd


def test_bad_hostfile_is_a_clear_error(tmp_path):
    import deepy as script

    from megatron.neox_arguments import NeoXArgsError
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1 4\n")
    with pytest.raises(NeoXArgsError, match=r"line 1: 'node1 4' is not `HOST slots=N`"):
        script.main([str(REPO_ROOT / "train.py"), str(KERPLE_LOG), "--dry-run", "-H", str(hostfile)])


def test_missing_script_is_a_clear_error(repo_root):
    result = deepy(repo_root, "nope.py", "configs/tiny.yml")
    assert result.returncode == 2 and "Script nope.py does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_two_process_cpu_launch_runs_the_script_on_both_ranks(repo_root, tmp_path):
    result = deepy(repo_root, "tests/scripts/report_rank.py", "configs/tiny.yml", "--set", "num_gpus=2",
                   "--set", f"master_port={free_port()}", "--set", "pos-emb=rpe", env={"OUT_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rank, report in enumerate(reports):
        assert report == {"rank": rank, "world_size": 2, "pos_emb": "t5", "train_batch_size": 32,
                          "all_reduce_sum": 3.0}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_deepy_alone_reaches_the_ranks_which_save(signum, stdlib_data, tmp_path, repo_root):
    """A scheduler that signals only the launcher process, or Ctrl-C in a terminal (the runner is in its
    own process group, so the terminal's SIGINT reaches deepy.py alone): the ranks still save, deepy.py
    returns after they have, and no launcher prints a KeyboardInterrupt traceback."""
    overrides = tiny_overrides(stdlib_data, tmp_path, train_iters=100_000, log_interval=1, master_port=free_port())
    process = subprocess.Popen([sys.executable, "deepy.py", "train.py", str(TINY), *set_flags(overrides)],
                               cwd=repo_root, env=child_environment(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    for line in process.stdout:
        if line.startswith("step") and " 3/100000" in line:
            break
    process.send_signal(signum)
    output, _ = process.communicate(timeout=180)
    name = signal.Signals(signum).name
    assert f"received {name}: stopping after step " in output, output[-3000:]
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output[-3000:]
    stopped = int(output.split(f"received {name}: stopping after step ")[1].split()[0])
    assert (tmp_path / "ckpt" / "latest").read_text() == f"global_step{stopped}"
    assert (tmp_path / "ckpt" / f"global_step{stopped}" / "mp_rank_00_model_states.pt").is_file()
