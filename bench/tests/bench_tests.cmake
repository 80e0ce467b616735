# The benchmark programs' tests (label "bench"): each is one case of
# bench_test.sh, which checks exact exit statuses and what the output says.
set(bench_test sh ${CMAKE_CURRENT_SOURCE_DIR}/tests/bench_test.sh)
set(bench_bin ${CMAKE_CURRENT_BINARY_DIR})
set(bench_tests "")

# bench_add_test(NAME CASE PROG [ARGS...])
macro(bench_add_test name case prog)
  add_test(NAME bench_${name} COMMAND ${bench_test} ${case} ${bench_bin} ${prog} ${ARGN})
  list(APPEND bench_tests bench_${name})
endmacro()

set(bench_reducing all_reduce reduce_scatter reduce)
set(bench_moving all_reduce reduce_scatter all_gather broadcast reduce all_to_all sendrecv pingpong gather scatter
                 alltoallv hypercube)

# Every program, 1 to 4 ranks, over shared memory and over TCP.
foreach(coll ${BENCH_COLLS})
  foreach(transport shm tcp)
    bench_add_test(sweep_${coll}_${transport} sweep ${coll}_perf ${transport})
  endforeach()
endforeach()

# Started by cclrun (ccl_comm_init_env) rather than --ranks.
if(TARGET cclrun)
  bench_add_test(cclrun_all_reduce_shm cclrun all_reduce_perf $<TARGET_FILE:cclrun> 3)
  bench_add_test(cclrun_all_reduce_tcp cclrun all_reduce_perf $<TARGET_FILE:cclrun> 4 --host-per-rank)
  bench_add_test(cclrun_broadcast_shm cclrun broadcast_perf $<TARGET_FILE:cclrun> 2)
endif()

# Every type, op and root, on 3 ranks (an odd count: the average's inputs
# pair ranks up) and on 4 over TCP for all-reduce.
foreach(coll ${bench_moving})
  if(coll STREQUAL hypercube)
    bench_add_test(types_${coll} types ${coll}_perf 4) # a power of 2
  else()
    bench_add_test(types_${coll} types ${coll}_perf 3)
  endif()
endforeach()
bench_add_test(types_all_reduce_tcp types all_reduce_perf 4 --transport tcp -z 0 -m 2)
# The same on ccl_mem_alloc buffers (--shared-mem), every call zero-copy.
foreach(coll all_reduce reduce_scatter all_gather broadcast reduce)
  bench_add_test(shared_${coll} types ${coll}_perf 3 --shared-mem)
  set_tests_properties(bench_shared_${coll} PROPERTIES ENVIRONMENT "CCL_ZERO_COPY_MIN=0")
endforeach()

# --fresh: inputs written before every timed iteration, on every buffer
# layout (out of place and in place, a rank's share, the whole buffer).
foreach(coll all_reduce reduce_scatter all_gather broadcast all_to_all)
  bench_add_test(fresh_${coll} fresh ${coll}_perf 3)
endforeach()

# The checker's self-test: one flipped element must be found, every time.
foreach(coll ${bench_moving})
  bench_add_test(corrupt_${coll} corrupt ${coll}_perf -- --ranks 2)
endforeach()
if(TARGET cclrun)
  bench_add_test(corrupt_reduce_cclrun corrupt reduce_perf $<TARGET_FILE:cclrun> -n 3 --timeout 100 --)
endif()

# JSON and CSV agree with the text: per-iteration statistics, roots,
# several types and ops, non-blocking aggregated calls, repeated cycles,
# a collective without an in-place form, and the barrier.
bench_add_test(files_all_reduce files all_reduce_perf -- --ranks 3 -b 8 -e 64K -f 8 -n 4 -w 1 -I -d float32,int8 -o sum,min)
bench_add_test(files_reduce files reduce_perf -- --ranks 2 --transport tcp -b 1K -e 64K -f 8 -n 3 -r all -z 0 -m 3 -a 1 -N 2)
bench_add_test(files_broadcast files broadcast_perf -- --ranks 3 -b 4 -e 4K -f 4 -n 3 -r all -c 0 -a 2)
bench_add_test(files_all_to_all files all_to_all_perf -- --ranks 4 -b 64 -e 64K -f 16 -n 3 -I -a 0)
bench_add_test(files_barrier files barrier_perf -- --ranks 2 -n 5 -I)
bench_add_test(files_algos files all_reduce_perf -- --ranks 3 -b 8 -e 64K -f 8 -n 3 -w 1 -A auto,ring,tree --rounds 3)
bench_add_test(algos algos all_reduce_perf 3 auto,ring,tree,rd,rhd,direct)
bench_add_test(algos_auto algos all_reduce_perf 4 auto)
bench_add_test(steady steady all_reduce_perf 3)
# GPU buffers (--device); skipped, saying why, without a GPU.
foreach(coll all_reduce reduce_scatter all_gather sendrecv)
  bench_add_test(device_${coll} device ${coll}_perf 2)
endforeach()
bench_add_test(warm warm all_reduce_perf 2)
bench_add_test(usage usage broadcast_perf)
foreach(coll all_reduce gather)
  bench_add_test(nccltests_${coll} nccltests ${coll}_perf)
endforeach()
bench_add_test(split_all_reduce split all_reduce_perf)
bench_add_test(split_all_gather split all_gather_perf)
bench_add_test(legs_pingpong legs pingpong_perf)
bench_add_test(roofline roofline roofline)

# The MPI twins under Open MPI's mpirun, when they were built with it.
find_program(BENCH_MPIRUN_OPENMPI mpirun.openmpi)
if(BENCH_MPI_LIBRARY STREQUAL "mpi-openmpi" AND BENCH_MPIRUN_OPENMPI)
  set(mpirun ${BENCH_MPIRUN_OPENMPI} -np 2 --oversubscribe)
  set(mpi_tests "")
  foreach(coll ${BENCH_COLLS})
    add_test(NAME bench_mpi_${coll} COMMAND ${bench_test} mpi ${bench_bin}/mpi ${coll}_perf_mpi ${mpirun})
    list(APPEND mpi_tests bench_mpi_${coll})
  endforeach()
  add_test(NAME bench_mpi_corrupt COMMAND ${bench_test} corrupt ${bench_bin}/mpi all_reduce_perf_mpi ${mpirun} --)
  add_test(NAME bench_mpi_files COMMAND ${bench_test} files ${bench_bin}/mpi reduce_scatter_perf_mpi ${mpirun} --
           -b 64 -e 64K -f 8 -n 3 -I -d int32,float64 -o sum,max -z 0 -m 2)
  list(APPEND mpi_tests bench_mpi_corrupt bench_mpi_files)
  # Open MPI leaks by design at exit: LeakSanitizer would fail every run.
  # Two mpirun starting at once can race creating Open MPI's session
  # directory in /tmp ("mkdir ... File exists"): one at a time.
  set_tests_properties(${mpi_tests} PROPERTIES RESOURCE_LOCK openmpi_session ENVIRONMENT
    "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;ASAN_OPTIONS=detect_leaks=0")
  list(APPEND bench_tests ${mpi_tests})
endif()

set_tests_properties(${bench_tests} PROPERTIES TIMEOUT 120 LABELS bench)
# --steady waits for a slow machine by design (up to a minute before a
# block): on a loaded machine its three runs may wait that long each.
set_tests_properties(bench_steady PROPERTIES TIMEOUT 300)
set_tests_properties(bench_device_all_reduce bench_device_reduce_scatter bench_device_all_gather bench_device_sendrecv
  PROPERTIES SKIP_RETURN_CODE 77 LABELS "bench;cuda")
