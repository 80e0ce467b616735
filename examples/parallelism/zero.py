"""ZeRO: data parallelism that stops keeping N copies of everything. Each of
N ranks owns 1/N of every layer's parameters (a shard) and keeps the Adam
states of its shard only (stage 1), then only its shard of the gradients
too (stage 2), then only its shard of the parameters, gathering a layer's
whole weights just before using it and dropping them after (stage 3).

    cclrun -n 4 /usr/bin/python3 examples/parallelism/zero.py --stage 1
    cclrun -n 4 /usr/bin/python3 examples/parallelism/zero.py --stage 2
    cclrun -n 4 /usr/bin/python3 examples/parallelism/zero.py --stage 3
    (--stage 0: plain data parallelism with Adam, for comparison)

Each step, per layer: stages 1 and 2 reduce-scatter the gradient (each rank
gets the sum of its shard) and all-gather the updated shards, which costs
what the all-reduce of plain data parallelism costs, 2(N-1)/N of the
parameters per rank; stage 3 all-gathers each layer twice (forward and
backward), 3(N-1)/N. Stage 2 reduce-scatters each layer's gradient as
soon as backpropagation has made it, so a whole model's gradient never
exists at once.

The lesson's memory per parameter is for Adam in mixed precision (2-byte
weights and gradients, 12 bytes of fp32 master weights and moments):
16 unsharded, 4 + 12/N (stage 1), 2 + 14/N (stage 2), 16/N (stage 3).
This program keeps everything in float64 (8-byte weights and gradients,
16 bytes of moments), so its own formulas are 32, 16 + 16/N, 8 + 24/N and
32/N; it prints both next to what it holds. Shards are padded to a
multiple of N elements, which adds a little.
"""
import numpy as np

import lesson

ITEM = lesson.ITEM


