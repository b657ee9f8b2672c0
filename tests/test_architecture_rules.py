"""The architecture's rules, read from the source with `ast` (every import, those inside functions
too), so that a change breaking one fails here naming the file and line:

- model code imports nothing from the config, evaluation or data packages;
- no module outside megatron/model/positional_embeddings compares a value against a method's name
  (the names come from the registry): what differs between methods is a property of the method class;
- entry points import nothing from tools/;
- megatron's top-level folders import each other without cycles;
- nothing below the door (megatron/ outside the config package) imports the config package: code there
  takes a `ModelConfig` and the run keys it needs; megatron/checkpoint/, megatron/evaluation/, megatron/data/ and
  megatron/text_generation/ take them as typed records (their run_keys.py) and have no name `neox_args` at all,
  nor has megatron/run/preflight.py (the start-up checks; the rest of megatron/run/ is start-up at the door);
  the config package imports megatron/data (and with it megatron-core) only when a DataRun is asked for;
- the positional files import nothing from `megatron` but inside base.py's one `try` block: they are
  copied verbatim into exported Hugging Face folders (tools/ckpts/hf_export);
- everything that computes attention lives in megatron/model/attention, which imports torch (and Triton), the
  standard library, itself and two leaf modules (megatron/errors.py, megatron/compiled_code.py), and
  importing one of its kernels does not build GPTModel's module graph (in a fresh interpreter:
  tests/e2e/test_architecture_rules.py);
- the tests' own layout: the launch tier is the path (no file outside tests/e2e/ marks a test `launches` by
  hand; tests/e2e/conftest.py marks every test there), and a test file imports no other test file (what
  tests share is in tests/support/).
"""
import ast
import pathlib
import sys

import pytest

from megatron.model.positional_embeddings import ALIASES, available

ROOT = pathlib.Path(__file__).resolve().parents[1]
MEGATRON = ROOT / "megatron"
POSITIONAL = MEGATRON / "model" / "positional_embeddings"
ATTENTION = MEGATRON / "model" / "attention"
# What the attention folder may import besides itself, torch and the standard library: leaf modules that
# import nothing of the project (the user-error type; where compiled code is kept).
ATTENTION_LEAVES = ("megatron.errors", "megatron.compiled_code")
TRITON_KERNELS = ("triton_kernel.py", "rotary_kernel.py")  # the attention files written in Triton (imported lazily, on CUDA or under its interpreter)
ENTRY_POINTS = ("deepy.py", "train.py", "evaluate.py", "generate.py", "eval.py")


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: pathlib.Path):
    """(absolute module name, line, node) of every import in the file, at any depth; `from a import b`
    yields both `a` and `a.b` (b may be a module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno, node
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            yield module, node.lineno, node
            for alias in node.names:
                yield f"{module}.{alias.name}", node.lineno, node


def where(path, line) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def python_files(folder: pathlib.Path):
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_model_code_imports_nothing_from_config_evaluation_or_data():
    forbidden = ("megatron.neox_arguments", "megatron.evaluation", "megatron.data")
    found = sorted({f"{where(path, line)} imports {module}" for path in python_files(MEGATRON / "model")
                    for module, line, _ in imports(path) if any(under(module, f) for f in forbidden)})
    assert not found, ("megatron/model must not import the config, evaluation or data packages (take what it "
                       "needs from megatron/errors.py, megatron/quoting.py or the model config):\n" + "\n".join(found))


def method_name_comparisons(source: str, names) -> list[tuple[int, str]]:
    """(line, name) of each `x == "learned"`, `x != "rotary"`, `x in ("alibi", ...)`: a comparison with
    a method's name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        for side in [node.left, *node.comparators]:
            constants = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
            found += [(node.lineno, c.value) for c in constants if isinstance(c, ast.Constant) and c.value in names]
    return found


def code_outside_positional():
    """megatron/ and the entry points. Not tools/: the NeoX importer and the sweep's paper claims name
    methods as data (upstream's method names, the paper's rows)."""
    return [p for p in python_files(MEGATRON) if POSITIONAL not in p.parents] + [ROOT / n for n in ENTRY_POINTS]


def test_no_module_outside_the_positional_package_compares_against_a_method_name():
    names = set(available()) | set(ALIASES)
    found = [f"{where(path, line)} compares against {name!r}" for path in code_outside_positional()
             for line, name in method_name_comparisons(path.read_text(), names)]
    assert not found, ("only megatron/model/positional_embeddings may name a method; elsewhere ask the method "
                       "class (lookup(name).uses_max_positions, .max_length, ...):\n" + "\n".join(found))


def test_entry_points_import_nothing_from_tools():
    found = sorted({f"{where(ROOT / name, line)} imports {module}" for name in ENTRY_POINTS
                    for module, line, _ in imports(ROOT / name) if under(module, "tools")})
    assert not found, "entry points must not import tools/ (move what they need into megatron/):\n" + "\n".join(found)


