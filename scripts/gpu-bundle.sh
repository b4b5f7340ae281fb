#!/usr/bin/env bash
# Prepares, on a build machine with the CUDA toolkit (no GPU needed), everything a GPU session runs on the lent
# device machine, whose image has CUDA, cuBLASLt and NCCL but none of our Debian packages and no network:
#   .gpu-bundle/bin   shardplan, shardplan_tests, shardplan_reference_check (sm_90 + PTX), mpirun and orted
#   .gpu-bundle/lib   every shared library they load from this machine, except the CUDA driver, cuBLAS(Lt) and
#                     NCCL (the device's own are used: same CUDA 13)
#   .gpu-bundle/root  OpenMPI and PMIx plugin trees, relocated with OPAL_PREFIX / PMIX_INSTALL_PREFIX
# Then `device run` with carry [".gpu-bundle"] and scripts/gpu-session.sh. The bundle is checked here first: a
# 1-rank validate runs from it inside a mount namespace where the system OpenMPI is hidden.
set -euo pipefail
cd "$(dirname "$0")/.."
B=.gpu-bundle
arch=${SHARDPLAN_CUDA_ARCH:-90}

cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DSHARDPLAN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" >/dev/null
cmake --build build-gpu -j"$(nproc)" --target shardplan shardplan_tests shardplan_reference_check

rm -rf "$B" && mkdir -p "$B/bin" "$B/lib" "$B/root/usr/lib/x86_64-linux-gnu" "$B/root/usr/share" "$B/root/etc"
cp build-gpu/shardplan build-gpu/tests/shardplan_tests build-gpu/reference/shardplan_reference_check "$B/bin/"
cp -a /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 "$B/root/usr/lib/x86_64-linux-gnu/"
cp -a /usr/share/openmpi "$B/root/usr/share/"
cp -a /etc/openmpi "$B/root/etc/"
cp /usr/bin/orterun "$B/bin/mpirun"
cp /usr/bin/orted "$B/bin/orted"
# An MPI singleton starts orted from the relocated prefix's bindir.
mkdir -p "$B/root/usr/bin" && cp /usr/bin/orted "$B/root/usr/bin/orted"

# Shared libraries of the binaries and of every plugin, minus what the device machine provides itself: the C and
# C++ runtimes (PyTorch's image has a libstdc++ at least as new; Debian 12's needs glibc 2.36), the CUDA driver,
# cuBLAS(Lt) and NCCL.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc\+\+|libgcc_s|libcuda\.|libcublas|libcublasLt|libnccl)'
collect() {
  ldd "$1" 2>/dev/null | awk '/=> \// {print $1, $3}' | while read -r name path; do
    [[ "$name" =~ $skip ]] && continue
    [ -e "$B/lib/$name" ] || cp -L "$path" "$B/lib/$name"
  done
}
for f in "$B"/bin/* $(find "$B/root" -name '*.so*' -type f); do collect "$f"; done

# Relocation check on this machine: hide the system OpenMPI and PMIx, run one rank from the bundle.
cat > /tmp/gpu-bundle-check.sh <<'INNER'
set -e
for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/openmpi; do mount -t tmpfs none "$d"; done
source scripts/gpu-env.sh
mpirun --oversubscribe -np 1 shardplan validate --preset tiny --zero 3 --backend cpu --steps 1 --warmup 0 --quiet --format csv
# ... and as an MPI singleton, the session's fallback where mpirun cannot start.
shardplan validate --preset tiny --zero 0 --backend cpu --steps 1 --warmup 0 --quiet --format csv
INNER
if unshare -m bash /tmp/gpu-bundle-check.sh > /tmp/gpu-bundle-check.log 2>&1; then
  echo "bundle check: a 1-rank validate ran from $B with the system OpenMPI hidden, under mpirun and as a singleton"
else
  cat /tmp/gpu-bundle-check.log
  echo "bundle check FAILED (see above)" >&2
  exit 1
fi
du -sh "$B"
