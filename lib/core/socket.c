/* Socket helpers with deadlines: every blocking step is a poll() bounded by
 * the caller's absolute deadline, so no helper can hang on a silent peer. */
#define _GNU_SOURCE
#include "core/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <math.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"

/* Longest single sleep between connection attempts to an absent listener. */
#define CONNECT_BACKOFF_MAX_S 0.1

double ccl__now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double ccl__wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

socklen_t ccl__sa_len(const union ccl__sa *a) {
    switch (a->sa.sa_family) {
    case AF_INET: return sizeof(struct sockaddr_in);
    case AF_INET6: return sizeof(struct sockaddr_in6);
    default: return 0;
    }
}

static int parse_port(const char *s, uint16_t *port) {
    if (!*s || strlen(s) > 5) return -1;
    unsigned v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (unsigned)(*p - '0');
    }
    if (v > 65535) return -1;
    *port = (uint16_t)v;
    return 0;
}

/* Numeric addresses never touch the resolver (it may be slow or absent);
 * names go through getaddrinfo, IPv4 preferred because every host has it. */
static ccl_status_t resolve_host(const char *host, int numeric_v6_only, union ccl__sa *out) {
    memset(out, 0, sizeof(*out));
    if (!numeric_v6_only && inet_pton(AF_INET, host, &out->in.sin_addr) == 1) {
        out->in.sin_family = AF_INET;
        return CCL_OK;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
    hints.ai_family = numeric_v6_only ? AF_INET6 : AF_UNSPEC;
    hints.ai_flags = numeric_v6_only ? AI_NUMERICHOST : 0;
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0) {
        CCL_INFO(CCL__SUB_NET, -1, "cannot resolve '%s': %s", host, gai_strerror(rc));
        return CCL_ERR_INVALID_ARGUMENT;
    }
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET) {
            pick = ai;
            break;
        }
        if (ai->ai_family == AF_INET6 && !pick) pick = ai;
    }
    ccl_status_t st = CCL_ERR_INVALID_ARGUMENT;
    if (pick && pick->ai_addrlen <= sizeof(*out)) {
        memcpy(out, pick->ai_addr, pick->ai_addrlen);
        st = CCL_OK;
    }
    freeaddrinfo(res);
    return st;
}

ccl_status_t ccl__sa_parse(const char *hostport, union ccl__sa *out) {
    if (!hostport || !out) return CCL_ERR_INVALID_ARGUMENT;
    char host[256];
    const char *port_str;
    int bracketed = hostport[0] == '[';
    if (bracketed) {
        const char *close = strchr(hostport, ']');
        if (!close || close[1] != ':') return CCL_ERR_INVALID_ARGUMENT;
        size_t len = (size_t)(close - hostport - 1);
        if (len == 0 || len >= sizeof(host)) return CCL_ERR_INVALID_ARGUMENT;
        memcpy(host, hostport + 1, len);
        host[len] = 0;
        port_str = close + 2;
    } else {
        const char *colon = strchr(hostport, ':');
        /* A second colon means an unbracketed IPv6 address: ambiguous. */
        if (!colon || strchr(colon + 1, ':')) return CCL_ERR_INVALID_ARGUMENT;
        size_t len = (size_t)(colon - hostport);
        if (len == 0 || len >= sizeof(host)) return CCL_ERR_INVALID_ARGUMENT;
        memcpy(host, hostport, len);
        host[len] = 0;
        port_str = colon + 1;
    }
    uint16_t port;
    if (parse_port(port_str, &port) != 0) return CCL_ERR_INVALID_ARGUMENT;
    ccl_status_t st = resolve_host(host, bracketed, out);
    if (st != CCL_OK) return st;
    if (out->sa.sa_family == AF_INET) out->in.sin_port = htons(port);
    else out->in6.sin6_port = htons(port);
    return CCL_OK;
}

