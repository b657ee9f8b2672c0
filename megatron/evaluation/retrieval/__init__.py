"""The retrieval probes as evaluation scores them: their scoring (scoring.py), the record both probe modes
write (record.py) and the heatmap of a result file (heatmap.py). The generators, which the training mix
uses too, are the leaf package megatron/probes."""
