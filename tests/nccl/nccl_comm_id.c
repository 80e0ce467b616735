/*
 * NCCL's NCCL_COMM_ID through libccl-nccl: with it set (and the job's
 * secret in CCL_SECRET), every rank calls ncclGetUniqueId itself, nothing
 * is passed between them, rank 0 starts the root at ncclCommInitRank, and
 * an all-reduce is right on every rank. The program sets NCCL_COMM_ID
 * to a free port of 127.0.0.1 (ctest sets CCL_SECRET).
 *
 *   nccl_comm_id NRANKS
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "nccl.h"
#include "nccl/check.h"

static int rank, fails;

static int rank_main(int nranks) {
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    NCCL_OK(ncclGetUniqueId(&id));
    NCCL_OK(ncclCommInitRank(&comm, nranks, id, rank));
    if (!comm) return 1;
    int32_t in[257], out[257];
    for (int i = 0; i < 257; i++) in[i] = i * (rank + 1);
    NCCL_OK(ncclAllReduce(in, out, 257, ncclInt32, ncclSum, comm, NULL));
    for (int i = 0; i < 257; i++)
        if (out[i] != i * nranks * (nranks + 1) / 2) {
            CHECK(0, "element %d is %d", i, out[i]);
            break;
        }
    NCCL_OK(ncclCommDestroy(comm));
    return fails != 0;
}

int main(int argc, char **argv) {
    int nranks = argc > 1 ? atoi(argv[1]) : 3;
    if (nranks < 1 || nranks > 8 || !getenv("CCL_SECRET")) {
        fprintf(stderr, "usage: CCL_SECRET=HEX nccl_comm_id NRANKS (1 to 8)\n");
        return 2;
    }
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(s, (struct sockaddr *)&a, &len) != 0) {
        perror("nccl_comm_id: a free port");
        return 1;
    }
    close(s);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(a.sin_port));
    setenv("NCCL_COMM_ID", addr, 1);
    pid_t pid[8];
    for (int r = 0; r < nranks; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            rank = r;
            _exit(rank_main(nranks));
        }
    }
    int bad = 0;
    for (int r = 0; r < nranks; r++) {
        int status = 0;
        waitpid(pid[r], &status, 0);
        bad |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    printf("nccl_comm_id: %d ranks, each with its own id from NCCL_COMM_ID: %s\n", nranks, bad ? "FAILED" : "ok");
    return bad;
}
