/* ctest: TIMEOUT 60 */
/*
 * Socket helpers (lib/core/socket.c): address parsing and printing, and the
 * deadline-bounded listen/connect/accept/send/recv on real TCP sockets over
 * loopback. Where a second party must run concurrently it is a forked child
 * that reports through its exit status (it never calls Check).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/socket.h"
#include "harness.h"

static void sleep_s(double s) {
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static union ccl__sa loopback(uint16_t port) {
    union ccl__sa a;
    memset(&a, 0, sizeof(a));
    a.in.sin_family = AF_INET;
    a.in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.in.sin_port = htons(port);
    return a;
}

static uint16_t port_of(const union ccl__sa *a) {
    return ntohs(a->sa.sa_family == AF_INET ? a->in.sin_port : a->in6.sin6_port);
}

/* A loopback port nobody listens on (it was free a moment ago). */
static uint16_t free_port(void) {
    union ccl__sa a = loopback(0);
    int fd;
    ck_assert_int_eq(ccl__sock_listen(&a, &fd), CCL_OK);
    close(fd);
    return port_of(&a);
}

/* A connected pair over loopback: *client and *server. */
static void tcp_pair(int *client, int *server) {
    union ccl__sa a = loopback(0);
    int lfd;
    ck_assert_int_eq(ccl__sock_listen(&a, &lfd), CCL_OK);
    ck_assert_int_eq(ccl__sock_connect(&a, ccl__now() + 5, client), CCL_OK);
    ck_assert_int_eq(ccl__sock_accept(lfd, ccl__now() + 5, server), CCL_OK);
    close(lfd);
}

static void expect_child_ok(pid_t pid) {
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (status 0x%x)", status);
}

/* ---- parsing and printing ---- */

START_TEST(parse_ipv4) {
    union ccl__sa a;
    ck_assert_int_eq(ccl__sa_parse("127.0.0.1:80", &a), CCL_OK);
    ck_assert_int_eq(a.sa.sa_family, AF_INET);
    ck_assert_uint_eq(ntohl(a.in.sin_addr.s_addr), 0x7f000001u);
    ck_assert_uint_eq(port_of(&a), 80);
    ck_assert_uint_eq(ccl__sa_len(&a), sizeof(struct sockaddr_in));
    char s[64];
    ccl__sa_str(&a, s, sizeof(s));
    ck_assert_str_eq(s, "127.0.0.1:80");

    ck_assert_int_eq(ccl__sa_parse("10.1.2.3:65535", &a), CCL_OK);
    ccl__sa_str(&a, s, sizeof(s));
    ck_assert_str_eq(s, "10.1.2.3:65535");
    ck_assert_int_eq(ccl__sa_parse("0.0.0.0:0", &a), CCL_OK);
    ck_assert_uint_eq(port_of(&a), 0);
}
END_TEST

START_TEST(parse_ipv6) {
    union ccl__sa a;
    ck_assert_int_eq(ccl__sa_parse("[::1]:5000", &a), CCL_OK);
    ck_assert_int_eq(a.sa.sa_family, AF_INET6);
    ck_assert(IN6_IS_ADDR_LOOPBACK(&a.in6.sin6_addr));
    ck_assert_uint_eq(port_of(&a), 5000);
    ck_assert_uint_eq(ccl__sa_len(&a), sizeof(struct sockaddr_in6));
    char s[64];
    ccl__sa_str(&a, s, sizeof(s));
    ck_assert_str_eq(s, "[::1]:5000");
    ck_assert_int_eq(ccl__sa_parse("[fe80::1:2]:7", &a), CCL_OK);
    ccl__sa_str(&a, s, sizeof(s));
    ck_assert_str_eq(s, "[fe80::1:2]:7");
}
END_TEST

START_TEST(parse_name) {
    union ccl__sa a;
    ck_assert_int_eq(ccl__sa_parse("localhost:1234", &a), CCL_OK);
    ck_assert(a.sa.sa_family == AF_INET || a.sa.sa_family == AF_INET6);
    ck_assert_uint_eq(port_of(&a), 1234);
    if (a.sa.sa_family == AF_INET) ck_assert_uint_eq(ntohl(a.in.sin_addr.s_addr) >> 24, 127);
}
END_TEST

