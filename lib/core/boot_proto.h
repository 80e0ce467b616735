/* Bootstrap wire messages, shared by the root (boot_root.c) and the ranks
 * (bootstrap.c). Fixed sizes; all ranks share one ABI. */
#ifndef CCL_BOOT_PROTO_H
#define CCL_BOOT_PROTO_H

#include <stdint.h>

#include "core/comm.h"

#define CCL__BOOT_MAGIC 0x42434c43u /* "CLCB" */
#define CCL__BOOT_VERSION 3
/* A rank's record (its peer info and every transport's addressing) is at
 * most this big; the hello says how big it is. */
#define CCL__BOOT_MAX_RECORD (64u << 10)
#define CCL__BOOT_HELLO_S 10.0      /* a connection must say hello this fast */

struct ccl__boot_hello {
    uint32_t magic;
    uint32_t version;
    uint8_t secret[CCL__SECRET_BYTES];
    int32_t nranks;
    int32_t rank;
    uint32_t record_bytes; /* the record that follows; the same for every rank */
    uint32_t reserved;
    uint8_t member_token[CCL__SECRET_BYTES]; /* a grow's proof of membership (zeros elsewhere) */
};

/* Root -> rank after everyone's record arrived (followed by nranks records
 * when status is CCL_OK). */
struct ccl__boot_table_hdr {
    int32_t status;
    int32_t nranks;
    uint64_t comm_id;
    char msg[256];
    char root_clock_id[96]; /* ranks with the root's clock id read its clock (ccl__boot_clock_id) */
};

/* Rank -> root and root -> rank in each set-up round. */
struct ccl__boot_round_msg {
    int32_t status;
    int32_t rank; /* in the reply: the first rank that failed, -1 if none */
    double root_time; /* in the reply: the root's clock when it answered */
};

#endif
