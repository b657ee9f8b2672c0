# GPU image: the same pinned requirements; torch==2.13.0 resolves to the CUDA build on Linux x86-64.
# Build: docker build -t neox-extrapolation .   Run: docker run --gpus all -it neox-extrapolation
FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04

ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1
RUN apt-get update && apt-get install -y --no-install-recommends \
        python3.11 python3.11-venv python3.11-dev git pdsh openssh-client build-essential \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /workspace/neox
COPY requirements/ requirements/
RUN python3.11 -m venv /opt/venv \
    && /opt/venv/bin/pip install --upgrade pip \
    && /opt/venv/bin/pip install -r requirements/requirements.txt \
        -r requirements/requirements-wandb.txt -r requirements/requirements-tensorboard.txt
ENV PATH=/opt/venv/bin:$PATH
COPY . .
CMD ["bash"]
