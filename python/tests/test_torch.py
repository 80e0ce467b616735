"""The "libccl" torch.distributed backend with PyTorch itself: every
process-group operation against a reference and against gloo on 1-4 ranks,
DDP and ZeroRedundancyOptimizer training against gloo, on torch 2.x the
backend's other duties (coalescing, split, sequence numbers, timeouts,
functional collectives, new_group) and FSDP2 and a 2-D DeviceMesh with
DTensor against one process, a rank killed mid-training, the timeout, a
skipped collective, a missing rank at a monitored barrier, and torchrun. Each rank is a fresh interpreter
(torch_scenarios.py)."""
import os
import socket
import subprocess
import sys
import tempfile

import pytest

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
SCEN = os.path.join(HERE, "torch_scenarios.py")


def launch(scenario, world, deadline=300, env=None):
    """Starts `world` ranks (with env added to the environment), returns
    their (exit code, output) after all exited; kills the rest and fails
    past the deadline."""
    with tempfile.TemporaryDirectory() as d:
        init = os.path.join(d, "store")
        full_env = dict(os.environ, **(env or {}))
        procs = [subprocess.Popen([sys.executable, SCEN, scenario, str(r), str(world), init], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, env=full_env) for r in range(world)]
        outs = []
        for p in procs:
            try:
                out, _ = p.communicate(timeout=deadline)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                pytest.fail(f"{scenario} on {world} ranks: still running after {deadline} s")
            outs.append((p.returncode, out))
        return outs


def expect_ok(outs, what):
    bad = [(r, code, out) for r, (code, out) in enumerate(outs) if code != 0]
    assert not bad, "".join(f"\n--- {what}: rank {r} exited {code} ---\n{out[-3000:]}" for r, code, out in bad)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_every_operation_against_gloo(world):
    expect_ok(launch("ops", world), f"ops on {world} ranks")


def test_ddp_and_zero_match_gloo():
    outs = launch("ddp", 4)
    expect_ok(outs, "ddp")
    print(outs[0][1])


def test_killed_rank_raises_everywhere():
    outs = launch("killed", 4, deadline=120)
    assert outs[1][0] == 7, f"rank 1 was to die with 7: {outs[1]}"
    for r in (0, 2, 3):
        code, out = outs[r]
        assert code == 0 and "raised after" in out, f"rank {r} exited {code}:\n{out[-3000:]}"


def test_timeout_is_honoured():
    outs = launch("timeout", 2, deadline=120)
    expect_ok(outs, "timeout")
    assert "timeout: raised after" in outs[0][1]


TORCH2 = int(torch.__version__.split(".")[0]) >= 2
needs_torch2 = pytest.mark.skipif(not TORCH2, reason=f"torch {torch.__version__}: FSDP2, DeviceMesh/DTensor, "
                                  "split_group, coalescing and functional collectives are torch 2.x's")


@needs_torch2
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_torch2_backend_api(world):
    expect_ok(launch("api2", world), f"api2 on {world} ranks")


@needs_torch2
def test_fsdp2_matches_one_process():
    outs = launch("fsdp2", 4)
    expect_ok(outs, "fsdp2")
    print(outs[0][1])


@needs_torch2
def test_fsdp2_on_shared_allocations_matches_one_process():
    # CCL_ZERO_COPY_MIN=0: the block's calls are a few KiB, where the cost
    # model keeps them on the direct path; here they must run zero-copy
    outs = launch("fsdp2_shared", 4, env={"CCL_ZERO_COPY_MIN": "0"})
    expect_ok(outs, "fsdp2_shared")


@needs_torch2
def test_2d_mesh_dtensor_matches_one_process():
    outs = launch("mesh2d", 4)
    expect_ok(outs, "mesh2d")
    print(outs[0][1])


@needs_torch2
@pytest.mark.parametrize("world", [1, 3])
def test_new_group_with_a_bound_device(world):
    expect_ok(launch("bound", world), f"bound on {world} ranks")


@pytest.mark.skipif(not TORCH2, reason="Backend.set_timeout is torch 2.x's")
def test_set_timeout_is_honoured():
    outs = launch("set_timeout", 2, deadline=120)
    expect_ok(outs, "set_timeout")
    assert "timeout: raised after" in outs[0][1]
    assert "timeout 3 s, set by ccl_comm_set_timeout" in outs[0][1], outs[0][1][-3000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here: CUDA tensors are tested where "
                    "there is one (tools/gpu-check.sh runs this test there)")
