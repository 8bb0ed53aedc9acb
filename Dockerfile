# Portico's container image: docs/deployment.md, "Container".
#
#   docker build -t portico .
#   docker run -d -p 8080:8080 -v portico-data:/data -e PUBLIC_URL=http://localhost:8080 portico
#   docker exec <container> portico login --user alice
#
# BASE is any Debian bookworm image with Node.js 20.19+ (or 22.13+) and npm on PATH; the official one by default.
# The tests build this file on a base made without a registry (test/deploy/node-base.sh).
ARG BASE=node:22-bookworm-slim

# ---- deps: every dependency, installed once. The lock and the stubs it names only: this stage is rebuilt only when
# the dependencies change. The build stage builds on it; the runtime takes its node_modules with the dev ones pruned.
FROM ${BASE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
COPY stubs ./stubs
RUN --mount=type=cache,target=/root/.npm,sharing=locked npm ci --no-audit --no-fund --loglevel=error

# ---- build: the server's build (node scripts/build.mjs --app: dist/src and the page, esbuild, a few seconds;
# --pglite-template: a dump of an empty migrated database, so a new /data starts in ~2 s, not ~10 s of initdb)
FROM deps AS build
COPY . .
RUN node scripts/build.mjs --app --pglite-template

# ---- prod-deps: what `npm ci --omit=dev` installs, made by removing the dev dependencies from the deps stage's tree
# (no second download and install; the same lock, so the same files, without the scope folders prune empties).
# Independent of the sources: cached like deps.
FROM deps AS prod-deps
RUN npm prune --omit=dev --no-audit --no-fund --loglevel=error \
 && find node_modules -mindepth 1 -maxdepth 1 -type d -empty -delete

# ---- runtime: the production dependencies, the built dist/, the engines' Debian packages ---------------------------
FROM ${BASE} AS runtime
# pocketsphinx (the embedded recognizer) is Debian's command-line program and its English model. ffmpeg comes with
# npm ci (@ffmpeg-installer's static binary), the voices (flite, espeak-ng) are WebAssembly in node_modules and
# llama.cpp is node-llama-cpp's prebuilt CPU binary: none of them needs a Debian package. whisper.cpp's prebuilt
# binary (@fugood/node-whisper-<platform>, an optional dependency) links OpenMP's runtime, libgomp1, which the slim
# base lacks: without it a pulled whisper model answers 503 "cannot be loaded".
RUN apt-get update \
 && apt-get install -y --no-install-recommends pocketsphinx pocketsphinx-en-us libgomp1 \
 && rm -rf /var/lib/apt/lists/*
# a user of its own (numeric, so an orchestrator can check runAsNonRoot), owning only the data directory (and its
# models folder, where a shared volume of pulled models may be mounted: compose.yaml)
RUN groupadd --gid 10001 portico \
 && useradd --no-log-init --uid 10001 --gid portico --home-dir /data --no-create-home --shell /usr/sbin/nologin portico \
 && mkdir -p /data/models && chown -R portico:portico /data && chmod 0700 /data /data/models
WORKDIR /app
COPY package.json package-lock.json ./
COPY stubs ./stubs
COPY --from=prod-deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
# `portico` on PATH: `docker exec <container> portico keys disable key_...`
RUN ln -s /app/dist/src/cli/main.js /usr/local/bin/portico && portico --version

# the application folder stays root's (read-only to Portico); everything Portico writes goes to /data
ENV DATA_DIR=/data HOST=0.0.0.0 PORT=8080
VOLUME ["/data"]
EXPOSE 8080
USER 10001:10001
# ready = the database answers and every migration is applied (503 otherwise); no curl in the image, node asks
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/readyz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# node is PID 1 and handles SIGTERM itself (graceful stop within SHUTDOWN_GRACE_MS), SIGINT and SIGHUP (reload)
ENTRYPOINT ["node", "/app/dist/src/cli/main.js"]
CMD ["serve"]