START_TEST(parse_bad) {
    static const char *const bad[] = {
        "",          "127.0.0.1",      "127.0.0.1:",    ":80",         "127.0.0.1:65536", "127.0.0.1:123456",
        "1.2.3.4:1a", "1.2.3.4:-1",    "1.2.3.4: 80",   "[::1:80",     "[::1]80",         "[::1]:",
        "::1:80",    "[]:80",          "[127.0.0.1]:80", "[::1]:8x",   "host:80:90",      "[not-v6]:80",
    };
    union ccl__sa a;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(ccl__sa_parse(bad[i], &a) == CCL_ERR_INVALID_ARGUMENT, "'%s' was accepted", bad[i]);
    ck_assert_int_eq(ccl__sa_parse(NULL, &a), CCL_ERR_INVALID_ARGUMENT);
    memset(&a, 0, sizeof(a));
    ck_assert_uint_eq(ccl__sa_len(&a), 0);
    char s[64];
    ccl__sa_str(&a, s, sizeof(s));
    ck_assert_ptr_ne(strstr(s, "family"), NULL);
    /* A buffer too small truncates instead of overflowing. */
    ck_assert_int_eq(ccl__sa_parse("127.0.0.1:80", &a), CCL_OK);
    char tiny[6];
    ccl__sa_str(&a, tiny, sizeof(tiny));
    ck_assert_str_eq(tiny, "127.0");
}
END_TEST

START_TEST(local_address) {
    union ccl__sa a;
    ck_assert_int_eq(ccl__sa_local(NULL, &a), CCL_OK);
    ck_assert_int_eq(a.sa.sa_family, AF_INET);
    ck_assert_uint_eq(port_of(&a), 0);
    ck_assert_int_eq(ccl__sa_local("", &a), CCL_OK);
    ck_assert_int_eq(ccl__sa_local("lo", &a), CCL_OK);
    ck_assert_int_eq(a.sa.sa_family, AF_INET);
    ck_assert_uint_eq(ntohl(a.in.sin_addr.s_addr), 0x7f000001u);
    ck_assert_int_eq(ccl__sa_local("no-such-if9", &a), CCL_ERR_INVALID_ARGUMENT);
    /* The address it picks can be listened on. */
    int fd;
    ck_assert_int_eq(ccl__sa_local(NULL, &a), CCL_OK);
    ck_assert_int_eq(ccl__sock_listen(&a, &fd), CCL_OK);
    ck_assert_uint_ne(port_of(&a), 0);
    close(fd);
}
END_TEST

START_TEST(secret_compare) {
    uint8_t a[32], b[32];
    for (int i = 0; i < 32; i++) a[i] = b[i] = (uint8_t)(i * 7 + 1);
    ck_assert(ccl__secret_equal(a, b, sizeof(a)));
    b[31] ^= 1;
    ck_assert(!ccl__secret_equal(a, b, sizeof(a)));
    b[31] ^= 1;
    b[0] ^= 0x80;
    ck_assert(!ccl__secret_equal(a, b, sizeof(a)));
    ck_assert(ccl__secret_equal(a, b, 0));
}
END_TEST

START_TEST(clock_moves) {
    double t0 = ccl__now();
    sleep_s(0.05);
    double t1 = ccl__now();
    ck_assert(t1 - t0 >= 0.045 && t1 - t0 < 2.0);
}
END_TEST

/* ---- sockets ---- */

START_TEST(listen_picks_port) {
    union ccl__sa a = loopback(0);
    int fd;
    ck_assert_int_eq(ccl__sock_listen(&a, &fd), CCL_OK);
    ck_assert_uint_ne(port_of(&a), 0);
    /* The same port twice is refused, with a status rather than a crash. */
    union ccl__sa again = a;
    int fd2 = 123;
    ck_assert_int_eq(ccl__sock_listen(&again, &fd2), CCL_ERR_SYSTEM);
    ck_assert_int_eq(fd2, -1);
    close(fd);
    union ccl__sa none;
    memset(&none, 0, sizeof(none));
    ck_assert_int_eq(ccl__sock_listen(&none, &fd2), CCL_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ccl__sock_connect(&none, ccl__now() + 1, &fd2), CCL_ERR_INVALID_ARGUMENT);
}
END_TEST

#define BIG (4u << 20)

static uint8_t pattern(size_t i) { return (uint8_t)(i * 131 + (i >> 11)); }

/* A child sends BIG bytes and waits for a 16-byte answer; the parent checks
 * every byte. Both sides block on full socket buffers many times. */
