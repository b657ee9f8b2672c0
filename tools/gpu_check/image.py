"""What the GPU machines' image already holds, so `make gpu-wheels` carries only the rest.

Read from the workplace's description of the `nvidia-h100-x1` / `nvidia-h200` image ('cuda'), as
last read on a running machine on 2026-11-17: Python 3.12.3 at /opt/torch/.venv/bin/python3 with
torch 2.11.0+cu130 and no DeepSpeed. Names are PEP 503-normalised. A machine whose image changed
shows it in the gpu-check report's `versions` section (what each import actually found).
"""
PYTHON_VERSION = "3.12"

# Versions seen there (pip list in a session's output); the rest of IMAGE_PACKAGES had no version read.
IMAGE_VERSIONS = {"torch": "2.11.0", "transformers": "5.17.0", "tokenizers": "0.23.2", "numpy": "2.5.2",
                  "sentencepiece": "0.2.2", "safetensors": "0.8.0", "triton": "3.6.0"}

IMAGE_PACKAGES = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt
jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx
onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client
propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions
pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl
tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics
torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop
wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())

# Carried although the image has a package of that name: the image's version is unknown and a carried
# package needs a recent one (pydantic 2.14 requires typing-extensions >= 4.16.0).
CARRY_ANYWAY = {"typing-extensions": "pydantic and pydantic-core require typing-extensions>=4.16.0; "
                                     "the image's version was not recorded"}
