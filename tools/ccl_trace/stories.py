"""What `ccl-trace explain` says of each phase of each algorithm, above
the phase's steps: the why, which the trace cannot show."""

# Per algorithm (the trace's label: broadcast and reduce on the ring are a
# chain), then per phase.
ALGO_PHASE_TEXT = {
    "tree": {
        "reduce": ("Partial sums climb the tree one level per step: a rank adds what each child sends to its "
                   "own data (its own first, then the children) and passes the sum to its parent. The root "
                   "ends with the sum over all ranks."),
        "broadcast": ("The result goes down the tree one level per step: each rank stores what its parent "
                      "sends and forwards it to its children (no arithmetic)."),
        "reduce-2": ("The buffer is halved and each half climbs its own binary tree (c0 tree 0, c1 tree 1) at "
                     "the same time, one level per step: a rank adds what each child sends to its own data "
                     "and passes the sum to its parent, so each tree's root ends with its half summed over "
                     "all ranks. The second tree is the first shifted or mirrored, so that a rank that works "
                     "as an inner node of one is a leaf of the other and both trees' links share the load."),
        "broadcast-2": ("Each tree's root sends its finished half back down its tree, one level per step: each "
                        "rank stores what its parent sends and forwards it to its children."),
    },
    "rd": {
        "reduce": ("In each step every rank taking part swaps its whole buffer with its partner, the rank "
                   "whose number (among the P taking part) differs in one bit, and both add the two: after "
                   "log2(P) steps every one of them holds the sum over all ranks, in log2(P) steps instead "
                   "of the ring's 2(N-1), moving the whole buffer each time. When N is not a power of two, "
                   "the first 2R ranks pair up before that (step 0): the even one hands its data to the odd "
                   "one, which adds it and takes part for both."),
        "broadcast": "The ranks that sat out get the finished result back from their partner.",
    },
    "rhd": {
        "reduce": ("N is not a power of two: the first 2R ranks pair up (step 0). The even one of each pair "
                   "hands its whole buffer to the odd one, which adds it and takes part for both; the P "
                   "ranks left (a power of two) are renumbered 0..P-1."),
        "reduce-scatter": ("Recursive halving: in each step a rank swaps half of what it still works on with "
                           "the partner whose number differs in one bit (the highest first), keeping the half "
                           "its bit selects and adding the partner's copy of it. Each step halves the work: "
                           "after log2(P) steps each rank holds one block of the buffer summed over all ranks, "
                           "having sent (P-1)/P of the buffer."),
        "all-gather": ("Recursive doubling: the halving backwards. Each rank swaps everything it has finished "
                       "with its partner (the lowest bit first), so the finished part doubles every step until "
                       "every rank holds the whole sum."),
        "broadcast": "The ranks that sat out get the finished result back from their partner.",
    },
    "bruck": {
        "p2p": ("Bruck: in step k every rank sends, packed in one message, every block of its work buffer whose "
                "index K has bit k set to the rank 2^k ahead, which puts them at the same places of its own. A "
                "block that must go K ranks on so travels once per 1 bit of K: more bytes than pairwise, in "
                "ceil(log2 N) steps instead of N-1."),
        "all-gather": ("Bruck: in step k every rank passes every block it has gathered so far (up to 2^k of "
                       "them: its own and the next ones) to the rank 2^k below it and gets as many from the rank "
                       "2^k above. Blocks land at their final places. After ceil(log2 N) steps, for any N, every "
                       "rank holds every block."),
    },
    "hier": {
        "reduce-scatter": ("Hierarchical, three rings. First a reduce-scatter ring inside each host (L ranks): "
                           "the rank at place i of its host ends with block i summed over its host. Then the "
                           "ranks at place i of every host form a ring across the hosts (H ranks, one per host, "
                           "all such rings side by side) and reduce-scatter block i among them, in H pieces: "
                           "each ends with one piece summed over every rank. Only these rings cross hosts."),
        "all-gather": ("Then the way back: each ring across the hosts all-gathers its block's finished pieces, "
                       "so that every rank at place i holds block i summed over everyone, and an all-gather "
                       "ring inside each host hands every rank all L blocks."),
    },
    "pairwise": {
        "p2p": ("Pairwise exchange: in step s each rank sends its block for rank r + s to that rank and "
                "receives rank r - s's block for it, so every pair of ranks meets once, in N-1 steps, each "
                "rank sending and receiving one block per step. in[q] is a rank's input block for rank q, "
                "out[q] the block it gets from rank q."),
    },
    "direct": {
        "p2p": ("Every rank has put its input in its shared window. Every rank copies the block each peer "
                "holds for it straight out of the peer's window: one step. in[q] is a rank's input block for "
                "rank q, out[q] the block it gets from rank q."),
        "reduce": ("Every rank has put its input in its shared window. Nothing travels hop by hop: every rank "
                   "that wants the result reads every peer's window in place and adds the inputs up itself, "
                   "in rank order, so every copy of the result has the same bits. One step."),
        "reduce-scatter": ("Every rank reads its own slice of every peer's input straight from the peer's "
                           "window and adds them up, in rank order: rank q ends up owning slice q summed over "
                           "all ranks."),
        "all-gather": ("Every rank copies the pieces it lacks (each finished slice, or each rank's block) "
                       "straight out of their owners' windows."),
        "broadcast": "Every rank copies the root's buffer straight out of the root's window: one step.",
    },
}

PHASE_TEXT = {
    "reduce-scatter": ("In each step every rank sends one chunk to the next rank on the ring, which adds its "
                       "own copy of that chunk; the sum travels on in the next step. After N-1 steps every "
                       "chunk has passed every rank once, so each rank holds one chunk summed over all ranks. "
                       "The ingredients below are listed in the order they were added: every run adds them "
                       "in the same order, so every run gives the same bits."),
    "all-gather": ("Now the finished chunks travel round the ring: each rank forwards the complete chunk it "
                   "finished or last got, and the receiver simply stores it (no arithmetic). After N-1 steps "
                   "every rank holds every complete chunk."),
    "all-gather-only": ("Each rank starts with its own chunk. In every step each rank forwards the chunk it "
                        "got last (its own, first) to the next rank on the ring, which stores it. After N-1 "
                        "steps every rank holds every chunk."),
    "broadcast": ("The root's buffer travels down a chain along the ring: each rank stores what it gets "
                  "and forwards it to the next."),
    "reduce": ("Partial sums travel down a chain along the ring that ends at the root: each rank adds its "
               "own data to what it gets and forwards the sum."),
}
