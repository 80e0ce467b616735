/*
 * Socket helpers with deadlines, shared by bootstrap and the TCP transport.
 * Deadlines are absolute ccl__now() seconds; every blocking helper gives up
 * with CCL_ERR_TIMEOUT when one passes.
 */
#ifndef CCL_SOCKET_H
#define CCL_SOCKET_H

#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>

#include "ccl.h"

/* An IPv4 or IPv6 address; 28 bytes, fits a peer blob. */
union ccl__sa {
    struct sockaddr sa;
    struct sockaddr_in in;
    struct sockaddr_in6 in6;
};

/* Monotonic clock in seconds. */
double ccl__now(void);
/* The wall clock in seconds since the epoch (CLOCK_REALTIME: comparable
 * across hosts as far as their clocks agree); async-signal-safe. */
double ccl__wall_now(void);

socklen_t ccl__sa_len(const union ccl__sa *a);
/* "host:port", "[v6addr]:port"; host may be a name. */
ccl_status_t ccl__sa_parse(const char *hostport, union ccl__sa *out);
/* "1.2.3.4:5" or "[::1]:5" */
void ccl__sa_str(const union ccl__sa *a, char *buf, size_t n);
/* An address of this host other ranks can reach: the interface named
 * ifname if set, else the first up non-loopback IPv4, else 127.0.0.1.
 * Port 0. */
ccl_status_t ccl__sa_local(const char *ifname, union ccl__sa *out);

/* Bind and listen on *addr (port 0 picks one); *addr gets the real port. */
ccl_status_t ccl__sock_listen(union ccl__sa *addr, int *fd);
/* 1 when fd is a TCP socket listening on addr's port (and its address,
 * or every address), made close-on-exec and non-blocking: a listener a
 * launcher bound and handed down. 0 otherwise, fd untouched. */
int ccl__sock_is_listener_at(int fd, const union ccl__sa *addr);
/* Connects, retrying refused connections until the deadline (the listener
 * may not exist yet). */
ccl_status_t ccl__sock_connect(const union ccl__sa *addr, double deadline, int *fd);
/* Like ccl__sock_connect, at a listener that was up before its address
 * was handed out: CCL_ERR_REMOTE at once when refused (it is gone). */
ccl_status_t ccl__sock_connect_listening(const union ccl__sa *addr, double deadline, int *fd);
/* One attempt at a listener known to exist: CCL_ERR_REMOTE when refused
 * (nobody listens there any more), CCL_ERR_TIMEOUT at the deadline. */
ccl_status_t ccl__sock_connect_up(const union ccl__sa *addr, double deadline, int *fd);
/* Without blocking: starts connecting a non-blocking socket to addr.
 * 0 with *fd set (connected or on its way), else the errno. */
int ccl__sock_connect_start(const union ccl__sa *addr, int *fd);
/* Without blocking: where a started connect stands. -1 still on its way,
 * 0 connected, else the errno it failed with (ECONNREFUSED: nobody
 * listens there). */
int ccl__sock_connect_result(int fd);
/* Accepts one connection; CCL_ERR_TIMEOUT at the deadline. */
ccl_status_t ccl__sock_accept(int lfd, double deadline, int *fd);
ccl_status_t ccl__sock_send_all(int fd, const void *buf, size_t n, double deadline);
/* CCL_ERR_REMOTE if the peer closed the connection. */
ccl_status_t ccl__sock_recv_all(int fd, void *buf, size_t n, double deadline);
void ccl__sock_nonblock(int fd);
void ccl__sock_nodelay(int fd);
/* Kernel keepalive on an idle connection: about 1 + link_timeout_s seconds
 * of an unanswering peer host fail the socket with ETIMEDOUT (0: off). */
void ccl__sock_keepalive(int fd, double link_timeout_s);
/* Fixes both socket buffers of fd at `bytes` (0: leaves them to the
 * kernel's autotuning). Returns 1 when set; 0 when left alone, because
 * bytes is 0 or above what net.core.rmem_max / wmem_max allow (the kernel
 * would cap the request below what autotuning reaches), with the reason
 * in why. */
int ccl__sock_buffers(int fd, size_t bytes, char *why, size_t whylen);
/* 1 and *silent_s = seconds since the peer's host last acknowledged
 * anything, when data we sent is waiting for retransmission; else 0. */
int ccl__sock_silent_s(int fd, double *silent_s);

/* Constant-time comparison for secrets. */
int ccl__secret_equal(const void *a, const void *b, size_t n);

#endif
