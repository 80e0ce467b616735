"""What every parallelism lesson here shares: the data, the model (a small
MLP whose forward and backward are written out in numpy), the optimizers,
the one-process reference run, the final check and the communication count.

Every number is float64, so that a distributed run and the one-process run
differ only in the order of floating-point additions: the final weights then
agree to about 1e-12, and the check can be tight (--tol, default 1e-9,
relative to the largest weight) instead of hiding mistakes.

The loss is the mean squared error over the whole global batch,
sum((out - y)^2) / (2 B). Whatever slice of the batch a rank works on, it
scales its gradients by 1/B (the global B), so a plain sum over ranks gives
the full-batch gradient exactly as one process computes it.
"""
import argparse
import os
import sys
import time

import numpy as np

import ccl

DTYPE = np.float64
ITEM = np.dtype(DTYPE).itemsize


def parser(doc, steps=30, batch=96, sizes="32,64,64,8", lr=0.01):
    p = argparse.ArgumentParser(description=doc.strip().splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=doc)
    p.add_argument("--steps", type=int, default=steps, help=f"optimizer steps (default {steps})")
    p.add_argument("--batch", type=int, default=batch, help=f"global batch, split across ranks (default {batch})")
    p.add_argument("--sizes", default=sizes, help=f"layer widths, input first (default {sizes})")
    p.add_argument("--lr", type=float, default=lr, help=f"learning rate (default {lr})")
    p.add_argument("--seed", type=int, default=0, help="seed of the data and the initial weights")
    p.add_argument("--log-every", type=int, default=10, help="print the loss every this many steps")
    p.add_argument("--tol", type=float, default=1e-9,
                   help="largest difference from the one-process weights, relative to the largest weight")
    return p


def parse(p, positive=()):
    """Parses the command line; a count that must be positive (the common
    ones and those named in positive) is a usage error (exit 2) otherwise."""
    args = p.parse_args()
    for name in ("steps", "batch", "log_every") + tuple(positive):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def widths(args):
    sizes = [int(s) for s in args.sizes.split(",")]
    if len(sizes) < 2 or min(sizes) < 1:
        sys.exit(f"--sizes needs at least two positive widths, got {args.sizes!r}")
    return sizes


def connect():
    """The job's communicator: from the launcher (cclrun, torchrun), or a
    job of one when the program runs on its own."""
    if any(v in os.environ for v in ("CCL_RANK", "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")):
        return ccl.Comm.from_env()
    return ccl.Comm(1, 0, ccl.get_unique_id())


def say(comm, *what, who=0):
    """One rank (rank 0 unless told) speaks for the job."""
    if comm.rank == who:
        print(*what, flush=True)


# ---- data and model ----

def dataset(args, sizes):
    """Inputs and targets of every step: a fixed random teacher network
    labels Gaussian inputs, plus a little noise. Same on every rank."""
    rng = np.random.default_rng(args.seed + 1000)
    n = args.batch * args.steps
    x = rng.standard_normal((n, sizes[0]))
    teacher = init_params(sizes, args.seed + 2000)
    y = forward(teacher, x)[0] + 0.01 * rng.standard_normal((n, sizes[-1]))
    return x.reshape(args.steps, args.batch, -1), y.reshape(args.steps, args.batch, -1)


