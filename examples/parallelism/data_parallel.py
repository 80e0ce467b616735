"""Data parallelism: every rank holds the whole model and trains on its own
slice of each batch; one all-reduce sums the gradients, so every rank takes
the same step as one process on the whole batch would.

    cclrun -n 4 /usr/bin/python3 examples/parallelism/data_parallel.py
    cclrun -n 4 /usr/bin/python3 examples/parallelism/data_parallel.py --accum 4
    cclrun -n 4 /usr/bin/python3 examples/parallelism/data_parallel.py --accum 4 --sync micro

The lesson: a ring all-reduce of P gradient bytes makes each rank send (and
receive) 2(N-1)/N * P bytes, whatever N; the program prints that next to
what it did. With --accum K each rank cuts its slice into K micro-batches
(less memory for activations), adds their gradients up locally and
all-reduces once per step: K times fewer all-reduces than --sync micro,
which all-reduces after every micro-batch, and the same final weights.
"""
import numpy as np

import lesson


def main():
    p = lesson.parser(__doc__)
    p.add_argument("--accum", type=int, default=1, help="micro-batches per step on each rank (default 1)")
    p.add_argument("--sync", choices=("step", "micro"), default="step",
                   help="all-reduce once per step (default) or after every micro-batch")
    args = lesson.parse(p, ("accum",))
    sizes = lesson.widths(args)
    comm = lesson.connect()
    n, rank = comm.size, comm.rank
    x, y = lesson.dataset(args, sizes)
    params = lesson.init_params(sizes, args.seed)
    w = lesson.flat(params)
    grad = np.zeros_like(w)
    opt = lesson.SGD(w.size, args.lr)
    traffic = lesson.Traffic()
    mine = np.array_split(np.arange(args.batch), n)[rank]
    micro = np.array_split(mine, args.accum)  # the same count on every rank, some maybe empty
    lesson.say(comm, f"data parallel: {n} ranks, {w.size:,} parameters ({w.nbytes:,} B of gradients), batch "
                     f"{args.batch} ({len(mine)} rows on rank 0 in {len(micro)} micro-batches), {args.steps} steps")
    for s in range(args.steps):
        grad[:] = 0
        loss = 0.0
        params = lesson.unflat(w, params)
        for m in micro:
            out, inputs = lesson.forward(params, x[s][m])
            part, dout = lesson.loss_grad(out, y[s][m], args.batch)
            loss += part
            g = lesson.flat(lesson.backward(params, inputs, dout))
            if args.sync == "micro":
                comm.all_reduce(g)
                traffic.add("all_reduce", g.nbytes)
            grad += g
        if args.sync == "step":
            comm.all_reduce(grad)
            traffic.add("all_reduce", grad.nbytes)
        opt.step(w, grad)
        if (s + 1) % args.log_every == 0 or s == 0:
            lesson.say(comm, f"step {s + 1:4d}  loss {lesson.global_loss(comm, loss):.6f}")
    lesson.say(comm, "communication for the gradients (the loss printed above adds one all_reduce of 8 B per "
                     "printed line):")
    traffic.report(comm, args.steps)
    calls = traffic.calls["all_reduce"]
    k = len(micro)
    lesson.say(comm, f"  lesson: with K = {k} micro-batches, accumulating gradients needs one all_reduce per step "
                     f"({args.steps}), all-reducing each micro-batch K times more ({args.steps * k}); this run "
                     f"(--sync {args.sync}) made {calls}")
    lesson.say(comm, f"  lesson: a ring all_reduce of {w.nbytes:,} B sends 2(N-1)/N of it per rank: "
                     f"{lesson.ring_sent('all_reduce', w.nbytes, n):,.0f} B (with CCL_ALGO=ring and CCL_TRACE set, "
                     f"`ccl-trace summary` shows it)")
    if args.sync == "step":
        lesson.plan_command(comm, sizes, args, "sgd", accum=len(micro))
    status = lesson.check(comm, w, args, sizes)
    comm.destroy()
    return status


if __name__ == "__main__":
    raise SystemExit(main())
