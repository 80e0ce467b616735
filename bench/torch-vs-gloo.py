#!/usr/bin/python3
"""torch.distributed on the "libccl" backend against "gloo", in one run on the
same ranks: all_reduce of float32 tensors over a size sweep, the step time
of DistributedDataParallel training a gradient-heavy MLP, and on torch 2.x
the step time of the same MLP under FSDP2 (fully_shard). The two
backends alternate (rounds), and each figure is the median over rounds.

    bench/torch-vs-gloo.py [--ranks 4] [--rounds 3] [--min 4K] [--max 64M]
                           [--ddp-params 24M] [--shared] [--csv FILE]

--shared (torch 2.x) adds, per size, the all_reduce of a tensor the
libccl process group allocated (its allocate_tensor, which FSDP2 uses for
its staging: memory every rank of the host maps, where libccl's
collectives run zero-copy), against gloo on that same tensor.

Run from a build tree (it sets CCL_LIBRARY to build/libccl.so.0 unless
already set); runs on Debian's torch 1.13 (/usr/bin/python3) and on torch 2.x. Prints one line per size and
the DDP step times, with ccl's speed-up (gloo time / ccl time)."""
import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1].upper()]) if s[-1].upper() in mult else int(s)


def fmt_size(b):
    for unit, m in (("M", 1 << 20), ("K", 1 << 10)):
        if b >= m:
            return f"{b // m}{unit}"
    return f"{b}"


def time_training(model, width, steps, barrier):
    """Seconds a step of SGD on a batch of 8 takes, after one untimed step
    (DDP builds its buckets then, FSDP its shards' buffers)."""
    import torch
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(8, width)

    def step():
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    step()
    return timed(step, steps, barrier)


def ran(group):
    """The algorithm libccl's last all_reduce on group ran, as
    ccl_comm_describe says it ("direct", "single_copy", ...)."""
    import ccl.torch
    text = ccl.torch.describe(group) or ""
    for part in text.split("last:")[-1].split(","):
        if part.strip().startswith("all_reduce:"):
            return part.strip().split()[0].split(":")[1]
    return "?"


def timed(fn, iters, sync):
    """Seconds per call of a block of iters calls, as nccl-tests and
    libccl's benchmarks time: every rank starts after a barrier, and the
    block's time is the slowest rank's. Neither the barrier nor the
    exchange of the times is inside it: gloo's barrier of 4 ranks on 2
    cores takes 1.8 ms here, about a 4 MiB all_reduce, and timed inside
    the block it added its cost, and the ranks' skew leaving it, to both
    backends' figures alike."""
    sync.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return sync.slowest(time.perf_counter() - t0) / iters


class Sync:
    """The timing's barrier and the slowest rank's time, both on gloo,
    outside every timed block."""

    def __init__(self, group):
        self.group = group

    def barrier(self):
        import torch.distributed as dist
        dist.barrier(group=self.group)

    def slowest(self, seconds):
        import torch
        import torch.distributed as dist
        t = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return t.item()


