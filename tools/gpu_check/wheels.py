"""Build `.whl/`: the wheels a GPU machine without internet needs to run this project (`make gpu-wheels`).

    .venv/bin/python -m tools.gpu_check.wheels [--dest .whl] [--list]

Which packages: the closure of requirements/requirements*.txt (the runtime, dev and tensorboard files;
W&B is optional and left out) over the installed packages' own requirements, without torch and without
what the GPU image already has (tools/gpu_check/image.py). Versions: the pins of the requirements files,
and for the packages they pull in, the version installed in this virtualenv (the one seen working here).
Binary packages come as CPython 3.12 manylinux wheels; DeepSpeed is an sdist on PyPI, so its wheel is
built here with no compiled ops (DS_BUILD_OPS=0) and checked to be pure Python. The folder must stay
out of git (it is added to .git/info/exclude) and, with the tracked tree, under the device tool's
64 MiB transfer limit; the script checks that and prints the sizes.

On the GPU machine (see docs/gpu/README.md) `make gpu-check` installs them with
`pip install --no-index --no-deps --target /tmp/site .whl/*.whl`.
"""
import argparse
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata

from .image import CARRY_ANYWAY, IMAGE_PACKAGES, PYTHON_VERSION

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
REQUIREMENT_FILES = ("requirements.txt", "requirements-dev.txt", "requirements-tensorboard.txt")
# torch: the machine's own CUDA build is the point. lm-eval: only eval.py needs it, not the GPU check, and
# its closure (datasets, evaluate, ...) would take much of the transfer limit.
NEVER_CARRIED = {"torch", "lm-eval"}
TRANSFER_LIMIT = 64 * 2**20
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")
BUILT_HERE = {"deepspeed"}  # sdist only on PyPI


class WheelError(RuntimeError):
    """The wheel folder cannot be made as asked; the message says what to do."""


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_requirements() -> dict:
    """{name: version} of the `name==version` lines of the requirements files."""
    pins = {}
    for file in REQUIREMENT_FILES:
        for line in (REPO_ROOT / "requirements" / file).read_text().splitlines():
            line = line.split("#")[0].strip()
            if line:
                name, _, version = line.partition("==")
                pins[normalise(name)] = version.strip()
    return pins


def _dependencies(name: str) -> list[str]:
    """The installed distribution's unconditional requirements (no extras, markers true here)."""
    from packaging.requirements import Requirement
    names = []
    for text in metadata.distribution(name).requires or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            names.append(normalise(requirement.name))
    return names


def carried_packages() -> dict:
    """{name: version} of every package the GPU machine lacks, from the requirements' closure."""
    pins, carried, queue, seen = pinned_requirements(), {}, list(pinned_requirements()), set()
    while queue:
        name = queue.pop()
        if name in seen or name in NEVER_CARRIED:
            continue
        seen.add(name)
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            raise WheelError(f"{name} (needed by the requirements) is not installed in {sys.prefix}; run "
                             "`make venv` first: the wheel versions are the ones installed there") from None
        if name not in IMAGE_PACKAGES or name in CARRY_ANYWAY:
            carried[name] = pins.get(name, installed)
            queue += _dependencies(name)  # what the image has brings its own requirements
    return dict(sorted(carried.items()))


def ignore_folder(dest: pathlib.Path) -> None:
    """Make git ignore the wheel folder (it must never be committed), via .git/info/exclude; a folder
    outside the repository is no concern of git's."""
    if not dest.resolve().is_relative_to(REPO_ROOT.resolve()):
        return
    relative = dest.resolve().relative_to(REPO_ROOT.resolve())
    if subprocess.run(["git", "check-ignore", "-q", str(relative)], cwd=REPO_ROOT).returncode == 0:
        return
    exclude = REPO_ROOT / subprocess.run(["git", "rev-parse", "--git-path", "info/exclude"], cwd=REPO_ROOT,
                                         capture_output=True, text=True, check=True).stdout.strip()
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with open(exclude, "a") as out:
        out.write(f"/{relative.as_posix()}/\n")
    print(f"added /{relative.as_posix()}/ to {exclude} (the wheels are never committed)")