void ccl__sa_str(const union ccl__sa *a, char *buf, size_t n) {
    char ip[INET6_ADDRSTRLEN] = "?";
    if (n == 0) return;
    switch (a->sa.sa_family) {
    case AF_INET:
        inet_ntop(AF_INET, &a->in.sin_addr, ip, sizeof(ip));
        snprintf(buf, n, "%s:%u", ip, (unsigned)ntohs(a->in.sin_port));
        break;
    case AF_INET6:
        inet_ntop(AF_INET6, &a->in6.sin6_addr, ip, sizeof(ip));
        snprintf(buf, n, "[%s]:%u", ip, (unsigned)ntohs(a->in6.sin6_port));
        break;
    default: snprintf(buf, n, "(address family %d)", (int)a->sa.sa_family); break;
    }
}

static int usable_if(const struct ifaddrs *ifa) {
    return ifa->ifa_addr && (ifa->ifa_flags & IFF_UP) &&
           (ifa->ifa_addr->sa_family == AF_INET || ifa->ifa_addr->sa_family == AF_INET6);
}

static void take_if_addr(const struct ifaddrs *ifa, union ccl__sa *out) {
    memset(out, 0, sizeof(*out));
    if (ifa->ifa_addr->sa_family == AF_INET) memcpy(&out->in, ifa->ifa_addr, sizeof(out->in));
    else memcpy(&out->in6, ifa->ifa_addr, sizeof(out->in6));
    if (out->sa.sa_family == AF_INET) out->in.sin_port = 0;
    else out->in6.sin6_port = 0;
}

ccl_status_t ccl__sa_local(const char *ifname, union ccl__sa *out) {
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) {
        CCL_WARN(CCL__SUB_NET, -1, "getifaddrs: %s", strerror(errno));
        return CCL_ERR_SYSTEM;
    }
    const struct ifaddrs *pick = NULL;
    if (ifname && *ifname) {
        /* The named interface: its IPv4 address if it has one, else IPv6. */
        for (const struct ifaddrs *ifa = ifs; ifa; ifa = ifa->ifa_next) {
            if (!usable_if(ifa) || strcmp(ifa->ifa_name, ifname) != 0) continue;
            if (ifa->ifa_addr->sa_family == AF_INET) {
                pick = ifa;
                break;
            }
            if (!pick) pick = ifa;
        }
        if (!pick) {
            freeifaddrs(ifs);
            CCL_WARN(CCL__SUB_NET, -1, "CCL_SOCKET_IFNAME=%s: no such interface with an address that is up", ifname);
            return CCL_ERR_INVALID_ARGUMENT;
        }
    } else {
        for (const struct ifaddrs *ifa = ifs; ifa && !pick; ifa = ifa->ifa_next)
            if (usable_if(ifa) && ifa->ifa_addr->sa_family == AF_INET && !(ifa->ifa_flags & IFF_LOOPBACK))
                pick = ifa;
    }
    if (pick) {
        take_if_addr(pick, out);
    } else {
        memset(out, 0, sizeof(*out));
        out->in.sin_family = AF_INET;
        out->in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
    freeifaddrs(ifs);
    return CCL_OK;
}

/* Milliseconds until the deadline for poll(), rounded up so that a wait
 * never ends just before it; -2 once it has passed. */
static int ms_left(double deadline) {
    double left = deadline - ccl__now();
    if (!(left > 0)) return -2;
    double ms = ceil(left * 1000.0);
    return ms > (double)INT_MAX ? INT_MAX : (int)ms;
}

/* Waits for events on fd; CCL_OK when they (or an error/hang-up) arrived. */
static ccl_status_t wait_for(int fd, short events, double deadline) {
    for (;;) {
        int ms = ms_left(deadline);
        if (ms == -2) return CCL_ERR_TIMEOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int rc = poll(&p, 1, ms);
        if (rc > 0) return CCL_OK;
        if (rc < 0 && errno != EINTR) {
            CCL_WARN(CCL__SUB_NET, -1, "poll: %s", strerror(errno));
            return CCL_ERR_SYSTEM;
        }
    }
}

static void set_flag(int fd, int flag, int on) {
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, on ? fl | flag : fl & ~flag);
}

void ccl__sock_nonblock(int fd) { set_flag(fd, O_NONBLOCK, 1); }

