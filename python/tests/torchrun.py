"""torchrun (python3 -m torch.distributed.run), usable on Python 3.11.

PyTorch 1.13's torchrun cannot start any job on Python 3.11, whatever the
backend: its Std.from_str checks `Std(n) in Std`, which Python 3.11's
IntFlag answers differently, so it returns None and the agent fails in
to_map. This runs torchrun's own main with that one parser fixed;
everything else (the elastic agent, its TCPStore rendezvous, the
environment it gives workers) is torchrun's."""
import re
import sys

from torch.distributed.elastic.multiprocessing import api
from torch.distributed.run import main

_original = api.Std.from_str


def _from_str(vm):
    if re.fullmatch(r"\d", vm):
        return api.Std(int(vm))
    return _original(vm)


if api.Std.from_str("0") is None:
    api.Std.from_str = staticmethod(_from_str)

if __name__ == "__main__":
    sys.exit(main())