START_TEST(round_trip) {
    union ccl__sa a = loopback(0);
    int lfd;
    ck_assert_int_eq(ccl__sock_listen(&a, &lfd), CCL_OK);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(lfd);
        int fd;
        uint8_t *buf = malloc(BIG);
        if (!buf || ccl__sock_connect(&a, ccl__now() + 10, &fd) != CCL_OK) _exit(2);
        for (size_t i = 0; i < BIG; i++) buf[i] = pattern(i);
        if (ccl__sock_send_all(fd, buf, BIG, ccl__now() + 20) != CCL_OK) _exit(3);
        char answer[16];
        if (ccl__sock_recv_all(fd, answer, sizeof(answer), ccl__now() + 20) != CCL_OK) _exit(4);
        if (memcmp(answer, "all bytes right", 16) != 0) _exit(5);
        free(buf);
        close(fd);
        _exit(0);
    }
    int fd;
    ck_assert_int_eq(ccl__sock_accept(lfd, ccl__now() + 10, &fd), CCL_OK);
    close(lfd);
    uint8_t *buf = malloc(BIG);
    ck_assert_ptr_nonnull(buf);
    sleep_s(0.05); /* let the sender fill its buffer and block */
    ck_assert_int_eq(ccl__sock_recv_all(fd, buf, BIG, ccl__now() + 20), CCL_OK);
    size_t wrong = 0;
    for (size_t i = 0; i < BIG; i++) wrong += buf[i] != pattern(i);
    ck_assert_uint_eq(wrong, 0);
    ck_assert_int_eq(ccl__sock_send_all(fd, "all bytes right", 16, ccl__now() + 10), CCL_OK);
    expect_child_ok(pid);
    free(buf);
    close(fd);
}
END_TEST

START_TEST(recv_sees_close) {
    int c, s;
    tcp_pair(&c, &s);
    ck_assert_int_eq(ccl__sock_send_all(c, "0123456789", 10, ccl__now() + 5), CCL_OK);
    close(c);
    char buf[20];
    /* The 10 bytes that did arrive are not enough: the peer is gone. */
    double t0 = ccl__now();
    ck_assert_int_eq(ccl__sock_recv_all(s, buf, 20, ccl__now() + 10), CCL_ERR_REMOTE);
    ck_assert(ccl__now() - t0 < 2.0);
    ck_assert_int_eq(memcmp(buf, "0123456789", 10), 0);
    ck_assert_int_eq(ccl__sock_recv_all(s, buf, 1, ccl__now() + 10), CCL_ERR_REMOTE);
    ck_assert_int_eq(ccl__sock_recv_all(s, buf, 0, ccl__now() + 10), CCL_OK);
    close(s);
}
END_TEST

START_TEST(recv_deadline) {
    int c, s;
    tcp_pair(&c, &s);
    char buf[4];
    double t0 = ccl__now();
    ck_assert_int_eq(ccl__sock_recv_all(s, buf, sizeof(buf), t0 + 0.2), CCL_ERR_TIMEOUT);
    double took = ccl__now() - t0;
    ck_assert_msg(took >= 0.19 && took < 2.0, "took %.3f s", took);
    /* Data already there is read even when the deadline has passed. */
    ck_assert_int_eq(ccl__sock_send_all(c, "abcd", 4, ccl__now() + 5), CCL_OK);
    sleep_s(0.05);
    ck_assert_int_eq(ccl__sock_recv_all(s, buf, 4, ccl__now() - 1), CCL_OK);
    ck_assert_int_eq(memcmp(buf, "abcd", 4), 0);
    close(c);
    close(s);
}
END_TEST

/* A peer that closes with our data unread resets the connection: send_all
 * reports it, and SIGPIPE (default action: kill) never fires. */
START_TEST(send_sees_reset) {
    ck_assert_ptr_ne(signal(SIGPIPE, SIG_DFL), SIG_ERR);
    int c, s;
    tcp_pair(&c, &s);
    ck_assert_int_eq(ccl__sock_send_all(c, "x", 1, ccl__now() + 5), CCL_OK);
    sleep_s(0.05);
    close(s); /* unread byte: RST */
    size_t n = 1u << 20;
    char *buf = calloc(1, n);
    ck_assert_ptr_nonnull(buf);
    ccl_status_t st = CCL_OK;
    for (int i = 0; i < 16 && st == CCL_OK; i++) st = ccl__sock_send_all(c, buf, n, ccl__now() + 5);
    ck_assert_int_eq(st, CCL_ERR_REMOTE);
    free(buf);
    close(c);
}
END_TEST

