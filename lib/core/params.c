/* Every environment knob in one table, read once per process. */
#include "core/params.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"

static const struct ccl__param_doc docs[] = {
    {"CCL_DEBUG", "WARN", "log level: NONE, WARN, INFO or TRACE"},
    {"CCL_DEBUG_SUBSYS", "ALL", "comma list of INIT,BOOT,NET,SHM,COLL,P2P,PLAN,ENV (^X excludes)"},
    {"CCL_DEBUG_FILE", "", "log to this file instead of stderr (%h host, %p pid)"},
    {"CCL_TIMEOUT", "300", "seconds a wait may go without progress before CCL_ERR_TIMEOUT"},
    {"CCL_LINK_TIMEOUT", "10", "seconds a peer's host (tcp) or adapter (ib) may leave our packets unanswered before the link counts as down (0: only CCL_TIMEOUT)"},
    {"CCL_TRANSPORT", "", "force one transport for every peer: shm, tcp or ib (ib only where built with libibverbs and an RDMA device is up)"},
    {"CCL_HOST_ID", "", "host identity; ranks with equal ids share memory (default: the kernel's boot id and the /dev/shm directory)"},
    {"CCL_SOCKET_IFNAME", "", "network interface for sockets (default: first non-loopback)"},
    {"CCL_SHM_SLOT_BYTES", "131072", "bytes per shared-memory FIFO slot (a pipeline chunk)"},
    {"CCL_TCP_SLOT_BYTES", "524288", "bytes per TCP staging slot (a pipeline chunk)"},
    {"CCL_TCP_SOCKET_BYTES", "4194304",
     "send and receive buffer of every TCP connection, when net.core.rmem_max and wmem_max allow it (0: the "
     "kernel's autotuning)"},
    {"CCL_IB_SLOT_BYTES", "262144", "bytes per RDMA FIFO slot (a pipeline chunk), registered on both sides"},
    {"CCL_IB_HCA", "", "RDMA device to use, as name or name:port (default: the active device nearest to the rank by hwloc)"},
    {"CCL_IB_GID_INDEX", "0", "GID table index of the RDMA port (RoCE: which address and RoCE version)"},
    {"CCL_IB_ZCOPY_BYTES", "524288",
     "point-to-point messages over RDMA of at least this many bytes go zero-copy (0: only buffers given to "
     "ccl_comm_register)"},
    {"CCL_REG_CACHE", "0",
     "1: keep automatic memory registrations between calls (only when the application never frees and reuses "
     "memory it passed); 0: they last one call"},
    {"CCL_SHM_WINDOW_BYTES", "2097152", "bytes of the shared window each rank exposes to its host for the direct algorithm (0: none)"},
    {"CCL_SLOTS", "8", "slots per connection direction (pipeline depth, >= 2)"},
    {"CCL_CHUNK_BYTES", "0", "bytes of every call's pipeline chunk, at most a slot, rounded up to a multiple of 64 (0: the planner picks per call)"},
    {"CCL_SPIN_US", "50", "microseconds to spin before yielding and sleeping (0 by default when a machine has more ranks than CPUs to use)"},
    {"CCL_TOPO_FILE", "", "plan for this topology instead of the machine's: an hwloc XML file, or an hwloc synthetic description (\"pack:2 numa:2 core:8 pu:1\"); nothing is pinned then"},
    {"CCL_BIND", "none", "pin the thread that creates a communicator: core (a core per rank of this machine, round robin when there are more ranks) or none; cclrun and the benchmarks' --ranks set core"},
    {"CCL_ALGO", "", "force algorithms: one of ring, tree, rd, rhd, bruck, pairwise, direct for every collective it runs, or per collective (allreduce:tree,broadcast:ring)"},
    {"CCL_SHM_PREFIX", "ccl", "prefix of shared-memory segment names in /dev/shm"},
    {"CCL_SECRET", "", "job secret (32 to 64 hex digits) for ccl_comm_init_env; cclrun sets it"},
    {"CCL_SECRET_FILE", "", "a file (mode 0600, owned by the user) holding the job secret for ccl_comm_init_env"},
    {"CCL_CHECK", "0", "1: before every collective, compare its arguments across ranks; a difference is an error naming both ranks (the same on every rank)"},
    {"CCL_TEST_KILL_AT", "", "for fault tests: this process kills itself (SIGKILL) at a set-up phase: joined, setup, connecting, connect or connected"},
    {"CCL_TEST_STALL_AT", "", "for fault tests: this process sleeps 0.2 s at a set-up phase (the phases of CCL_TEST_KILL_AT)"},
    {"CCL_CUDA_LIBRARY", "libcuda.so.1", "the CUDA driver library, opened the first time a call brings a device pointer or a stream"},
    {"CCL_CUDA_DIRECT", "1", "0: never run collectives on device buffers on the GPU itself (the GPU-resident path, when every rank shares one GPU); stage them through host memory"},
    {"CCL_TRACE", "", "trace every chunk; rank 0 writes this Chrome trace JSON at destroy (%p pid, %c communicator id)"},
    {"CCL_TRACE_MAX_EVENTS", "4000000", "events kept per rank while tracing; later ones are dropped"},
};

