"""The one place a run's config becomes what evaluation reads (megatron/evaluation/run_keys.py): its settings, what
the evaluating config says of the run for the result file, the keys that load the model (to_checkpoint.py), what its
start reads (the start-up checks' keys: to_preflight.py; the data's: to_data.py), the dashboards and the lm-eval keys.
megatron/evaluation/ never reads the run config itself."""
import dataclasses
import pathlib

from megatron.evaluation.modes import mode_options
from megatron.evaluation.run_keys import Dashboards, EvaluatedRun, EvaluationRun, LmEvalTasks, RunStart
from megatron.evaluation.settings import EvaluationSettings
from megatron.model.positional_embeddings import per_run_options
from megatron.run.wandb_run import WandbRun

from .to_checkpoint import inference_run
from .to_preflight import preflight_run


def evaluation_run(neox_args) -> EvaluationRun:
    """What one evaluation of the run `load` names takes from `neox_args` (evaluate.py, train.py's `train-iters: 0`, eval.py)."""
    return EvaluationRun(settings=evaluation_settings(neox_args), evaluated=evaluated_run(neox_args),
                         inference=inference_run(neox_args), start=run_start(neox_args), dashboards=dashboards(neox_args))


def evaluation_settings(neox_args) -> EvaluationSettings:
    """The evaluation keys, with those of every registered mode's options."""
    mode_keys = {f.name for _, options in mode_options() if options is not None for f in dataclasses.fields(options)}
    return EvaluationSettings(
        load=neox_args.load, iteration=neox_args.iteration,
        lengths=tuple(neox_args.eval_lengths or [neox_args.seq_length]), modes=tuple(neox_args.eval_modes),
        split=neox_args.eval_split, seed=neox_args.eval_seed, chunks=neox_args.eval_chunks,
        stride=neox_args.eval_stride, documents=neox_args.eval_documents, force=bool(neox_args.eval_force),
        results_dir=neox_args.eval_results_dir, micro_batch_size=neox_args.eval_micro_batch_size,
        rank=neox_args.rank, world_size=neox_args.world_size, sequence_parallel_size=neox_args.sequence_parallel_size,
        mode_keys={key: getattr(neox_args, key) for key in sorted(mode_keys)})


def evaluated_run(neox_args) -> EvaluatedRun:
    options = {name: getattr(neox_args, name) for name in per_run_options(neox_args.pos_emb)}
    return EvaluatedRun(
        dataset=dataset_name(neox_args), pos_emb=neox_args.pos_emb, attention_window=neox_args.attention_window,
        per_run_options={name: value for name, value in options.items() if value is not None},
        run_name=neox_args.run_name, run_name_from=neox_args.config_sources.get("run_name", "the config"),
        trained_keys=neox_args.trained_keys(), num_layers=neox_args.num_layers, hidden_size=neox_args.hidden_size,
        num_attention_heads=neox_args.num_attention_heads)


def dataset_name(neox_args) -> str:
    """Short name of the evaluated data: the dataset file stem(s) without `_text_document`."""
    paths = getattr(neox_args, f"{neox_args.eval_split}_data_paths") or [neox_args.data_path]
    names = [pathlib.Path(str(p)).name.removesuffix("_text_document") for p in paths if p]
    return "+".join(names) or "unknown"


def wandb_run(neox_args) -> WandbRun:
    """Where the run's W&B numbers go, and the config the W&B run shows."""
    return WandbRun(project=neox_args.wandb_project, group=neox_args.wandb_group, name=neox_args.wandb_run_name,
                    team=neox_args.wandb_team, log_dir=neox_args.log_dir,
                    config={k: v for k, v in neox_args.to_dict().items() if k not in ("config_files", "config_sources")})


def dashboards(neox_args) -> Dashboards:
    return Dashboards(tensorboard_dir=neox_args.tensorboard_dir,
                      wandb=wandb_run(neox_args) if neox_args.use_wandb else None)


def run_start(neox_args) -> RunStart:
    """What the evaluation's start reads: the ranks' seed, the start-up checks' keys and the data's."""
    return RunStart(seed=neox_args.seed, preflight=preflight_run(neox_args), data=neox_args.data_run(),
                    model_only_from=None if neox_args.data_path else neox_args.model_only_from())


def lm_eval_tasks(neox_args) -> LmEvalTasks:
    """eval.py's lm-eval keys."""
    return LmEvalTasks(
        tasks=tuple(neox_args.eval_tasks or ()), task_paths=tuple(str(p) for p in neox_args.eval_task_paths or ()),
        task_metadata=neox_args.eval_task_metadata, task_length=neox_args.eval_task_length,
        task_limit=neox_args.eval_task_limit, num_fewshot=neox_args.eval_task_num_fewshot,
        seq_length=neox_args.seq_length,
        eval_lengths=tuple(neox_args.eval_lengths) if neox_args.eval_lengths else None,
        sources={k: neox_args.config_sources[k] for k in ("eval_results_dir", "eval_lengths", "eval_task_metadata")
                 if k in neox_args.config_sources})
