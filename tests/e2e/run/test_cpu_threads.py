"""The entry points' thread rule on CPU (megatron/run/cpu_threads.py): a share of the cores when the machine
is quiet, one thread when it is busy, an OMP_NUM_THREADS the user set kept as it is."""
import os
import subprocess
import sys

from megatron.run.cpu_threads import chosen_threads


CHILD = ("import os, torch; from megatron.run.cpu_threads import chosen_threads, choose_cpu_threads; "
         "default = torch.get_num_threads(); load = os.getloadavg()[0]; got = choose_cpu_threads(); "
         "print(default, load, got, torch.get_num_threads())")
def test_a_process_without_omp_num_threads_takes_the_rules_count():
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "LOCAL_WORLD_SIZE")}
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    default, load, got, now = done.stdout.split()
    expected = chosen_threads(os.cpu_count(), 1, float(load), int(default))
    # the load average may cross the core count between the child's reading and this one: the child's counts
    assert int(got) == int(now) == expected
    assert ("note: the machine is busy" in done.stderr) == (float(load) >= os.cpu_count() and expected < int(default))
def test_an_omp_num_threads_the_user_set_is_kept():
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    default, _, got, now = done.stdout.split()
    assert got == "None" and now == default == "2" and "note:" not in done.stderr