def _pip(*argv, env=None) -> None:
    command = [sys.executable, "-m", "pip", *argv]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise WheelError(f"`{' '.join(command)}` failed:\n{done.stdout[-1500:]}{done.stderr[-1500:]}")


def download(name: str, version: str, dest: pathlib.Path) -> None:
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    _pip("download", "--quiet", "--no-deps", "--only-binary=:all:", "--python-version", PYTHON_VERSION,
         "--implementation", "cp", *platforms, "-d", str(dest), f"{name}=={version}")


def build_pure_wheel(name: str, version: str, dest: pathlib.Path) -> None:
    """`pip wheel` from the sdist with no ops compiled; refuse a wheel holding compiled code."""
    import os
    env = dict(os.environ, DS_BUILD_OPS="0", DS_SKIP_CUDA_CHECK="1")
    with tempfile.TemporaryDirectory() as scratch:
        _pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", scratch, f"{name}=={version}", env=env)
        (built,) = pathlib.Path(scratch).glob("*.whl")
        compiled = [n for n in zipfile.ZipFile(built).namelist() if n.endswith((".so", ".pyd", ".dylib"))]
        if not built.name.endswith("-py3-none-any.whl") or compiled:
            raise WheelError(f"{built.name} is not a pure-Python wheel ({compiled[:3] or 'platform tag'}); "
                             "it would not install on the GPU machine's Python")
        shutil.move(str(built), dest / built.name)


def wheel_name(path: pathlib.Path) -> tuple[str, str]:
    name, version = path.name.split("-")[:2]
    return normalise(name), version


def tracked_bytes() -> int:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, text=True,
                           check=True).stdout.split("\0")
    return sum((REPO_ROOT / f).stat().st_size for f in files if f and (REPO_ROOT / f).is_file())


def build(dest: pathlib.Path) -> dict:
    packages = carried_packages()
    dest.mkdir(parents=True, exist_ok=True)
    ignore_folder(dest)
    for stale in dest.glob("*.whl"):  # one version of each: two stop the install on the GPU machine
        if packages.get(wheel_name(stale)[0]) != wheel_name(stale)[1]:
            stale.unlink()
    have = {wheel_name(p)[0] for p in dest.glob("*.whl")}
    for name, version in packages.items():
        if name in have:
            continue
        print(f"{'building' if name in BUILT_HERE else 'downloading'} {name}=={version}", flush=True)
        (build_pure_wheel if name in BUILT_HERE else download)(name, version, dest)
    wheels = {wheel_name(p)[0]: p for p in dest.glob("*.whl")}
    missing = sorted(set(packages) - set(wheels))
    if missing:
        raise WheelError(f"no wheel in {dest} for {', '.join(missing)}")
    return {name: wheels[name] for name in packages}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", default=str(REPO_ROOT / ".whl"), help="wheel folder (default: .whl)")
    parser.add_argument("--list", action="store_true", help="print the packages and versions; download nothing")
    args = parser.parse_args(argv)
    try:
        if args.list:
            for name, version in carried_packages().items():
                print(f"{name}=={version}" + (f"  ({CARRY_ANYWAY[name]})" if name in CARRY_ANYWAY else ""))
            return 0
        wheels = build(pathlib.Path(args.dest))
    except WheelError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    total, tree = sum(p.stat().st_size for p in wheels.values()), tracked_bytes()
    for path in wheels.values():
        print(f"  {path.stat().st_size / 2**20:6.2f} MiB  {path.name}")
    print(f"{len(wheels)} wheels, {total / 2**20:.1f} MiB; with the tracked tree ({tree / 2**20:.1f} MiB) "
          f"{(total + tree) / 2**20:.1f} MiB of the device tool's {TRANSFER_LIMIT / 2**20:.0f} MiB")
    if total + tree > TRANSFER_LIMIT:
        print("error: over the transfer limit; carry fewer wheels", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