void ccl__sock_nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void ccl__sock_keepalive(int fd, double link_timeout_s) {
    if (!(link_timeout_s > 0)) return;
    int one = 1, idle = 1, interval = 1, probes = (int)link_timeout_s;
    if (probes < 1) probes = 1;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
}

/* A sysctl's value, or -1 when it cannot be read. */
static long sysctl_long(const char *path) {
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

int ccl__sock_buffers(int fd, size_t bytes, char *why, size_t whylen) {
    /* Autotuning grows each connection's receive buffer on its own
     * history, and over loopback it can stay small on some connections
     * for good: two communicators of one job moved 16 MiB all-reduces
     * 25-30% apart, run after run, with receive buffers of 0.9 MB on one
     * connection and 33 MB on another. A fixed buffer gives every
     * connection the same window. */
    if (bytes == 0) {
        snprintf(why, whylen, "CCL_TCP_SOCKET_BYTES=0");
        return 0;
    }
    static const char *const caps[2] = {"/proc/sys/net/core/rmem_max", "/proc/sys/net/core/wmem_max"};
    for (int i = 0; i < 2; i++) {
        long cap = sysctl_long(caps[i]);
        if (cap >= 0 && (size_t)cap < bytes) {
            snprintf(why, whylen, "net.core.%s is %ld, below CCL_TCP_SOCKET_BYTES=%zu", i ? "wmem_max" : "rmem_max",
                     cap, bytes);
            return 0;
        }
    }
    int v = bytes > INT_MAX / 2 ? INT_MAX / 2 : (int)bytes;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)) != 0) {
        snprintf(why, whylen, "setsockopt: %s", strerror(errno));
        return 0;
    }
    return 1;
}

int ccl__sock_silent_s(int fd, double *silent_s) {
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    memset(&ti, 0, sizeof(ti));
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return 0;
    /* Only retransmitted data proves a silence: a fresh send is unacked
     * for a round trip, and a full receive window is answered (probes are
     * acknowledged) by a host that is merely slow to read. */
    if (ti.tcpi_unacked == 0 || ti.tcpi_retransmits == 0) return 0;
    *silent_s = ti.tcpi_last_ack_recv / 1000.0;
    return 1;
}

int ccl__sock_is_listener_at(int fd, const union ccl__sa *addr) {
    int type = 0, listening = 0;
    socklen_t ol = sizeof(int);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &ol) != 0 || type != SOCK_STREAM) return 0;
    ol = sizeof(int);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ol) != 0 || !listening) return 0;
    union ccl__sa at;
    socklen_t len = sizeof(at);
    if (getsockname(fd, &at.sa, &len) != 0 || at.sa.sa_family != addr->sa.sa_family) return 0;
    if (at.sa.sa_family == AF_INET) {
        if (at.in.sin_port != addr->in.sin_port) return 0;
        if (at.in.sin_addr.s_addr != htonl(INADDR_ANY) && at.in.sin_addr.s_addr != addr->in.sin_addr.s_addr) return 0;
    } else if (at.sa.sa_family == AF_INET6) {
        if (at.in6.sin6_port != addr->in6.sin6_port) return 0;
        if (memcmp(&at.in6.sin6_addr, &in6addr_any, sizeof(in6addr_any)) != 0 &&
            memcmp(&at.in6.sin6_addr, &addr->in6.sin6_addr, sizeof(in6addr_any)) != 0)
            return 0;
    } else {
        return 0;
    }
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) return 0;
    ccl__sock_nonblock(fd);
    return 1;
}

ccl_status_t ccl__sock_listen(union ccl__sa *addr, int *fd) {
    *fd = -1;
    socklen_t len = ccl__sa_len(addr);
    if (len == 0) return CCL_ERR_INVALID_ARGUMENT;
    int s = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
        CCL_WARN(CCL__SUB_NET, -1, "socket: %s", strerror(errno));
        return CCL_ERR_SYSTEM;
    }
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    char name[80];
    ccl__sa_str(addr, name, sizeof(name));
    if (bind(s, &addr->sa, len) != 0 || listen(s, SOMAXCONN) != 0) {
        CCL_WARN(CCL__SUB_NET, -1, "cannot listen on %s: %s", name, strerror(errno));
        close(s);
        return CCL_ERR_SYSTEM;
    }
    if (getsockname(s, &addr->sa, &len) != 0) {
        CCL_WARN(CCL__SUB_NET, -1, "getsockname: %s", strerror(errno));
        close(s);
        return CCL_ERR_SYSTEM;
    }
    /* Non-blocking so that accept() after a poll() cannot block on a
     * connection that was reset in between. */
    ccl__sock_nonblock(s);
    *fd = s;
    return CCL_OK;
}

