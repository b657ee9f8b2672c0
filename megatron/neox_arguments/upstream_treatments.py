"""What this project does with each config key of upstream GPT-NeoX and the KERPLE fork, written once.

Every key in upstream_keys.json (generated from their argument classes) gets one treatment:
- implemented: this project has the key, same meaning (NeoXArgs; nothing to write here);
- mapped: translated to this project's equivalent (`MAPPED`, functions in upstream_compat.py);
- ignored: accepted with no effect, listed once at start-up with the reason (`IGNORED`);
- refused: accepted only at the value that means "off" (then it has no effect either); any other value
  is refused as not supported, because ignoring it would silently change the model or the run (`REFUSED`).
docs/upstream-keys.md is generated from this file (tools/docs/upstream_keys_page.py).
"""

# reason -> keys. A key appears once in this file; tests/neox_arguments/test_neox_compat_configs.py checks that every
# upstream key has exactly one treatment.
IGNORED = {
    "fused-kernel switch: this project builds no custom kernels; PyTorch's kernels compute the same "
    "function either way": (
        "bias_gelu_fusion", "bias_dropout_fusion", "scaled_upper_triang_masked_softmax_fusion",
        "scaled_masked_softmax_fusion", "rope_fusion", "layernorm_fusion", "rmsnorm_fusion",
        "use_flashattn_swiglu", "fused_kernels_build_path", "onnx_safe", "mamba_causal_conv_fusion",
        "mamba_inner_func_fusion", "mamba_selective_scan_fusion"),
    "chosen by the accelerator and launcher here (NCCL on GPUs, gloo on CPU), not by the config": (
        "distributed_backend", "deepspeed_mpi", "deepspeed_slurm", "lazy_mpu_init", "use_cpu_initialization",
        "detect_nvlink_pairs", "account", "comment", "slurm_comment", "use_shared_fs"),
    "only matters with tensor or pipeline parallelism, which is 1 here": (
        "output_layer_parallelism", "pipe_partition_method", "sequence_parallel", "partition_activations"),
    "activation checkpointing here is torch.utils.checkpoint around every layer (checkpoint-activations); "
    "DeepSpeed's variants and their tuning knobs change speed and memory, never the results": (
        "checkpoint_num_layers", "synchronize_each_layer", "contiguous_checkpointing", "checkpoint_in_cpu",
        "deepspeed_activation_checkpointing", "activation_checkpointing", "profile_backward"),
    "numerically the same model: a rounding or precision detail of upstream's kernels": (
        "attention_softmax_in_fp32", "fp16_lm_cross_entropy"),
    "computed at launch, as upstream does: a value written in a config is overwritten": (
        "world_size", "rank", "local_rank", "is_pipe_parallel", "padded_vocab_size", "git_hash",
        "config_files", "global_num_gpus", "user_script", "lr", "zero_stage", "zero_reduce_scatter",
        "zero_contiguous_gradients", "zero_reduce_bucket_size", "zero_allgather_bucket_size", "clip_grad",
        "optimizer_type", "gas", "batch_size", "dynamic_loss_scale", "loss_scale", "loss_scale_window",
        "hysteresis", "min_scale", "curriculum_seqlen", "deepspeed", "deepscale", "deepscale_config",
        "zero_allow_untested_optimizer", "do_train", "do_valid", "do_test"),
    "logging, profiling or checking only; not implemented here, and the run is the same without it": (
        "wandb_host", "wandb_init_all_ranks", "use_comet", "comet_workspace", "comet_project",
        "comet_experiment_name", "comet_tags", "comet_others", "comet_experiment", "log_grad_norm",
        "log_grad_pct_zeros", "log_gradient_noise_scale", "gradient_noise_scale_cpu_offload",
        "gradient_noise_scale_n_batches", "log_optimizer_states", "log_param_norm", "memory_profiling",
        "memory_profiling_path", "peak_theoretical_tflops", "profile", "profile_step_start",
        "profile_step_stop", "checkpoint_validation_with_forward_pass", "mmap_warmup", "char_level_ppl",
        "adlr_autoresume", "adlr_autoresume_interval", "dump_state", "rotary_save_freqs_buffer",
        "no_save_optim", "no_save_rng"),
    "read only by upstream's generate.py (its `precompute` mode, returned logits) or its eval.py's "
    "result naming; this project's generate.py writes text only, and eval.py names results by run": (
        "eval_results_prefix", "precompute_model_name", "return_logits"),
    "used only by layer types that attention-config would have to select, which is refused": (
        "gmlp_attn_dim", "scalenorm_epsilon", "sparsity_config", "online_dataserver_ips",
        "online_dataserver_ports", "weight_server_port", "short_seq_prob"),
}

