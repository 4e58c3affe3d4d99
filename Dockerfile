# One image for controller and engines: `docker compose up --scale engine=4`.
FROM python:3.11-slim
WORKDIR /opt/zpar
COPY pyproject.toml README.md ./
COPY zpar zpar
COPY hub hub
COPY engine engine
COPY client client
COPY schedulers schedulers
RUN pip install --no-cache-dir .
ENV ZPAR_DIR=/zpar
ENTRYPOINT ["zpar"]
