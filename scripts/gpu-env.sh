# Sourced on the device machine (and by gpu-bundle.sh's check): the bundle's binaries, libraries and relocated
# OpenMPI first; the machine's own CUDA and NCCL libraries after them.
B=$(pwd)/.gpu-bundle
export PATH="$B/bin:$PATH"
export OPAL_PREFIX="$B/root/usr"
export PMIX_INSTALL_PREFIX="$B/root/usr/lib/x86_64-linux-gnu/pmix2"
export OMPI_MCA_mca_base_param_files="$B/root/etc/openmpi/openmpi-mca-params.conf"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_plm_rsh_agent=
# NCCL and cuBLASLt: the toolkit's, else the copies PyTorch's wheels bring (site-packages/nvidia/*/lib).
lib_dir() { local f; f=$(find /usr/local/cuda/ /usr/lib /opt /usr/local/lib -name "$1" 2>/dev/null | head -1 || true); [ -n "$f" ] && dirname "$f"; }
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:$(lib_dir 'libnccl.so.2'):$(lib_dir 'libcublasLt.so.13'):${LD_LIBRARY_PATH:-}"
