"""The values file ccl_trace_run writes: header lines, then `in R v...` and
`out R v...` rows (see tools/ccl_trace_run.c)."""

from .tracefile import TraceError

ESIZE = {"int32": 4, "int64": 8}


class Values:
    def __init__(self, path):
        self.header, self.inputs, self.outputs = {}, {}, {}
        try:
            with open(path, encoding="ascii") as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise TraceError(f"cannot read values file {path}: {exc}") from None
        for n, line in enumerate(lines, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            try:
                if words[0] in ("in", "out"):
                    row = [int(w) for w in words[2:]]
                    (self.inputs if words[0] == "in" else self.outputs)[int(words[1])] = row
                elif len(words) == 2:
                    self.header[words[0]] = words[1]
                else:
                    raise ValueError("expected 'key value', 'in R ...' or 'out R ...'")
            except ValueError as exc:
                raise TraceError(f"{path}:{n}: {exc}") from None
        try:
            self.coll = self.header["coll"]
            self.nranks = int(self.header["ranks"])
            self.count = int(self.header["count"])
            self.dtype = self.header.get("dtype", "int64")
            self.root = int(self.header.get("root", 0))
            self.esize = ESIZE[self.dtype]
        except (KeyError, ValueError) as exc:
            raise TraceError(f"{path}: incomplete header ({exc})") from None
        self.pattern = self.header.get("pattern", "?")

    def elements(self, offset, nbytes):
        """Element indices of a byte range of the collective's buffer."""
        return range(offset // self.esize, (offset + nbytes) // self.esize)

    def contribution(self, rank, i):
        """Rank's input that lands at element i of the buffer the trace's
        offsets refer to (all_gather: the full output buffer)."""
        row = self.inputs.get(rank)
        if row is None:
            return None
        if self.coll == "all_gather":
            i -= rank * self.count
        return row[i] if 0 <= i < len(row) else None

    def value(self, prov, i):
        """What a copy built from these ranks' data holds at element i."""
        if not prov:
            return None
        parts = [self.contribution(r, i) for r in prov]
        return None if None in parts else sum(parts)

    def piece(self, prov, offset, nbytes, limit=6):
        """'[v0 v1 ...]' for a piece of the buffer with this provenance."""
        vals = [self.value(prov, i) for i in self.elements(offset, nbytes)]
        shown = ["?" if v is None else str(v) for v in vals[:limit]]
        more = f" ... ({len(vals)} values)" if len(vals) > limit else ""
        return "[" + " ".join(shown) + more + "]"
