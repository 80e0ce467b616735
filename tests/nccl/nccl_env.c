/*
 * NCCL's environment read as libccl's (nccl/nccl_env.c). ctest runs this
 * with NCCL_* variables set as a job tuned for NCCL would set them, and
 * one CCL_* variable that must win over its NCCL twin. It checks the
 * CCL_* spelling each became, then makes a one-rank communicator and
 * checks that libccl's log went where NCCL_DEBUG_FILE said, at the level
 * and for the subsystems NCCL_DEBUG and NCCL_DEBUG_SUBSYS said.
 *
 *   nccl_env LOG_PREFIX      (NCCL_DEBUG_FILE is LOG_PREFIX.%p)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl.h"
#include "nccl/check.h"

static int rank, fails;

static void expect_env(const char *name, const char *want) {
    const char *got = getenv(name);
    if (!want) CHECK(got == NULL, "%s is set (%s), want unset", name, got);
    else CHECK(got && strcmp(got, want) == 0, "%s is %s, want %s", name, got ? got : "unset", want);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: nccl_env LOG_PREFIX\n");
        return 2;
    }
    expect_env("CCL_DEBUG", "INFO");                         /* NCCL_DEBUG=INFO */
    expect_env("CCL_DEBUG_SUBSYS", "INIT,PLAN");             /* NCCL_DEBUG_SUBSYS=INIT,GRAPH,ALLOC */
    expect_env("CCL_SOCKET_IFNAME", "lo");                   /* NCCL_SOCKET_IFNAME==lo,eth0 */
    expect_env("CCL_ALGO", "allreduce:tree,allgather:ring"); /* NCCL_ALGO=allreduce:NVLS,Tree;allgather:Ring */
    expect_env("CCL_IB_HCA", NULL);                          /* NCCL_IB_HCA=^mlx5_0: an exclusion */
    expect_env("CCL_IB_GID_INDEX", "3");                     /* set, so NCCL_IB_GID_INDEX=1 is not read */

    ncclUniqueId id;
    ncclComm_t comm = NULL;
    NCCL_OK(ncclGetUniqueId(&id));
    NCCL_OK(ncclCommInitRank(&comm, 1, id, 0));
    float x = 2, y = 0;
    if (comm) NCCL_OK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL));
    CHECK(y == 2, "a one-rank all-reduce gave %g", y);
    if (comm) NCCL_OK(ncclCommDestroy(comm));

    char path[4200], line[2048];
    snprintf(path, sizeof path, "%s.%d", argv[1], (int)getpid());
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "no log at %s (NCCL_DEBUG_FILE)", path);
    int info_init = 0, other = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (strstr(line, "CCL INFO INIT:")) info_init++;
        else if (strstr(line, "CCL INFO") && !strstr(line, "CCL INFO PLAN:")) other++;
    }
    if (f) fclose(f);
    CHECK(info_init > 0, "no INFO line of subsystem INIT in %s", path);
    CHECK(other == 0, "%d INFO lines of subsystems other than INIT and PLAN in %s", other, path);
    unlink(path);
    printf("nccl_env: %s\n", fails ? "FAILED" : "every check passed");
    return fails != 0;
}
