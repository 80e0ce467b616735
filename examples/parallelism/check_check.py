"""The lessons' final check must fail when the weights are wrong: a job of
one rank trains the reference, then lesson.check is shown it exactly (it
must pass), with one weight moved by 1e-6 of the largest (it must fail),
and with a layer missing (it must fail). Run by ctest (lesson_check_fails)."""
import sys

import numpy as np

import lesson


def main():
    args = lesson.parser(__doc__).parse_args(["--steps", "3"])
    sizes = lesson.widths(args)
    comm = lesson.connect()
    ref = lesson.reference(args, sizes)
    moved = ref.copy()
    moved[len(moved) // 2] += 1e-6 * np.max(np.abs(ref))
    got = [lesson.check(comm, w, args, sizes) for w in (ref, moved, ref[:-3])]
    comm.destroy()
    print("check on the exact, a moved and a short set of weights:", got)
    return 0 if got == [0, 1, 1] else 1


if __name__ == "__main__":
    sys.exit(main())
