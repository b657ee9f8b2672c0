"""How a process of any entry point (train.py, evaluate.py, generate.py, eval.py, deepy.py) starts, is
checked and reports: start-up of every rank (process group, seeds, CPU threads, the launcher's watch), the
checks made before any step is spent (preflight), and what a run reports (console, TensorBoard, W&B).
The training loop is megatron/training/; evaluation's driver is megatron/evaluation/."""
