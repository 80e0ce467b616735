/*
 * Communicators from the launcher's environment.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coll/coll.h"
#include "core/hash.h"
#include "core/bootstrap.h"
#include "core/log.h"
#include "transports/manager.h"

/* First variable of the list that is set. */
static const char *env_first(const char *const *names, const char **which) {
    for (; *names; names++) {
        const char *v = getenv(*names);
        if (v && *v) {
            *which = *names;
            return v;
        }
    }
    return NULL;
}

/* A bad environment: logged, kept for ccl_comm_last_error(NULL), and
 * CCL_ERR_INVALID_ARGUMENT. */
#define refuse_env(rank, ...) ccl__init_failed((rank), CCL_ERR_INVALID_ARGUMENT, "ccl_comm_init_env: ", __VA_ARGS__)
/* The same for the job's secret, read by init_env and address ids alike:
 * who is the call's name and ": ". */
#define refuse_secret(who, rank, ...) ccl__init_failed((rank), CCL_ERR_INVALID_ARGUMENT, (who), __VA_ARGS__)

static int parse_int(const char *s, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 0 || v > 1 << 24) return -1;
    *out = (int)v;
    return 0;
}

/* ---- the job's secret ----
 * Every connection of the job proves the secret, so whoever holds it can
 * join as a rank. ccl_get_unique_id draws it at random, and it travels
 * inside the id. A job started from the environment needs one that every
 * rank has and nobody else does:
 *   CCL_SECRET        16 to 32 bytes as hex (cclrun sets 32 at random);
 *   CCL_SECRET_FILE   a file holding that hex, owned by this user and
 *                     readable by nobody else (mode 0600 or stricter), on
 *                     a file system every rank sees (as HPC launchers do).
 * Without either, the secret is derived from the root address and the
 * launcher's job id. That keeps concurrent jobs apart, but anyone who can
 * reach the root can compute it and join: every rank says so, loudly. */

#define SECRET_MIN_BYTES 16

/* hex (surrounding whitespace allowed) -> out, zero-padded; -1 unless it is
 * an even number of 2 * SECRET_MIN_BYTES to 2 * CCL__SECRET_BYTES hex digits. */
static int parse_secret(const char *hex, uint8_t out[CCL__SECRET_BYTES]) {
    static const char space[] = " \t\r\n";
    hex += strspn(hex, space);
    size_t n = strspn(hex, "0123456789abcdefABCDEF"), end = n + strspn(hex + n, space);
    if (hex[end] || n % 2 || n < 2 * SECRET_MIN_BYTES || n > 2 * CCL__SECRET_BYTES) return -1;
    memset(out, 0, CCL__SECRET_BYTES);
    for (size_t i = 0; i < n; i += 2) {
        unsigned b;
        if (sscanf(hex + i, "%2x", &b) != 1) return -1;
        out[i / 2] = (uint8_t)b;
    }
    return 0;
}

