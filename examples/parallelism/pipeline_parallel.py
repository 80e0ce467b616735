"""Pipeline parallelism: the model's layers are cut into P stages, one per
rank; the batch is cut into K micro-batches that flow through the stages,
activations forward and their gradients back, by send/recv.

    cclrun -n 4 /usr/bin/python3 examples/parallelism/pipeline_parallel.py --schedule gpipe
    cclrun -n 4 /usr/bin/python3 examples/parallelism/pipeline_parallel.py --schedule 1f1b

A stage waits while the pipeline fills and drains: with forward and
backward taking the same time on every stage, each stage is idle
(P-1)/(K+P-1) of a step, under either schedule. GPipe runs every forward
then every backward and so keeps the activations of all K micro-batches;
1F1B (one forward, one backward) starts each micro-batch's backward as soon
as it can and keeps at most P-s of them on stage s. The program measures
each stage's idle fraction and the activations it kept, and prints them
next to the formula.

So that the schedule, not this machine's cores, sets the timing, each
micro-batch's forward on a stage also takes --compute-ms (a sleep standing
for a big layer's compute; backward twice that); the real numpy work is
tiny. Sends and the next receive go together in a group, as pipeline
trainers batch them, so no order of sends and receives can deadlock.
"""
import time

import numpy as np

import ccl
import lesson


def stage_forward(params, x, last):
    """Like lesson.forward, for some layers of the model: ReLU after each
    unless it is the model's last layer."""
    out, inputs = lesson.forward(params, x)
    return (out if last else np.maximum(out, 0.0)), inputs


def stage_backward(params, inputs, out, dout, last, first):
    """This stage's gradients and the gradient of its input (None on the
    first stage, which has no one to send it to). dout is the gradient of
    the stage's output; the ReLU on the input was the previous stage's."""
    if not last:
        dout = dout * (out > 0)
    grads = [None] * len(params)
    for i in range(len(params) - 1, -1, -1):
        grads[i] = (inputs[i].T @ dout, dout.sum(axis=0))
        if i > 0 or not first:
            dout = dout @ params[i][0].T
            if i > 0:
                dout = dout * (inputs[i] > 0)
    return grads, None if first else dout


def schedule(kind, k, p, s):
    """Stage s's actions, in order: ("F", micro) and ("B", micro)."""
    if kind == "gpipe":
        return [("F", m) for m in range(k)] + [("B", m) for m in range(k)]
    warm = min(p - 1 - s, k)
    acts = [("F", m) for m in range(warm)]
    for m in range(k - warm):
        acts += [("F", warm + m), ("B", m)]
    return acts + [("B", m) for m in range(k - warm, k)]


