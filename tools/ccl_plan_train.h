/* ccl-plan's two halves: the machine view (ccl_plan.c) and the training
 * configuration planner (ccl_plan_train.c, `ccl-plan --train`). */
#ifndef CCL_TOOLS_PLAN_TRAIN_H
#define CCL_TOOLS_PLAN_TRAIN_H

#include <stddef.h>

/* The chunk a job whose links are of these classes (bit per class) runs
 * its calls with: the smallest slot among the transports carrying them. */
size_t ccl_plan_links_slot(unsigned links);

/* `ccl-plan --train ...`: argv[0] is the program, --train among the rest.
 * Returns the exit status. */
int ccl_plan_train(int argc, char **argv);

#endif
