"""One rank of a torch.distributed scenario on the "libccl" backend; run by
test_torch.py as: torch_scenarios.py SCENARIO RANK WORLD INIT_FILE.
Exits 0 when every check on this rank passed."""
import datetime
import os
import re
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
    computed here and (for gloo's dtypes) against gloo's own result;
    new_group on subsets."""
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
    check_bitwise_premul(rank, world, gloo)
    # send/recv around a ring, and a barrier
    if world > 1:
        t = torch.full((5,), float(rank))
        got = torch.zeros(5)
        reqs = [dist.isend(t, (rank + 1) % world), dist.irecv(got, (rank - 1) % world)]
        for r in reqs:
            r.wait()
        same(got, torch.full((5,), float((rank - 1) % world)), "send/recv ring")
        check_recv_any(rank, world)
    check_new_group(rank, world)
    dist.barrier()


BITWISE = {"band": (dist.ReduceOp.BAND, torch.bitwise_and), "bor": (dist.ReduceOp.BOR, torch.bitwise_or),
           "bxor": (dist.ReduceOp.BXOR, torch.bitwise_xor)}


def check_bitwise_premul(rank, world, gloo):
    """BAND, BOR and BXOR on every integer dtype and bool (against gloo
    where it has the dtype); PREMUL_SUM with a number and with a tensor
    factor on every float dtype, through all_reduce and
    reduce_scatter_tensor; a float tensor with a bitwise op refused."""
    n = 11
    for dt in [torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool]:
        for name, (op, fn) in BITWISE.items():
            ins = [(torch.arange(n, dtype=torch.int64) * (q + 3) + 5 * q).to(dt) for q in range(world)]
            want = ins[0].clone()
            for t in ins[1:]:
                want = fn(want, t)
            for g in [None] + ([gloo] if dt in GLOO_DTYPES else []):
                x = ins[rank].clone()
                dist.all_reduce(x, op=op, group=g)
                same(x, want, f"all_reduce {name} {dt} on {'gloo' if g else 'ccl'}")
    for dt in [torch.float16, torch.bfloat16, torch.float32, torch.float64]:
        # torch 1.13 takes a tensor factor as a list of one
        tensor_factor = torch.tensor([2.0], dtype=torch.float64)
        for factor in (0.5, tensor_factor if TORCH2 else [tensor_factor]):
            f = factor if isinstance(factor, float) else 2.0
            x = data(rank, n, dt)
            dist.all_reduce(x, op=dist._make_nccl_premul_sum(factor))
            same(x, (reduce_ref([data(q, n, dt) for q in range(world)], "sum").double() * f).to(dt),
                 f"all_reduce premul_sum x{f} {dt}")
            if TORCH2:
                out = torch.zeros(n, dtype=dt)
                dist.reduce_scatter_tensor(out, data(rank, n * world, dt, 1), op=dist._make_nccl_premul_sum(factor))
                want = reduce_ref([data(q, n * world, dt, 1)[rank * n:(rank + 1) * n] for q in range(world)], "sum")
                same(out, (want.double() * f).to(dt), f"reduce_scatter_tensor premul_sum x{f} {dt}")
    try:
        dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND)
        raise AssertionError("a bitwise all_reduce of floats was accepted")
    except (RuntimeError, ValueError) as e:
        assert "bitwise op" in str(e), str(e)


def check_new_group(rank, world):
    """new_group on the even and the odd ranks (every rank calls both, in
    order; the members alone make each one's communicator, on the
    world's): an all_reduce and a broadcast from the group's last rank on
    each, and the world after them."""
    evens, odds = list(range(0, world, 2)), list(range(1, world, 2))
    groups = [(dist.new_group(m), m) for m in (evens, odds) if m]
    for g, members in groups:
        if rank not in members:
            continue
        made = ccl.torch.origin(g)
        assert made == "ccl_comm_create_group", made
        x = data(rank, 9, torch.int64)
        dist.all_reduce(x, group=g)
        same(x, reduce_ref([data(q, 9, torch.int64) for q in members], "sum"), f"all_reduce on new_group {members}")
        y = data(rank, 9, torch.float32)
        dist.broadcast(y, src=members[-1], group=g)
        same(y, data(members[-1], 9, torch.float32), f"broadcast on new_group {members}")
    z = data(rank, 9, torch.int32)
    dist.all_reduce(z)
    same(z, reduce_ref([data(q, 9, torch.int32) for q in range(world)], "sum"), "all_reduce after new_group")


def check_recv_any(rank, world):
    """dist.recv without a source (recvAnysource): rank 0 takes one
    message from every other rank, in whatever order they come, and each
    names its sender."""
    if rank == 0:
        seen = []
        for _ in range(world - 1):
            t = torch.zeros(6, dtype=torch.int64)
            src = dist.recv(t)
            same(t, torch.full((6,), 100 + src, dtype=torch.int64), f"recv from any source ({src})")
            seen.append(src)
        assert sorted(seen) == list(range(1, world)), seen
    else:
        dist.send(torch.full((6,), 100 + rank, dtype=torch.int64), 0)


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


def ddp_hook(model, pg, hook):
    """DDP's gradient communication through a comm hook: fp16 compression,
    or PowerSGD (rank-1 approximation from the third step, error feedback)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
    if hook == "fp16":
        model.register_comm_hook(pg, default_hooks.fp16_compress_hook)
    elif hook == "powersgd":
        state = powersgd.PowerSGDState(process_group=pg, matrix_approximation_rank=1, start_powerSGD_iter=3,
                                       random_seed=0)
        model.register_comm_hook(state, powersgd.powerSGD_hook)


HOOK_TOLERANCE = {None: 1e-5, "fp16": 1e-3, "powersgd": 1e-3}  # libccl against gloo after 50 steps


def check_ddp(rank, world, gloo):
    """DDP for 50 steps on ccl and on gloo from the same start, plain and
    with the fp16-compression and PowerSGD comm hooks; ccl's parameters
    are bit-identical on every rank and within HOOK_TOLERANCE of gloo's
    (float sums in another order; fp16 rounds them too);
    ZeroRedundancyOptimizer on ccl lands within 1e-5 of plain DDP."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    results = {}
    runs = [("ccl", None, False, None), ("gloo", gloo, False, None), ("ccl+zero", None, True, None)]
    for hook in ("fp16", "powersgd"):
        runs += [(f"ccl+{hook}", None, False, hook), (f"gloo+{hook}", gloo, False, hook)]
    for name, pg, zero, hook in runs:
        model = DDP(mlp(0), process_group=pg, bucket_cap_mb=1)
        ddp_hook(model, pg, hook)
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
    diffs = {}
    for a, b, tol in (("ccl", "gloo", HOOK_TOLERANCE[None]), ("ccl", "ccl+zero", 1e-5),
                      ("ccl+fp16", "gloo+fp16", HOOK_TOLERANCE["fp16"]),
                      ("ccl+powersgd", "gloo+powersgd", HOOK_TOLERANCE["powersgd"])):
        diffs[f"{a} vs {b}"] = d = (results[a] - results[b]).abs().max().item()
        if d > tol:
            raise AssertionError(f"{a} and {b} differ by {d} after 50 steps (tolerance {tol})")
    if rank == 0:
        print(f"ddp: 50 steps, {results['ccl'].numel()} parameters, max differences: "
              + ", ".join(f"{k} {v:.3g}" for k, v in diffs.items()))


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


def check_bound(rank, world, gloo):
    """What torch does after init_process_group(device_id=cuda:N), short of
    a GPU: the world's bound device set as init sets it (its index needs
    no device until a CUDA tensor is used). new_group then makes each
    non-member call perform_nocolor_split on the world's backend, and the
    members' groups are still made by ccl_comm_create_group."""
    pg = dist.group.WORLD
    pg.bound_device_id = torch.device("cuda", 0)
    assert dist.distributed_c10d._get_split_source(pg) is not None, "the backend is no split source"
    check_new_group(rank, world)
    for g in (dist.new_group([world - 1]), dist.new_group(list(range(world)))):
        if rank in dist.get_process_group_ranks(g):
            x = data(rank, 5, torch.float32)
            dist.all_reduce(x, group=g)
            members = dist.get_process_group_ranks(g)
            same(x, reduce_ref([data(q, 5, torch.float32) for q in members], "sum"), f"all_reduce on {members}")
    pg.bound_device_id = None


def check_set_timeout(rank, world, gloo):
    """The backend's set_timeout (3 s, after an init with 20 s) holds: as
    "timeout"."""
    dist.group.WORLD._get_backend(torch.device("cpu")).set_timeout(datetime.timedelta(seconds=3))
    check_timeout(rank, world, gloo)


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


def check_api2(rank, world, gloo):
    """What torch 2.x asks of a backend beyond the collectives: coalesced
    blocks (one libccl group), batch_isend_irecv, sequence numbers, the
    group's timeout changed, split_group (ccl_comm_split, no rendezvous),
    new_group on a subset, functional collectives, monitored_barrier."""
    import torch.distributed._functional_collectives as fc
    pg = dist.group.WORLD
    n = 5
    # a coalesced block on the device: torch gathers the all_reduces into
    # one allreduce_coalesced; that and the broadcast run as one group at
    # endCoalescing
    a, a2, b = data(rank, n, torch.float32), data(rank, 2, torch.float32, 1), data(rank, 3, torch.int32)
    with dist._coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:
        dist.all_reduce(a)
        dist.broadcast(b, src=world - 1)
        dist.all_reduce(a2)
    cm.wait()
    same(a, reduce_ref([data(q, n, torch.float32) for q in range(world)], "sum"), "coalesced all_reduce")
    same(a2, reduce_ref([data(q, 2, torch.float32, 1) for q in range(world)], "sum"), "coalesced all_reduce 2")
    same(b, data(world - 1, 3, torch.int32), "coalesced broadcast")
    # batch_isend_irecv around the ring, both ways (deadlocks unless grouped)
    if world > 1:
        right, left = (rank + 1) % world, (rank - 1) % world
        got_l, got_r = torch.zeros(4), torch.zeros(4)
        ops = [dist.P2POp(dist.isend, torch.full((4,), float(rank)), right),
               dist.P2POp(dist.isend, torch.full((4,), float(rank)), left),
               dist.P2POp(dist.irecv, got_l, left), dist.P2POp(dist.irecv, got_r, right)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        same(got_l, torch.full((4,), float(left)), "batch_isend_irecv from the left")
        same(got_r, torch.full((4,), float(right)), "batch_isend_irecv from the right")
    # sequence numbers agree
    seq = torch.tensor([pg._get_backend(torch.device("cpu"))._get_sequence_number_for_group()])
    seqs = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(seqs, seq, group=gloo)
    assert all(int(x) == int(seq) and int(seq) > 0 for x in seqs), [int(x) for x in seqs]
    # the timeout, changed for the group's backend (torch 2.11's
    # _set_pg_timeout reaches nccl and gloo alone; "set_timeout" tests that
    # the change holds)
    pg._get_backend(torch.device("cpu")).set_timeout(datetime.timedelta(seconds=17))
    # split_group's path: the world split into its first world-1 ranks and the last
    if world > 1:
        mine = list(range(world - 1)) if rank < world - 1 else [world - 1]
        sub = pg.split_group(mine, timeout=datetime.timedelta(seconds=20), group_name=f"split{len(mine)}{rank in mine}",
                             group_desc="split")
        assert sub is not None and sub.size() == len(mine), (sub, mine)
        assert ccl.torch.origin(sub) == "ccl_comm_split", ccl.torch.origin(sub)
        z = data(rank, n, torch.int64)
        dist.all_reduce(z, group=sub)
        same(z, reduce_ref([data(q, n, torch.int64) for q in mine], "sum"), f"all_reduce on the split {mine}")
    # new_group on a subset: ranks 0 and 2 (or 0 alone)
    members = [0, 2] if world > 2 else [0]
    g = dist.new_group(members)
    if rank in members:
        assert ccl.torch.origin(g) == "ccl_comm_create_group", ccl.torch.origin(g)
        z = data(rank, n, torch.float64)
        dist.all_reduce(z, group=g)
        same(z, reduce_ref([data(q, n, torch.float64) for q in members], "sum"), "all_reduce on new_group [0, 2]")
    # functional collectives
    x = data(rank, n, torch.float32)
    r = fc.all_reduce(x, "sum", pg)
    same(r, reduce_ref([data(q, n, torch.float32) for q in range(world)], "sum"), "functional all_reduce")
    ag = fc.all_gather_tensor(data(rank, n, torch.float32, 2), 0, pg)
    same(ag, torch.cat([data(q, n, torch.float32, 2) for q in range(world)]), "functional all_gather_tensor")
    rs = fc.reduce_scatter_tensor(data(rank, n * world, torch.float32, 3), "sum", 0, pg)
    same(rs, reduce_ref([data(q, n * world, torch.float32, 3)[rank * n:(rank + 1) * n] for q in range(world)], "sum"),
         "functional reduce_scatter_tensor")
    # monitored_barrier: dist.monitored_barrier refuses every backend but
    # gloo in Python; the process group's own method reaches this backend
    pg.monitored_barrier(datetime.timedelta(seconds=10), True)


def check_monitored(rank, world, gloo):
    """Rank 1 never reaches the monitored barrier: rank 0 raises within its
    3 s, naming rank 1."""
    if rank == 1:
        time.sleep(8)
        os._exit(0)
    t0 = time.time()
    try:
        dist.group.WORLD.monitored_barrier(datetime.timedelta(seconds=3), True)
    except RuntimeError as e:
        took = time.time() - t0
        if rank == 0:
            assert "rank 1 did not reach the barrier" in str(e) and 2 < took < 15, (str(e), took)
        print(f"monitored: rank {rank} raised after {took:.2f} s: {str(e).splitlines()[0][:200]}")
        sys.stdout.flush()
        os._exit(0)
    raise AssertionError("a monitored barrier rank 1 skipped returned")


def check_skipped(rank, world, gloo):
    """A collective the last rank skips (it goes on to the next one): every
    other rank raises within the 3 s timeout, and destroy_process_group
    with work still queued returns."""
    t0 = time.time()
    try:
        if rank != world - 1:
            dist.all_reduce(torch.ones(8))
        dist.all_gather_into_tensor(torch.zeros(8 * world), torch.ones(8))
        pending = dist.all_reduce(torch.ones(8), async_op=True)
        pending.wait()
    except RuntimeError as e:
        print(f"skipped: rank {rank} raised after {time.time() - t0:.2f} s: {str(e).splitlines()[0][:200]}")
        t1 = time.time()
        dist.destroy_process_group()
        print(f"skipped: rank {rank} destroyed in {time.time() - t1:.2f} s")
        sys.stdout.flush()
        os._exit(0)
    raise AssertionError("a collective one rank skipped completed")


class Block(nn.Module):
    """A small transformer block (pre-norm attention and MLP) whose
    projections are plain Linears, so tensor parallelism can split them:
    the head count follows the local width."""

    def __init__(self, d=32, head_dim=8):
        super().__init__()
        self.hd = head_dim
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, _ = x.shape
        y = self.ln1(x)
        q, k, v = (p(y).view(b, t, -1, self.hd).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, -1)
        x = x + self.o(a)
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


def block_data(step, batch):
    g = torch.Generator().manual_seed(4321 + step)
    return torch.randn(batch, 6, 32, generator=g), torch.randn(batch, 6, 32, generator=g)


def train_block(model, steps, shard, nshards, batch_per_shard=2):
    """SGD on the mean loss of a global batch of nshards * batch_per_shard,
    of which this model sees shard number `shard`."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(steps):
        x, y = block_data(step, nshards * batch_per_shard)
        lo, hi = shard * batch_per_shard, (shard + 1) * batch_per_shard
        opt.zero_grad()
        nn.functional.mse_loss(model(x[lo:hi]), y[lo:hi]).backward()
        opt.step()


def full_params(model):
    """Every parameter whole (a DTensor's full_tensor), in order."""
    out = []
    for p in model.parameters():
        t = p.detach()
        out.append((t.full_tensor() if hasattr(t, "full_tensor") else t).reshape(-1))
    return torch.cat(out)


TOLERANCE = 2e-5  # float32 sums in another order over 20 steps


def compare_with_one_process(rank, params, what, batch):
    torch.manual_seed(0)
    ref = Block()
    train_block(ref, 20, 0, 1, batch_per_shard=batch)
    diff = (params - full_params(ref)).abs().max().item()
    if diff > TOLERANCE:
        raise AssertionError(f"{what}: after 20 steps the parameters differ from one process's by {diff}")
    if rank == 0:
        print(f"{what}: 20 steps, {params.numel()} parameters, max diff from one process {diff:.3g}")


def check_fsdp2(rank, world, gloo):
    """FSDP2 (fully_shard) of a transformer block on CPU for 20 steps,
    each rank on its part of the batch: the same parameters (within
    TOLERANCE) as one process training on the whole batch."""
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    model = Block()
    for m in (model.q, model.k, model.v, model.o, model.fc1, model.fc2):
        fully_shard(m)
    fully_shard(model)
    train_block(model, 20, rank, world)
    compare_with_one_process(rank, full_params(model), f"fsdp2 on {world} ranks", 2 * world)


def check_fsdp2_shared(rank, world, gloo):
    """FSDP2 with its all-gather and reduce-scatter staging allocated by
    the process group (set_allocate_memory_from_process_group_for_comm: libccl's
    shared allocations, released by the tensors' deleters): the same
    parameters as one process, and calls that ran zero-copy (the test sets
    CCL_ZERO_COPY_MIN=0)."""
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    model = Block()
    for m in (model.q, model.k, model.v, model.o, model.fc1, model.fc2):
        fully_shard(m)
        m.set_allocate_memory_from_process_group_for_comm(True)
    fully_shard(model)
    model.set_allocate_memory_from_process_group_for_comm(True)
    train_block(model, 20, rank, world)
    compare_with_one_process(rank, full_params(model), f"fsdp2 on shared allocations, {world} ranks", 2 * world)
    d = ccl.torch.describe(dist.group.WORLD)
    m = re.search(r"zero_copy_calls=(\d+)", d or "")
    assert m and int(m.group(1)) > 0, f"no call ran zero-copy: {d}"


def check_mesh2d(rank, world, gloo):
    """A 2 x 2 DeviceMesh (data parallel x tensor parallel): the block's
    projections split over "tp" (column-wise q, k, v and fc1, row-wise o
    and fc2, DTensors), the whole sharded over "dp" with FSDP2; 20 steps
    against one process on the whole batch."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
    for dim in ("dp", "tp"):  # the mesh's groups are made on the world's communicator
        made = ccl.torch.origin(mesh[dim].get_group())
        assert made == "ccl_comm_create_group", (dim, made)
    torch.manual_seed(0)
    model = Block()
    parallelize_module(model, mesh["tp"], {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(),
                                           "o": RowwiseParallel(), "fc1": ColwiseParallel(),
                                           "fc2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    train_block(model, 20, mesh["dp"].get_local_rank(), 2)  # a tensor-parallel pair shares its part
    compare_with_one_process(rank, full_params(model), f"2-D mesh dp x tp on {world} ranks", 4)


def check_cuda(rank, world, gloo):
    """CUDA tensors (rank r on GPU r mod the GPU count, so ranks may share
    one): every collective against a reference on the CPU, inputs written
    by a slow kernel on the caller's own stream just before each call
    (the backend waits for that stream), a large all-reduce, and DDP on
    the GPU with parameters bit-identical on every rank."""
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    side = torch.cuda.Stream()
    n = 1001

    def on_gpu(t):
        """t on the GPU, written last by a slow kernel on the side stream."""
        with torch.cuda.stream(side):
            g = t.to(dev, non_blocking=False)
            busy = torch.randn(1024, 1024, device=dev)
            for _ in range(8):
                busy = busy @ busy
                busy /= busy.norm()
            g.add_((busy.sum() * 0).to(g.dtype))  # depends on the slow kernels
        return g

    for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8):
        tag = f"{dt} on {dev}"
        with torch.cuda.stream(side):
            x = on_gpu(data(rank, n, dt))
            dist.all_reduce(x)
            same(x.cpu(), reduce_ref([data(q, n, dt) for q in range(world)], "sum"), f"all_reduce {tag}")
            b = on_gpu(data(rank, n, dt, 1))
            dist.broadcast(b, src=world - 1)
            same(b.cpu(), data(world - 1, n, dt, 1), f"broadcast {tag}")
            out = torch.zeros(n * world, dtype=dt, device=dev)
            dist.all_gather_into_tensor(out, on_gpu(data(rank, n, dt, 2)))
            same(out.cpu(), torch.cat([data(q, n, dt, 2) for q in range(world)]), f"all_gather_into_tensor {tag}")
            outs = [torch.zeros(n, dtype=dt, device=dev) for _ in range(world)]
            dist.all_gather(outs, on_gpu(data(rank, n, dt, 2)))
            for q in range(world):
                same(outs[q].cpu(), data(q, n, dt, 2), f"all_gather (list) from {q} {tag}")
            rs = torch.zeros(n, dtype=dt, device=dev)
            dist.reduce_scatter_tensor(rs, on_gpu(data(rank, n * world, dt, 3)))
            same(rs.cpu(), reduce_ref([data(q, n * world, dt, 3)[rank * n:(rank + 1) * n] for q in range(world)], "sum"),
                 f"reduce_scatter_tensor {tag}")
            a_out = torch.zeros(n * world, dtype=dt, device=dev)
            dist.all_to_all_single(a_out, on_gpu(torch.cat([data(rank * world + q, n, dt, 4) for q in range(world)])))
            same(a_out.cpu(), torch.cat([data(q * world + rank, n, dt, 4) for q in range(world)]), f"all_to_all {tag}")
            if dt.is_floating_point:
                p = on_gpu(data(rank, n, dt, 5))
                dist.all_reduce(p, op=dist._make_nccl_premul_sum(0.5))
                same(p.cpu(), (reduce_ref([data(q, n, dt, 5) for q in range(world)], "sum").double() * 0.5).to(dt),
                     f"all_reduce premul_sum {tag}")
            if world > 1:
                got = torch.zeros(n, dtype=dt, device=dev)
                reqs = [dist.isend(on_gpu(data(rank, n, dt, 6)), (rank + 1) % world),
                        dist.irecv(got, (rank - 1) % world)]
                for r in reqs:
                    r.wait()
                same(got.cpu(), data((rank - 1) % world, n, dt, 6), f"send/recv ring {tag}")
    big = torch.full((16 << 20,), float(rank + 1), device=dev)  # 64 MiB
    dist.all_reduce(big)
    assert bool((big == world * (world + 1) / 2).all()), "a 64 MiB all_reduce on the GPU"
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(mlp(0).to(dev), device_ids=[dev.index], bucket_cap_mb=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator(device="cpu").manual_seed(1234 + rank)
    for _ in range(10):
        x, y = torch.randn(16, 32, generator=g).to(dev), torch.randn(16, 4, generator=g).to(dev)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    p = flat_params(model).cpu()
    everyone = [torch.zeros_like(p) for _ in range(world)]
    dist.all_gather(everyone, p, group=gloo)
    for q in range(world):
        if not torch.equal(everyone[q], p):
            raise AssertionError(f"DDP on the GPU: rank {q}'s parameters differ from rank {rank}'s")
    if rank == 0:
        print(f"cuda: every collective on {world} ranks over {torch.cuda.device_count()} GPU(s), "
              f"64 MiB all_reduce, DDP 10 steps: ok")


def check_cuda_stream(rank, world, gloo):
    """NCCL's semantics for CUDA tensors on torch 2.x, after an eager init
    (init_process_group(device_id=cuda:N)), with calls staged
    (CCL_CUDA_DIRECT=0, the test sets it: the GPU-resident path waits on
    the host). The group names its device before any tensor was moved; a
    call behind a slow kernel on the caller's stream returns while that
    kernel still runs (the CPU does not wait for the GPU), and what reads
    its result on that stream sees the result; an async call is not
    completed until its stream ran it, and its wait() orders another
    stream after it; its future's value, and a callback chained on it,
    are the result on any stream; the list forms and gather/scatter run
    in stream order; a sub-group works on the bound device; a call still
    pending at destroy_process_group holds nothing up."""
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    desc = ccl.torch.describe(dist.group.WORLD)
    assert f"cuda_device={dev.index}" in desc, f"eager init did not bind the group to {dev}: {desc}"
    torch.cuda.set_device(dev)
    n = 1 << 18
    total = world * (world + 1) / 2  # each rank contributes rank + 1

    def slow():
        torch.cuda._sleep(400_000_000)  # a kernel of some 0.2 s on the current stream

    def full(v):
        return torch.full((n,), float(v), device=dev)

    dist.all_reduce(full(1))  # the first call sets up staging (pinned buffers) on the host
    torch.cuda.synchronize()
    x = full(rank + 1)
    slow()
    dist.all_reduce(x)
    pending = not torch.cuda.current_stream().query()
    assert pending, "all_reduce returned only after the caller's stream had run: the CPU waited for the GPU"
    assert bool((x == total).all()), "all_reduce read on the caller's stream: not its result"

    y = full(rank + 1)
    slow()
    work = dist.all_reduce(y, async_op=True)
    assert not work.is_completed(), "an async all_reduce behind a slow kernel is completed already"
    other = torch.cuda.Stream()
    with torch.cuda.stream(other):  # read (bool()) on that stream too: only it waited
        work.wait()
        ok = bool((y == total).all())
    assert ok, "another stream after wait(): not the all_reduce's result"
    torch.cuda.synchronize()
    assert work.is_completed(), "the all_reduce ran, yet is_completed() says no"

    z = full(rank + 1)
    slow()
    fut = dist.all_reduce(z, async_op=True).get_future()
    chained = dist.all_reduce(full(2 * (rank + 1)), async_op=True).get_future().then(lambda f: f.value()[0] / 2)
    with torch.cuda.stream(torch.cuda.Stream()):
        ok = bool((fut.wait()[0] == total).all() & (chained.wait() == total).all())
    assert ok, "a future's value (or a callback chained on it) on another stream: not the result"

    k = 1001
    for dt in (torch.float32, torch.int64):
        tag = f"{dt}, stream-ordered"
        src = data(rank, k, dt, 7).to(dev)
        slow()
        outs = [torch.zeros(k, dtype=dt, device=dev) for _ in range(world)]
        dist.all_gather(outs, src)
        rs = torch.zeros(k, dtype=dt, device=dev)
        dist.reduce_scatter(rs, [data(rank, k, dt, 8 + q).to(dev) for q in range(world)])
        got = [torch.zeros(k, dtype=dt, device=dev) for _ in range(world)] if rank == 0 else None
        dist.gather(src, got, dst=0)
        sc = torch.zeros(k, dtype=dt, device=dev)
        dist.scatter(sc, [data(q, k, dt, 9).to(dev) for q in range(world)] if rank == world - 1 else None,
                     src=world - 1)
        for q in range(world):
            same(outs[q].cpu(), data(q, k, dt, 7), f"all_gather (list) from {q}, {tag}")
            if rank == 0:
                same(got[q].cpu(), data(q, k, dt, 7), f"gather from {q}, {tag}")
        same(rs.cpu(), reduce_ref([data(q, k, dt, 8 + rank) for q in range(world)], "sum"), f"reduce_scatter, {tag}")
        same(sc.cpu(), data(rank, k, dt, 9), f"scatter, {tag}")

    members = [0, world - 1]
    sub = dist.new_group(members)
    if rank in members:
        s = full(rank + 1)
        slow()
        dist.all_reduce(s, group=sub)
        assert bool((s == 1 + world).all()), f"all_reduce on the sub-group {members}"

    last = full(rank + 1)
    slow()
    dist.all_reduce(last, async_op=True)  # still pending on its stream
    dist.barrier(group=gloo)
    t0 = time.time()
    dist.destroy_process_group()
    torch.cuda.synchronize()  # a stream left waiting would hang here
    if rank == 0:
        print(f"cuda_stream: {world} ranks: eager init on {dev}, calls stream-ordered, destroy with a call "
              f"pending took {time.time() - t0:.2f} s: ok")
    sys.stdout.flush()
    os._exit(0)


def check_abort(rank, world, gloo):
    """The backend's abort (torch calls it from _abort_process_group and on
    errors): rank 0's pending all_reduce fails at once, and rank 1, which
    joins a second later, fails within a few seconds (rank 0 told it; its
    first call may still complete on what rank 0 sent before aborting),
    long before the 20 s timeout."""
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    t0 = time.time()
    try:
        if rank == 0:
            work = dist.all_reduce(torch.ones(4), async_op=True)
            time.sleep(0.5)
            backend.abort()
            work.wait()
        else:
            time.sleep(1.5)
            # the first may still complete with what rank 0 had sent before it aborted
            for _ in range(3):
                dist.all_reduce(torch.ones(4))
    except RuntimeError as e:
        took = time.time() - t0
        assert took < 8, f"raised after {took:.1f} s"
        print(f"abort: rank {rank} raised after {took:.2f} s: {str(e).splitlines()[0][:200]}")
        sys.stdout.flush()
        os._exit(0)
    raise AssertionError("a call on an aborted process group completed")


def check_shrink(rank, world, gloo):
    """torch's shrink_group on the libccl group: the last rank leaves (it
    makes no call), the others get a smaller default group whose
    all_reduce sums over them alone; the leaver's pending call fails."""
    leaver = world - 1
    if rank == leaver:
        try:
            dist.all_reduce(torch.ones(4))  # the others never join it: the shrink revokes it
        except RuntimeError as e:
            print(f"shrink: the leaver's call raised: {str(e).splitlines()[0][:200]}")
        dist.barrier(group=gloo)
        sys.stdout.flush()
        os._exit(0)
    time.sleep(0.5)  # the leaver is in its call
    small = dist.shrink_group([leaver])
    assert small.size() == world - 1 and small.rank() == rank, (small.size(), small.rank())
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t, group=small)
    want = sum(r + 1 for r in range(world - 1))
    assert torch.equal(t, torch.full((5,), float(want))), t
    print(f"shrink: rank {rank} of {small.size()} after shrink_group, all_reduce {t[0].item():g}")
    dist.barrier(group=gloo)
    sys.stdout.flush()
    os._exit(0)


