# One image for controller, engines and client: see docker-compose.yml.
# CI builds the same install (the COPY lines below, then `pip install .`) in a throwaway
# venv: tests/deploy/test_containers.py.
FROM python:3.11-slim
WORKDIR /opt/zpar
COPY pyproject.toml README.md ./
COPY zpar zpar
COPY hub hub
COPY engine engine
COPY client client
COPY schedulers schedulers
COPY typed typed
COPY communicator communicator
COPY darray darray
RUN pip install --no-cache-dir .
ENV ZPAR_DIR=/zpar
ENTRYPOINT ["zpar"]
