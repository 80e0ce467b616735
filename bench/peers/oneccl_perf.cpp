// oneccl_perf: oneCCL's CPU collectives timed as the project's benchmarks
// time theirs (nccl-tests' rules: per size, warm-up calls, then a timed
// block of calls; time = mean per call, max over ranks; busbw by
// nccl-tests' factors), written in the benchmarks' CSV columns so that
// bench/peers_summary.py reads it beside theirs. Every result is checked
// (inputs chosen so any order of summing is exact). Launched by Intel MPI,
// which also hands rank 0's key-value store address to the others.
//
//   mpiexec -n N oneccl_perf COLL MIN MAX FACTOR ITERS WARMUP CSV
//   COLL: all_reduce, reduce_scatter, all_gather, broadcast, reduce
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <oneapi/ccl.hpp>

static double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char **argv) {
    if (argc != 8) {
        std::fprintf(stderr, "usage: oneccl_perf COLL MIN MAX FACTOR ITERS WARMUP CSV\n");
        return 2;
    }
    std::string coll = argv[1];
    size_t min = std::strtoull(argv[2], nullptr, 0), max = std::strtoull(argv[3], nullptr, 0);
    size_t factor = std::strtoull(argv[4], nullptr, 0);
    int iters = std::atoi(argv[5]), warmup = std::atoi(argv[6]);
    ccl::init();
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ccl::shared_ptr_class<ccl::kvs> kvs;
    ccl::kvs::address_type addr;
    if (rank == 0) {
        kvs = ccl::create_main_kvs();
        addr = kvs->get_address();
    }
    MPI_Bcast(addr.data(), (int)addr.size(), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rank != 0) kvs = ccl::create_kvs(addr);
    auto comm = ccl::create_communicator(size, rank, kvs);
    FILE *csv = rank == 0 ? std::fopen(argv[7], "w") : nullptr;
    if (csv)
        std::fprintf(csv, "library,op,nranks,nhosts,transport,algo,dtype,redop,root,size_bytes,count,placement,"
                          "time_us,algbw_gbps,busbw_gbps,wrong\n");
    int bad_total = 0;
    for (size_t bytes = min < 4 ? 4 : min; bytes <= max; bytes *= factor) {
        size_t count = bytes / sizeof(float), n = (size_t)size;
        // the send and receive element counts of this collective
        size_t sn = coll == "reduce_scatter" ? count * n : count, rn = coll == "all_gather" ? count * n : count;
        std::vector<float> send(sn), recv(rn);
        for (size_t i = 0; i < sn; i++) send[i] = (float)((rank + 1) * (int)(i % 7));
        auto once = [&]() {
            if (coll == "all_reduce") ccl::allreduce(send.data(), recv.data(), count, ccl::reduction::sum, comm).wait();
            else if (coll == "reduce_scatter")
                ccl::reduce_scatter(send.data(), recv.data(), count, ccl::reduction::sum, comm).wait();
            else if (coll == "all_gather") ccl::allgather(send.data(), recv.data(), count, comm).wait();
            else if (coll == "broadcast") {
                if (rank == 0) std::memcpy(recv.data(), send.data(), count * sizeof(float));
                ccl::broadcast(recv.data(), count, 0, comm).wait();
            } else ccl::reduce(send.data(), recv.data(), count, ccl::reduction::sum, 0, comm).wait();
        };
        once();
        // check: sums of (r + 1) * (i % 7) over the ranks are exact in float
        int bad = 0;
        float tri = (float)(size * (size + 1) / 2);
        for (size_t i = 0; i < rn && (coll != "reduce" || rank == 0); i++) {
            size_t blk = i / count, j = i % count;
            float want = coll == "all_reduce" || coll == "reduce" ? tri * (float)(int)(j % 7)
                         : coll == "reduce_scatter"              ? tri * (float)(int)(((size_t)rank * count + j) % 7)
                         : coll == "all_gather"                  ? (float)((int)(blk + 1) * (int)(j % 7))
                                                                 : (float)(int)(j % 7);
            bad += recv[i] != want;
        }
        for (int i = 0; i < warmup; i++) once();
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now_us();
        for (int i = 0; i < iters; i++) once();
        double t = (now_us() - t0) / iters, tmax;
        MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        int wrong;
        MPI_Allreduce(&bad, &wrong, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        bad_total += wrong;
        double data = (double)(coll == "all_gather" || coll == "reduce_scatter" ? bytes * n : bytes);
        double algbw = data / tmax / 1e3;
        double f = coll == "all_reduce" ? 2.0 * (double)(n - 1) / (double)n
                   : coll == "all_gather" || coll == "reduce_scatter" ? (double)(n - 1) / (double)n
                                                                      : 1.0;
        if (csv)
            std::fprintf(csv, "oneccl,%s,%d,1,shm,auto,float32,sum,%s,%zu,%zu,out,%.3f,%.6f,%.6f,%d\n", coll.c_str(),
                         size, coll == "broadcast" || coll == "reduce" ? "0" : "", bytes, count, tmax, algbw,
                         algbw * f, wrong);
        if (rank == 0) std::printf("%12zu %10.2f us %8.2f GB/s busbw %d wrong\n", bytes, tmax, algbw * f, wrong);
    }
    if (csv) std::fclose(csv);
    MPI_Finalize();
    return bad_total ? 1 : 0;
}
