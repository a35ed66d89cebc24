# syntax=docker/dockerfile:1
# The gang-extender image: one process, `gang-extender serve` (extender :8443,
# webhook :9443, metrics and health :8080).
#
#   docker build -t gang-extender:dev .
#
# Repeatable: the base image is pinned by digest, Python dependencies by
# constraints.txt, and the service is built as a wheel from this tree. The final
# stage has no compiler, no pip and no source tree, and runs as uid 65532.

# python:3.11.10-slim-bookworm, pinned by the digest its tag had when this was
# written (as recorded by Renovate in public repositories). To move it forward:
#   docker buildx imagetools inspect python:3.11-slim-bookworm   # -> Digest: sha256:...
ARG PYTHON_IMAGE=python:3.11.10-slim-bookworm@sha256:5148c0e4bbb64271bca1d3322360ebf4bfb7564507ae32dd639322e4952a6b16

# ---- builder: wheels, then a self-contained virtualenv ----
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY extender ./extender
RUN python -m pip wheel --wheel-dir /wheels --constraint constraints.txt . \
 && python -m venv /opt/gang-extender \
 && /opt/gang-extender/bin/pip install --no-index --find-links /wheels \
      --constraint constraints.txt gang-extender \
 && /opt/gang-extender/bin/pip uninstall --yes pip \
 && /opt/gang-extender/bin/gang-extender version

# ---- final: the interpreter, the virtualenv, the placement policies ----
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="gang-extender" \
      org.opencontainers.image.description="Gang scheduling for GPU jobs beside the stock kube-scheduler" \
      org.opencontainers.image.licenses="Apache-2.0"
# The base image's own pip/setuptools/wheel are not needed at run time.
RUN python -m pip uninstall --yes --disable-pip-version-check pip setuptools wheel \
 && rm -rf /root/.cache
COPY --from=builder /opt/gang-extender /opt/gang-extender
# For --policy: /etc/gang-extender/policies/{binpack,spread,binpack-zone}.yaml
COPY policies /etc/gang-extender/policies
ENV PATH=/opt/gang-extender/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
# Non-root (distroless "nonroot" uid/gid); deploy/ adds readOnlyRootFilesystem.
USER 65532:65532
EXPOSE 8443 9443 8080
ENTRYPOINT ["gang-extender", "serve"]
