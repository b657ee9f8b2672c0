"""What a checkpoint holds and how it is read: where one is (its folder), saving and resuming a run
(checkpointing), reading its .pt files as data only (plain loading), and the one way a trained model is
loaded for inference (inference_model). No torch or DeepSpeed is imported here: the config loader reads a
checkpoint's folder before either is."""
