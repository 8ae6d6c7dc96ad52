#!/bin/sh
# One entrypoint for every container of the compose file: the Ray head, the GPU workers and the
# one-shot `weightsearch launch`/`resume`. It checks the Ray token is there, optionally joins
# the cluster as a resource-less node (a Ray driver must run on a node of its cluster), then
# runs the given command.
set -eu

if [ "${RAY_AUTH_MODE:-}" = "token" ] && [ -z "${RAY_AUTH_TOKEN:-}" ]; then
    echo "entrypoint: RAY_AUTH_MODE=token but RAY_AUTH_TOKEN is empty; put" \
         "RAY_AUTH_TOKEN=<token> in docker/.env (see docker/README.md)" >&2
    exit 2
fi

if [ -n "${WEIGHTSEARCH_JOIN_RAY:-}" ]; then
    # Zero CPUs and GPUs: trials are never scheduled here, only the driver runs here.
    ray start --address="${WEIGHTSEARCH_JOIN_RAY}" --num-cpus=0 --num-gpus=0 \
        --disable-usage-stats
fi

exec "$@"