const struct ccl__param_doc *ccl__params_docs(size_t *n) {
    *n = sizeof(docs) / sizeof(docs[0]);
    return docs;
}

static struct ccl__params params;
static pthread_once_t params_once = PTHREAD_ONCE_INIT;

static const char *env_or(const char *name, const char *def) {
    const char *v = getenv(name);
    return v && *v ? v : def;
}

static long env_long(const char *name, long def, long lo, long hi) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    long x = strtol(v, &end, 0);
    if (*end == 'k' || *end == 'K') x <<= 10, end++;
    else if (*end == 'm' || *end == 'M') x <<= 20, end++;
    if (*end || x < lo || x > hi) {
        CCL_WARN(CCL__SUB_ENV, -1, "ignoring %s=%s (want %ld..%ld); using %ld", name, v, lo, hi, def);
        return def;
    }
    return x;
}

static void copy_str(char *dst, size_t n, const char *src) {
    snprintf(dst, n, "%s", src);
}

/* The machine is the kernel: its boot id is the same in every container
 * and namespace of one boot, and differs between machines. Hostnames are
 * not: a UTS namespace changes them, and two machines may share one. */
static void default_machine_id(char *dst, size_t n) {
    char boot[40] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof(boot), f)) boot[0] = 0;
        fclose(f);
        boot[strcspn(boot, "\n")] = 0;
    }
    if (boot[0]) {
        snprintf(dst, n, "boot:%.36s", boot);
        return;
    }
    char host[64] = "unknown";
    gethostname(host, sizeof(host) - 1);
    snprintf(dst, n, "host:%.58s", host);
}

/* Shared memory needs more than one machine: shm_open names live in the
 * /dev/shm directory, and a container may have a private one. Ranks whose
 * /dev/shm is the same directory (device and inode) can open each other's
 * segments; the others talk over sockets even on one machine. */
static void default_host_id(const char *machine, char *dst, size_t n) {
    struct stat sb;
    if (stat("/dev/shm", &sb) == 0)
        snprintf(dst, n, "%.41s/shm:%llx.%llx", machine, (unsigned long long)sb.st_dev, (unsigned long long)sb.st_ino);
    else
        snprintf(dst, n, "%s", machine);
}

/* CCL_TUNING_FILE, else tuning-<hostname> in the user's cache directory
 * (a home shared between machines holds one file per machine). */
void ccl__params_tuning_file(char *dst, size_t n) {
    const char *set = getenv("CCL_TUNING_FILE");
    if (set && *set) {
        copy_str(dst, n, set);
        return;
    }
    char host[64] = "unknown";
    gethostname(host, sizeof(host) - 1);
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg) snprintf(dst, n, "%s/libccl/tuning-%s", xdg, host);
    else if (home && *home) snprintf(dst, n, "%s/.cache/libccl/tuning-%s", home, host);
    else copy_str(dst, n, "none");
}

