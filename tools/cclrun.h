/*
 * cclrun's pieces that are not the event loop: the command line and the
 * job's rendezvous address and secret (cclrun_setup.c).
 */
#ifndef CCLRUN_H
#define CCLRUN_H

#define CCLRUN_MAX_RANKS 1024
#define CCLRUN_GRACE_SECONDS 3.0 /* between SIGTERM and SIGKILL */

struct cclrun_options {
    int nranks;
    int host_per_rank;
    const char *transport; /* NULL: leave CCL_TRANSPORT as inherited */
    double timeout_s;      /* 0: none */
    int elastic;           /* a rank killed by a signal does not stop the others */
    char **argv;           /* the program and its arguments */
};

/* 0: run; 1: help was shown; -1: bad usage (the message was printed). */
int cclrun_parse_options(int argc, char **argv, struct cclrun_options *o);

/* 32 random bytes as 64 hex digits, the form CCL_SECRET takes. 0 or -1. */
int cclrun_make_secret(char hex[65]);

#endif
