#!/bin/sh
# The GPU checks in one go, on a machine with a GPU (docs/cuda.md records
# what they gave): build with the kernels for this GPU's architecture alone
# (a build for every architecture spends minutes in nvcc), run every test
# labelled cuda or nccl (among them nccl_cuda_swap_{2,4}: a program built
# against NVIDIA's nccl.h and libnccl.so.2, run on device buffers with
# libccl's drop-in swapped in), then the device benchmarks' figures: the
# GPU-resident all-reduce on 2 and 4 ranks, in and out of place, and the
# staged path, pipelined and whole, against host buffers (reduce-scatter
# and all-gather too, once); then the torch backend's CUDA tests and
# PyTorch's own NCCL process group on libccl's libnccl.so.2.
#
# usage: tools/gpu-check.sh [BUILD_DIR] [LOG_DIR]
#   BUILD_DIR  default /tmp/ccl-gpu-build; LOG_DIR  default BUILD_DIR/gpu-logs
#   CCL_GPU_ARCH  the sm number to build for (default: what nvidia-smi says)
#   CCL_GPU_CHECK_PERF=0  skips the device benchmarks (the tests alone)
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-/tmp/ccl-gpu-build}
logs=${2:-$build/gpu-logs}
mkdir -p "$build" "$logs" || exit 1

if ! nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv >"$logs/gpu.txt" 2>&1; then
    echo "gpu-check: skipped: nvidia-smi found no GPU here" >&2
    exit 77
fi
cat "$logs/gpu.txt"
arch=${CCL_GPU_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')}
# The C tests need Check; a GPU machine without it still runs the torch
# backend's CUDA tests below.
tests=ON
if ! pkg-config --exists check 2>/dev/null; then
    tests=OFF
    echo "gpu-check: Check is not installed here: the C tests (ctest -L 'cuda|nccl') are not built or run"
fi
echo "gpu-check: building $src for sm_$arch in $build ($(nproc) CPUs)"
start=$(date +%s)
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCCL_CUDA=ON -DCCL_CUDA_ARCHS="$arch" -DCCL_BUILD_TESTS=$tests \
    >"$logs/cmake.log" 2>&1 &&
    cmake --build "$build" -j "$(nproc)" >"$logs/build.log" 2>&1 || {
    tail -n 40 "$logs/cmake.log" "$logs/build.log"
    exit 1
}
echo "gpu-check: built in $(($(date +%s) - start)) s"

status=0
if [ $tests = ON ]; then
    (cd "$build" && ctest -L 'cuda|nccl' --output-on-failure -j 4 --timeout 240) >"$logs/ctest.log" 2>&1 || status=1
    grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|tests failed|Total Test" "$logs/ctest.log"
fi

perf=$build/bench/all_reduce_perf
bench() {
    [ "${CCL_GPU_CHECK_PERF:-1}" = 0 ] && return 0
    echo "gpu-check: $(basename "$perf") $*"
    timeout 120 "$perf" "$@" 2>&1 | grep -v '^#$'
}
{
    bench --ranks 2 --device -b 8 -e 128M -f 8 -n 20 -w 5
    bench --ranks 4 --device -b 1M -e 256M -f 16 -n 20 -w 5
    # Staged: pipelined (CCL_DEVICE_PIECE_BYTES' default), whole (0), and
    # libccl on host buffers, in turn, three times (the target: pipelined
    # at least 3x whole and 0.8x host buffers at 64 MiB)
    for round in 1 2 3; do
        CCL_CUDA_DIRECT=0 bench --ranks 2 --device -b 64M -e 64M -n 10 -w 3
        CCL_CUDA_DIRECT=0 CCL_DEVICE_PIECE_BYTES=0 bench --ranks 2 --device -b 64M -e 64M -n 10 -w 3
        bench --ranks 2 -b 64M -e 64M -n 10 -w 3
    done
    # Reduce-scatter and all-gather staged the same three ways, once: their
    # pieces are strided across the ranks' blocks
    for coll in reduce_scatter all_gather; do
        perf=$build/bench/${coll}_perf
        CCL_CUDA_DIRECT=0 bench --ranks 2 --device -b 64M -e 64M -n 10 -w 3
        CCL_CUDA_DIRECT=0 CCL_DEVICE_PIECE_BYTES=0 bench --ranks 2 --device -b 64M -e 64M -n 10 -w 3
        bench --ranks 2 -b 64M -e 64M -n 10 -w 3
    done
} >"$logs/perf.log" 2>&1
grep -E "^ +[0-9]+ |roofline|copy|gpu-check|device_piece_bytes" "$logs/perf.log" | sed 's/^# rank 0: .*\(device_piece_bytes=[0-9]*\).*/#   \1/' | head -80

# The torch backend's CUDA tensors, where this machine's python3 has a
# CUDA torch: the extension builds against it and this build's libccl.
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu-check: torch $(python3 -c 'import torch; print(torch.__version__)'): CUDA tensors through the backend"
    export LD_LIBRARY_PATH="$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" CCL_LIBRARY="$build/libccl.so"
    export PYTHONPATH="$src/python${PYTHONPATH:+:$PYTHONPATH}" CCL_TORCH_BUILD_DIR="$build/torch-ext"
    if python3 -c "import pytest" 2>/dev/null; then
        (cd "$src/python/tests" && timeout 400 python3 -m pytest -q -p no:cacheprovider -s -k "cuda" test_torch.py) \
            >"$logs/torch.log" 2>&1 || status=1
        tail -n 60 "$logs/torch.log" | grep -v "^$" | tail -n 40
    else # no pytest there: the scenarios themselves, on 2 ranks
        for scenario in cuda cuda_stream; do
            d=$(mktemp -d)
            direct=$([ $scenario = cuda_stream ] && echo 0 || echo 1)
            for r in 0 1; do
                (cd "$src/python/tests" && CCL_CUDA_DIRECT=$direct timeout 200 python3 torch_scenarios.py $scenario $r 2 \
                    "$d/store" >"$logs/torch-$scenario-$r.log" 2>&1
                 echo "$scenario rank $r exit $?" >>"$logs/torch.log") &
            done
            wait
            cat "$logs/torch-$scenario-0.log" >>"$logs/torch.log"
            grep -q "$scenario rank 0 exit 0" "$logs/torch.log" && grep -q "$scenario rank 1 exit 0" "$logs/torch.log" ||
                status=1
        done
    fi
    grep -E "passed|failed|cuda:|exit|Error" "$logs/torch.log" | head -20
    # PyTorch's own NCCL process group with libccl's libnccl.so.2 in place of NVIDIA's (LD_PRELOAD):
    # all-reduce, all-gather, broadcast and 5 DDP steps on 2 ranks of this GPU (python/tests/torch_nccl_swap.py)
    d=$(mktemp -d)
    for r in 0 1; do
        (LD_PRELOAD="$build/nccl/drop-in/libnccl.so.2" timeout 200 python3 "$src/python/tests/torch_nccl_swap.py" $r 2 \
            "$d/store" >"$logs/torch-swap-$r.log" 2>&1; echo "exit $?" >>"$logs/torch-swap-$r.log") &
    done
    wait
    for r in 0 1; do
        tail -n 3 "$logs/torch-swap-$r.log"
        grep -q "^exit 0$" "$logs/torch-swap-$r.log" || status=1
    done
else
    echo "gpu-check: no CUDA torch for python3 here: the torch backend's CUDA tensors were not run"
fi
exit $status
