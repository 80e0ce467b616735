/*
 * Logging: CCL_DEBUG=WARN|INFO|TRACE, CCL_DEBUG_SUBSYS=INIT,NET,SHM,COLL,...
 * (or ALL, or ^SUBSYS to exclude), CCL_DEBUG_FILE=path (%h host, %p pid).
 * Every line starts with "host:pid:rank [subsys]". The level check is one
 * load and one compare, so disabled logging costs nothing on hot paths.
 */
#ifndef CCL_LOG_H
#define CCL_LOG_H

#include <stdarg.h>

enum ccl__log_level { CCL__LOG_NONE = 0, CCL__LOG_WARN = 1, CCL__LOG_INFO = 2, CCL__LOG_TRACE = 3 };

enum ccl__subsys {
    CCL__SUB_INIT = 1u << 0,
    CCL__SUB_BOOT = 1u << 1,
    CCL__SUB_NET = 1u << 2,
    CCL__SUB_SHM = 1u << 3,
    CCL__SUB_COLL = 1u << 4,
    CCL__SUB_P2P = 1u << 5,
    CCL__SUB_PLAN = 1u << 6,
    CCL__SUB_ENV = 1u << 7,
    CCL__SUB_ALL = ~0u
};

extern int ccl__log_level_cached;      /* set once by ccl__log_init */
extern unsigned ccl__log_subsys_mask;  /* set once by ccl__log_init */

void ccl__log_init(void);
/* rank < 0 prints "-" (before a communicator exists). */
void ccl__log(int level, unsigned subsys, int rank, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define CCL__LOG_ON(level, sub) \
    (ccl__log_level_cached >= (level) && (ccl__log_subsys_mask & (unsigned)(sub)))

#define CCL_WARN(sub, rank, ...) \
    do { if (CCL__LOG_ON(CCL__LOG_WARN, sub)) ccl__log(CCL__LOG_WARN, sub, rank, __VA_ARGS__); } while (0)
#define CCL_INFO(sub, rank, ...) \
    do { if (CCL__LOG_ON(CCL__LOG_INFO, sub)) ccl__log(CCL__LOG_INFO, sub, rank, __VA_ARGS__); } while (0)
#define CCL_TRACE(sub, rank, ...) \
    do { if (CCL__LOG_ON(CCL__LOG_TRACE, sub)) ccl__log(CCL__LOG_TRACE, sub, rank, __VA_ARGS__); } while (0)

/* Connections a listener refuses (strangers, garbage, silence): the first
 * CCL__DROPS_WARNED of a listener's life are warnings, the rest INFO, so a
 * flood of strangers cannot flood the log; ccl__log_drops_total ends the
 * listener's life with their count. `count` is the listener's own int. */
#define CCL__DROPS_WARNED 8
#define CCL_DROP(sub, rank, count, ...)                                      \
    do {                                                                     \
        if ((count)++ < CCL__DROPS_WARNED) CCL_WARN(sub, rank, __VA_ARGS__); \
        else CCL_INFO(sub, rank, __VA_ARGS__);                               \
    } while (0)
void ccl__log_drops_total(unsigned subsys, int rank, const char *listener, int count);

#endif
