/* The library's environment knobs, read once per process (a transport's
 * own are read in its folder, by the same rules: ccl__env_long). */
#include "core/params.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"

static struct ccl__params params;
static pthread_once_t params_once = PTHREAD_ONCE_INIT;

/* One rule for every knob: a value is taken whole or not at all. A number
 * with anything after it (but a k or M suffix where sizes take one), out of
 * range or too large to hold, and a string too long for its field, is
 * refused with a warning that names the variable and says what is used
 * instead. */
static long env_long(const char *name, long def, long lo, long hi) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 0);
    int shift = *end == 'k' || *end == 'K' ? 10 : *end == 'm' || *end == 'M' ? 20 : 0;
    if (shift) end++;
    int fits = errno == 0 && end != v && x >= LONG_MIN >> shift && x <= LONG_MAX >> shift;
    if (fits) x = (long)((unsigned long)x << shift);
    if (!fits || *end || x < lo || x > hi) {
        CCL_WARN(CCL__SUB_ENV, -1, "ignoring %s=%s (want a whole number %ld..%ld); using %ld", name, v, lo, hi, def);
        return def;
    }
    return x;
}

/* Seconds: a finite number above 0 and at most a billion (ccl_config_t's
 * bound); nothing after it. */
static double env_seconds(const char *name, double def) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !(x > 0) || !(x <= 1e9)) {
        CCL_WARN(CCL__SUB_ENV, -1, "ignoring %s=%s (want seconds above 0, at most 1e9); using %g", name, v, def);
        return def;
    }
    return x;
}

static void copy_str(char *dst, size_t n, const char *src) {
    snprintf(dst, n, "%s", src);
}

