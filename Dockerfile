# nanolm in a pinned environment: `docker build -t nanolm .`, then `docker run --rm nanolm` runs the demo.
#
# The install steps are those of `make demo USE_LOCK=1` (tests/test_dockerfile.py keeps them the same): torch from
# TORCH_SPEC, then every other package at the hash-checked version of requirements/dev.lock (`make lock` writes it),
# then nanolm itself without dependencies, then `pip check`.
#
# CPU by default: torch's CPU build, from PyTorch's CPU index. For NVIDIA GPUs, take torch's CUDA build instead:
#   docker build --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 -t nanolm:cuda .
#   docker run --rm --gpus all nanolm:cuda nanolm train --set device=cuda ...
# torch's CUDA wheels bring their own CUDA libraries, so the slim Python base works; the host needs the NVIDIA driver
# and the container toolkit. A CUDA base image (BASE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04, for the tools it
# has) needs a `python` of version 3.11 on its PATH, which the lock is resolved for.
ARG BASE=python:3.11-slim
FROM ${BASE}

ARG TORCH_SPEC=torch==2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

WORKDIR /app

# Dependencies first, so that editing the source does not reinstall them. torch is pinned by TORCH_SPEC (DL3013
# cannot see into the build argument).
COPY requirements/dev.lock requirements/dev.lock
# hadolint ignore=DL3013
RUN python -m venv /opt/venv \
    && python -m pip install --no-cache-dir --index-url "${TORCH_INDEX}" "${TORCH_SPEC}" \
    && python -m pip install --no-cache-dir --require-hashes --no-deps -r requirements/dev.lock

COPY pyproject.toml README.md ./
COPY src ./src
RUN python -m pip install --no-cache-dir --no-deps -e . \
    && python -m pip check \
    && useradd --create-home --uid 1000 nanolm \
    && chown nanolm /app

# Runs are written under /app/runs: mount a volume there to keep them (docker run -v "$PWD/runs:/app/runs" ...).
USER 1000
CMD ["nanolm", "demo"]
