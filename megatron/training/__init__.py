"""How a model is trained: the loop on DeepSpeed's engine (loop.py: pretrain, train_step, the periodic
evaluation and saves), the optimizer and learning-rate schedule, the positions each step trains on
(random-positions, PoSE), and what train.py says about a run before its first step (banner)."""
