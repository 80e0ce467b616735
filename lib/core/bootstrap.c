/* The rank's side of bootstrap: join the root, exchange infos, rounds. */
#include "core/bootstrap.h"

#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <errno.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/boot_proto.h"
#include "core/log.h"
#include "core/params.h"

ccl_status_t ccl__boot_make_id(struct ccl__unique_id *uid, const char *ifname, double timeout_s,
                               size_t record_bytes) {
    memset(uid, 0, sizeof(*uid));
    uid->magic = CCL__UID_MAGIC;
    if (getrandom(uid->secret, sizeof(uid->secret), 0) != (ssize_t)sizeof(uid->secret)) return CCL_ERR_SYSTEM;
    CCL_CHECK(ccl__sa_local(ifname, &uid->root));
    return ccl__boot_root_start(&uid->root, uid->secret, timeout_s, record_bytes);
}

ccl_status_t ccl__boot_make_grow_id(struct ccl__unique_id *uid, int members_below, const char *ifname,
                                    double timeout_s, size_t record_bytes) {
    memset(uid, 0, sizeof(*uid));
    uid->magic = CCL__UID_MAGIC;
    if (getrandom(uid->secret, sizeof(uid->secret), 0) != (ssize_t)sizeof(uid->secret) ||
        getrandom(uid->member_token, sizeof(uid->member_token), 0) != (ssize_t)sizeof(uid->member_token))
        return CCL_ERR_SYSTEM;
    CCL_CHECK(ccl__sa_local(ifname, &uid->root));
    return ccl__boot_root_start_members(&uid->root, uid->secret, uid->member_token, members_below, timeout_s,
                                        record_bytes);
}

ccl_status_t ccl__boot_connect(struct ccl_comm *comm, const struct ccl__unique_id *uid, size_t record_bytes,
                               int *root_fd) {
    if (record_bytes == 0 || record_bytes > CCL__BOOT_MAX_RECORD)
        return ccl__set_error(comm, CCL_ERR_INTERNAL, "init: a peer record of %zu bytes (at most %u)", record_bytes,
                              CCL__BOOT_MAX_RECORD);
    char where[64];
    ccl__sa_str(&uid->root, where, sizeof(where));
    int fd;
    /* An id made inside a parent communicator (split, shrink) had its root
     * listening before the parent carried the id: a refusal there means
     * the rank holding the root died, and every member must learn it as
     * soon as the ones that reached the root first (a shrink agrees again
     * at once, and waits for each survivor only so long). */
    double deadline = ccl__now() + comm->params.timeout_s;
    ccl_status_t st = comm->parent ? ccl__sock_connect_listening(&uid->root, deadline, &fd)
                                   : ccl__sock_connect(&uid->root, deadline, &fd);
    if (st == CCL_ERR_SYSTEM) {
        /* Not the root's absence: this process could not even try (out of
         * file descriptors, no route), and waiting would not help. */
        int err = errno;
        struct rlimit lim = {0, 0};
        int fds = (err == EMFILE || err == ENFILE) && getrlimit(RLIMIT_NOFILE, &lim) == 0;
        return ccl__set_error(comm, st, "init: cannot connect to the bootstrap root at %s: %s%s%.0ld%s", where,
                              strerror(err), fds ? " (this process may open " : "", fds ? (long)lim.rlim_cur : 0L,
                              fds ? " files: raise ulimit -n)" : "");
    }
    if (st == CCL_ERR_REMOTE)
        return ccl__set_error(comm, st, "init: the bootstrap root at %s refuses connections: the parent "
                              "communicator's rank that made the id exited", where);
    if (st != CCL_OK)
        return ccl__set_error(comm, st, "init: cannot reach the bootstrap root at %s within %g s", where,
                              comm->params.timeout_s);
    union ccl__sa self;
    socklen_t len = sizeof(self);
    if (getsockname(fd, &self.sa, &len) != 0) {
        close(fd);
        return ccl__set_error(comm, CCL_ERR_SYSTEM, "init: getsockname failed");
    }
    const void *ip = self.sa.sa_family == AF_INET6 ? (const void *)&self.in6.sin6_addr : (const void *)&self.in.sin_addr;
    inet_ntop(self.sa.sa_family, ip, comm->boot_addr, sizeof(comm->boot_addr));
    struct ccl__boot_hello h = {.magic = CCL__BOOT_MAGIC, .version = CCL__BOOT_VERSION, .nranks = comm->nranks,
                                .rank = comm->rank, .record_bytes = (uint32_t)record_bytes};
    memcpy(h.secret, uid->secret, sizeof(h.secret));
    memcpy(h.member_token, uid->member_token, sizeof(h.member_token));
    st = ccl__sock_send_all(fd, &h, sizeof(h), ccl__now() + comm->params.timeout_s);
    if (st != CCL_OK) {
        explicit_bzero(&h, sizeof(h));
        close(fd);
        return ccl__set_error(comm, st, "init: sending hello to the bootstrap root at %s failed", where);
    }
    /* Every connection between ranks (transports, the pair channel) proves
     * membership with the same secret. */
    memcpy(comm->secret, uid->secret, sizeof(comm->secret));
    *root_fd = fd;
    return CCL_OK;
}

/* A rank waits for the table this much past its own timeout: the root's
 * deadline ends first and its verdict names the ranks that never came. */
#define ROOT_VERDICT_GRACE_S 1.0

