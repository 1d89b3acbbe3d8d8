# kplane broker image: `docker run IMAGE CONFIG [--override key=value ...]` runs
# `kplane serve`. The default config binds 127.0.0.1 inside the container; for a reachable
# broker pass a config or overrides, as docker-compose.yml does.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/kplane

# Runtime only: no dev or report extras.
COPY pyproject.toml README.md ./
COPY kplane ./kplane
COPY configs ./configs
RUN pip install . \
    && rm -rf build kplane.egg-info \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin kplane \
    && mkdir data && chown kplane:kplane data

# Relative log.dirs (./data/...) land in /opt/kplane/data, the one directory the broker
# may write; a named volume mounted there starts out owned by kplane.
USER kplane
EXPOSE 9092

ENTRYPOINT ["kplane", "serve"]
CMD ["configs/server.properties"]