SCENARIOS = {"shrink": check_shrink, "ops": check_ops, "abort": check_abort, "fsdp2": check_fsdp2, "fsdp2_shared": check_fsdp2_shared, "mesh2d": check_mesh2d, "cuda": check_cuda, "cuda_stream": check_cuda_stream, "ddp": check_ddp, "killed": check_killed, "timeout": check_timeout,
             "set_timeout": check_set_timeout, "bound": check_bound,
             "api2": check_api2, "monitored": check_monitored, "skipped": check_skipped}


def main():
    scenario, rank, world, init = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    timeout = datetime.timedelta(seconds=3 if scenario in ("timeout", "skipped", "monitored") else 20)
    backend = os.environ.get("CCL_TEST_BACKEND", "libccl")  # "ccl": the other name
    if init == "env":  # under torchrun
        dist.init_process_group(backend, timeout=timeout)
    else:
        store = dist.FileStore(init, world)
        # eager init: the group bound to this rank's GPU from the start
        bound = {"device_id": torch.device("cuda", rank % torch.cuda.device_count())} if scenario == "cuda_stream" else {}
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout, **bound)
    assert dist.get_backend() == backend, (dist.get_backend(), backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    SCENARIOS[scenario](rank, world, gloo)
    dist.barrier(group=gloo)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