ccl_status_t ccl__boot_exchange(struct ccl_comm *comm, int root_fd, const void *record, size_t record_bytes,
                                void **table) {
    double dl = ccl__now() + comm->params.timeout_s + ROOT_VERDICT_GRACE_S;
    *table = NULL;
    ccl_status_t st = ccl__sock_send_all(root_fd, record, record_bytes, dl);
    if (st != CCL_OK) return ccl__set_error(comm, st, "init: sending peer info to the bootstrap root failed");
    struct ccl__boot_table_hdr h;
    st = ccl__sock_recv_all(root_fd, &h, sizeof(h), dl);
    if (st == CCL_ERR_REMOTE)
        return ccl__set_error(comm, st, "init: the bootstrap root closed the connection (wrong unique id or "
                                        "secret, or the root gave up waiting for other ranks)");
    if (st == CCL_ERR_TIMEOUT)
        return ccl__set_error(comm, st, "init: not every one of the %d ranks joined within %g s (CCL_TIMEOUT)",
                              comm->nranks, comm->params.timeout_s);
    if (st != CCL_OK) return ccl__set_error(comm, st, "init: reading the peer table failed");
    h.msg[sizeof(h.msg) - 1] = 0;
    if (h.status != CCL_OK) return ccl__set_error(comm, (ccl_status_t)h.status, "init: %s", h.msg);
    if (h.nranks != comm->nranks)
        return ccl__set_error(comm, CCL_ERR_INTERNAL, "init: root sent %d infos for %d ranks", h.nranks, comm->nranks);
    uint8_t *all = malloc(record_bytes * (size_t)comm->nranks);
    if (!all) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "init: out of memory for the peer table");
    st = ccl__sock_recv_all(root_fd, all, record_bytes * (size_t)comm->nranks, dl);
    if (st != CCL_OK) {
        free(all);
        return ccl__set_error(comm, st, "init: reading the peer table failed");
    }
    *table = all;
    comm->comm_id = h.comm_id;
    h.root_clock_id[sizeof(h.root_clock_id) - 1] = 0;
    char clock_id[sizeof(h.root_clock_id)];
    ccl__boot_clock_id(clock_id, sizeof(clock_id));
    comm->clock_shared_with_root = strcmp(h.root_clock_id, clock_id) == 0;
    return CCL_OK;
}

void ccl__boot_clock_id(char *dst, size_t n) {
    struct stat sb;
    unsigned long long ns = stat("/proc/self/ns/time", &sb) == 0 ? (unsigned long long)sb.st_ino : 0;
    snprintf(dst, n, "%s/timens:%llx", ccl__params_get()->machine_id, ns);
}

ccl_status_t ccl__boot_told(struct ccl_comm *comm) {
    if (comm->boot_fd < 0) return CCL_OK;
    struct pollfd p = {.fd = comm->boot_fd, .events = POLLIN};
    if (poll(&p, 1, 0) <= 0) return CCL_OK;
    comm->boot_told = 1;
    return ccl__set_error(comm, CCL_ERR_REMOTE, "init: set-up failed on another rank");
}

/* A failure this rank judged alone (a bad argument, as every rank may find
 * at once), not one seen on a peer or told by the root: its message says
 * more than any other rank's or the root's could. */
static int own_failure(const struct ccl_comm *comm, ccl_status_t mine) {
    return mine != CCL_OK && !comm->boot_told && mine != CCL_ERR_REMOTE && mine != CCL_ERR_TIMEOUT;
}

ccl_status_t ccl__boot_round(struct ccl_comm *comm, int root_fd, ccl_status_t mine) {
    struct ccl__boot_round_msg m = {.status = mine, .rank = comm->rank};
    double t0 = ccl__now(), dl = t0 + comm->params.timeout_s;
    int first_round = comm->clock_rtt == 0;
    /* The root answers the first failure at once, and the process that
     * holds it may have returned from init and exited since: the answer can
     * be waiting here even when the send fails, so read it either way. */
    ccl_status_t sent = ccl__sock_send_all(root_fd, &m, sizeof(m), dl);
    ccl_status_t st = ccl__sock_recv_all(root_fd, &m, sizeof(m), sent == CCL_OK ? dl : ccl__now() + 1.0);
    if (st != CCL_OK && own_failure(comm, mine)) return mine;
    if (st != CCL_OK) return ccl__set_error(comm, st, "init: lost the bootstrap root during set-up");
    /* The root stamps its clock as it answers, after the slowest rank
     * arrived, so request and reply are not symmetric: root_time - t1 is
     * the offset minus the reply's one-way delay (>= 0). The largest value
     * over the rounds is the tightest estimate; it puts every rank on the
     * root's clock for traces. */
    double t1 = ccl__now(), est = m.root_time - t1;
    if (comm->clock_shared_with_root) comm->clock_offset = 0; /* one kernel, one monotonic clock */
    else if (first_round || est > comm->clock_offset) comm->clock_offset = est;
    comm->clock_rtt = t1 - t0;
    if (m.status == CCL_OK || m.rank == comm->rank) return (ccl_status_t)m.status;
    /* The root answers with the first rank it saw fail. When that is
     * another rank and this rank failed on a peer (a segment removed, a
     * listener closed, a wait that ran out), that failure is most likely a
     * consequence of the first: blame the first rank and keep this rank's
     * symptom beside it. A failure this rank judged alone (a bad argument,
     * as every rank may find at once) stays its own. */
    if (own_failure(comm, mine)) return mine;
    if (mine == CCL_OK || comm->boot_told)
        return ccl__set_error(comm, CCL_ERR_REMOTE, "init: rank %d failed during set-up (%s)", m.rank,
                              ccl_status_string((ccl_status_t)m.status));
    char symptom[sizeof comm->last_error];
    pthread_mutex_lock(&comm->err_lock);
    memcpy(symptom, comm->last_error, sizeof symptom);
    pthread_mutex_unlock(&comm->err_lock);
    return ccl__set_error(comm, CCL_ERR_REMOTE, "init: rank %d failed during set-up (%s); here, after it: %s", m.rank,
                          ccl_status_string((ccl_status_t)m.status), symptom);
}
