/*
 * Containers for ranks, made of Linux namespaces the way container runtimes
 * make them: a PID namespace of its own (pids mean nothing across it), a
 * private /dev/shm (a mount namespace with a fresh tmpfs), a hostname of
 * its own (a UTS namespace). The harness applies them in a child before
 * ccl_comm_init_rank (harness_run.own_*).
 */
#ifndef CCL_TESTS_CONTAINER_H
#define CCL_TESTS_CONTAINER_H

#include <stddef.h>

enum { CONTAINER_PID_NS = 1, CONTAINER_PRIVATE_SHM = 2, CONTAINER_HOSTNAME = 4 };

/* 0 when this process may make every kind above; else -1 and why. */
int container_probe(char *why, size_t n);

/* Puts the calling child (rank r) into the containers in `what`. With a
 * PID namespace the caller forks: the original waits for the new process
 * (pid 1 in its namespace) and leaves with its exit status; only the new
 * process returns. Exits with 3 on failure. */
void container_enter(int rank, int what);

#endif
