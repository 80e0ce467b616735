"""Elastic data parallelism: ranks die in the middle of training, the
survivors shrink the communicator, re-shard the batch and go on; later a
replacement process joins and the job grows back.

    cclrun --elastic -n 6 /usr/bin/python3 examples/parallelism/elastic.py
    cclrun --elastic -n 6 /usr/bin/python3 examples/parallelism/elastic.py --kills 2 --seed 7

The lesson: data parallelism does not care how many ranks share the batch,
only that every row of it is counted once. Each step splits the same global
batch over whoever is there; when a rank dies during a step's all-reduce,
the survivors agree on who is gone (`comm.shrink()`), split the batch again
over fewer ranks and redo the step, so no row is lost or counted twice. A
newcomer joins with `Comm.join` on the id rank 0 made (`comm.grow_id()`),
receives the weights and the optimizer's state, and takes its share from
the next step. --kills ranks die at random steps (chosen from --seed), the
replacement joins at --grow-at; cclrun --elastic reports the deaths and
keeps the others running. At the end every rank's weights are checked
against one process that replays the same membership: at each step, the
same shards, summed in rank order.
"""
import os
import signal
import subprocess
import sys

import numpy as np

import ccl
import lesson

LOST = (ccl.RemoteError, ccl.Revoked, ccl.Timeout)


def schedule(args, n):
    """Which original ranks die, and at which steps: the same on every rank."""
    rng = np.random.default_rng(args.seed + 3000)
    steps = sorted(int(s) for s in rng.choice(np.arange(1, args.grow_at), size=args.kills, replace=False))
    victims = [int(v) for v in rng.choice(np.arange(1, n), size=args.kills, replace=False)]
    return dict(zip(steps, victims))


def shard_grad(params, x, y, batch, n, r):
    """Rank r's gradient of the whole batch's loss, on its rows of n shards."""
    rows = np.array_split(np.arange(batch), n)[r]
    out, inputs = lesson.forward(params, x[rows])
    loss, dout = lesson.loss_grad(out, y[rows], batch)
    return lesson.flat(lesson.backward(params, inputs, dout)), loss


def replay(args, sizes, sizes_by_step):
    """One process: at each step the shards of that step's ranks, in rank order."""
    x, y = lesson.dataset(args, sizes)
    params = lesson.init_params(sizes, args.seed)
    w = lesson.flat(params)
    opt = lesson.SGD(w.size, args.lr)
    for s in range(args.steps):
        params = lesson.unflat(w, params)
        n = sizes_by_step[s]
        grad = shard_grad(params, x[s], y[s], args.batch, n, 0)[0]
        for r in range(1, n):
            grad = grad + shard_grad(params, x[s], y[s], args.batch, n, r)[0]
        opt.step(w, grad)
    return w


def main():
    p = lesson.parser(__doc__, steps=24)
    p.add_argument("--kills", type=int, default=2, help="ranks killed at random steps (default 2)")
    p.add_argument("--grow-at", type=int, default=0, help="the step a replacement joins at (default 2/3 through)")
    p.add_argument("--join", help=argparse_hidden())
    p.add_argument("--orig", type=int, default=-1, help=argparse_hidden())
    p.add_argument("--size", type=int, default=0, help=argparse_hidden())
    args = lesson.parse(p)
    args.grow_at = args.grow_at or max(2, 2 * args.steps // 3)
    sizes = lesson.widths(args)
    x, y = lesson.dataset(args, sizes)
    params = lesson.init_params(sizes, args.seed)
    w = lesson.flat(params)
    opt = lesson.SGD(w.size, args.lr)
    if args.join:  # a replacement: join, then take the job's state from rank 0
        comm = ccl.Comm.join(args.size, args.size - 1, bytes.fromhex(args.join))
        orig, step = args.orig, np.zeros(1, np.int64)
        members = np.zeros(comm.size, np.int64)
        sizes_by_step = np.zeros(args.steps, np.int64)
        for a in (step, w, opt.v, members, sizes_by_step):
            comm.broadcast(a, root=0)
        print(f"[replacement] joined as rank {comm.rank} of {comm.size} at step {step[0]}", flush=True)
        members, step = [int(m) for m in members], int(step[0])
        child = None
    else:
        comm = lesson.connect()
        orig, step, members, child = comm.rank, 0, list(range(comm.size)), None
        sizes_by_step = np.zeros(args.steps, np.int64)
        if args.kills >= comm.size or args.kills >= args.grow_at:
            sys.exit(f"--kills {args.kills} needs more ranks than that ({comm.size}) and a later --grow-at "
                     f"({args.grow_at})")
    plan = {} if args.join else schedule(args, comm.size)
    if not args.join:
        lesson.say(comm, f"elastic data parallel: {comm.size} ranks, {w.size:,} parameters, batch {args.batch}, "
                         f"{args.steps} steps; original rank(s) {', '.join(map(str, plan.values()))} die at step(s) "
                         f"{', '.join(map(str, plan))}, a replacement joins at step {args.grow_at}")
    while step < args.steps:
        if plan.get(step) == orig:
            print(f"[original rank {orig}] dies at step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        params = lesson.unflat(w, params)
        grad, loss = shard_grad(params, x[step], y[step], args.batch, comm.size, comm.rank)
        try:
            comm.all_reduce(grad)
            total = lesson.global_loss(comm, loss)
        except LOST as e:
            new = comm.shrink()  # the survivors agree on who is gone
            lost = [members[r] for r in comm.failed_ranks()]
            comm.destroy()
            comm = new
            members = [m for m in members if m not in lost]
            lesson.say(comm, f"step {step:4d}  lost original rank(s) {lost} ({type(e).__name__}); {comm.size} ranks "
                             f"go on, the batch re-sharded over them: the step again")
            continue
        sizes_by_step[step] = comm.size
        opt.step(w, grad)
        step += 1
        if step % args.log_every == 0 or step == 1:
            lesson.say(comm, f"step {step:4d}  loss {total:.6f}  ranks {comm.size}")
        if step == args.grow_at:
            comm, members, child = grow(comm, args, members, step, w, opt, sizes_by_step)
    ref = replay(args, sizes, sizes_by_step)
    lesson.say(comm, f"membership by step: {' '.join(str(int(n)) for n in sizes_by_step)}")
    status = lesson.check(comm, w, args, sizes, ref=ref, what="final weights (every rank, the replacement too)")
    comm.destroy()
    if child is not None:
        status |= child.wait(timeout=120)
    return status


def grow(comm, args, members, step, w, opt, sizes_by_step):
    """Rank 0 starts a replacement and hands it the grow id; everyone grows."""
    child = None
    gid = comm.grow_id() if comm.rank == 0 else None
    newcomer = max(max(members) + 1, int(sizes_by_step[0]))  # a name no original rank had
    if comm.rank == 0:
        argv = [a for a in sys.argv if a]
        child = subprocess.Popen([sys.executable, argv[0], *argv[1:], "--join", gid.hex(), "--orig", str(newcomer),
                                  "--size", str(comm.size + 1)])
    new = comm.grow(comm.size + 1, gid)
    comm.destroy()
    members = members + [newcomer]
    state = (np.array([step], np.int64), w, opt.v, np.array(members, np.int64), sizes_by_step)
    for a in state:
        new.broadcast(a, root=0)
    lesson.say(new, f"step {step:4d}  a replacement (original rank {newcomer}) joined: {new.size} ranks")
    return new, members, child


def argparse_hidden():
    import argparse
    return argparse.SUPPRESS


if __name__ == "__main__":
    raise SystemExit(main())
