#!/usr/bin/env python3
"""deepspeed_perf: DeepSpeed's shared-memory all-reduce for CPU inference
(deepspeed.comm.inference_all_reduce over its shm op, with a gloo process
group beside it), timed as the project's benchmarks time theirs: per size,
warm-up calls, a timed block, time = mean per call, max over ranks; busbw
by nccl-tests' factor; every result checked (inputs chosen so that any
order of summing is exact); the benchmarks' CSV columns, which
bench/peers_summary.py reads beside theirs.

    deepspeed_perf.py N MIN MAX FACTOR ITERS WARMUP CSV

Starts N local ranks itself (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_SIZE,
MASTER_ADDR and MASTER_PORT, as a launcher would set them). Exit status 1
when a result was wrong or a rank failed.
"""
import os
import socket
import subprocess
import sys
import time


def rank_main(n, lo, hi, factor, iters, warmup, path):
    import torch
    import torch.distributed as dist
    import deepspeed
    import deepspeed.comm as dscomm
    import deepspeed.comm.comm as dscomm_state

    torch.set_num_threads(1)
    deepspeed.init_distributed(dist_backend="gloo", verbose=False)
    rank = dist.get_rank()
    backend = dscomm_state.cdb
    if getattr(backend, "shm_comm_op", None) is None:
        raise SystemExit(f"rank {rank}: DeepSpeed's shared-memory op did not load (ShareMemCommBuilder)")
    if getattr(backend, "shm_vector_kernel_level", 0) < 1:
        raise SystemExit(f"rank {rank}: DeepSpeed's shared-memory all-reduce needs AVX2 for float32; "
                         "it would fall back to gloo here")
    rows, wrong_total = [], 0
    size = max(lo, 4)
    while size <= hi:
        count = size // 4
        x = torch.empty(count, dtype=torch.float32)
        pattern = (torch.arange(count) % 7).float()
        x.copy_(pattern * (rank + 1))
        dscomm.inference_all_reduce(x)
        wrong = int((x != pattern * (n * (n + 1) // 2)).sum())
        for _ in range(warmup):
            dscomm.inference_all_reduce(x)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dscomm.inference_all_reduce(x)
        t = torch.tensor([(time.perf_counter() - t0) / iters * 1e6, float(wrong)])
        dist.all_reduce(t[:1], op=dist.ReduceOp.MAX)
        dist.all_reduce(t[1:], op=dist.ReduceOp.SUM)
        us, wrong = float(t[0]), int(t[1])
        wrong_total += wrong
        algbw = size / us / 1e3
        busbw = algbw * 2 * (n - 1) / n
        rows.append(f"deepspeed-shm,all_reduce,{n},1,shm,auto,float32,sum,,{size},{count},out,{us:.3f},"
                    f"{algbw:.6f},{busbw:.6f},{wrong}")
        if rank == 0:
            print(f"{size:12d} {us:10.2f} us {busbw:8.2f} GB/s busbw {wrong} wrong", flush=True)
        size *= factor
    if rank == 0:
        with open(path, "w") as f:
            f.write("library,op,nranks,nhosts,transport,algo,dtype,redop,root,size_bytes,count,placement,"
                    "time_us,algbw_gbps,busbw_gbps,wrong\n" + "\n".join(rows) + "\n")
    dist.barrier()
    # torch 2.x asks for it before exit. Without it a rank died at exit
    # once in 30 runs of 2 ranks ("terminate called without an active
    # exception", after every result was written, so the run counted as
    # failed); with it, none in 30.
    dist.destroy_process_group()
    return 1 if wrong_total else 0


def main():
    if os.environ.get("DS_PERF_RANK_OF"):
        a = sys.argv[1:]
        sys.exit(rank_main(int(a[0]), int(a[1]), int(a[2]), int(a[3]), int(a[4]), int(a[5]), a[6]))
    if len(sys.argv) != 8:
        print(__doc__.strip().splitlines()[-6], file=sys.stderr)
        sys.exit(2)
    n = int(sys.argv[1])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(n):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r), LOCAL_SIZE=str(n),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), DS_PERF_RANK_OF="1")
        procs.append(subprocess.Popen([sys.executable, __file__] + sys.argv[1:], env=env))
    codes = [p.wait() for p in procs]
    sys.exit(0 if not any(codes) else 1)


if __name__ == "__main__":
    main()
