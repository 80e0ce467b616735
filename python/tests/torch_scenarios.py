"""One rank of a torch.distributed scenario on the "libccl" backend; run by
test_torch.py as: torch_scenarios.py SCENARIO RANK WORLD INIT_FILE.
Exits 0 when every check on this rank passed."""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import ccl.torch  # noqa: F401  (registers the backend)

DTYPES = [torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.float64]
GLOO_DTYPES = [torch.int32, torch.int64, torch.float32, torch.float64]  # compared with gloo as well
OPS = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX}


def data(rank, n, dtype, salt=0):
    """Small integers: exact in every dtype, and so are their sums and products over 4 ranks."""
    v = (torch.arange(n, dtype=torch.int64) * 7 + rank * 3 + salt) % 4 + 1
    return v.to(dtype)


def reduce_ref(tensors, op):
    wide = torch.stack([t.to(torch.float64) for t in tensors])
    r = {"sum": wide.sum(0), "product": wide.prod(0), "min": wide.min(0).values, "max": wide.max(0).values}[op]
    return r.to(tensors[0].dtype)


def same(a, b, what):
    if not torch.equal(a, b):
        raise AssertionError(f"{what}: {a.tolist()[:8]} != {b.tolist()[:8]}")


TORCH2 = int(torch.__version__.split(".")[0]) >= 2


def check_coalesced(rank, world, n, dt, tag):
    """torch 2.x's coalesced all_gather_into_tensor and reduce_scatter_tensor
    (what _coalescing_manager, and FSDP, call): three pairs of tensors of
    different sizes in one coalesced call each."""
    sizes = [n, 1, 2 * n + 1]
    gathered = [torch.zeros(k * world, dtype=dt) for k in sizes]
    with dist._coalescing_manager(async_ops=True) as cm:
        for i, k in enumerate(sizes):
            dist.all_gather_into_tensor(gathered[i], data(rank, k, dt, 10 + i))
    cm.wait()
    for i, k in enumerate(sizes):
        same(gathered[i], torch.cat([data(q, k, dt, 10 + i) for q in range(world)]),
             f"allgather_into_tensor_coalesced pair {i} {tag}")
    scattered = [torch.zeros(k, dtype=dt) for k in sizes]
    with dist._coalescing_manager(async_ops=True) as cm:
        for i, k in enumerate(sizes):
            dist.reduce_scatter_tensor(scattered[i], data(rank, k * world, dt, 20 + i), op=dist.ReduceOp.SUM)
    cm.wait()
    for i, k in enumerate(sizes):
        want = reduce_ref([data(q, k * world, dt, 20 + i)[rank * k:(rank + 1) * k] for q in range(world)], "sum")
        same(scattered[i], want, f"reduce_scatter_tensor_coalesced pair {i} {tag}")