def rank_main(args, rank, world, init):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    import ccl.torch  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group("libccl", store=dist.FileStore(init, world), rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    groups = {"ccl": None, "gloo": dist.new_group(backend="gloo")}
    sync = Sync(groups["gloo"])
    out = []
    size = args.min
    while size <= args.max:
        x = torch.ones(size // 4, dtype=torch.float32)
        iters = max(3, min(200, int(64 * (1 << 20) / max(size, 1 << 16))))
        times = {"ccl": [], "gloo": []}
        for rnd in range(args.rounds):
            for name in (("ccl", "gloo") if rnd % 2 == 0 else ("gloo", "ccl")):
                g = groups[name]
                dist.all_reduce(x, group=g)  # warm-up
                times[name].append(timed(lambda: dist.all_reduce(x, group=g), iters, sync))
        med = {k: statistics.median(v) for k, v in times.items()}
        out.append(("all_reduce", size, med["ccl"], med["gloo"]))
        if rank == 0:
            busbw = 2 * (world - 1) / world * size / med["ccl"] / 1e9
            print(f"all_reduce {fmt_size(size):>5}: ccl {med['ccl'] * 1e6:10.1f} us  gloo {med['gloo'] * 1e6:10.1f} us"
                  f"  speed-up {med['gloo'] / med['ccl']:5.2f}x  (ccl busbw {busbw:.2f} GB/s, {ran(dist.group.WORLD)})",
                  flush=True)
        if args.shared:
            backend = dist.group.WORLD._get_backend(torch.device("cpu"))
            xs = backend.allocate_tensor(size // 4, dtype=torch.float32, device=torch.device("cpu")).fill_(1)
            times = {"ccl": [], "gloo": []}
            for rnd in range(args.rounds):
                for name in (("ccl", "gloo") if rnd % 2 == 0 else ("gloo", "ccl")):
                    g = groups[name]
                    dist.all_reduce(xs, group=g)
                    times[name].append(timed(lambda: dist.all_reduce(xs, group=g), iters, sync))
            med = {k: statistics.median(v) for k, v in times.items()}
            out.append(("all_reduce_shared", size, med["ccl"], med["gloo"]))
            del xs
            if rank == 0:
                busbw = 2 * (world - 1) / world * size / med["ccl"] / 1e9
                print(f"  allocated by the group: ccl {med['ccl'] * 1e6:10.1f} us  gloo {med['gloo'] * 1e6:10.1f} us"
                      f"  speed-up {med['gloo'] / med['ccl']:5.2f}x  (ccl busbw {busbw:.2f} GB/s)", flush=True)
        size *= 4

    # DDP: a stack of square layers holding about args.ddp_params parameters,
    # a small batch, so the step is dominated by the gradient all-reduce.
    width = 2048
    layers = max(1, round(args.ddp_params / (width * width + width)))
    torch.manual_seed(0)
    steps = {"ccl": [], "gloo": []}
    for rnd in range(args.rounds):
        for name in (("ccl", "gloo") if rnd % 2 == 0 else ("gloo", "ccl")):
            torch.manual_seed(0)
            model = DDP(nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)]),
                        process_group=groups[name])
            steps[name].append(time_training(model, width, args.ddp_steps, sync))
            del model
    med = {k: statistics.median(v) for k, v in steps.items()}
    nparams = layers * (width * width + width)
    out.append(("ddp_step", nparams, med["ccl"], med["gloo"]))
    if rank == 0:
        print(f"DDP step, {layers} x Linear({width}, {width}) = {nparams / 1e6:.1f}M parameters, batch 8: "
              f"ccl {med['ccl'] * 1e3:.1f} ms  gloo {med['gloo'] * 1e3:.1f} ms  speed-up "
              f"{med['gloo'] / med['ccl']:.2f}x", flush=True)

    # FSDP2 (torch 2.x): the same layers, each sharded (fully_shard), so a
    # step all-gathers every layer's parameters (forward and backward) and
    # reduce-scatters its gradients.
    if int(torch.__version__.split(".")[0]) >= 2:
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import fully_shard
        steps = {"ccl": [], "gloo": []}
        for rnd in range(args.rounds):
            for name in (("ccl", "gloo") if rnd % 2 == 0 else ("gloo", "ccl")):
                torch.manual_seed(0)
                model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])
                mesh = DeviceMesh.from_group(groups[name] or dist.group.WORLD, "cpu")
                for layer in model:
                    fully_shard(layer, mesh=mesh)
                fully_shard(model, mesh=mesh)
                steps[name].append(time_training(model, width, args.ddp_steps, sync))
                del model
        med = {k: statistics.median(v) for k, v in steps.items()}
        out.append(("fsdp2_step", nparams, med["ccl"], med["gloo"]))
        if rank == 0:
            print(f"FSDP2 step, the same {nparams / 1e6:.1f}M parameters, each layer sharded: "
                  f"ccl {med['ccl'] * 1e3:.1f} ms  gloo {med['gloo'] * 1e3:.1f} ms  speed-up "
                  f"{med['gloo'] / med['ccl']:.2f}x", flush=True)
        if args.csv:
            with open(args.csv, "w") as f:
                f.write("what,size,ccl_s,gloo_s,speedup\n")
                for what, s, c, g in out:
                    f.write(f"{what},{s},{c:.9f},{g:.9f},{g / c:.3f}\n")
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--min", type=parse_size, default=parse_size("4K"))
    p.add_argument("--max", type=parse_size, default=parse_size("64M"))
    p.add_argument("--ddp-params", type=parse_size, default=parse_size("24M"))
    p.add_argument("--ddp-steps", type=int, default=5)
    p.add_argument("--shared", action="store_true",
                   help="also all_reduce a tensor the libccl group allocated (torch 2.x)")
    p.add_argument("--csv")
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--init", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank is not None:
        return rank_main(args, args.rank, args.ranks, args.init)
    env = dict(os.environ)
    env.setdefault("CCL_LIBRARY", os.path.join(TOP, "build", "libccl.so.0"))
    env.setdefault("CCL_TORCH_BUILD_DIR", os.path.join(TOP, "build", "torch-ext"))
    env["PYTHONPATH"] = os.path.join(TOP, "python") + os.pathsep + env.get("PYTHONPATH", "")
    print(f"torch.distributed all_reduce and DDP, ccl against gloo: {args.ranks} ranks, medians of {args.rounds} "
          f"alternating rounds", flush=True)
    with tempfile.TemporaryDirectory() as d:
        init = os.path.join(d, "store")
        procs = [subprocess.Popen([sys.executable, __file__, *sys.argv[1:], "--rank", str(r), "--init", init], env=env)
                 for r in range(args.ranks)]
        codes = [p.wait() for p in procs]
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
