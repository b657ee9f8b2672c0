"""Hostile inputs, part 1, the check that runs in this process: the start-up folder check tests what is
real for this user. The entry points' refusals of config mistakes are in tests/e2e/hostile/."""
import os


def test_folder_check_tests_what_is_real_for_this_user(tmp_path):
    """Permission bits stop other users but not root, so the start-up check writes a file instead of
    reading the bits: a mode-555 folder is refused for a normal user and accepted for root, who can
    really write there (test_hostile_runs.py refuses a folder even root cannot write to)."""
    from megatron.run.preflight import folder_problem

    folder = tmp_path / "r-x"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        problem = folder_problem(folder, "save")
        if os.geteuid() == 0:
            assert problem is None
        else:
            assert problem and "is not writable by this process (Permission denied)" in problem
        assert list(folder.iterdir()) == []  # the probe file is gone
    finally:
        folder.chmod(0o755)