static void params_load(void) {
    ccl__log_init();
    const char *t = getenv("CCL_TIMEOUT");
    double timeout = t && *t ? strtod(t, NULL) : 300.0;
    if (!(timeout > 0)) {
        CCL_WARN(CCL__SUB_ENV, -1, "ignoring CCL_TIMEOUT=%s (want seconds > 0); using 300", t);
        timeout = 300.0;
    }
    params.timeout_s = timeout;
    params.link_timeout_s = (double)env_long("CCL_LINK_TIMEOUT", 10, 0, 86400);
    copy_str(params.transport, sizeof(params.transport), env_or("CCL_TRANSPORT", ""));
    default_machine_id(params.machine_id, sizeof(params.machine_id));
    const char *hid = getenv("CCL_HOST_ID");
    if (hid && *hid) copy_str(params.host_id, sizeof(params.host_id), hid);
    else default_host_id(params.machine_id, params.host_id, sizeof(params.host_id));
    copy_str(params.ifname, sizeof(params.ifname), env_or("CCL_SOCKET_IFNAME", ""));
    params.shm_slot_bytes = (size_t)env_long("CCL_SHM_SLOT_BYTES", 128 << 10, 4096, 64 << 20) & ~(size_t)63;
    params.tcp_slot_bytes = (size_t)env_long("CCL_TCP_SLOT_BYTES", 512 << 10, 4096, 64 << 20) & ~(size_t)63;
    params.tcp_socket_bytes = (size_t)env_long("CCL_TCP_SOCKET_BYTES", 4 << 20, 0, 1L << 30);
    params.ib_slot_bytes = (size_t)env_long("CCL_IB_SLOT_BYTES", 256 << 10, 4096, 64 << 20) & ~(size_t)63;
    copy_str(params.ib_hca, sizeof(params.ib_hca), env_or("CCL_IB_HCA", ""));
    params.ib_gid_index = (int)env_long("CCL_IB_GID_INDEX", 0, 0, 255);
    params.ib_qps = (int)env_long("CCL_IB_QPS", 1, 1, 8);
    /* 0: 256 KiB, the pieces soft-RoCE pulled fastest at 1 and 4 MiB (transports/ib/ib.h) */
    long pull = env_long("CCL_IB_PULL_BYTES", 0, 0, 1L << 30);
    params.ib_pull_bytes = pull == 0 ? (size_t)256 << 10 : (size_t)(pull < 4096 ? 4096 : pull);
    params.ib_zcopy_bytes = (size_t)env_long("CCL_IB_ZCOPY_BYTES", 512 << 10, 0, 1L << 40);
    params.reg_cache = (int)env_long("CCL_REG_CACHE", 0, 0, 1);
    /* 0, or at least 64 KiB (the window holds four staging areas); whole pages */
    params.shm_window_bytes = (size_t)env_long("CCL_SHM_WINDOW_BYTES", 2 << 20, 0, 1L << 30) & ~(size_t)4095;
    if (params.shm_window_bytes && params.shm_window_bytes < (64 << 10)) params.shm_window_bytes = 64 << 10;
    params.slots = (int)env_long("CCL_SLOTS", 8, 2, 64);
    params.chunk_bytes = ((size_t)env_long("CCL_CHUNK_BYTES", 0, 0, 64 << 20) + 63) & ~(size_t)63;
    params.check = (int)env_long("CCL_CHECK", 0, 0, 1);
    params.spin_us = (int)env_long("CCL_SPIN_US", 50, 0, 1000000);
    params.spin_us_set = getenv("CCL_SPIN_US") && *getenv("CCL_SPIN_US");
    copy_str(params.bind, sizeof(params.bind), env_or("CCL_BIND", "none"));
    copy_str(params.topo_file, sizeof(params.topo_file), env_or("CCL_TOPO_FILE", ""));
    copy_str(params.algo, sizeof(params.algo), env_or("CCL_ALGO", ""));
    copy_str(params.algo_source, sizeof(params.algo_source), "CCL_ALGO");
    ccl__params_tuning_file(params.tuning_file, sizeof(params.tuning_file));
    copy_str(params.shm_prefix, sizeof(params.shm_prefix), env_or("CCL_SHM_PREFIX", "ccl"));
    copy_str(params.trace, sizeof(params.trace), env_or("CCL_TRACE", ""));
    copy_str(params.test_kill_at, sizeof(params.test_kill_at), env_or("CCL_TEST_KILL_AT", ""));
    copy_str(params.test_stall_at, sizeof(params.test_stall_at), env_or("CCL_TEST_STALL_AT", ""));
    copy_str(params.cuda_library, sizeof(params.cuda_library), env_or("CCL_CUDA_LIBRARY", "libcuda.so.1"));
    params.cuda_direct = (int)env_long("CCL_CUDA_DIRECT", 1, 0, 1);
    params.trace_max_events = (size_t)env_long("CCL_TRACE_MAX_EVENTS", 4000000, 1, 1L << 30);
}

const struct ccl__params *ccl__params_get(void) {
    pthread_once(&params_once, params_load);
    return &params;
}

int ccl__list_place(const char *list, const char *name) {
    size_t len = strlen(name);
    int k = 0;
    for (const char *p = list; *p; k++) {
        size_t w = strcspn(p, ",");
        if (w == len && strncmp(p, name, len) == 0) return k;
        p += w + (p[w] == ',');
    }
    return 1 << 20;
}
