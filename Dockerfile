# syntax=docker/dockerfile:1
# vllm-operator image: `vllm-operator run` (the controller) by default; the same image runs the
# GPU probe DaemonSet (`vllm-operator probe`). Build from the repository root:
#   docker build --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(date -u +%FT%TZ) -t ghcr.io/vllm-operator/vllm-operator:0.1.0 .
#
# The base is pinned by digest (the tag is informational: the digest decides). Both stages use the
# same base, so the virtual environment built in the first stage runs unchanged in the second, and
# the final image holds no compiler, no pip and no sources: every dependency ships as a wheel.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ONLY_BINARY=:all:
WORKDIR /src
RUN python -m venv /opt/vllm-operator
# Every dependency (and the build backend) from the lock file, each wheel checked against its
# sha256 (--require-hashes): the image installs exactly what was reviewed, never a newer release
# inside pyproject's ranges. Regenerate with `make lock`. Wheels only (PIP_ONLY_BINARY).
COPY requirements.lock ./
RUN /opt/vllm-operator/bin/pip install --require-hashes --no-deps -r requirements.lock
COPY pyproject.toml README.md ./
COPY operator ./operator
# The project itself: no dependency resolution (--no-deps), no index (--no-index), the locked
# setuptools as build backend (--no-build-isolation). Bytecode is compiled here because the
# runtime root filesystem is read-only. The build tools leave with pip.
RUN /opt/vllm-operator/bin/pip install --no-deps --no-index --no-build-isolation . \
 && /opt/vllm-operator/bin/pip uninstall --yes setuptools wheel pip \
 && /opt/vllm-operator/bin/vllm-operator --version

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="vllm-operator" \
      org.opencontainers.image.description="Kubernetes operator that computes vLLM engine limits per GPU type and keeps vLLM services memory-safe." \
      org.opencontainers.image.source="https://github.com/vllm-operator/vllm-operator" \
      org.opencontainers.image.url="https://github.com/vllm-operator/vllm-operator" \
      org.opencontainers.image.documentation="https://github.com/vllm-operator/vllm-operator/blob/main/docs/installation.md" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="vllm-operator authors" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11-slim-bookworm"
# The base's own pip/setuptools/wheel are not needed at run time: fewer packages, fewer CVEs.
RUN python -m pip uninstall --yes --no-cache-dir pip setuptools wheel
COPY --from=build /opt/vllm-operator /opt/vllm-operator
ENV PATH=/opt/vllm-operator/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    HF_HOME=/var/cache/vllm-operator/huggingface
# Non-root, numeric (Kubernetes' runAsNonRoot can only verify a numeric USER); 65532 is the
# conventional "nonroot" UID of distroless images. No /etc/passwd entry is needed.
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080 8081
ENTRYPOINT ["vllm-operator"]
CMD ["run"]