/* A string knob: 0, or -1 when it is too long for its field (then def). */
static int env_str(const char *name, const char *def, char *dst, size_t n) {
    const char *v = getenv(name);
    if (v && *v && strlen(v) >= n) {
        CCL_WARN(CCL__SUB_ENV, -1, "ignoring %s='%.40s...' (%zu characters, at most %zu); using '%s'", name, v,
                 strlen(v), n - 1, def);
        copy_str(dst, n, def);
        return -1;
    }
    copy_str(dst, n, v && *v ? v : def);
    return 0;
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
        /* A name cut short would be another file: none is read or written. */
        env_str("CCL_TUNING_FILE", "none", dst, n);
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
    params.timeout_s = env_seconds("CCL_TIMEOUT", 300.0);
    copy_str(params.timeout_source, sizeof(params.timeout_source), "CCL_TIMEOUT");
    params.link_timeout_s = (double)env_long("CCL_LINK_TIMEOUT", 10, 0, 86400);
    env_str("CCL_TRANSPORT", "", params.transport, sizeof params.transport);
    default_machine_id(params.machine_id, sizeof(params.machine_id));
    const char *hid = getenv("CCL_HOST_ID");
    if (!(hid && *hid) || env_str("CCL_HOST_ID", "", params.host_id, sizeof params.host_id) != 0)
        default_host_id(params.machine_id, params.host_id, sizeof(params.host_id));
    env_str("CCL_SOCKET_IFNAME", "", params.ifname, sizeof params.ifname);
    char connect[8];
    env_str("CCL_CONNECT", "lazy", connect, sizeof connect);
    params.connect_all = strcmp(connect, "all") == 0;
    if (!params.connect_all && strcmp(connect, "lazy") != 0)
        CCL_WARN(CCL__SUB_ENV, -1, "ignoring CCL_CONNECT='%s' (lazy or all); using lazy", connect);
    params.reg_cache = (int)env_long("CCL_REG_CACHE", 0, 0, 1);
    params.slots = (int)env_long("CCL_SLOTS", 8, 2, 64);
    params.chunk_bytes = ((size_t)env_long("CCL_CHUNK_BYTES", 0, 0, 64 << 20) + 63) & ~(size_t)63;
    params.check = (int)env_long("CCL_CHECK", 0, 0, 1);
    params.spin_us = (int)env_long("CCL_SPIN_US", 50, 0, 1000000);
    params.spin_us_set = getenv("CCL_SPIN_US") && *getenv("CCL_SPIN_US");
    env_str("CCL_BIND", "none", params.bind, sizeof params.bind);
    env_str("CCL_TOPO_FILE", "", params.topo_file, sizeof params.topo_file);
    /* A forced algorithm is never dropped in silence: init refuses it as
     * ccl_comm_set_algo would (plan/choose.c). */
    const char *algo = getenv("CCL_ALGO");
    if (algo && strlen(algo) >= sizeof params.algo) {
        params.algo_too_long = strlen(algo);
        snprintf(params.algo, sizeof params.algo, "%.40s", algo);
    } else {
        env_str("CCL_ALGO", "", params.algo, sizeof params.algo);
    }
    copy_str(params.algo_source, sizeof(params.algo_source), "CCL_ALGO");
    ccl__params_tuning_file(params.tuning_file, sizeof(params.tuning_file));
    env_str("CCL_TRACE", "", params.trace, sizeof params.trace);
    params.flight_recorder = env_long("CCL_FLIGHT_RECORDER", 512, 0, 1L << 20);
    env_str("CCL_FLIGHT_DIR", "", params.flight_dir, sizeof params.flight_dir);
    env_str("CCL_FLIGHT_SIGNAL", "USR2", params.flight_signal, sizeof params.flight_signal);
    params.status = (int)env_long("CCL_STATUS", 1, 0, 1);
    env_str("CCL_STATUS_DIR", "", params.status_dir, sizeof params.status_dir);
    env_str("CCL_TEST_KILL_AT", "", params.test_kill_at, sizeof params.test_kill_at);
    env_str("CCL_TEST_STALL_AT", "", params.test_stall_at, sizeof params.test_stall_at);
    env_str("CCL_CUDA_LIBRARY", "libcuda.so.1", params.cuda_library, sizeof params.cuda_library);
    params.cuda_direct = (int)env_long("CCL_CUDA_DIRECT", 1, 0, 1);
    params.device_piece_bytes = (size_t)env_long("CCL_DEVICE_PIECE_BYTES", 4L << 20, 0, 1L << 30);
    params.single_copy = (int)env_long("CCL_SINGLE_COPY", 1, 0, 1);
    params.cma_large_probe = (size_t)env_long("CCL_CMA_LARGE_PROBE", 0, 0, 1L << 30);
    params.zero_copy = (int)env_long("CCL_ZERO_COPY", 1, 0, 1);
    params.zero_copy_min = env_long("CCL_ZERO_COPY_MIN", -1, -1, 1L << 40);
    params.direct_window_bytes = (size_t)env_long("CCL_DIRECT_WINDOW_BYTES", 0, 0, 1L << 30);
    params.stream_output_bytes = env_long("CCL_STREAM_OUTPUT_BYTES", -1, -1, 1L << 50);
    params.trace_max_events = (size_t)env_long("CCL_TRACE_MAX_EVENTS", 4000000, 1, 1L << 30);
}

int ccl__params_private_dir(const char *configured, const char *variable, const char *stem, char *dst, size_t n) {
    if (configured[0]) {
        copy_str(dst, n, configured);
        return 0;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(dst, n, "%s/%s-%u", tmp && *tmp ? tmp : "/tmp", stem, (unsigned)getuid());
    (void)mkdir(dst, 0700);
    struct stat st;
    if (lstat(dst, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid() && !(st.st_mode & 077)) return 0;
    CCL_WARN(CCL__SUB_INIT, -1, "%s cannot be made, or is not a directory of this user's alone: nothing is "
             "written there (set %s)", dst, variable);
    dst[0] = 0;
    return -1;
}

long ccl__env_long(const char *name, long def, long lo, long hi) { return env_long(name, def, lo, hi); }
int ccl__env_str(const char *name, const char *def, char *dst, size_t n) { return env_str(name, def, dst, n); }

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
