"""Checkpoint tools: export to Hugging Face (convert_to_hf.py) and back."""