START_TEST(send_deadline) {
    int c, s;
    tcp_pair(&c, &s);
    /* Nobody reads: the buffers fill and the deadline ends the wait. */
    size_t n = 64u << 20;
    char *buf = calloc(1, n);
    ck_assert_ptr_nonnull(buf);
    double t0 = ccl__now();
    ck_assert_int_eq(ccl__sock_send_all(c, buf, n, t0 + 0.3), CCL_ERR_TIMEOUT);
    ck_assert(ccl__now() - t0 < 3.0);
    free(buf);
    close(c);
    close(s);
}
END_TEST

static long read_sysctl(const char *path) {
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f && fscanf(f, "%ld", &v) != 1) v = -1;
    if (f) fclose(f);
    return v;
}

static int sock_buf(int fd, int which) {
    int v = 0;
    socklen_t len = sizeof(v);
    ck_assert_int_eq(getsockopt(fd, SOL_SOCKET, which, &v, &len), 0);
    return v;
}

/* CCL_TCP_SOCKET_BYTES: both buffers fixed when the kernel's caps allow
 * the size, left alone (autotuned) when they do not or when it is 0, and
 * the reason said. */
START_TEST(socket_buffers) {
    int c, s;
    tcp_pair(&c, &s);
    char why[128] = "";
    int rcv0 = sock_buf(c, SO_RCVBUF), snd0 = sock_buf(c, SO_SNDBUF);
    ck_assert_int_eq(ccl__sock_buffers(c, 0, why, sizeof(why)), 0);
    ck_assert_msg(strstr(why, "CCL_TCP_SOCKET_BYTES=0"), "why: %s", why);
    ck_assert_int_eq(sock_buf(c, SO_RCVBUF), rcv0);
    ck_assert_int_eq(sock_buf(c, SO_SNDBUF), snd0);

    long rmax = read_sysctl("/proc/sys/net/core/rmem_max"), wmax = read_sysctl("/proc/sys/net/core/wmem_max");
    ck_assert_msg(rmax > 0 && wmax > 0, "net.core.rmem_max %ld, wmem_max %ld", rmax, wmax);
    /* Above the smaller cap: left alone, naming the cap. */
    size_t over = (size_t)(rmax > wmax ? rmax : wmax) + 4096;
    ck_assert_int_eq(ccl__sock_buffers(c, over, why, sizeof(why)), 0);
    ck_assert_msg(strstr(why, "net.core.") && strstr(why, "below CCL_TCP_SOCKET_BYTES"), "why: %s", why);
    ck_assert_int_eq(sock_buf(c, SO_RCVBUF), rcv0);

    /* Within both caps: the kernel keeps twice the request (its own
     * bookkeeping), on both sides of the socket. */
    size_t want = (size_t)(rmax < wmax ? rmax : wmax);
    if (want > (8u << 20)) want = 8u << 20;
    ck_assert_int_eq(ccl__sock_buffers(c, want, why, sizeof(why)), 1);
    ck_assert_int_eq(sock_buf(c, SO_RCVBUF), 2 * (int)want);
    ck_assert_int_eq(sock_buf(c, SO_SNDBUF), 2 * (int)want);
    /* The connection still carries data. */
    char buf[4];
    ck_assert_int_eq(ccl__sock_send_all(c, "wxyz", 4, ccl__now() + 5), CCL_OK);
    ck_assert_int_eq(ccl__sock_recv_all(s, buf, 4, ccl__now() + 5), CCL_OK);
    ck_assert_int_eq(memcmp(buf, "wxyz", 4), 0);
    close(c);
    close(s);
}
END_TEST

START_TEST(accept_deadline) {
    union ccl__sa a = loopback(0);
    int lfd, fd = 7;
    ck_assert_int_eq(ccl__sock_listen(&a, &lfd), CCL_OK);
    double t0 = ccl__now();
    ck_assert_int_eq(ccl__sock_accept(lfd, t0 + 0.2, &fd), CCL_ERR_TIMEOUT);
    double took = ccl__now() - t0;
    ck_assert_msg(took >= 0.19 && took < 2.0, "took %.3f s", took);
    ck_assert_int_eq(fd, -1);
    close(lfd);
}
END_TEST