@pytest.mark.parametrize("world", [2, 3])
def test_cuda_tensors(world):
    outs = launch("cuda", world)
    expect_ok(outs, f"cuda on {world} ranks")
    print(outs[0][1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here: CUDA tensors are tested where "
                    "there is one (tools/gpu-check.sh runs this test there)")
@needs_torch2
@pytest.mark.parametrize("world", [2, 3])
def test_cuda_calls_are_stream_ordered_after_an_eager_init(world):
    outs = launch("cuda_stream", world, env={"CCL_CUDA_DIRECT": "0"})
    expect_ok(outs, f"cuda_stream on {world} ranks")
    print(outs[0][1])


def test_monitored_barrier_names_the_missing_rank():
    outs = launch("monitored", 3, deadline=120)
    for r in (0, 2):
        code, out = outs[r]
        assert code == 0 and "monitored: rank" in out, f"rank {r} exited {code}:\n{out[-3000:]}"
    assert "rank 1 did not reach the barrier within 3 s" in outs[0][1], outs[0][1][-3000:]


@needs_torch2
def test_abort_fails_pending_and_later_calls_everywhere():
    outs = launch("abort", 2, deadline=120)
    for r, (code, out) in enumerate(outs):
        assert code == 0 and "abort: rank" in out, f"rank {r} exited {code}:\n{out[-3000:]}"


@needs_torch2
def test_shrink_group_leaves_a_rank_out():
    if not hasattr(torch.distributed, "shrink_group"):
        pytest.skip("this torch has no shrink_group")
    outs = launch("shrink", 3, deadline=120)
    for r, (code, out) in enumerate(outs):
        assert code == 0 and "shrink: " in out, f"rank {r} exited {code}:\n{out[-3000:]}"
    assert "after shrink_group, all_reduce 3" in outs[0][1], outs[0][1][-3000:]
    assert "the leaver's call raised" in outs[2][1], outs[2][1][-3000:]


def test_skipped_collective_raises_everywhere():
    outs = launch("skipped", 3, deadline=120)
    for r, (code, out) in enumerate(outs):
        assert code == 0 and "skipped: rank" in out and "destroyed in" in out, f"rank {r} exited {code}:\n{out[-3000:]}"


@needs_torch2
def test_flight_recorder_names_the_divergence(tmp_path):
    """The skipped collective again, with torch's TORCH_FR_DUMP_TEMP_FILE:
    every rank writes its flight recorder at the failure, in torch's
    format, and torch's analyzer (through python -m ccl.fr_trace) finds
    the call at which rank 2 went its own way."""
    import pickle
    prefix = "libccl_trace_rank_"
    outs = launch("skipped", 3, deadline=120, env={"TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / prefix)})
    for r, (code, out) in enumerate(outs):
        assert code == 0 and f"flight recorder written to {tmp_path / prefix}{r}" in out, \
            f"rank {r} exited {code}:\n{out[-3000:]}"
    for r in range(3):
        with open(tmp_path / f"{prefix}{r}", "rb") as f:
            dump = pickle.load(f)
        assert dump["version"] == "2.10" and dump["pg_config"]["0"]["ranks"] == "[0, 1, 2]", dump
        last = dump["entries"][-1]
        want = "libccl:_all_gather_base" if r == 2 else "libccl:all_reduce"
        assert (last["profiling_name"], last["collective_seq_id"], last["state"]) == (want, 1, "started"), last
        assert last["input_sizes"] == [[8]] and last["output_sizes"] == ([[24]] if r == 2 else [[8]]), last
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(HERE),
                                                                      os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-m", "ccl.fr_trace", str(tmp_path), "--prefix", prefix],
                         capture_output=True, text=True, env=env, timeout=120)
    report = out.stdout + out.stderr
    assert out.returncode == 0 and "Collective sequence number: 1 has errors" in report, report[-3000:]
    assert "COLLECTIVE_TYPE_MISMATCH" in report and "'all_reduce'" in report, report[-3000:]


NAMES = """
import sys, torch.distributed as dist
import ccl.torch
print(sorted(n for n in ("CCL", "LIBCCL") if n in dist.Backend._plugins), ccl.torch.oneccl_installed())
"""


def test_backend_names(tmp_path):
    """"libccl" always; "ccl" too, unless Intel's oneCCL bindings are
    installed (a package of that name on the path stands in for them)."""
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", NAMES], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[0] == "['CCL', 'LIBCCL'] False", out.stdout
    (tmp_path / "oneccl_bindings_for_pytorch").mkdir()
    (tmp_path / "oneccl_bindings_for_pytorch" / "__init__.py").write_text("")
    env["PYTHONPATH"] = f"{tmp_path}:{env.get('PYTHONPATH', '')}"
    out = subprocess.run([sys.executable, "-c", NAMES], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[0] == "['LIBCCL'] True", out.stdout


def test_torchrun():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # torch 2.x: torchrun as it is. 1.13: torchrun.py, torchrun itself with the one parser PyTorch 1.13
    # gets wrong on Python 3.11 fixed, under the earlier name "ccl" (which also works where oneCCL's
    # bindings are not installed)
    launcher = ["-m", "torch.distributed.run"] if TORCH2 else [os.path.join(HERE, "torchrun.py")]
    out = subprocess.run([sys.executable, *launcher, "--nproc_per_node", "3", "--master_addr",
                          "127.0.0.1", "--master_port", str(port), SCEN, "ops", "0", "3", "env"],
                         capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, CCL_TEST_BACKEND="libccl" if TORCH2 else "ccl"))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
