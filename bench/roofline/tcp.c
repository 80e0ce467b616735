/* Loopback TCP between two processes with nothing in the way: the fastest
 * any library's bytes can cross between two ranks of this machine over
 * TCP. One connection; each side moves its bytes with non-blocking sends
 * and receives, waiting in poll() or spinning, as a library's progress
 * loop would. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/measure.h"
#include "roofline.h"

enum mode { ONE_WAY, BOTH_WAYS };

/* How a side waits for its socket: asleep in poll(), or spinning on
 * non-blocking calls (on a core of its own that saves the wake-ups). */
enum wait { POLL, SPIN };
#define NO_PROGRESS_S 10.0 /* this long without a byte: the peer is gone */

/* One way of running the pair: how a side waits, and the most bytes one
 * send or receive call moves (a side that hands the kernel everything at
 * once copies it all in before it drains what came the other way). */
struct how {
    enum wait w;
    size_t piece;
};
#define PIECE_BYTES ((size_t)512 << 10) /* libccl's TCP slot */

static size_t at_most(size_t left, size_t piece) { return left < piece ? left : piece; }

/* Sends `out` bytes and receives `in` bytes at once; 0 or -1. */
static int move(int fd, struct how h, const char *sbuf, size_t out, char *rbuf, size_t in) {
    size_t sent = 0, got = 0;
    double idle_since = 0;
    unsigned idle = 0;
    while (sent < out || got < in) {
        short ev = (short)((sent < out ? POLLOUT : 0) | (got < in ? POLLIN : 0)), rev = ev;
        if (h.w == POLL) {
            struct pollfd p = {.fd = fd, .events = ev};
            if (poll(&p, 1, (int)(NO_PROGRESS_S * 1000)) <= 0) return -1;
            if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return -1;
            rev = p.revents;
        }
        size_t before = sent + got;
        if (sent < out && (rev & POLLOUT)) {
            ssize_t r = send(fd, sbuf + sent, at_most(out - sent, h.piece), MSG_DONTWAIT | MSG_NOSIGNAL);
            if (r < 0 && errno != EAGAIN && errno != EINTR) return -1;
            if (r > 0) sent += (size_t)r;
        }
        if (got < in && (rev & POLLIN)) {
            ssize_t r = recv(fd, rbuf + got, at_most(in - got, h.piece), MSG_DONTWAIT);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) return -1;
            if (r > 0) got += (size_t)r;
        }
        if (sent + got != before) idle = 0;
        else if (++idle % 4096 == 1) { /* look at the clock now and then only */
            if (idle == 1) idle_since = bench_now();
            else if (bench_now() - idle_since > NO_PROGRESS_S) return -1;
        }
    }
    return 0;
}

/* One iteration from side `me` (0 or 1): both ways, each sends and
 * receives `bytes`; one way, side 0 sends them and side 1 answers with a
 * byte once they are all in, so side 0's clock covers their arrival. */
static int iteration(int fd, struct how h, int me, enum mode m, char *sbuf, char *rbuf, size_t bytes) {
    if (m == BOTH_WAYS) return move(fd, h, sbuf, bytes, rbuf, bytes);
    if (me == 0) return move(fd, h, sbuf, bytes, NULL, 0) || move(fd, h, NULL, 0, rbuf, 1);
    return move(fd, h, NULL, 0, rbuf, bytes) || move(fd, h, sbuf, 1, NULL, 0);
}

/* Every size in both modes, `blocks` blocks each; side 0 keeps the
 * fastest block's rate per size in out[]. */
