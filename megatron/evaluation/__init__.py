"""Length-extrapolation evaluation: score a trained run at many lengths, write one JSON per run.

chunks.py picks what is scored, scoring.py scores it with any logits callable, results.py is the result
file's schema (all light: the analysis tools import them), run.py ties them to a checkpoint and the
model; driver.py is what evaluate.py calls (the data, the model, every length and mode, the result file),
dashboards.py writes its results to TensorBoard and W&B, lm_eval_run.py is what eval.py calls, and
retrieval/ scores the retrieval probes (whose generators are the leaf package megatron/probes).
"""