def check_ops(rank, world, gloo):
    """Every process-group operation, on every dtype, against a reference
    computed here and (for gloo's dtypes) against gloo's own result."""
    n = 7  # elements per rank: divides nothing
    for dt in DTYPES:
        both = [None] + ([gloo] if dt in GLOO_DTYPES else [])
        for op_name, op in OPS.items():
            want = reduce_ref([data(r, n, dt) for r in range(world)], op_name)
            for g in both:
                x = data(rank, n, dt)
                dist.all_reduce(x, op=op, group=g)
                same(x, want, f"all_reduce {op_name} {dt} on {'gloo' if g else 'ccl'}")
        if dt.is_floating_point:  # AVG: the sum divided in the element type
            x = data(rank, n, dt)
            dist.all_reduce(x, op=dist.ReduceOp.AVG)
            s = reduce_ref([data(r, n, dt) for r in range(world)], "sum")
            same(x, (s / world).to(dt), f"all_reduce avg {dt}")
        for g in both:
            tag = f"{dt} on {'gloo' if g else 'ccl'}"
            root = world - 1
            b = data(rank, n, dt, 1) if rank == root else torch.zeros(n, dtype=dt)
            dist.broadcast(b, src=root, group=g)
            same(b, data(root, n, dt, 1), f"broadcast {tag}")
            r = data(rank, n, dt, 2)
            dist.reduce(r, dst=root, op=dist.ReduceOp.MAX, group=g)
            if rank == root:
                same(r, reduce_ref([data(q, n, dt, 2) for q in range(world)], "max"), f"reduce {tag}")
            outs = [torch.zeros(n, dtype=dt) for _ in range(world)]
            dist.all_gather(outs, data(rank, n, dt, 3), group=g)
            for q in range(world):
                same(outs[q], data(q, n, dt, 3), f"all_gather from {q} {tag}")
            if g is None:  # the flat and reduce-scatter forms: gloo 1.13 has none, so the reference alone
                flat = torch.zeros(n * world, dtype=dt)
                dist._all_gather_base(flat, data(rank, n, dt, 3))
                same(flat, torch.cat([data(q, n, dt, 3) for q in range(world)]), f"_all_gather_base {tag}")
                ins = [data(rank * world + q, n, dt, 4) for q in range(world)]
                out = torch.zeros(n, dtype=dt)
                dist.reduce_scatter(out, ins, op=dist.ReduceOp.SUM)
                same(out, reduce_ref([data(q * world + rank, n, dt, 4) for q in range(world)], "sum"),
                     f"reduce_scatter {tag}")
                out2 = torch.zeros(n, dtype=dt)
                dist._reduce_scatter_base(out2, torch.cat(ins))
                same(out2, out, f"_reduce_scatter_base {tag}")
                if TORCH2:
                    check_coalesced(rank, world, n, dt, tag)
            gl = [torch.zeros(n, dtype=dt) for _ in range(world)] if rank == 0 else None
            dist.gather(data(rank, n, dt, 5), gl, dst=0, group=g)
            if rank == 0:
                for q in range(world):
                    same(gl[q], data(q, n, dt, 5), f"gather from {q} {tag}")
            sc = [data(q, n, dt, 6) for q in range(world)] if rank == 0 else None
            part = torch.zeros(n, dtype=dt)
            dist.scatter(part, sc, src=0, group=g)
            same(part, data(rank, n, dt, 6), f"scatter {tag}")
            # all_to_all_single, equal: block q of rank r is data(r*world+q)
            a_in = torch.cat([data(rank * world + q, n, dt, 7) for q in range(world)])
            a_out = torch.zeros(n * world, dtype=dt)
            dist.all_to_all_single(a_out, a_in, group=g)
            same(a_out, torch.cat([data(q * world + rank, n, dt, 7) for q in range(world)]), f"alltoall equal {tag}")
            if g is None:
                # uneven: rank r sends r + q + 1 rows of 2 elements to q
                rows_in = [rank + q + 1 for q in range(world)]
                rows_out = [q + rank + 1 for q in range(world)]
                u_in = torch.cat([data(rank * 31 + q, 2 * k, dt, 8) for q, k in enumerate(rows_in)]).view(-1, 2)
                u_out = torch.zeros(sum(rows_out), 2, dtype=dt)
                dist.all_to_all_single(u_out, u_in, rows_out, rows_in)
                want = torch.cat([data(q * 31 + rank, 2 * k, dt, 8) for q, k in enumerate(rows_out)]).view(-1, 2)
                same(u_out, want, f"alltoall uneven {tag}")
                # all_to_all over lists of tensors of different sizes
                l_in = [data(rank * world + q, q + 1, dt, 9) for q in range(world)]
                l_out = [torch.zeros(rank + 1, dtype=dt) for _ in range(world)]
                dist.all_to_all(l_out, l_in)
                for q in range(world):
                    same(l_out[q], data(q * world + rank, rank + 1, dt, 9), f"all_to_all list from {q} {tag}")
    # send/recv around a ring, and a barrier
    if world > 1:
        t = torch.full((5,), float(rank))
        got = torch.zeros(5)
        reqs = [dist.isend(t, (rank + 1) % world), dist.irecv(got, (rank - 1) % world)]
        for r in reqs:
            r.wait()
        same(got, torch.full((5,), float((rank - 1) % world)), "send/recv ring")
    dist.barrier()


