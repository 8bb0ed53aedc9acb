#!/usr/bin/env bash
# (test/deploy/container.test.ts runs this when localhost/node-base:test is missing; the image is kept and reused.)
# Make a local stand-in for the official Node base image, with no registry: a Debian bookworm root filesystem from
# Debian's packages (mmdebstrap) plus the node binary this machine runs. Then a Dockerfile that takes its base as a
# build argument can be built and run here:
#   podman --runtime runc --cgroup-manager=cgroupfs build --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
#     --network host --build-arg BASE=localhost/node-base:test -t localhost/portico:test .
# (--network host lets `npm ci` in a RUN step reach the npm registry, as the machine does)
# Needs: apt-get install -y podman runc mmdebstrap
set -euo pipefail
for tool in podman runc mmdebstrap; do
  command -v "$tool" >/dev/null || { echo "node-base.sh: $tool is not installed (apt-get install -y podman runc mmdebstrap)" >&2; exit 1; }
done
P=(podman --runtime runc --cgroup-manager=cgroupfs)
U=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mmdebstrap --variant=minbase --include=ca-certificates,libstdc++6 bookworm "$work/rootfs.tar" >/dev/null
"${P[@]}" import "$work/rootfs.tar" localhost/debian-bookworm:base >/dev/null
cp "$(command -v node)" "$work/node"
npmdir=$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")   # .../node_modules/npm
cp -r "$npmdir" "$work/npm"
cat >"$work/Containerfile" <<'CF'
FROM localhost/debian-bookworm:base
COPY node /usr/local/bin/node
COPY npm /usr/local/lib/node_modules/npm
RUN ["/bin/sh","-c","ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx && node --version && npm --version"]
CF
"${P[@]}" build "${U[@]}" --network host -t localhost/node-base:test "$work" >/dev/null
"${P[@]}" run --rm "${U[@]}" --network host localhost/node-base:test sh -c 'echo "node-base:test ready: node $(node --version), npm $(npm --version)"'
rm -rf "$work"
