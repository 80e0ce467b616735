/*
 * Cross-memory attach: reading and writing another process's memory with
 * one copy by the kernel (process_vm_readv / process_vm_writev), for the
 * single-copy path between ranks of one host (algo/single_copy.c). The
 * kernel allows it to a process that may ptrace the other: the same user
 * in the same (or an ancestor) user namespace, unless Yama's ptrace_scope,
 * a seccomp filter (a container's default profile without
 * CAP_SYS_PTRACE) or a non-dumpable peer forbids it. So whether it works
 * is found out by trying (ccl__cma_probe), never assumed.
 */
#ifndef CCL_CMA_H
#define CCL_CMA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The address, in this process, of a word every libccl process holds
 * with the same value: a peer that reads it through cross-memory attach
 * and finds that value knows the kernel lets it read this process. */
uint64_t ccl__cma_probe_addr(void);
/* Reads the probe word of process pid at addr: 0, or the errno that
 * stopped it (EIO: the read went through and found another value). */
int ccl__cma_probe(pid_t pid, uint64_t addr);
/* len bytes at remote in process pid into dst, or dst's into remote:
 * 0, or the errno that stopped the copy part way (EFAULT: the range is
 * not mapped there any more; ESRCH: the process is gone; EPERM: refused). */
int ccl__cma_read(pid_t pid, void *dst, uint64_t remote, size_t len);
int ccl__cma_write(pid_t pid, uint64_t remote, const void *src, size_t len);

/* The error of a read (writing 0) or write of len bytes at `at` in peer's
 * process that failed with err, recorded on comm (what: the call) and
 * returned. A peer that exited (ESRCH) or whose buffer is not mapped
 * (EFAULT: freed) is blamed, so that the ranks this one tells name it. */
struct ccl_comm;
int ccl__cma_failed(struct ccl_comm *comm, const char *what, int peer, int err, int writing, uint64_t at, size_t len);

#endif
