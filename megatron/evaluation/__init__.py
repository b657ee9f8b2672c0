"""Length-extrapolation evaluation: score a trained run at many lengths, write one JSON per run.

chunks.py picks what is scored, scoring.py scores it with any logits callable, results.py is the result
file's schema (all light: the analysis tools import them), run.py ties them to a checkpoint and the
model (megatron/evaluating.py, what evaluate.py calls, uses them with the data).
"""
