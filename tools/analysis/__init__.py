"""Tables and figures from evaluation result files and checkpoints (`python -m tools.analysis.<tool>`)."""
