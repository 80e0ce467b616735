"""Two dimensions at once: data parallel x tensor parallel. The N ranks form
a grid of D data-parallel rows and T tensor-parallel columns (N = D x T);
communicators made with split give each rank its tensor-parallel group (the
T ranks that share one copy of the model, split as in tensor_parallel.py)
and its data-parallel group (the D ranks that hold the same part of the
model and train on different data).

    cclrun -n 4 /usr/bin/python3 examples/parallelism/parallel_2d.py --tp 2     (2 x 2)
    cclrun -n 6 /usr/bin/python3 examples/parallelism/parallel_2d.py --tp 3     (2 x 3)

Rank r is data-parallel row r // T and tensor-parallel column r % T. Each
step: the tensor-parallel group runs the block's two all-reduces (forward
and backward) on its row's slice of the batch; then each data-parallel
group all-reduces its part of the gradients, 1/T of the block plus the
layers every rank holds whole: smaller than plain data parallelism's
all-reduce of every gradient by the (T-1)/T of the block the rank does not
hold, the more so the more of the model the block is.
"""
import numpy as np

import lesson
import tensor_parallel as tp


def main():
    p = lesson.parser(__doc__, sizes="32,64,128,8")
    p.add_argument("--tp", type=int, default=2, help="ranks per tensor-parallel group, T (default 2)")
    args = lesson.parse(p, ("tp",))
    sizes = lesson.widths(args)
    if len(sizes) != 4:
        raise SystemExit("--sizes: input, the first layer's width, the block's hidden width, output (4 widths)")
    world = lesson.connect()
    n, rank, t = world.size, world.rank, args.tp
    if t < 1 or n % t:
        raise SystemExit(f"--tp {t} must divide the {n} ranks")
    d = n // t
    row, col = divmod(rank, t)
    tp_comm = world.split(row, col)  # my row: the ranks that share one copy of the model
    dp_comm = world.split(col, row)  # my column: the ranks that hold my part of the model
    assert (tp_comm.size, tp_comm.rank, dp_comm.size, dp_comm.rank) == (t, col, d, row)
    x, y = lesson.dataset(args, sizes)
    mine, cols = tp.split(lesson.init_params(sizes, args.seed), t, col)
    w = lesson.flat(mine)
    opt = lesson.SGD(w.size, args.lr)
    traffic_tp, traffic_dp = lesson.Traffic(), lesson.Traffic()
    rows = np.array_split(np.arange(args.batch), d)[row]  # this data-parallel row's slice of the batch
    lesson.say(world, f"2D parallel: {n} ranks = {d} data-parallel x {t} tensor-parallel; rank 0 holds "
                      f"{w.size:,} parameters and trains on {len(rows)} of {args.batch} rows")
    for s in range(args.steps):
        mine = lesson.unflat(w, mine)
        loss, grads = tp.step(mine, x[s][rows], y[s][rows], args.batch, tp_comm, traffic_tp)
        g = lesson.flat(grads)
        dp_comm.all_reduce(g)  # the same part of the model, different data
        traffic_dp.add("all_reduce", g.nbytes)
        opt.step(w, g)
        if (s + 1) % args.log_every == 0 or s == 0:
            total = np.array([loss if col == 0 else 0.0])  # one rank per row counts its rows' loss
            world.all_reduce(total)
            lesson.say(world, f"step {s + 1:4d}  loss {total[0]:.6f}")
    lesson.say(world, "communication of rank 0, in its tensor-parallel group (T ranks):")
    traffic_tp.report(world, args.steps)
    lesson.say(world, "and in its data-parallel group (D ranks):")
    traffic_dp.report(world, args.steps)
    everything = sum(a.size + b.size for a, b in lesson.init_params(sizes, args.seed))
    lesson.say(world, f"  lesson: plain data parallelism all-reduces all {everything * lesson.ITEM:,} B of "
                      f"gradients; here each rank all-reduces its {w.nbytes:,} B")
    full, same = tp.whole(lesson.unflat(w, mine), cols, sizes, tp_comm)
    lesson.say(world, f"the layers every rank holds whole are identical in each tensor-parallel group: "
                      f"{'yes' if same else 'NO'}")
    status = lesson.check(world, full, args, sizes)
    for c in (dp_comm, tp_comm, world):
        c.destroy()
    return status if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