static ccl_status_t secret_from_file(const char *who, const char *path, int rank, uint8_t out[CCL__SECRET_BYTES]) {
    /* A link is fine: the file it leads to is checked. Non-blocking: a FIFO
     * would hold the open until someone wrote to it. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return refuse_secret(who, rank, "cannot open CCL_SECRET_FILE %s: %s", path, strerror(errno));
    struct stat st = {0};
    char buf[4 * CCL__SECRET_BYTES + 1];
    ssize_t got = -1;
    const char *why = NULL;
    if (fstat(fd, &st) != 0) why = "cannot stat it";
    else if (!S_ISREG(st.st_mode)) why = S_ISFIFO(st.st_mode) ? "a FIFO, not a regular file" : "not a regular file";
    else if (st.st_uid != geteuid()) why = "owned by another user";
    else if (st.st_mode & 077) why = "readable or writable by others (chmod 600 it)";
    else if ((got = read(fd, buf, sizeof(buf) - 1)) < 0) why = "cannot read it";
    close(fd);
    if (!why) {
        buf[got] = 0;
        if (parse_secret(buf, out) != 0) why = "does not hold 32 to 64 hex digits";
    }
    explicit_bzero(buf, sizeof(buf));
    if (why)
        return refuse_secret(who, rank, "CCL_SECRET_FILE %s (mode %04o): %s", path, (unsigned)(st.st_mode & 07777), why);
    return CCL_OK;
}

/* The job id a launcher gives every rank, for the derived secret. */
static void derive_secret(const char *root, uint8_t out[CCL__SECRET_BYTES]) {
    static const char *const ids[] = {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "OMPI_MCA_orte_ess_jobid",
                                      "PMIX_NAMESPACE", "PMI_JOBID", NULL};
    const char *which = "", *job = env_first(ids, &which);
    char seed[512];
    snprintf(seed, sizeof(seed), "libccl|%s|%s", root, job ? job : "");
    /* FNV-1a, re-seeded per 8-byte lane: a fixed mapping, not cryptography. */
    for (int lane = 0; lane < CCL__SECRET_BYTES / 8; lane++) {
        uint64_t h = ccl__fnv1a(CCL__FNV_OFFSET ^ (uint64_t)lane, seed, strlen(seed));
        memcpy(out + lane * 8, &h, 8);
    }
}

static ccl_status_t job_secret(const char *who, const char *root, int rank, uint8_t out[CCL__SECRET_BYTES]) {
    const char *hex = getenv("CCL_SECRET"), *file = getenv("CCL_SECRET_FILE");
    memset(out, 0, CCL__SECRET_BYTES);
    if (hex && *hex && file && *file)
        return refuse_secret(who, rank, "both CCL_SECRET and CCL_SECRET_FILE are set; set one");
    if (file && *file) return secret_from_file(who, file, rank, out);
    if (hex && *hex) {
        if (parse_secret(hex, out) == 0) return CCL_OK;
        return refuse_secret(who, rank, "CCL_SECRET is not 32 to 64 hex digits");
    }
    derive_secret(root, out);
    CCL_WARN(CCL__SUB_INIT, rank,
             "INSECURE: no CCL_SECRET or CCL_SECRET_FILE, so the job's secret is derived from "
             "the root address and job id; anyone who can reach %s can compute it, join as a rank and feed this "
             "job data. Set CCL_SECRET_FILE to a file only you can read (README: Security)",
             root);
    return CCL_OK;
}

/* No launcher at all: a communicator of this process alone, as an MPI
 * singleton is, so that a program started by hand runs as one rank. */
static ccl_status_t init_singleton(ccl_comm_t **comm) {
    CCL_INFO(CCL__SUB_INIT, 0,
             "init from environment: no launcher variables (CCL_RANK, RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, "
             "PMI_RANK), so this process runs as a communicator of 1 rank; start it with cclrun -n N (or torchrun, "
             "srun, mpirun) for more");
    struct ccl__unique_id uid;
    ccl_status_t st = ccl__make_id(&uid);
    return st != CCL_OK ? st : ccl__comm_create(comm, 1, &uid, 0, NULL);
}

/* The root address: CCL_ROOT_ADDR, else MASTER_ADDR:MASTER_PORT. torchrun's
 * agent already listens on MASTER_PORT (its store, which the workers' torch
 * reaches), so under torchrun (TORCHELASTIC_RUN_ID set) the root takes the
 * port after it (*shifted set). 0, or -1 with why[] said. */
static int root_address(char *root, size_t n, int *shifted, char *why, size_t why_n) {
    const char *ra = getenv("CCL_ROOT_ADDR"), *ma = getenv("MASTER_ADDR"), *mp = getenv("MASTER_PORT");
    *shifted = 0;
    if (ra && *ra) {
        snprintf(root, n, "%s", ra);
        return 0;
    }
    int port;
    if (!ma || !*ma || !mp || !*mp) {
        snprintf(why, why_n, "set CCL_ROOT_ADDR=host:port (or MASTER_ADDR and MASTER_PORT)");
        return -1;
    }
    if (parse_int(mp, &port) || port < 1 || port > 65535) {
        snprintf(why, why_n, "MASTER_PORT=%s is not a port (1 to 65535)", mp);
        return -1;
    }
    const char *run = getenv("TORCHELASTIC_RUN_ID");
    if (run && *run) {
        if (port == 65535) {
            snprintf(why, why_n, "under torchrun the root listens on MASTER_PORT + 1, and MASTER_PORT is 65535; "
                                 "set CCL_ROOT_ADDR=host:port");
            return -1;
        }
        port++;
        *shifted = 1;
    }
    snprintf(root, n, strchr(ma, ':') ? "[%s]:%d" : "%s:%d", ma, port);
    return 0;
}

/* cclrun binds the root's port and hands rank 0 the listening socket
 * (CCL_ROOT_FD), so that no other process can take the port between the
 * launcher's choice and rank 0's start. Taken once per process: a second
 * communicator from the environment binds the port as usual. 1: the root
 * runs on it. */
static int root_on_inherited_listener(const struct ccl__unique_id *uid, int size) {
    static int taken;
    const char *v = getenv("CCL_ROOT_FD");
    int fd;
    if (!v || !*v || __atomic_exchange_n(&taken, 1, __ATOMIC_ACQ_REL)) return 0;
    if (parse_int(v, &fd) || fd < 3 || !ccl__sock_is_listener_at(fd, &uid->root)) {
        char root[80];
        ccl__sa_str(&uid->root, root, sizeof root);
        CCL_WARN(CCL__SUB_INIT, 0, "CCL_ROOT_FD=%s is not a socket listening on %s: ignored, rank 0 binds it", v,
                 root);
        return 0;
    }
    if (ccl__boot_root_start_on(fd, uid->secret, ccl__params_get()->timeout_s, ccl__conns_record_bytes()) != CCL_OK)
        return 0; /* fd is closed; binding the port again says why it fails */
    CCL_INFO(CCL__SUB_INIT, 0, "the root of %d ranks listens on the launcher's socket (CCL_ROOT_FD=%s)", size, v);
    return 1;
}

CCL_API ccl_status_t ccl_comm_init_env(ccl_comm_t **comm) {
    if (!comm) return CCL_ERR_INVALID_ARGUMENT;
    *comm = NULL;
    ccl__log_init(); /* CCL_DEBUG's level holds for the lines below, said before any communicator exists */
    static const char *const rank_vars[] = {"CCL_RANK", "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", NULL};
    static const char *const size_vars[] = {"CCL_WORLD_SIZE", "WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE",
                                            "PMI_SIZE", NULL};
    const char *rv_name = "", *sv_name = "";
    const char *rv = env_first(rank_vars, &rv_name), *sv = env_first(size_vars, &sv_name);
    if (!rv && !sv) return init_singleton(comm);
    int rank, size;
    if (!rv || !sv || parse_int(rv, &rank) || parse_int(sv, &size) || size < 1 || rank >= size)
        return refuse_env(-1,
                          "no usable rank/size in the environment (%s=%s, %s=%s); set CCL_RANK and CCL_WORLD_SIZE, "
                          "or run under torchrun, Slurm, mpirun or cclrun",
                          rv ? rv_name : "rank", rv ? rv : "unset", sv ? sv_name : "size", sv ? sv : "unset");
    char root[256], why[160];
    int torchrun;
    if (root_address(root, sizeof root, &torchrun, why, sizeof why) != 0) return refuse_env(rank, "%s", why);
    struct ccl__unique_id uid = {.magic = CCL__UID_MAGIC};
    if (ccl__sa_parse(root, &uid.root) != CCL_OK) return refuse_env(rank, "cannot resolve the root address '%s'", root);
    ccl_status_t sst = job_secret("ccl_comm_init_env: ", root, rank, uid.secret);
    if (sst != CCL_OK) return sst;
    CCL_INFO(CCL__SUB_INIT, rank, "init from environment: rank %d of %d (%s, %s), root %s%s", rank, size, rv_name,
             sv_name, root, torchrun ? " (MASTER_PORT + 1: torchrun's store holds MASTER_PORT)" : "");
    if (rank == 0 && !root_on_inherited_listener(&uid, size)) {
        ccl_status_t st = ccl__root_start_at(&uid, rank, "ccl_comm_init_env",
                                             torchrun ? "; under torchrun the root takes MASTER_PORT + 1: set "
                                                        "CCL_ROOT_ADDR=host:port to choose another" : "");
        if (st != CCL_OK) return st;
    }
    return ccl__comm_create(comm, size, &uid, rank, NULL);
}

ccl_status_t ccl__root_start_at(const struct ccl__unique_id *uid, int rank, const char *what, const char *hint) {
    const struct ccl__params *prm = ccl__params_get();
    union ccl__sa bind_addr = uid->root;
    ccl_status_t st = ccl__boot_root_start(&bind_addr, uid->secret, prm->timeout_s, ccl__conns_record_bytes());
    if (st != CCL_OK) {
        /* The name may resolve to an address of this host that cannot be
         * bound (e.g. behind NAT): listen on every address instead. */
        union ccl__sa any = uid->root;
        if (any.sa.sa_family == AF_INET6) any.in6.sin6_addr = in6addr_any;
        else any.in.sin_addr.s_addr = htonl(INADDR_ANY);
        st = ccl__boot_root_start(&any, uid->secret, prm->timeout_s, ccl__conns_record_bytes());
    }
    if (st != CCL_OK) {
        char root[80];
        ccl__sa_str(&uid->root, root, sizeof root);
        return ccl__init_failed(rank, st, "", "%s: rank 0 cannot listen on %s for the job's root (%s)%s", what, root,
                                ccl_status_string(st), hint);
    }
    return CCL_OK;
}

CCL_API ccl_status_t ccl_unique_id_from_address(const char *host_port, ccl_unique_id_t *id) {
    if (!id || !host_port || !*host_port)
        return ccl__init_failed(-1, CCL_ERR_INVALID_ARGUMENT, "ccl_unique_id_from_address: ", "%s is NULL or empty",
                                id ? "host_port" : "id");
    ccl__log_init();
    struct ccl__unique_id uid = {.magic = CCL__UID_MAGIC, .flags = CCL__UID_ROOT_AT_RANK0};
    if (ccl__sa_parse(host_port, &uid.root) != CCL_OK)
        return ccl__init_failed(-1, CCL_ERR_INVALID_ARGUMENT, "ccl_unique_id_from_address: ",
                                "'%s' is not host:port, or the host does not resolve", host_port);
    ccl_status_t st = job_secret("ccl_unique_id_from_address: ", host_port, -1, uid.secret);
    if (st != CCL_OK) return st;
    memset(id, 0, sizeof *id);
    memcpy(id->internal, &uid, sizeof uid);
    explicit_bzero(&uid, sizeof uid);
    return CCL_OK;
}