def main():
    p = lesson.parser(__doc__, steps=10, sizes="32,64,64,64,8")
    p.add_argument("--schedule", choices=("gpipe", "1f1b"), default="1f1b", help="schedule (default 1f1b)")
    p.add_argument("--micro", type=int, default=8, help="micro-batches per step, K (default 8)")
    p.add_argument("--compute-ms", type=float, default=10.0,
                   help="time a micro-batch's forward takes on a stage, backward twice that (default 10)")
    args = lesson.parse(p, ("micro",))
    if args.compute_ms < 0:
        p.error("--compute-ms cannot be negative")
    sizes = lesson.widths(args)
    comm = lesson.connect()
    P, s, K = comm.size, comm.rank, args.micro
    if len(sizes) - 1 < P:
        raise SystemExit(f"{P} stages need at least {P} layers: give --sizes {P + 1} widths or more")
    first, last = s == 0, s == P - 1
    x, y = lesson.dataset(args, sizes)
    everything = lesson.init_params(sizes, args.seed)
    layers = np.array_split(np.arange(len(everything)), P)[s]
    mine = [everything[i] for i in layers]
    w = lesson.flat(mine)
    opt = lesson.SGD(w.size, args.lr)
    micro = np.array_split(np.arange(args.batch), K)
    acts = schedule(args.schedule, K, P, s)
    lesson.say(comm, f"pipeline parallel, {args.schedule}: {P} stages, {K} micro-batches of about "
                     f"{len(micro[0])} rows, layers per stage: "
                     f"{[len(a) for a in np.array_split(np.arange(len(everything)), P)]}")
    busy = wall = 0.0
    most_kept = sent = messages = 0
    for step in range(args.steps):
        params = lesson.unflat(w, mine)
        grad = np.zeros_like(w)
        kept, loss, pending = {}, 0.0, None  # kept: micro -> (stage input, inputs, output)
        comm.barrier()
        t0 = time.perf_counter()
        for a, m in acts:
            rows = micro[m]
            width_in = sizes[layers[0]] if a == "F" else sizes[layers[-1] + 1]
            peer = s - 1 if a == "F" else s + 1
            incoming = None
            if (a == "F" and not first) or (a == "B" and not last):
                incoming = np.empty((len(rows), width_in))
            with ccl.group():  # the previous action's send and this one's receive, together
                if pending is not None:
                    comm.send(*pending)
                if incoming is not None:
                    comm.recv(incoming, peer)
            pending = None
            t = time.perf_counter()
            if a == "F":
                inp = x[step][rows] if first else incoming
                out, inputs = stage_forward(params, inp, last)
                kept[m] = (inputs, out)
                most_kept = max(most_kept, len(kept))
                if last:
                    part, dout = lesson.loss_grad(out, y[step][rows], args.batch)
                    loss += part
                    kept[m] = (inputs, out, dout)
                else:
                    pending = (out, s + 1)
                time.sleep(args.compute_ms / 1000)
            else:
                inputs, out, *d = kept.pop(m)
                g, dx = stage_backward(params, inputs, out, d[0] if last else incoming, last, first)
                grad += lesson.flat(g)
                if not first:
                    pending = (dx, s - 1)
                time.sleep(2 * args.compute_ms / 1000)
            busy += time.perf_counter() - t
            if pending is not None:
                sent += pending[0].nbytes
                messages += 1
        if pending is not None:
            comm.send(*pending)
        comm.barrier()  # the step ends when the last stage to finish does: the pipeline has drained
        wall += time.perf_counter() - t0
        opt.step(w, grad)
        if (step + 1) % args.log_every == 0 or step == 0:
            lesson.say(comm, f"step {step + 1:4d}  loss {loss:.6f}", who=P - 1)
    idle = np.zeros(P)
    idle[s] = 1 - busy / wall
    kept_by = np.zeros(P, np.int64)
    kept_by[s] = most_kept
    comm.all_reduce(idle)
    comm.all_reduce(kept_by)
    bubble = (P - 1) / (K + P - 1)
    lesson.say(comm, f"idle fraction per stage (measured over {args.steps} steps), next to (P-1)/(K+P-1) = "
                     f"{bubble:.3f} (above it: the time the messages take, on the critical path at every hop):")
    for r in range(P):
        limit = K if args.schedule == "gpipe" else min(P - r, K)
        lesson.say(comm, f"  stage {r}: idle {idle[r]:.3f}; kept the activations of {kept_by[r]} micro-batches at "
                         f"most ({args.schedule}: {limit})")
    lesson.say(comm, f"stage 0 sent {messages // args.steps} messages per step ({sent // args.steps:,} B); "
                     f"each stage but the last sends K = {K} activations forward, each but the first K gradients back")
    if P > 1:
        lesson.plan_pipeline_command(comm, sizes, args, P, K)
    # The whole model for the check: each stage adds its layers into zeros.
    whole = lesson.flat(everything) * 0
    at = sum(everything[i][0].size + everything[i][1].size for i in range(layers[0]))
    whole[at:at + w.size] = w
    comm.all_reduce(whole)
    status = lesson.check(comm, whole, args, sizes)
    comm.destroy()
    return status


if __name__ == "__main__":
    raise SystemExit(main())