/* Errors after which the listener may still appear (not started yet, or
 * its interface/route is still coming up): try again until the deadline. */
static int connect_retryable(int err) {
    return err == ECONNREFUSED || err == ETIMEDOUT || err == ECONNRESET || err == EHOSTUNREACH ||
           err == ENETUNREACH || err == EAGAIN || err == ECONNABORTED;
}

/* Retrying a port nobody listens on can end in TCP's simultaneous open
 * with itself (the kernel picked the same port as the source): a socket
 * that looks connected but talks to itself. */
static int connected_to_self(int s) {
    union ccl__sa me, peer;
    socklen_t lm = sizeof(me), lp = sizeof(peer);
    memset(&me, 0, sizeof(me));
    memset(&peer, 0, sizeof(peer));
    if (getsockname(s, &me.sa, &lm) != 0 || getpeername(s, &peer.sa, &lp) != 0) return 0;
    return lm == lp && memcmp(&me, &peer, lm) == 0;
}

/* One attempt: 0 connected, else the errno (ETIMEDOUT at the deadline). */
static int connect_once(const union ccl__sa *addr, double deadline, int *fd) {
    int s = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) return errno ? errno : EIO;
    int err = 0;
    if (connect(s, &addr->sa, ccl__sa_len(addr)) != 0) {
        err = errno;
        if (err == EINPROGRESS || err == EINTR) {
            ccl_status_t st = wait_for(s, POLLOUT, deadline);
            socklen_t elen = sizeof(err);
            if (st == CCL_ERR_TIMEOUT) err = ETIMEDOUT;
            else if (st != CCL_OK || getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &elen) != 0) err = EIO;
        }
    }
    if (!err && connected_to_self(s)) err = ECONNREFUSED;
    if (err) {
        close(s);
        return err;
    }
    set_flag(s, O_NONBLOCK, 0);
    *fd = s;
    return 0;
}

/* refusal_final: the listener was up before its address was handed out,
 * so a refusal means it is gone, not that it is still to come. */
static ccl_status_t connect_retrying(const union ccl__sa *addr, double deadline, int refusal_final, int *fd) {
    *fd = -1;
    if (ccl__sa_len(addr) == 0) return CCL_ERR_INVALID_ARGUMENT;
    char name[80];
    ccl__sa_str(addr, name, sizeof(name));
    double backoff = 0.001;
    for (;;) {
        int err = connect_once(addr, deadline, fd);
        if (err == 0) return CCL_OK;
        if (refusal_final && (err == ECONNREFUSED || err == ECONNRESET)) {
            CCL_INFO(CCL__SUB_NET, -1, "connect to %s: %s (its listener is gone)", name, strerror(err));
            return CCL_ERR_REMOTE;
        }
        if (!connect_retryable(err)) {
            CCL_WARN(CCL__SUB_NET, -1, "connect to %s: %s", name, strerror(err));
            errno = err; /* the caller's sentence names it */
            return CCL_ERR_SYSTEM;
        }
        double left = deadline - ccl__now();
        if (left <= 0) {
            CCL_INFO(CCL__SUB_NET, -1, "connect to %s: gave up at the deadline (%s)", name, strerror(err));
            return CCL_ERR_TIMEOUT;
        }
        double nap = backoff < left ? backoff : left;
        struct timespec ts = {.tv_sec = (time_t)nap, .tv_nsec = (long)((nap - (double)(time_t)nap) * 1e9)};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 < CONNECT_BACKOFF_MAX_S ? backoff * 2 : CONNECT_BACKOFF_MAX_S;
    }
}

