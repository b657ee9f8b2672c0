"""Synthetic retrieval probes made on the fly from the evaluation stream (no downloads): the
generators (passkey.py) and their scoring (scoring.py). The `passkey` evaluation mode runs them."""