# reason -> {key: the values that mean "off"}. Off: accepted with no effect; anything else: refused.
REFUSED = {
    # Upstream and the KERPLE fork multiply the positional bias (T5, ALiBi, KERPLE) by the layer number
    # under this switch, so it is a different model, not a rounding detail (tools/ckpts/neox_import).
    "query-key layer scaling (it rescales the positional bias per layer)": {
        "apply_query_key_layer_scaling": (False,)},
    "mixture of experts": {
        "moe_num_experts": (1,), "moe_top_k": (1,), "moe_router_type": ("sinkhorn",),
        "moe_expert_interval": (1,), "moe_jitter_eps": (None,), "moe_lbl_in_fp32": (False,)},
    "Mamba and RWKV blocks": {
        "mamba_selective_fp32_params": (True,), "mamba_use_bias_in_conv": (True,),
        "mamba_use_bias_in_linears": (False,), "dim_att": (None,), "head_size": (None,),
        "ffn_dim": (None,), "expansion_factor": (None,)},
    "TransformerEngine layers and FP8": {
        "te_columnparallel": (False,), "te_rowparallel": (False,), "te_layernorm_mlp": (False,),
        "te_mha": (False,), "te_fp8_format": ("hybrid",), "te_fp8_wgrad": (True,),
        "te_fp8_amax_history_len": (1,), "te_fp8_amax_compute_algo": ("most_recent",), "te_fp8_margin": (0,),
        "te_fp8_mha": (False,)},
    "muP parameterisation": {
        "use_mup": (False,), "coord_check": (False,), "save_base_shapes": (False,), "base_shapes_file": (None,),
        "mup_init_scale": (1.0,), "mup_attn_temp": (1.0,), "mup_output_temp": (1.0,),
        "mup_embedding_mult": (1.0,), "mup_rp_embedding_mult": (1.0,), "mup_width_scale": (2,)},
    "preference and reward training (DPO, KTO, REINFORCE, reward models)": {
        "train_impl": ("normal",), "dpo_beta": (0.1,), "dpo_fp32": (True,), "dpo_reference_free": (False,),
        "kto_beta": (0.1,), "kto_fp32": (True,), "kto_desirable_weight": (1.0,),
        "kto_undesirable_weight": (1.0,), "kl_div_beta": (0.1,), "kl_impl": ("mse",),
        "fp32_reinforce": (True,), "reinforce_leave_one_out": (False,), "serve_model_weights": (False,),
        **{f"{sign}_{split}_{kind}data_paths": (None,) for sign in ("pos", "neg")
           for split in ("train", "valid", "test") for kind in ("", "label_")},
        **{f"{split}_{kind}_data_paths": (None,) for split in ("train", "valid", "test")
           for kind in ("label", "reward")}},
    "architecture variants this model does not have (it would train a different model)": {
        "num_kv_heads": (None,), "use_qk_layernorm": (False,), "use_bias_in_attn_linear": (True,),
        "use_bias_in_mlp": (True,), "use_bias_in_norms": (True,), "mlp_multiple_of": (1,), "gpt_j_tied": (False,),
        "num_unique_layers": (None,), "param_sharing_style": ("grouped",), "opt_pos_emb_offset": (0,),
        "soft_prompt_tuning": (None,), "sliding_window_width": (None,), "z_loss": (0.0,)},
    "data pipeline variants (the model would see different data)": {
        "dataset_impl": ("gpt2",), "pack_impl": ("packed",), "allow_chopped": (True,), "train_epochs": (None,),
        "weight_by_num_documents": (False,), "weighted_sampler_alpha": (1.0,)},
    "DeepSpeed features that replace this project's schedule, precision, data or checkpoints": {
        "scheduler": (None,), "amp": (None,), "elasticity": (None,), "autotuning": (None,),
        "autotuning_run": (None,), "checkpoint": (None,), "compression_training": (None,),
        "data_efficiency": (None,), "sparse_attention": (None,),
        "use_bnb_optimizer": (False,)},
    "DeepSpeed's sequence-length curriculum, which truncates samples (length-schedule warms the length up "
    "without dropping tokens: docs/length-schedules.md)": {"curriculum_learning": (None,)},
    "resuming with a schedule other than the config's, or saving elsewhere": {
        "override_lr_scheduler": (False,), "use_checkpoint_lr_scheduler": (False,),
        "checkpoint_scale": ("linear",), "s3_path": (None,), "s3_chunk_size": (104857600,)},
}

# key -> what it becomes (the function of the same name in upstream_compat.py does it).
MAPPED = {
    "save_interval": "checkpoint-factor (the KERPLE fork's name for it)",
    "lr_decay_fraction": "lr-decay-iters = round(fraction x train-iters), as upstream computes it",
    "attention_config": "accepted when every layer is `global` (or `flash`, the same attention computed by "
                        "another kernel); a sparse, local, gMLP, RWKV or Mamba layer is refused",
    "rms_norm_epsilon": "layernorm-epsilon when norm is rmsnorm (this project's one norm epsilon); ignored "
                        "otherwise. Upstream's rmsnorm default is 1e-8, this project's 1e-5: set it",
    # DeepSpeed keys upstream copies into the DeepSpeed JSON: the same here, via deepspeed-extra-args.
    **{key: "the DeepSpeed JSON (deepspeed-extra-args), which DeepSpeed reads as upstream's does"
       for key in ("fp32_allreduce", "prescale_gradients", "gradient_predivide_factor", "sparse_gradients",
                   "communication_data_type", "data_types", "comms_logger", "flops_profiler", "csv_monitor",
                   "tensorboard", "wandb")},
}

# Implemented keys whose upstream spellings of values are translated (upstream_compat.VALUE_MAPS).
VALUE_MAPPED = {
    "precision": "`bfloat16` (upstream's spelling) = bf16",
    "fp16": "`{type: bfloat16, enabled: true}` (the KERPLE fork's bf16 switch) = bf16: {enabled: true}; "
            "a nested `fp16: true` (Pythia's configs) is dropped: DeepSpeed's schema refuses it",
    "pipe_parallel_size": "0 (upstream: no pipeline engine) and 1 both mean no pipeline parallelism here",
    "data_impl": "`infer` reads the .bin/.idx files as mmap, the only format here",
    "pos_emb": "the fork's `kerple_power_ap_ap` = kerple_bias_weight, `kerple_power_original` = alibi",
    "use_wandb": "null (upstream's default) = false",
    "train_iters": "0 = evaluate only, as the KERPLE fork does (train.py runs evaluate.py's scoring)",
}