def folder_graph() -> dict[str, dict[str, set[str]]]:
    """folder -> {folder it imports: [file:line, ...]} between megatron's top-level folders."""
    folders = {p.name for p in MEGATRON.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    graph = {folder: {} for folder in folders}
    for folder in folders:
        for path in python_files(MEGATRON / folder):
            for module, line, _ in imports(path):
                parts = module.split(".")
                if parts[0] == "megatron" and len(parts) > 1 and parts[1] in folders and parts[1] != folder:
                    graph[folder].setdefault(parts[1], set()).add(where(path, line))
    return graph


def cycle_in(graph) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None."""
    state = {}

    def visit(node, trail):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return trail[trail.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt, trail + [nxt])):
                return found
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_megatron_folders_import_each_other_without_cycles():
    graph = folder_graph()
    cycle = cycle_in(graph)
    assert cycle is None, ("megatron's folders import in a cycle " + " -> ".join(cycle) + ":\n" + "\n".join(
        f"{a} -> {b}: {', '.join(sorted(graph[a][b])[:3])}" for a, b in zip(cycle, cycle[1:])))


def test_the_cycle_finder_finds_a_cycle():
    assert cycle_in({"a": {"b": []}, "b": {"c": []}, "c": {"a": []}}) == ["a", "b", "c", "a"]
    assert cycle_in({"a": {"b": []}, "b": {}, "c": {"a": []}}) is None


def inside_a_try_block(line: int, tree) -> bool:
    return any(isinstance(t, ast.Try) and t.body[0].lineno <= line <= t.body[-1].end_lineno for t in ast.walk(tree))


def test_positional_files_import_megatron_only_inside_base_pys_try_block():
    found = []
    for path in python_files(POSITIONAL):
        tree = ast.parse(path.read_text())
        for module, line, _ in imports(path):
            if under(module, "megatron") and not under(module, "megatron.model.positional_embeddings"):
                if not (path.name == "base.py" and inside_a_try_block(line, tree)):
                    found.append(f"{where(path, line)} imports {module}")
    assert not found, ("the positional files are copied verbatim into exported Hugging Face folders, which hold "
                       "no `megatron`: import it only inside base.py's try block:\n" + "\n".join(found))
    tries = [t for t in ast.walk(ast.parse((POSITIONAL / "base.py").read_text())) if isinstance(t, ast.Try)]
    assert len(tries) == 1, "base.py has one try block, the one whose imports an export can do without"


@pytest.mark.parametrize("source, hit", [
    ('if args.pos_emb == "learned":\n    pass\n', (1, "learned")),
    ('x = 1\nok = name not in ("rotary", "xyz")\n', (2, "rotary")),
    ('ok = "t5" != x\n', (1, "t5")),
])
def test_a_method_name_comparison_is_found(source, hit):
    assert method_name_comparisons(source, set(available())) == [hit]


def test_the_attention_folder_imports_only_torch_itself_and_two_leaves():
    found = []
    for path in python_files(ATTENTION):
        for module, line, _ in imports(path):
            if under(module, "megatron") and not (under(module, "megatron.model.attention")
                                                  or any(under(module, leaf) for leaf in ATTENTION_LEAVES)):
                found.append(f"{where(path, line)} imports {module}")
            elif module.split(".")[0] == "triton":  # the language of this project's kernel, in its one file
                if path.name not in TRITON_KERNELS:
                    found.append(f"{where(path, line)} imports {module} (only {', '.join(TRITON_KERNELS)} may, imported lazily)")
            elif not under(module, "megatron") and module.split(".")[0] not in ("torch", *sys.stdlib_module_names):
                found.append(f"{where(path, line)} imports {module}")
    assert not found, ("megatron/model/attention imports only torch, itself and " + ", ".join(ATTENTION_LEAVES) +
                       f" (the positional method comes in as an object), and triton in {', '.join(TRITON_KERNELS)}:\n"
                       + "\n".join(found))
    for leaf in ATTENTION_LEAVES:
        leaf_path = ROOT / (leaf.replace(".", "/") + ".py")
        assert not [m for m, _, _ in imports(leaf_path) if under(m, "megatron")], f"{leaf} must stay a leaf"


def test_attention_code_lives_in_the_attention_folder():
    """Outside attention/ nothing in megatron/model calls an attention kernel: SDPA, the CPU flash ops,
    FlexAttention or a softmax over scores."""
    kernels = ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu", "flex_attention")
    found = []
    for path in python_files(MEGATRON / "model"):
        if ATTENTION in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
            if name in kernels:
                found.append(f"{where(path, node.lineno)} uses {name}")
    assert not found, "attention is computed in megatron/model/attention only:\n" + "\n".join(found)


CONFIG = MEGATRON / "neox_arguments"
PROBES = MEGATRON / "probes"
# The config package's imports of evaluation: the modes registry, whose modes declare their own config keys
# (groups.py builds the evaluation keys from them), and the typed records it builds for evaluation
# (to_evaluation.py). Nothing else of evaluation.
CONFIG_READS_OF_EVALUATION = ("megatron.evaluation.modes", "megatron.evaluation.run_keys", "megatron.evaluation.settings")
PROBE_LEAVES = ("megatron.errors", "megatron.quoting", "megatron.model.positional_embeddings.base")


def test_the_config_package_imports_nothing_of_evaluation_but_its_modes_registry_and_records():
    found = sorted({f"{where(path, line)} imports {module}" for path in python_files(CONFIG)
                    for module, line, _ in imports(path) if under(module, "megatron.evaluation")
                    and not any(under(module, allowed) for allowed in CONFIG_READS_OF_EVALUATION)})
    assert not found, ("megatron/neox_arguments imports nothing of megatron/evaluation but the modes' registry and the "
                       "records it builds (run_keys.py, settings.py) (probe generators: megatron/probes; a config "
                       "hash's keys: NeoXArgs.trained_keys):\n"
                       + "\n".join(found))


def config_imports_below_the_door() -> list[str]:
    """'file:line imports module' of every import of the config package under megatron/ outside it."""
    return sorted({f"{where(path, line)} imports {module}" for path in python_files(MEGATRON) if CONFIG not in path.parents
                   for module, line, _ in imports(path) if under(module, "megatron.neox_arguments")})


def test_nothing_below_the_door_imports_the_config_package():
    found = config_imports_below_the_door()
    assert not found, ("below the entry points, code takes a ModelConfig (NeoXArgs.model, or a model's own .config) and "
                       "the run keys it needs, not the config package (megatron.errors has the error type, "
                       "megatron.checkpoint.folder a checkpoint's file names):\n" + "\n".join(found))


# Rooms (a folder, or one file of a folder whose other files start a process from the config) that take a
# ModelConfig and typed records of the run keys they read (their folder's run_keys.py), never the run config under
# another import: no parameter, variable or attribute is named `neox_args` there.
# The string "neox_args" is data: the client-state key checkpoints have always kept the run's config under.
TYPED_ROOMS = (MEGATRON / "checkpoint", MEGATRON / "evaluation", MEGATRON / "data", MEGATRON / "text_generation",
               MEGATRON / "run", MEGATRON / "training", MEGATRON / "tokenizer", MEGATRON / "length_schedule.py")


def room_files(room: pathlib.Path):
    return [room] if room.is_file() else python_files(room)


def room_name(room: pathlib.Path) -> str:
    return f"{room.relative_to(ROOT)}" + ("" if room.is_file() else "/")


def run_config_names(source: str) -> list[int]:
    """Lines of `source` that name `neox_args` as a parameter, a variable or an attribute."""
    return sorted({node.lineno for node in ast.walk(ast.parse(source))
                   if (isinstance(node, ast.Name) and node.id == "neox_args")
                   or (isinstance(node, ast.arg) and node.arg == "neox_args")
                   or (isinstance(node, ast.Attribute) and node.attr == "neox_args")})


def test_the_typed_rooms_take_typed_run_keys_not_the_run_config():
    assert all(room.exists() for room in TYPED_ROOMS), [room_name(room) for room in TYPED_ROOMS if not room.exists()]
    found = [f"{where(path, line)}" for room in TYPED_ROOMS for path in room_files(room)
             for line in run_config_names(path.read_text())]
    assert not found, (", ".join(room_name(room) for room in TYPED_ROOMS) + " take a ModelConfig and "
                       "the records of their run_keys.py (built by megatron/neox_arguments/to_*.py), not the run "
                       "config; add the key a function needs to its record instead:\n" + "\n".join(found))


@pytest.mark.parametrize("source, hits", [
    ("def save(neox_args, engine):\n    pass\n", [1]),
    ("def save(run):\n    return run.save\n\n\nx = neox_args\n", [5]),
    ("def f(loaded):\n    return loaded.neox_args\n", [2]),
    ("state = {'neox_args': 1}\nvalue = state.get('neox_args')\n", []),  # the on-disk key is data
])
def test_a_run_config_name_is_found(source, hits):
    assert run_config_names(source) == hits


def test_the_probe_generators_are_a_leaf_package():
    found = sorted({f"{where(path, line)} imports {module}" for path in python_files(PROBES)
                    for module, line, _ in imports(path) if under(module, "megatron")
                    and not any(under(module, leaf) for leaf in ("megatron.probes",) + PROBE_LEAVES)})
    assert not found, ("megatron/probes (used by the training mix and by evaluation) imports only itself and "
                       + ", ".join(PROBE_LEAVES) + ":\n" + "\n".join(found))


MUTATORS = {"update", "append", "extend", "setdefault", "add", "insert", "clear", "pop", "remove"}


def writes_into_other_modules(source: str, own: str = "") -> list[tuple[int, str]]:
    """(line, statement) of each module-level statement that changes another project module: an assignment
    to an attribute (or item) of a name imported from `megatron`, or a mutating call on one of its attributes
    (`identity.TRAINED_KEYS.update(...)`)."""
    tree = ast.parse(source)
    project = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            project |= {(a.asname or a.name).split(".")[0] for a in node.names if under(a.name, "megatron")}
        elif isinstance(node, ast.ImportFrom) and (node.level or under(node.module or "", "megatron")):
            project |= {a.asname or a.name for a in node.names}

    def root(node):
        while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            node = node.func if isinstance(node, ast.Call) else node.value
        return node.id if isinstance(node, ast.Name) else None

    found = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        if any(isinstance(t, (ast.Attribute, ast.Subscript)) and root(t) in project for t in targets):
            found.append((node.lineno, ast.unparse(node)[:80]))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Attribute) and func.attr in MUTATORS and \
                    isinstance(func.value, (ast.Attribute, ast.Subscript)) and root(func.value) in project:
                found.append((node.lineno, ast.unparse(node)[:80]))
    return found


def test_no_module_writes_into_another_at_import_time():
    found = [f"{where(path, line)}: {statement}" for path in python_files(MEGATRON) + [ROOT / n for n in ENTRY_POINTS]
             for line, statement in writes_into_other_modules(path.read_text())]
    assert not found, ("a module changes another when it is imported (import order then decides behaviour); give "
                       "the value through a function instead:\n" + "\n".join(found))


@pytest.mark.parametrize("source, hits", [
    ("from megatron.evaluation import identity\nidentity.TRAINED_KEYS.update({'a': 1})\n", [2]),
    ("import megatron.evaluation.identity as identity\nidentity.KEYS = {}\n", [2]),
    ("from . import registry\nregistry.OPTIONS['x'] = 1\n", [2]),
    ("import os\nos.environ['A'] = '1'\nTABLE = {}\nTABLE.update(a=1)\n", []),  # not a project module
    ("from megatron.evaluation import identity\ndef f():\n    identity.KEYS.update({})\n", []),  # at call time
])
def test_a_write_into_another_module_is_found(source, hits):
    assert [line for line, _ in writes_into_other_modules(source)] == hits


# ---------------------------------------------------------------------------------- the tests' layout
TESTS = ROOT / "tests"
E2E = TESTS / "e2e"


def launch_marks(source: str) -> list[int]:
    """The lines of `source` that mark tests `launches` by hand: `pytest.mark.launches` anywhere (a decorator,
    `pytestmark`, a parameter's marks) or `add_marker("launches")`."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "launches" and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "mark":
            found.add(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_marker" \
                and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "launches":
            found.add(node.lineno)
    return sorted(found)


def test_no_file_outside_tests_e2e_marks_a_test_launches_by_hand():
    found = [where(path, line) for path in python_files(TESTS) if not path.is_relative_to(E2E)
             for line in launch_marks(path.read_text())]
    assert not found, ("a test that starts a process belongs in tests/e2e/, at the path that mirrors its in-process "
                       "file (tests/e2e/conftest.py marks it `launches`; shared helpers go to tests/support/); move "
                       "it there instead of marking it by hand:\n" + "\n".join(found))


@pytest.mark.parametrize("source, hits", [
    ("import pytest\n@pytest.mark.launches\ndef test_a():\n    pass\n", [2]),
    ("import pytest\npytestmark = [pytest.mark.slow, pytest.mark.launches]\n", [2]),
    ("import pytest\n@pytest.mark.parametrize('n', [pytest.param(1, marks=pytest.mark.launches)])\n"
     "def test_a(n):\n    pass\n", [2]),
    ("def pytest_itemcollected(item):\n    item.add_marker('launches')\n", [2]),
    ("def pytest_runtest_setup(item):\n    assert item.get_closest_marker('launches')\n", []),  # reads, marks nothing
])
def test_a_hand_made_launch_mark_is_found(source, hits):
    assert launch_marks(source) == hits


def test_a_test_file_imports_no_other_test_file():
    found = sorted({f"{where(path, line)} imports {module}" for path in python_files(TESTS)
                    if path.name.startswith("test_") for module, line, _ in imports(path)
                    if under(module, "tests") and any(part.startswith("test_") for part in module.split("."))})
    assert not found, ("a test file imports another (an edit of one then breaks the other, and a file moved to "
                       "tests/e2e/ carries it along); move what they share into tests/support/:\n" + "\n".join(found))
