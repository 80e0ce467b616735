"""Tensor parallelism (Megatron's MLP block): the block's first weight is
split by columns and its second by rows, so each of N ranks holds 1/N of
the block, computes its share of the hidden layer without talking to
anyone, and one all-reduce adds the partial outputs. Backward mirrors it:
one all-reduce adds the partial gradients of the block's input.

    cclrun -n 4 /usr/bin/python3 examples/parallelism/tensor_parallel.py

The model: a layer every rank holds whole (x -> a, ReLU), then the block
(a -> hidden, ReLU, split by columns; hidden -> out, split by rows). Every
rank sees the same batch. Forward: h_r = ReLU(a W1[:, r] + b1[r]), then
all_reduce(h_r W2[r, :]) is the block's output (the bias b2 is added
after, once). Backward: the gradient of a is the sum over ranks of
dh_r W1[:, r]^T, one all-reduce, which the whole first layer needs. So:
two all-reduces per step, of batch x out and batch x width(a) elements,
whatever N; and a split that needs no communication in between because
ReLU acts element by element on each rank's own columns.
"""
import numpy as np

import lesson


def split(params, n, rank):
    """This rank's parameters: the whole first layer, its columns of W1 and
    b1, its rows of W2, and b2 (whole, added once after the all-reduce);
    and which hidden units are its."""
    (w0, b0), (w1, b1), (w2, b2) = params
    cols = np.array_split(np.arange(w1.shape[1]), n)[rank]
    return [(w0, b0), (w1[:, cols], b1[cols]), (w2[cols, :], b2)], cols


def step(mine, xs, ys, batch, comm, traffic):
    """One forward and backward on rows xs of a global batch of `batch`
    rows: the loss of these rows and this rank's gradients, like mine."""
    (w0, b0), (w1r, b1r), (w2r, b2) = mine
    a = np.maximum(xs @ w0 + b0, 0.0)
    h = np.maximum(a @ w1r + b1r, 0.0)
    z = h @ w2r
    comm.all_reduce(z)  # forward: the partial outputs add up to the block's output
    traffic.add("all_reduce forward", z.nbytes)
    loss, dout = lesson.loss_grad(z + b2, ys, batch)
    dh = (dout @ w2r.T) * (h > 0)
    da = dh @ w1r.T
    comm.all_reduce(da)  # backward: each rank's columns hold part of the input's gradient
    traffic.add("all_reduce backward", da.nbytes)
    dz0 = da * (a > 0)
    return loss, [(xs.T @ dz0, dz0.sum(axis=0)), (a.T @ dh, dh.sum(axis=0)), (h.T @ dout, dout.sum(axis=0))]


def whole(mine, cols, sizes, comm):
    """The whole model from every rank's part (each adds its columns into
    zeros), and whether the layers every rank holds whole are identical on
    every rank, as they must be: their gradients come from all-reduced
    data, the same bits everywhere."""
    (w0, b0), (w1r, b1r), (w2r, b2) = mine
    rep = lesson.flat([(w0, b0), (b2, b2[:0])])
    lo, hi = rep.copy(), rep.copy()
    comm.all_reduce(lo, op="min")
    comm.all_reduce(hi, op="max")
    w1, b1, w2 = np.zeros((sizes[1], sizes[2])), np.zeros(sizes[2]), np.zeros((sizes[2], sizes[3]))
    w1[:, cols], b1[cols], w2[cols, :] = w1r, b1r, w2r
    for t in (w1, b1, w2):
        comm.all_reduce(t)
    return lesson.flat([(w0, b0), (w1, b1), (w2, b2)]), bool(np.array_equal(lo, hi))


def main():
    p = lesson.parser(__doc__, sizes="32,64,128,8")
    args = lesson.parse(p)
    sizes = lesson.widths(args)
    if len(sizes) != 4:
        raise SystemExit("--sizes: input, the first layer's width, the block's hidden width, output (4 widths)")
    comm = lesson.connect()
    n = comm.size
    x, y = lesson.dataset(args, sizes)
    mine, cols = split(lesson.init_params(sizes, args.seed), n, comm.rank)
    w = lesson.flat(mine)
    opt = lesson.SGD(w.size, args.lr)
    traffic = lesson.Traffic()
    block = sizes[1] * sizes[2] + sizes[2] + sizes[2] * sizes[3]
    held = mine[1][0].size + mine[1][1].size + mine[2][0].size
    lesson.say(comm, f"tensor parallel: {n} ranks, block {sizes[1]} -> {sizes[2]} -> {sizes[3]}; rank 0 holds "
                     f"{len(cols)} of {sizes[2]} hidden units, {held:,} of the block's {block:,} weights")
    for s in range(args.steps):
        mine = lesson.unflat(w, mine)
        loss, grads = step(mine, x[s], y[s], args.batch, comm, traffic)
        opt.step(w, lesson.flat(grads))
        if (s + 1) % args.log_every == 0 or s == 0:
            lesson.say(comm, f"step {s + 1:4d}  loss {loss:.6f}")
    lesson.say(comm, "communication:")
    traffic.report(comm, args.steps)
    lesson.say(comm, f"  lesson: one all_reduce per forward of batch x out = {args.batch} x {sizes[3]} elements "
                     f"({args.batch * sizes[3] * lesson.ITEM:,} B) and one per backward of batch x width(a) = "
                     f"{args.batch} x {sizes[1]} ({args.batch * sizes[1] * lesson.ITEM:,} B), whatever N")
    if n > 1:
        lesson.plan_tensor_command(comm, sizes, args)
    full, same = whole(lesson.unflat(w, mine), cols, sizes, comm)
    lesson.say(comm, f"the layers every rank holds whole are identical on every rank: {'yes' if same else 'NO'}")
    status = lesson.check(comm, full, args, sizes)
    comm.destroy()
    return status if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