START_TEST(connect_deadline) {
    union ccl__sa a = loopback(free_port());
    int fd = 7;
    double t0 = ccl__now();
    ck_assert_int_eq(ccl__sock_connect(&a, t0 + 0.3, &fd), CCL_ERR_TIMEOUT);
    double took = ccl__now() - t0;
    ck_assert_msg(took >= 0.29 && took < 2.0, "took %.3f s", took);
    ck_assert_int_eq(fd, -1);
}
END_TEST

/* The listener appears 0.3 s after the first attempt: connect keeps
 * retrying the refused connection until it is there. */
START_TEST(connect_waits_for_listener) {
    union ccl__sa a = loopback(free_port());
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        sleep_s(0.3);
        int lfd, fd;
        union ccl__sa mine = a;
        if (ccl__sock_listen(&mine, &lfd) != CCL_OK) _exit(2);
        if (ccl__sock_accept(lfd, ccl__now() + 10, &fd) != CCL_OK) _exit(3);
        if (ccl__sock_send_all(fd, "hi", 2, ccl__now() + 10) != CCL_OK) _exit(4);
        char b;
        /* Wait for the parent to close, so the bytes are surely read. */
        if (ccl__sock_recv_all(fd, &b, 1, ccl__now() + 10) != CCL_ERR_REMOTE) _exit(5);
        _exit(0);
    }
    int fd;
    double t0 = ccl__now();
    ck_assert_int_eq(ccl__sock_connect(&a, t0 + 10, &fd), CCL_OK);
    double took = ccl__now() - t0;
    ck_assert_msg(took >= 0.25 && took < 5.0, "took %.3f s", took);
    char buf[2];
    ck_assert_int_eq(ccl__sock_recv_all(fd, buf, 2, ccl__now() + 10), CCL_OK);
    ck_assert_int_eq(memcmp(buf, "hi", 2), 0);
    close(fd);
    expect_child_ok(pid);
}
END_TEST

START_TEST(ipv6_round_trip) {
    union ccl__sa a;
    ck_assert_int_eq(ccl__sa_parse("[::1]:0", &a), CCL_OK);
    int lfd;
    if (ccl__sock_listen(&a, &lfd) != CCL_OK) {
        fprintf(stderr, "ipv6_round_trip: no IPv6 loopback here, nothing to test\n");
        return;
    }
    ck_assert_uint_ne(port_of(&a), 0);
    int c, s;
    ck_assert_int_eq(ccl__sock_connect(&a, ccl__now() + 5, &c), CCL_OK);
    ck_assert_int_eq(ccl__sock_accept(lfd, ccl__now() + 5, &s), CCL_OK);
    ck_assert_int_eq(ccl__sock_send_all(c, "v6!", 3, ccl__now() + 5), CCL_OK);
    char buf[3];
    ck_assert_int_eq(ccl__sock_recv_all(s, buf, 3, ccl__now() + 5), CCL_OK);
    ck_assert_int_eq(memcmp(buf, "v6!", 3), 0);
    close(c);
    close(s);
    close(lfd);
}
END_TEST

static Suite *socket_suite(void) {
    Suite *s = suite_create("socket");
    TCase *addr = tcase_create("address");
    tcase_add_test(addr, parse_ipv4);
    tcase_add_test(addr, parse_ipv6);
    tcase_add_test(addr, parse_name);
    tcase_add_test(addr, parse_bad);
    tcase_add_test(addr, local_address);
    tcase_add_test(addr, secret_compare);
    tcase_add_test(addr, clock_moves);
    suite_add_tcase(s, addr);
    TCase *io = tcase_create("io");
    tcase_add_test(io, listen_picks_port);
    tcase_add_test(io, round_trip);
    tcase_add_test(io, recv_sees_close);
    tcase_add_test(io, recv_deadline);
    tcase_add_test(io, send_sees_reset);
    tcase_add_test(io, send_deadline);
    tcase_add_test(io, accept_deadline);
    tcase_add_test(io, connect_deadline);
    tcase_add_test(io, connect_waits_for_listener);
    tcase_add_test(io, ipv6_round_trip);
    tcase_add_test(io, socket_buffers);
    suite_add_tcase(s, io);
    return s;
}

int main(void) { return harness_main(socket_suite()); }