ccl_status_t ccl__sock_connect(const union ccl__sa *addr, double deadline, int *fd) {
    return connect_retrying(addr, deadline, 0, fd);
}

ccl_status_t ccl__sock_connect_listening(const union ccl__sa *addr, double deadline, int *fd) {
    return connect_retrying(addr, deadline, 1, fd);
}

ccl_status_t ccl__sock_connect_up(const union ccl__sa *addr, double deadline, int *fd) {
    *fd = -1;
    if (ccl__sa_len(addr) == 0) return CCL_ERR_INVALID_ARGUMENT;
    int err = connect_once(addr, deadline, fd);
    if (err == 0) return CCL_OK;
    if (err == ECONNREFUSED || err == ECONNRESET) return CCL_ERR_REMOTE;
    return err == ETIMEDOUT ? CCL_ERR_TIMEOUT : CCL_ERR_SYSTEM;
}

int ccl__sock_connect_start(const union ccl__sa *addr, int *fd) {
    *fd = -1;
    if (ccl__sa_len(addr) == 0) return EINVAL;
    int s = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) return errno ? errno : EIO;
    if (connect(s, &addr->sa, ccl__sa_len(addr)) != 0 && errno != EINPROGRESS && errno != EINTR) {
        int err = errno;
        close(s);
        return err;
    }
    *fd = s;
    return 0;
}

int ccl__sock_connect_result(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int r = poll(&p, 1, 0);
    if (r < 0) return errno == EINTR ? -1 : errno;
    if (r == 0) return -1;
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno ? errno : EIO;
    if (!err && connected_to_self(fd)) err = ECONNREFUSED;
    return err;
}

ccl_status_t ccl__sock_accept(int lfd, double deadline, int *fd) {
    *fd = -1;
    for (;;) {
        int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (s >= 0) {
            *fd = s;
            return CCL_OK;
        }
        int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ECONNABORTED || err == EPROTO) {
            ccl_status_t st = wait_for(lfd, POLLIN, deadline);
            if (st != CCL_OK) return st;
            continue;
        }
        CCL_WARN(CCL__SUB_NET, -1, "accept: %s", strerror(err));
        return CCL_ERR_SYSTEM;
    }
}

static int peer_gone(int err) { return err == EPIPE || err == ECONNRESET || err == ENOTCONN || err == ETIMEDOUT; }

ccl_status_t ccl__sock_send_all(int fd, const void *buf, size_t n, double deadline) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        int err = w < 0 ? errno : EAGAIN;
        if (err == EINTR) continue;
        if (err == EAGAIN || err == EWOULDBLOCK) {
            ccl_status_t st = wait_for(fd, POLLOUT, deadline);
            if (st != CCL_OK) return st;
            continue;
        }
        if (peer_gone(err)) return CCL_ERR_REMOTE;
        CCL_WARN(CCL__SUB_NET, -1, "send: %s", strerror(err));
        return CCL_ERR_SYSTEM;
    }
    return CCL_OK;
}

ccl_status_t ccl__sock_recv_all(int fd, void *buf, size_t n, double deadline) {
    char *p = buf;
    while (n > 0) {
        ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
        if (r > 0) {
            p += r;
            n -= (size_t)r;
            continue;
        }
        if (r == 0) return CCL_ERR_REMOTE;
        int err = errno;
        if (err == EINTR) continue;
        if (err == EAGAIN || err == EWOULDBLOCK) {
            ccl_status_t st = wait_for(fd, POLLIN, deadline);
            if (st != CCL_OK) return st;
            continue;
        }
        if (peer_gone(err)) return CCL_ERR_REMOTE;
        CCL_WARN(CCL__SUB_NET, -1, "recv: %s", strerror(err));
        return CCL_ERR_SYSTEM;
    }
    return CCL_OK;
}

int ccl__secret_equal(const void *a, const void *b, size_t n) {
    /* Touch every byte whatever the first difference, so the time taken
     * tells a guesser nothing about how much of the secret was right. */
    const volatile unsigned char *x = a, *y = b;
    unsigned char diff = 0;
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)(x[i] ^ y[i]);
    return diff == 0;
}
