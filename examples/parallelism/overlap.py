"""Overlapping communication with computation: data parallelism whose
gradient all-reduce for each layer starts, asynchronously, as soon as
backpropagation has made that layer's gradient, while the layers below it
are still being differentiated. It trains the same model twice, taking
turns step by step: once all-reducing after the whole backward pass, once
overlapped, and prints the median step time of each.

    cclrun -n 2 /usr/bin/python3 examples/parallelism/overlap.py
    cclrun -n 2 --host-per-rank /usr/bin/python3 examples/parallelism/overlap.py    (over TCP)

The lesson: without overlap a step takes compute + communication; with it,
the all-reduce of layer l runs while layers l-1 .. 0 are computed, so when
a layer's communication takes no longer than the compute that follows it,
all of it hides except the last layer's (layer 0, made last): the step
takes about compute + comm(layer 0).

So that the 2 cores of a small machine do not decide the result (numpy's
matmuls and the all-reduce would compete for them), each layer's backward
also takes --compute-ms (a sleep standing for a big layer's backward on an
accelerator, which leaves the CPU to communication). Wide layers and a
small batch make the gradients big and numpy's share small; over shared
memory on one machine the all-reduces are quick and there is little to
hide, over TCP (--host-per-rank) there is more.
"""
import time

import numpy as np

import lesson


class Trainer:
    """One data-parallel training run, stepped from outside so the two runs
    (with and without overlap) can take turns: this machine's speed drifts,
    and alternating lets both see the same drift."""

    def __init__(self, args, sizes, comm, x, y, overlap):
        self.args, self.comm, self.x, self.y, self.overlap = args, comm, x, y, overlap
        self.params = lesson.init_params(sizes, args.seed)
        self.w = lesson.flat(self.params)
        self.opt = lesson.SGD(self.w.size, args.lr)
        self.rows = np.array_split(np.arange(args.batch), comm.size)[comm.rank]
        self.layer_comm = [[] for _ in self.params]  # each layer's all-reduce when waited for alone
        self.times, self.backward_times = [], []

    def step(self, s):
        args, comm = self.args, self.comm
        self.params = params = lesson.unflat(self.w, self.params)
        comm.barrier()
        t0 = time.perf_counter()
        out, inputs = lesson.forward(params, self.x[s][self.rows])
        _, dout = lesson.loss_grad(out, self.y[s][self.rows], args.batch)
        grads, requests = [None] * len(params), []

        def on_grad(i, dw, db):
            time.sleep(args.compute_ms / 1000)  # this layer's backward, as long as on an accelerator
            grads[i] = np.concatenate([dw.ravel(), db])
            if self.overlap:
                requests.append(comm.all_reduce_async(grads[i]))

        t = time.perf_counter()
        lesson.backward(params, inputs, dout, on_grad)
        self.backward_times.append(time.perf_counter() - t)
        for r in requests:
            r.wait()
        if not self.overlap:
            for i in range(len(params) - 1, -1, -1):  # in the order backward made them
                t = time.perf_counter()
                comm.all_reduce(grads[i])
                self.layer_comm[i].append(time.perf_counter() - t)
        self.opt.step(self.w, np.concatenate(grads))
        self.times.append(time.perf_counter() - t0)


def main():
    p = lesson.parser(__doc__, steps=20, batch=8, sizes="64,512,512,512,8")
    p.add_argument("--compute-ms", type=float, default=5.0,
                   help="time each layer's backward takes on top of its numpy work (default 5)")
    args = lesson.parse(p)
    if args.compute_ms < 0:
        p.error("--compute-ms cannot be negative")
    sizes = lesson.widths(args)
    comm = lesson.connect()
    x, y = lesson.dataset(args, sizes)
    nbytes = [(a * b + b) * lesson.ITEM for a, b in zip(sizes, sizes[1:])]
    lesson.say(comm, f"overlap: {comm.size} ranks, {len(nbytes)} layers, gradient bytes per layer "
                     f"{', '.join(f'{b:,}' for b in nbytes)}; {args.steps} steps each way")
    plain, hiding = (Trainer(args, sizes, comm, x, y, overlap) for overlap in (False, True))
    for s in range(args.steps):
        for t in ((plain, hiding) if s % 2 else (hiding, plain)):
            t.step(s)
    status = lesson.check(comm, plain.w, args, sizes, what="without overlap, the final weights")
    status |= lesson.check(comm, hiding.w, args, sizes, what="with overlap, the final weights")
    compute = args.compute_ms / 1000 * len(nbytes)
    layer_comm = np.array([np.median(t) for t in plain.layer_comm])
    backward = [1000 * np.median(t.backward_times) for t in (plain, hiding)]
    plain, hidden = np.median(plain.times), np.median(hiding.times)
    lesson.say(comm, "median of each layer's all-reduce alone (ms, last layer first): "
                     + ", ".join(f"{1000 * t:.2f}" for t in layer_comm[::-1])
                     + f" (the first also waits for the slower rank); each layer's backward: {args.compute_ms:g} ms "
                     f"plus its numpy work")
    lesson.say(comm, f"median step time without overlap: {1000 * plain:.2f} ms; with overlap: {1000 * hidden:.2f} "
                     f"ms ({plain / hidden:.2f}x as fast; the two runs took turns, step by step)")
    lesson.say(comm, f"overlap hid {1000 * (plain - hidden):.2f} ms of the {1000 * layer_comm.sum():.2f} ms the "
                     f"all-reduces took when waited for alone; the backward pass took {backward[0]:.2f} ms "
                     f"without overlap and {backward[1]:.2f} ms with it (here the all-reduces beside it share "
                     f"the same CPU cores)")
    lesson.say(comm, f"  lesson: without overlap about compute + comm = {1000 * compute:.1f} + "
                     f"{1000 * layer_comm.sum():.2f} ms plus the numpy work; with it, when every layer's comm "
                     f"fits in the compute after it, about compute + comm(layer 0) = {1000 * compute:.1f} + "
                     f"{1000 * layer_comm[0]:.2f} ms plus the numpy work")
    comm.destroy()
    return status


if __name__ == "__main__":
    raise SystemExit(main())
