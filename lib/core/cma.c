/* Cross-memory attach (cma.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/uio.h>

#include "core/cma.h"

#include <string.h>

#include "core/comm.h"

/* What ccl__cma_probe expects to read (any value; one a stray word is
 * unlikely to hold). */
#define PROBE_VALUE 0x63636c2d636d6121ull
static const volatile uint64_t probe_word = PROBE_VALUE;

uint64_t ccl__cma_probe_addr(void) { return (uint64_t)(uintptr_t)&probe_word; }

/* One direction of the copy, resumed where a short transfer stopped (the
 * kernel copies page by page and may stop early, as read(2) may). */
static int transfer(pid_t pid, char *local, uint64_t remote, size_t len, int write) {
    while (len) {
        struct iovec l = {local, len}, r = {(void *)(uintptr_t)remote, len};
        ssize_t got = write ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return errno;
        if (got == 0) return EFAULT;
        local += got, remote += (uint64_t)got, len -= (size_t)got;
    }
    return 0;
}

int ccl__cma_read(pid_t pid, void *dst, uint64_t remote, size_t len) { return transfer(pid, dst, remote, len, 0); }

int ccl__cma_write(pid_t pid, uint64_t remote, const void *src, size_t len) {
    return transfer(pid, (char *)(uintptr_t)src, remote, len, 1);
}

int ccl__cma_probe(pid_t pid, uint64_t addr) {
    uint64_t got = 0;
    int err = ccl__cma_read(pid, &got, addr, sizeof got);
    return err ? err : got == PROBE_VALUE ? 0 : EIO;
}

int ccl__cma_failed(struct ccl_comm *comm, const char *what, int peer, int err, int writing, uint64_t at, size_t len) {
    const struct ccl__peer_info *p = &comm->peers[peer];
    if (err == ESRCH || err == EFAULT)
        ccl__comm_blame(comm, peer, err == ESRCH ? CCL__CULPRIT_EXITED : CCL__CULPRIT_FAILED);
    if (err == ESRCH)
        return ccl__set_error(comm, CCL_ERR_REMOTE, "%s: rank %d (pid %d on %s) exited while this rank %s its buffer",
                              what, peer, (int)p->pid, p->hostname, writing ? "wrote" : "read");
    if (err == EFAULT)
        return ccl__set_error(comm, CCL_ERR_REMOTE, "%s: rank %d's buffer (%zu bytes at 0x%llx in pid %d) is not "
                              "mapped there: it was freed or unmapped during the call", what, peer, len,
                              (unsigned long long)at, (int)p->pid);
    return ccl__set_error(comm, CCL_ERR_SYSTEM, "%s: %s rank %d's memory (pid %d) through cross-memory attach: %s",
                          what, writing ? "writing" : "reading", peer, (int)p->pid, strerror(err));
}
