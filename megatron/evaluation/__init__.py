"""Length-extrapolation evaluation: score a trained run at many lengths, write one JSON per run.

chunks.py picks what is scored, scoring.py scores it with any logits callable, results.py is the result
file's schema, run.py ties them to a checkpoint (what evaluate.py calls).
"""
from .results import MODES, SCHEMA, ResultFileError, find_record, load_result, load_results
from .run import EvaluationError, evaluate_run

__all__ = ["MODES", "SCHEMA", "EvaluationError", "ResultFileError", "evaluate_run", "find_record",
           "load_result", "load_results"]
