"""A resumed run says so once, with the step and the checkpoint it came from (issue 23); a run that
starts fresh, or fine-tunes from weights only, does not claim to resume."""
from tests.support.training import pretrain, tiny_args


def test_resume_prints_the_step_it_came_from_and_a_fresh_run_does_not(stdlib_data, tmp_path, capsys):
    pretrain(tiny_args(stdlib_data, tmp_path, train_iters=2, eval_iters=0))
    assert "resumed from step" not in capsys.readouterr().out
    pretrain(tiny_args(stdlib_data, tmp_path, train_iters=3, eval_iters=0))
    out = capsys.readouterr().out
    assert out.count("resumed from step 2 (") == 1 and "global_step2" in out