class Layer:
    """One layer's parameters as a flat vector [W, b], padded to a multiple
    of N; this rank's shard is elements [rank*S, (rank+1)*S). Stages 0-2
    keep the whole vector and the shard is a view into it (so all-gather
    and reduce-scatter work in place, as ZeRO's flat buffers do); stage 3
    keeps only the shard."""

    def __init__(self, w, b, n, rank, stage):
        self.wshape, self.size = w.shape, w.size + b.size
        self.shard = -(-self.size // n)
        full = self.pack(w, b, np.zeros(self.shard * n))
        self.mine = full[rank * self.shard:(rank + 1) * self.shard]
        self.full = full if stage < 3 else None
        if stage == 3:
            self.mine = self.mine.copy()

    def pack(self, w, b, into):
        """[w, b] written into a padded flat vector (its padding left as is)."""
        into[:w.size], into[w.size:self.size] = w.ravel(), b
        return into

    def split(self, full):
        nw = self.wshape[0] * self.wshape[1]
        return full[:nw].reshape(self.wshape), full[nw:self.size]


def main():
    p = lesson.parser(__doc__, lr=0.003)
    p.add_argument("--stage", type=int, choices=(0, 1, 2, 3), default=1, help="ZeRO stage (default 1)")
    args = lesson.parse(p)
    sizes = lesson.widths(args)
    comm = lesson.connect()
    n, rank, stage = comm.size, comm.rank, args.stage
    x, y = lesson.dataset(args, sizes)
    layers = [Layer(w, b, n, rank, stage) for w, b in lesson.init_params(sizes, args.seed)]
    psi = sum(layer.size for layer in layers)
    traffic = lesson.Traffic()
    # Adam's moments: for every parameter (stage 0) or for this rank's shards.
    opt = [lesson.Adam(layer.full.size if stage == 0 else layer.shard, args.lr) for layer in layers]
    grad_full = [np.zeros(layer.shard * n) for layer in layers] if stage in (0, 1) else None
    if stage == 1:  # this rank's shard of the gradient: reduce-scattered in place
        grad_mine = [g[rank * layer.shard:(rank + 1) * layer.shard] for g, layer in zip(grad_full, layers)]
    else:
        grad_mine = [np.zeros(layer.shard) for layer in layers] if stage else None

    def gathered(i):
        """Layer i's whole parameters: stage 3 all-gathers them on each use."""
        layer = layers[i]
        if stage < 3:
            return layer.split(layer.full)
        full = np.empty(layer.shard * n)
        comm.all_gather(layer.mine, full)
        traffic.add("all_gather", full.nbytes)
        return layer.split(full)

    class Params:  # what forward and backward index: layer i's (W, b)
        def __len__(self):
            return len(layers)

        def __getitem__(self, i):
            if i >= len(layers):
                raise IndexError(i)
            return gathered(i)

    def on_grad(i, dw, db):
        """Layer i's gradient, as backpropagation makes it: stages 0 and 1
        keep it whole; stages 2 and 3 reduce-scatter it at once and keep
        their shard, and the whole gradient is gone when backward moves on."""
        if stage < 2:
            layers[i].pack(dw, db, grad_full[i])
            return
        full = layers[i].pack(dw, db, np.zeros(layers[i].shard * n))
        comm.reduce_scatter(full, grad_mine[i])
        traffic.add("reduce_scatter", full.nbytes)

    held = 0
    mine = np.array_split(np.arange(args.batch), n)[rank]
    lesson.say(comm, f"ZeRO stage {stage}: {n} ranks, {psi:,} parameters in {len(layers)} layers, Adam, "
                     f"{args.steps} steps")
    for s in range(args.steps):
        out, inputs = lesson.forward(Params(), x[s][mine])
        part, dout = lesson.loss_grad(out, y[s][mine], args.batch)
        lesson.backward(Params(), inputs, dout, on_grad)
        # Model state held now, at the step's peak: weights, gradients,
        # moments (views into another array are not counted twice).
        arrays = [o.m for o in opt] + [o.v for o in opt] + (grad_full or []) + (grad_mine or [])
        arrays += [layer.full if stage < 3 else layer.mine for layer in layers]
        held = sum(a.nbytes for a in arrays if a.base is None)
        for i, layer in enumerate(layers):
            if stage == 0:
                comm.all_reduce(grad_full[i])
                traffic.add("all_reduce", grad_full[i].nbytes)
                opt[i].step(layer.full, grad_full[i])
                continue
            if stage == 1:
                comm.reduce_scatter(grad_full[i], grad_mine[i])
                traffic.add("reduce_scatter", grad_full[i].nbytes)
            opt[i].step(layer.mine, grad_mine[i])
            if stage < 3:  # every rank needs the whole updated layer for the next forward
                comm.all_gather(layer.mine, layer.full)
                traffic.add("all_gather", layer.full.nbytes)
        if (s + 1) % args.log_every == 0 or s == 0:
            lesson.say(comm, f"step {s + 1:4d}  loss {lesson.global_loss(comm, part):.6f}")

    ours = {0: 32, 1: 16 + 16 / n, 2: 8 + 24 / n, 3: 32 / n}[stage]
    taught = {0: 16, 1: 4 + 12 / n, 2: 2 + 14 / n, 3: 16 / n}[stage]
    formula = {0: ("32", "16"), 1: ("16 + 16/N", "4 + 12/N"), 2: ("8 + 24/N", "2 + 14/N"), 3: ("32/N", "16/N")}[stage]
    lesson.say(comm, f"memory for the model on rank 0: {held:,} B = {held / psi:.2f} B per parameter (weights, "
                     f"gradients, Adam moments; float64)")
    lesson.say(comm, f"  formula for this float64 program: {formula[0]} = {ours:.2f} B per parameter; "
                     f"unsharded: 32")
    lesson.say(comm, f"  the lesson's formula (mixed precision): {formula[1]} = {taught:.2f} B per parameter; "
                     f"unsharded: 16")
    if stage == 3:
        biggest = max(layer.shard * n for layer in layers) * ITEM
        lesson.say(comm, f"  plus, for a moment, one gathered layer and its gradient: {2 * biggest:,} B at most")
    lesson.say(comm, "communication for the model (the printed loss adds one all_reduce of 8 B per line):")
    traffic.report(comm, args.steps)
    sent = sum(lesson.ring_sent(k, b, n) for k, b in traffic.bytes.items()) / args.steps
    times = {0: 2, 1: 2, 2: 2, 3: 3}[stage]
    lesson.say(comm, f"  per rank per step, ring algorithms: {sent:,.0f} B sent; the lesson's {times}(N-1)/N of the "
                     f"{psi * ITEM:,} B of parameters: {times * (n - 1) / n * psi * ITEM:,.0f} B (padding adds a "
                     f"little)")
    if stage:  # stage 0 here all-reduces layer by layer; the planner buckets as DDP does (data_parallel.py)
        lesson.plan_command(comm, sizes, args, "adam", zero=stage)
    final = [gathered(i) for i in range(len(layers))] if stage == 3 else [layer.split(layer.full) for layer in layers]
    status = lesson.check(comm, lesson.flat(final), args, sizes, lesson.Adam)
    comm.destroy()
    return status


if __name__ == "__main__":
    raise SystemExit(main())