def init_params(sizes, seed):
    """[(W, b) per layer], He-initialised."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((a, b)) * np.sqrt(2.0 / a), np.zeros(b)) for a, b in zip(sizes, sizes[1:])]


def forward(params, x):
    """The MLP's output and what backward needs: every layer's input.
    ReLU after each layer but the last."""
    inputs = []
    for i, (w, b) in enumerate(params):
        inputs.append(x)
        x = x @ w + b
        if i < len(params) - 1:
            x = np.maximum(x, 0.0)
    return x, inputs


def loss_grad(out, y, batch):
    """The summed loss of these rows, and d(global loss)/d(out)."""
    diff = out - y
    return float(np.sum(diff * diff)) / (2 * batch), diff / batch


def backward(params, inputs, dout, on_grad=None):
    """Gradients [(dW, db)], made last layer first as backpropagation goes.
    With on_grad, each is handed over as soon as it exists, as
    on_grad(layer, dW, db), and not kept here (the ZeRO and overlap lessons
    reduce it at once); the list returned is then empty."""
    grads = [None] * len(params)
    for i in range(len(params) - 1, -1, -1):
        w, _ = params[i]
        g = (inputs[i].T @ dout, dout.sum(axis=0))
        if on_grad:
            on_grad(i, *g)
        else:
            grads[i] = g
        if i > 0:
            dout = (dout @ w.T) * (inputs[i] > 0)
    return [] if on_grad else grads


def flat(pairs):
    return np.concatenate([a.ravel() for wb in pairs for a in wb])


def unflat(vec, like):
    out, at = [], 0
    for w, b in like:
        out.append((vec[at:at + w.size].reshape(w.shape), vec[at + w.size:at + w.size + b.size]))
        at += w.size + b.size
    return out


# ---- optimizers: in place on flat arrays, so a shard is optimized like the whole ----

class SGD:
    """Plain SGD with momentum 0.9."""
    state_per_param = 1

    def __init__(self, n, lr):
        self.lr, self.v = lr, np.zeros(n)

    def step(self, p, g):
        self.v *= 0.9
        self.v += g
        p -= self.lr * self.v


class Adam:
    """Adam (beta 0.9, 0.999, eps 1e-8); two states per parameter."""
    state_per_param = 2

    def __init__(self, n, lr):
        self.lr, self.m, self.v, self.t = lr, np.zeros(n), np.zeros(n), 0

    def step(self, p, g):
        self.t += 1
        self.m *= 0.9
        self.m += 0.1 * g
        self.v *= 0.999
        self.v += 0.001 * g * g
        mhat = self.m / (1 - 0.9 ** self.t)
        vhat = self.v / (1 - 0.999 ** self.t)
        p -= self.lr * mhat / (np.sqrt(vhat) + 1e-8)


def reference(args, sizes, optimizer=SGD):
    """The same model trained in one process on the whole batch: what every
    distributed run must end with."""
    x, y = dataset(args, sizes)
    params = init_params(sizes, args.seed)
    p = flat(params)
    opt = optimizer(p.size, args.lr)
    for s in range(args.steps):
        params = unflat(p, params)
        out, inputs = forward(params, x[s])
        _, dout = loss_grad(out, y[s], args.batch)
        opt.step(p, flat(backward(params, inputs, dout)))
    return p


def check(comm, got, args, sizes, optimizer=SGD, what="final weights", ref=None):
    """Compares this rank's weights (flat, every layer) with the one-process
    run's (ref: a run of the caller's own, else reference()); every rank
    checks, rank 0 reports. Returns the exit status."""
    if ref is None:
        ref = reference(args, sizes, optimizer)
    scale = max(1.0, float(np.max(np.abs(ref))))
    diff = float(np.max(np.abs(got - ref))) / scale if got.shape == ref.shape else float("inf")
    ok = np.array([1 if diff <= args.tol else 0], np.int32)
    comm.all_reduce(ok, op=ccl.MIN)
    worst = np.array([diff])
    comm.all_reduce(worst, op=ccl.MAX)
    verdict = "match" if ok[0] else "DIFFER FROM"
    say(comm, f"check: {what} {verdict} the one-process run: largest difference {worst[0]:.3g} "
              f"(relative to the largest weight; tolerance {args.tol:g})")
    return 0 if ok[0] else 1


def global_loss(comm, local_sum):
    """The whole batch's loss from each rank's part of it (one all-reduce
    of 8 bytes: the counts below show it as the loss's)."""
    v = np.array([local_sum])
    comm.all_reduce(v)
    return v[0]


# ---- what was communicated ----

class Traffic:
    """Counts the program's collectives: calls and buffer bytes per kind,
    so each lesson prints what it did next to the formula (and
    `ccl-trace summary` shows the same calls)."""

    def __init__(self):
        self.calls, self.bytes = {}, {}

    def add(self, kind, nbytes, calls=1):
        self.calls[kind] = self.calls.get(kind, 0) + calls
        self.bytes[kind] = self.bytes.get(kind, 0) + nbytes

    def report(self, comm, steps):
        for kind in sorted(self.calls):
            n, b = self.calls[kind], self.bytes[kind]
            say(comm, f"  {kind}: {n} call{'s' if n != 1 else ''}, {b:,} buffer bytes ({n / steps:g} per step, "
                      f"{b / steps:,.0f} B per step)")


def layer_params(sizes):
    """Each layer's parameters, W and b: what --layer-params takes."""
    return [sizes[i] * sizes[i + 1] + sizes[i + 1] for i in range(len(sizes) - 1)]


def say_plan(comm, layers, rest):
    """The line tools/tests/test_plan_train.py reads back."""
    say(comm, "  the planner's view of this run: ccl-plan --train --layer-params " + ",".join(map(str, layers)) +
        " " + rest)


def plan_tensor_command(comm, sizes, args):
    """The same for the tensor-parallel block a -> hidden -> out on every
    rank: Megatron's MLP block (--block mlp), whose input and output are
    one width (--hidden), a row being a sequence of one. Its all-reduces per
    step are the block's: one forward, one backward. The layer before the
    block, which every rank holds whole, is not the planner's."""
    n = comm.size
    if sizes[1] != sizes[3]:
        say(comm, f"  (the planner's MLP block has one width in and out: give --sizes x,h,H,h to compare; this run's "
                  f"block takes {sizes[1]} and gives {sizes[3]})")
        return
    block = sizes[1] * sizes[2] + sizes[2] + sizes[2] * sizes[3] + sizes[3]
    say_plan(comm, [block], f"--block mlp --hidden {sizes[1]} --seq 1 --precision fp64 --optimizer sgd --gpus {n} "
             f"--dp 1 --tp {n} --pp 1 --batch {args.batch} --micro-batch {args.batch}")


def plan_pipeline_command(comm, sizes, args, P, K):
    """The same for a pipeline of P stages (the layers cut as np.array_split
    cuts them) and K micro-batches: the planner's stages pass activations of
    one width (--hidden), a row being a sequence of one (--seq 1). Its
    send/recv per step are a middle stage's: K activations on, K gradients
    back."""
    splits = np.array_split(np.arange(len(sizes) - 1), P)
    widths = sorted({sizes[part[0]] for part in splits[1:]})
    if len(widths) > 1 or args.batch % K:
        why = (f"this run's stage boundaries are {', '.join(map(str, widths))} wide" if len(widths) > 1 else
               f"{args.batch} rows do not cut into {K} equal micro-batches")
        say(comm, f"  (the planner's pipeline passes activations of one width in equal micro-batches: {why})")
        return
    say_plan(comm, layer_params(sizes), f"--hidden {widths[0] if widths else sizes[0]} --seq 1 --precision fp64 "
             f"--optimizer sgd --gpus {P} --dp 1 --tp 1 --pp {P} --batch {args.batch} --micro-batch {args.batch // K}")


def plan_command(comm, sizes, args, optimizer, zero=0, accum=1):
    """Prints the `ccl-plan --train` command that plans this very run: the
    same layers, float64, ranks all data-parallel (docs/training-planner.md).
    Its calls per step are the ones counted above."""
    n = comm.size
    if args.batch % (n * accum):
        say(comm, f"  (the planner cuts a batch into equal micro-batches: {args.batch} rows do not divide into "
                  f"{n} ranks x {accum})")
        return
    say_plan(comm, layer_params(sizes), f"--precision fp64 --optimizer {optimizer} --gpus {n} --dp {n} --zero {zero} "
             f"--batch {args.batch} --micro-batch {args.batch // (n * accum)}")


def ring_sent(kind, nbytes, n):
    """Bytes one rank sends for a collective on a buffer of nbytes with the
    ring algorithm: the lesson's formula. all_reduce: 2(N-1)/N of it;
    reduce_scatter (nbytes: the full input) and all_gather (the full
    output): (N-1)/N."""
    share = (n - 1) / n
    return (2 * share if kind == "all_reduce" else share) * nbytes


class Clock:
    """Seconds spent in each named activity (compute, communication, ...)."""

    def __init__(self):
        self.spent = {}

    def __call__(self, name):
        clock = self

        class Span:
            def __enter__(self):
                self.t = time.perf_counter()

            def __exit__(self, *exc):
                clock.spent[name] = clock.spent.get(name, 0.0) + time.perf_counter() - self.t
        return Span()
