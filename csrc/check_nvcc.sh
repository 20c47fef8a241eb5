#!/usr/bin/env bash
# Compile the CUDA probe code with this machine's nvcc (syntax and type check; no GPU needed).
#   csrc/check_nvcc.sh [python]      # python: the interpreter whose torch headers to use
# 1. probe_cuda.cu on its own (CUDA runtime only);
# 2. the torch glue probe_cuda_op.cpp, probe_cpu.cpp and probe_publish.cpp with DYNSTEP_WITH_CUDA (C++20, as torch 2.13), against torch's
#    headers (a CPU torch wheel ships the c10/cuda and ATen/cuda headers this needs).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${1:-python3}"
nvcc="${NVCC:-nvcc}"
arch="${NVCC_ARCH:-sm_80}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
command -v "$nvcc" >/dev/null || { echo "check_nvcc: nvcc not found (set NVCC=...)" >&2; exit 2; }
echo "check_nvcc: $("$nvcc" --version | tail -1)"
"$nvcc" -c -std=c++17 -O2 -arch="$arch" -Werror all-warnings -I"$here" "$here/cuda/probe_cuda.cu" -o "$out/probe_cuda.o"
echo "check_nvcc: cuda/probe_cuda.cu ok"
inc="$("$py" -c 'from torch.utils.cpp_extension import include_paths; print(" ".join("-I" + p for p in include_paths()))')"
pyinc="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
abi="$("$py" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')"
# A CPU torch wheel lacks the CMake-generated c10/cuda/impl/cuda_cmake_macros.h; for a
# compile-only check an empty stand-in is enough (a CUDA torch has the real one and skips this).
shim=""
if ! "$py" -c 'import os, sys; from torch.utils.cpp_extension import include_paths; sys.exit(not any(os.path.exists(os.path.join(p, "c10/cuda/impl/cuda_cmake_macros.h")) for p in include_paths()))'; then
  mkdir -p "$out/shim/c10/cuda/impl"
  printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' > "$out/shim/c10/cuda/impl/cuda_cmake_macros.h"
  shim="-I$out/shim"
  echo "check_nvcc: CPU torch headers: using a stand-in c10/cuda/impl/cuda_cmake_macros.h"
fi
for src in cuda/probe_cuda_op.cpp probe_cpu.cpp probe_publish.cpp flight_lines.cpp; do
  # .cpp files go to the host compiler through nvcc, as torch's build does; -O0: a type check only.
  "$nvcc" -c -std=c++20 -O0 -arch="$arch" -DDYNSTEP_WITH_CUDA -DTORCH_EXTENSION_NAME=dynstep_native \
    -D_GLIBCXX_USE_CXX11_ABI="$abi" $inc $shim -I"$pyinc" -I"$here" "$here/$src" -o "$out/$(basename "$src").o"
  echo "check_nvcc: $src ok"
done
echo "check_nvcc: all CUDA sources compile"
