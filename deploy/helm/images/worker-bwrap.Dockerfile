# toolgate/worker-bwrap: the worker image plus what the bwrap sandbox driver needs in the pod:
# Debian's bubblewrap (0.8.0 on bookworm: --disable-userns) and the sandbox root filesystems and
# compiled seccomp filter that scripts/sandbox/build-images.sh exports to deploy/sandbox/.build.
# They land where the driver looks by default (relative to the worker's /app working directory),
# so the config needs no paths. The build context is that directory:
#
#   bash scripts/sandbox/build-images.sh && bash scripts/deploy/build-images.sh
#   docker build --label toolgate.deploy=1 -f deploy/helm/images/worker-bwrap.Dockerfile -t toolgate/worker-bwrap:local deploy/sandbox/.build
#
# What a pod running it needs (seccomp, /proc, user namespaces): docs/kubernetes.md.
ARG WORKER_IMAGE=toolgate/worker:local
FROM ${WORKER_IMAGE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb \
 && bwrap --version
COPY seccomp/sandbox.bpf /app/deploy/sandbox/.build/seccomp/sandbox.bpf
COPY rootfs/ /app/deploy/sandbox/.build/rootfs/
ENV TOOLGATE_SANDBOX_DRIVER=bwrap
