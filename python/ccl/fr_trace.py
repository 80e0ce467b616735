"""torch's flight-recorder analyzer on the libccl backend's dumps:

    python -m ccl.fr_trace DIR [--prefix PREFIX] [the analyzer's options]

runs `python -m torch.distributed.flight_recorder.fr_trace` (torch 2.x) on
the files the backend wrote ($TORCH_FR_DUMP_TEMP_FILE<rank>, one per rank)
and reports, as it does for NCCL, the first call at which the ranks
disagree or stopped: a collective one rank never made, a different
collective or size at the same sequence number.

torch 2.11's parser knows two backends by their records' names, "nccl:"
and "xccl:"; libccl's records say "libccl:all_reduce". They are read as
"nccl:" here, in memory (the analyzer's own output then says nccl); the
files stay as written.
"""
import sys


def main(argv=None):
    try:
        from torch.distributed.flight_recorder.components import loader
        from torch.distributed.flight_recorder import fr_trace
    except ImportError as e:
        sys.exit(f"ccl.fr_trace: torch's flight-recorder analyzer is not here ({e}); it comes with torch 2.x")
    read_dump = loader.read_dump

    def read_libccl_dump(prefix, filename):
        dump = read_dump(prefix, filename)
        for e in dump["entries"]:
            name = e.get("profiling_name", "")
            if name.startswith("libccl:"):
                e["profiling_name"] = "nccl:" + name[len("libccl:"):]
        return dump

    loader.read_dump = read_libccl_dump
    if argv is not None:
        sys.argv = [sys.argv[0]] + list(argv)
    fr_trace.main()


if __name__ == "__main__":
    main()