def mlp(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4))


def train(model, opt, rank, steps=50, kill_at=None):
    g = torch.Generator().manual_seed(1234 + rank)
    for step in range(steps):
        if kill_at is not None and step == kill_at:
            os._exit(7)
        x = torch.randn(16, 32, generator=g)
        y = torch.randn(16, 4, generator=g)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def check_ddp(rank, world, gloo):
    """DDP for 50 steps on ccl and on gloo from the same start; ccl's
    parameters are bit-identical on every rank and within 1e-5 of gloo's;
    ZeroRedundancyOptimizer on ccl lands within the same tolerance."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    results = {}
    for name, pg, zero in (("ccl", None, False), ("gloo", gloo, False), ("ccl+zero", None, True)):
        model = DDP(mlp(0), process_group=pg, bucket_cap_mb=1)
        if zero:
            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.05,
                                          process_group=pg)
        else:
            opt = torch.optim.SGD(model.parameters(), lr=0.05)
        train(model, opt, rank)
        results[name] = flat_params(model)
    for name, p in results.items():  # identical on every rank (compared through gloo)
        everyone = [torch.zeros_like(p) for _ in range(world)]
        dist.all_gather(everyone, p, group=gloo)
        for q in range(world):
            if not torch.equal(everyone[q], p):
                raise AssertionError(f"{name}: rank {q}'s parameters differ from rank {rank}'s")
    for name in ("gloo", "ccl+zero"):
        diff = (results["ccl"] - results[name]).abs().max().item()
        if diff > 1e-5:
            raise AssertionError(f"ccl and {name} differ by {diff} after 50 steps")
    if rank == 0:
        print(f"ddp: 50 steps, {results['ccl'].numel()} parameters, ccl vs gloo max diff "
              f"{(results['ccl'] - results['gloo']).abs().max().item():.3g}, vs ccl+zero "
              f"{(results['ccl'] - results['ccl+zero']).abs().max().item():.3g}")


def check_killed(rank, world, gloo):
    """Rank 1 dies at step 5 of DDP training: every other rank raises
    (never hangs) within the process group's timeout."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(mlp(0), bucket_cap_mb=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    t0 = time.time()
    try:
        train(model, opt, rank, steps=10000, kill_at=5 if rank == 1 else None)
    except RuntimeError as e:
        print(f"rank {rank} raised after {time.time() - t0:.2f} s: {str(e).splitlines()[0][:200]}")
        sys.stdout.flush()
        os._exit(0)
    raise AssertionError("trained 10000 steps next to a dead rank")


def check_timeout(rank, world, gloo):
    """init_process_group's timeout (3 s here): an all-reduce rank 1 never
    joins raises on rank 0 after about that long."""
    if rank == 0:
        t0 = time.time()
        try:
            dist.all_reduce(torch.ones(4))
        except RuntimeError as e:
            took = time.time() - t0
            assert 2 < took < 15, f"raised after {took:.1f} s with a 3 s timeout"
            print(f"timeout: raised after {took:.2f} s: {str(e).splitlines()[0][:200]}")
            sys.stdout.flush()
            os._exit(0)
        raise AssertionError("an all-reduce nobody joined returned")
    time.sleep(8)
    os._exit(0)


SCENARIOS = {"ops": check_ops, "ddp": check_ddp, "killed": check_killed, "timeout": check_timeout}


def main():
    scenario, rank, world, init = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    timeout = datetime.timedelta(seconds=3 if scenario == "timeout" else 20)
    backend = os.environ.get("CCL_TEST_BACKEND", "libccl")  # "ccl": the other name
    if init == "env":  # under torchrun
        dist.init_process_group(backend, timeout=timeout)
    else:
        store = dist.FileStore(init, world)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    assert dist.get_backend() == backend, (dist.get_backend(), backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    SCENARIOS[scenario](rank, world, gloo)
    dist.barrier(group=gloo)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