static int sweep(int fd, struct how h, int me, const struct roofline_tcp_args *a, char *sbuf, char *rbuf,
                 struct roofline_tcp *out) {
    const size_t *sizes = a->sizes;
    int nsizes = a->nsizes, blocks = a->blocks;
    for (int s = 0; s < nsizes; s++)
        for (int m = ONE_WAY; m <= BOTH_WAYS; m++) {
            size_t bytes = sizes[s], iters = a->block_bytes / bytes ? a->block_bytes / bytes : 1;
            if (iteration(fd, h, me, m, sbuf, rbuf, bytes)) return -1; /* warm-up */
            for (int b = 0; b < blocks; b++) {
                double t0 = bench_now();
                for (size_t i = 0; i < iters; i++)
                    if (iteration(fd, h, me, m, sbuf, rbuf, bytes)) return -1;
                double gbps = (double)bytes * (double)iters / (bench_now() - t0) / 1e9;
                double *best = m == ONE_WAY ? &out[s].one_way_gbps : &out[s].both_gbps;
                if (gbps > *best) *best = gbps;
            }
        }
    return 0;
}

static int set_buffers(int fd, size_t sockbuf) {
    int one = 1, v = (int)sockbuf;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one)) return -1;
    if (sockbuf && (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v) || setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v)))
        return -1;
    return 0;
}

/* One connection with the given socket buffers (0: autotuned), run one
 * way, swept. */
static int run_pair(const struct roofline_tcp_args *a, size_t sockbuf, struct how h, struct roofline_tcp *out) {
    size_t most = 1;
    for (int s = 0; s < a->nsizes; s++)
        if (a->sizes[s] > most) most = a->sizes[s];
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof sa;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    /* buffers set before listen() are the accepted socket's from its first
     * byte, window scale included */
    if (lfd < 0 || set_buffers(lfd, sockbuf) || bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, 1) ||
        getsockname(lfd, (struct sockaddr *)&sa, &alen)) {
        perror("roofline: tcp: a listening socket on the loopback");
        if (lfd >= 0) close(lfd);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("roofline: tcp: fork");
        close(lfd);
        return -1;
    }
    int me = pid == 0;
    int fd = -1;
    if (me == 1) {
        close(lfd);
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || set_buffers(fd, sockbuf) || connect(fd, (struct sockaddr *)&sa, sizeof sa)) _exit(1);
    } else {
        /* a child that could not connect must not leave this side waiting */
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        fd = poll(&p, 1, (int)(NO_PROGRESS_S * 1000)) == 1 ? accept(lfd, NULL, NULL) : -1;
        close(lfd);
    }
    if (a->ncpus >= 2) roofline_pin(a->cpus[me]); /* one cpu: both sides share it unpinned */
    char *sbuf = malloc(most), *rbuf = malloc(most);
    int rc = fd >= 0 && sbuf && rbuf && !set_buffers(fd, 0) ? 0 : -1; /* no delay; buffers as set */
    if (rc == 0) {
        memset(sbuf, 1, most);
        memset(rbuf, 0, most);
        rc = sweep(fd, h, me, a, sbuf, rbuf, out);
    }
    free(sbuf);
    free(rbuf);
    if (fd >= 0) close(fd);
    if (me == 1) _exit(rc ? 1 : 0);
    int status;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = -1;
    if (rc)
        fprintf(stderr, "roofline: tcp: the loopback exchange failed (socket buffers %zu, %s, pieces of %zu)\n",
                sockbuf, h.w == SPIN ? "spinning" : "poll", h.piece);
    return rc;
}

int roofline_tcp_sweep(const struct roofline_tcp_args *a, struct roofline_tcp *out) {
    memset(out, 0, sizeof(*out) * (size_t)a->nsizes);
    /* spinning only where each side has a core: two spinners on one would
     * take turns at it */
    for (int w = POLL; w <= (a->ncpus >= 2 ? SPIN : POLL); w++)
        for (int b = 0; b < (a->sockbuf ? 2 : 1); b++)
            for (int p = 0; p < 2; p++)
                if (run_pair(a, b ? a->sockbuf : 0, (struct how){(enum wait)w, p ? PIECE_BYTES : SIZE_MAX}, out))
                    return -1;
    return 0;
}
