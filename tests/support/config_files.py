"""Config files the config tests write (read in-process, or handed to deepy.py by their tests/e2e/ halves): a
small valid base to add a line to, and hostile YAML."""
import textwrap

BASE = "train_micro_batch_size_per_gpu: 4\nnum_layers: 2\nhidden_size: 64\nnum_attention_heads: 4\n"
OPTIMIZER = "optimizer:\n  type: Adam\n  params:\n    lr: 1.0e-3\n"  # lines 5-8 after BASE


def write(tmp_path, text, name="c.yml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def billion_laughs(key):
    """Nine levels of nine aliases each, the anchors inside the real key's own list: 9**10 values
    (3.5 billion) written in eleven lines."""
    levels = [f"  - &a{i} [{', '.join([f'*a{i - 1}'] * 9) if i else ', '.join(['1'] * 9)}]\n" for i in range(9)]
    return f"train_micro_batch_size_per_gpu: 4\n{key}:\n" + "".join(levels) + f"  - [{', '.join(['*a8'] * 9)}]\n"
