"""PyTorch's own NCCL process group, with libccl's drop-in libnccl.so.2 in
place of NVIDIA's NCCL (tools/gpu-check.sh runs it on a GPU machine):

    LD_PRELOAD=build/nccl/drop-in/libnccl.so.2 python3 torch_nccl_swap.py RANK NRANKS STORE_FILE

Every rank checks that the NCCL answering torch is libccl's (its version
is libccl-nccl's header's, not NVIDIA's), runs an all-reduce, an
all-gather and a broadcast on CUDA tensors against the values computed
here, and 5 DDP steps of a small model whose weights must match the same
steps taken in one process. Prints "torch_nccl_swap: rank R ok" and exits 0
when every check passed.
"""
import os
import sys

import torch
import torch.distributed as dist

LIBCCL_NCCL_VERSION = (2, 30, 7)  # nccl/nccl.h's NCCL_MAJOR, _MINOR, _PATCH


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)).double()


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(8, 16, generator=g, dtype=torch.float64), torch.randn(8, 4, generator=g, dtype=torch.float64)


def main():
    rank, nranks, store_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    torch.cuda.set_device(0)  # one GPU here: every rank on it
    dev = torch.device("cuda", 0)
    version = torch.cuda.nccl.version()
    assert tuple(version) == LIBCCL_NCCL_VERSION, "torch's NCCL is %s, not libccl-nccl's %s (LD_PRELOAD it)" % (
        version, LIBCCL_NCCL_VERSION)
    dist.init_process_group("nccl", store=dist.FileStore(store_file, nranks), rank=rank, world_size=nranks,
                            device_id=dev)
    x = torch.arange(1000, dtype=torch.float32, device=dev) * (rank + 1)
    dist.all_reduce(x)
    want = torch.arange(1000, dtype=torch.float32) * sum(r + 1 for r in range(nranks))
    assert torch.equal(x.cpu(), want), "all_reduce"
    parts = [torch.empty(7, dtype=torch.int64, device=dev) for _ in range(nranks)]
    dist.all_gather(parts, torch.full((7,), rank, dtype=torch.int64, device=dev))
    assert all(int(p[0]) == r and int(p[6]) == r for r, p in enumerate(parts)), "all_gather"
    b = torch.full((5,), float(rank), device=dev)
    dist.broadcast(b, src=nranks - 1)
    assert torch.equal(b.cpu(), torch.full((5,), float(nranks - 1))), "broadcast"

    ddp = torch.nn.parallel.DistributedDataParallel(model().to(dev), device_ids=[0])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(5):
        xb, yb = batch(rank, step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(xb.to(dev)), yb.to(dev)).backward()
        opt.step()
    # one process, the same steps: the gradient is the mean over the ranks' batches
    ref = model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(5):
        ref_opt.zero_grad()
        for r in range(nranks):
            xb, yb = batch(r, step)
            (torch.nn.functional.mse_loss(ref(xb), yb) / nranks).backward()
        ref_opt.step()
    for p, q in zip(ddp.module.parameters(), ref.parameters()):
        assert torch.allclose(p.detach().cpu(), q.detach(), rtol=0, atol=1e-12), "DDP weights differ from one process"
    dist.destroy_process_group()
    print("torch_nccl_swap: rank %d ok (torch %s, NCCL %s)" % (rank, torch.__version__, ".".join(map(str, version))))


if __name__ == "__main__":
    main()
