/*
 * A program written against NCCL (nccl.h only), built against an installed
 * libccl-nccl with nothing but -lccl-nccl: two forked ranks all-reduce
 * their rank + 1 and check the sum.
 */
#include <nccl.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static int run_rank(ncclUniqueId id, int rank, int n) {
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return 1;
    float v = (float)(rank + 1);
    ncclResult_t r = ncclAllReduce(&v, &v, 1, ncclFloat, ncclSum, comm, NULL);
    int ok = r == ncclSuccess && v == (float)(n * (n + 1) / 2);
    printf("nccl_consumer: rank %d of %d: sum %g: %s\n", rank, n, v, ok ? "ok" : "WRONG");
    ncclCommDestroy(comm);
    return !ok;
}

/* Fork first, then make the id (a process with threads should not fork):
 * rank 0 hands it to rank 1 through a pipe. */
int main(void) {
    enum { N = 2 };
    int fds[2];
    if (pipe(fds) != 0) return 1;
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) return 1;
    ncclUniqueId id;
    if (child == 0) {
        close(fds[1]);
        _exit(read(fds[0], &id, sizeof id) == (ssize_t)sizeof id ? run_rank(id, 1, N) : 1);
    }
    close(fds[0]);
    int rc = ncclGetUniqueId(&id) != ncclSuccess || write(fds[1], &id, sizeof id) != (ssize_t)sizeof id;
    close(fds[1]);
    if (!rc) rc = run_rank(id, 0, N);
    int status = 0;
    waitpid(child, &status, 0);
    return rc || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}
