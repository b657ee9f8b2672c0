# GPU image. torch==2.13.0 from PyPI on Linux x86-64 is the CUDA build and brings its CUDA runtime
# as wheels, so a plain Python base suffices (no nvcc: nothing here compiles CUDA code).
# Build: docker build -t neox-extrapolation .   Run: docker run --gpus all -it neox-extrapolation
FROM python:3.11-slim-bookworm

ENV PIP_NO_CACHE_DIR=1
RUN apt-get update && apt-get install -y --no-install-recommends git pdsh openssh-client build-essential \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /workspace/neox
COPY requirements/ requirements/
RUN pip install -r requirements/requirements.txt \
        -r requirements/requirements-wandb.txt -r requirements/requirements-tensorboard.txt
COPY . .
CMD ["bash"]
