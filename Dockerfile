# One image for controller, engines and client: see docker-compose.yml.
# BASE: any image with python3 (>= 3.11) and its venv module; the official one by default.
# Where that registry cannot be reached, `scripts/container_engine.sh base-image TAG` makes
# one from the distribution's packages: docker build --build-arg BASE=TAG .
# The source tree stays in the build stage: a `zpar/` folder in the working directory of
# the running image would hide the installed package (python -m puts the cwd first).
# CI builds and runs this image (tests/deploy/test_compose_cluster.py) and rebuilds the
# same install (the COPY lines below, then pip) in a throwaway venv
# (tests/deploy/test_containers.py).
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY zpar zpar
COPY hub hub
COPY engine engine
COPY client client
COPY schedulers schedulers
COPY typed typed
COPY communicator communicator
COPY darray darray
COPY dashboard dashboard
RUN python3 -m venv /opt/zpar && /opt/zpar/bin/pip install --no-cache-dir .

FROM ${BASE}
COPY --from=build /opt/zpar /opt/zpar
ENV PATH=/opt/zpar/bin:$PATH ZPAR_DIR=/zpar
WORKDIR /home
ENTRYPOINT ["zpar"]
