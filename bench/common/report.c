/* Text table, CSV and JSON. Only rank 0 reports. */
#define _GNU_SOURCE /* localtime_r */
#include "report.h"

#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "colls.h"
#include "options.h"
#include "values.h"

static const char *const combine_names[] = {"rank0", "avg", "min", "max"};
static const char *const combine_words[] = {"rank 0's", "average over ranks", "min over ranks", "max over ranks"};
static const char *const placement_names[] = {"out", "in"};

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static double frac_of_memcpy(const struct bench_report *r, double busbw) {
    return r->memcpy.gbps > 0 ? busbw / r->memcpy.gbps : 0.0;
}

static void text_header(const struct bench_report *r) {
    const struct bench_options *o = r->o;
    const struct bench_wiring *w = r->w;
    char mc[32], step[48];
    bench_format_bytes(r->memcpy.bytes, mc, sizeof mc);
    if (o->step_bytes) snprintf(step, sizeof step, "%zu(bytes)", o->step_bytes);
    else snprintf(step, sizeof step, "%g(factor)", o->step_factor);
    printf("# %s: %s %s, %d rank%s, %d host%s, transport %s, algo %s\n", o->prog, w->library, w->version, r->nranks,
           r->nranks == 1 ? "" : "s", w->nhosts, w->nhosts == 1 ? "" : "s", w->transport, w->algo);
    printf("# rank 0: %s\n", w->detail);
    if (w->split[0]) printf("# split: %s\n", w->split);
    if (w->machine_cpus > 0 && w->machine_ranks > w->machine_cpus)
        printf("# oversubscribed: %d ranks on this machine share %d CPUs, so ranks wait for a core (waits yield "
               "instead of spinning); times are slower than with a core per rank (--ranks %d)\n",
               w->machine_ranks, w->machine_cpus, w->machine_cpus);
    printf("# minBytes %zu maxBytes %zu step: %s warmup iters: %d iters: %d agg iters: %d validation: %d "
           "nonblocking: %d run cycles: %d\n",
           o->min_bytes, o->max_bytes, step, o->warmup, o->iters, o->agg, o->check, o->nonblocking, o->cycles);
    printf("# time: %s of the mean %s per operation over %s", combine_words[o->combine],
           o->report_cputime ? "CPU time of the process (-C 1)" : "wall time",
           o->stats ? "iterations timed one by one, each after a barrier" : "one timed block after a barrier");
    if (o->stats_skip) printf(", the first %d left out (-K)", o->stats_skip);
    if (o->unalign) printf("; buffers %d elements past a page (-u)", o->unalign);
    if (o->register_bufs) printf("; buffers registered (-R 1)");
    printf("\n");
    if (r->memcpy.gpu) {
        printf("# buffers: GPU memory (--device), rank r on GPU r %% GPUs\n");
        printf("# memcpy: %.2f GB/s device to device on %s (%s buffer, cuMemcpyDtoDAsync, median of %d reps on rank 0 "
               "alone, bytes copied per second)\n", r->memcpy.gbps, r->memcpy.gpu, mc, r->memcpy.reps);
    } else {
        printf("# memcpy: %.2f GB/s (%s buffer, median of %d reps on rank 0 alone, bytes copied per second)\n",
               r->memcpy.gbps, mc, r->memcpy.reps);
    }
    printf("#\n");
    printf("# %10s %14s %9s %7s %6s  %-35s  %-35s  %-15s", "", "", "", "", "", "            out-of-place",
           "              in-place", "   busbw/memcpy");
    if (o->stats) printf("  %-43s  %-43s", "    out-of-place, per iteration (us)", "    in-place, per iteration (us)");
    printf("\n");
    printf("# %10s %14s %9s %7s %6s  %10s %8s %8s %6s  %10s %8s %8s %6s  %7s %7s", "size", "count", "type", "redop",
           "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "out", "in");
    if (o->stats)
        for (int p = 0; p < BENCH_NUM_PLACEMENTS; p++) printf("  %10s %10s %10s %10s", "min", "median", "p99", "max");
    if (o->nalgos) printf("  %-8s", "algo");
    if (o->timestamps) printf("  %-19s", "timestamp");
    printf("\n# %10s %14s %9s %7s %6s  %10s %8s %8s %6s  %10s %8s %8s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
           "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    if (o->nalgos)
        printf("# algorithms in turn: each time is the median of %d timed blocks, the algorithms' blocks interleaved; "
               "auto:X is the planner's choice, which ran X\n", o->rounds);
}

static void csv_header(const struct bench_report *r) {
    fputs("library,op,nranks,nhosts,transport,algo,dtype,redop,root,size_bytes,count,placement,time_us,algbw_gbps,"
          "busbw_gbps,wrong,min_us,median_us,p99_us,max_us,memcpy_gbps,busbw_frac_memcpy\n",
          r->csv);
}

static void json_header(const struct bench_report *r) {
    const struct bench_options *o = r->o;
    FILE *f = r->json;
    fputs("{\"library\": ", f);
    json_string(f, r->w->library);
    fputs(", \"version\": ", f);
    json_string(f, r->w->version);
    fprintf(f, ", \"op\": \"%s\", \"nranks\": %d, \"nhosts\": %d, \"transport\": ", r->op_name, r->nranks,
            r->w->nhosts);
    json_string(f, r->w->transport);
    fputs(", \"algo\": ", f);
    json_string(f, r->w->algo);
    fprintf(f,
            ", \"memcpy_gbps\": %.4f, \"iters\": %d, \"warmup\": %d, \"agg\": %d, \"blocking\": %d, "
            "\"combine\": \"%s\",\n \"rows\": [",
            r->memcpy.gbps, o->iters, o->warmup, o->agg, !o->nonblocking, combine_names[o->combine]);
}

int bench_report_open(struct bench_report *r) {
    r->csv = r->json = NULL;
    r->json_rows = r->busbw_rows = 0;
    r->busbw_sum = 0;
    r->wrong_total = 0;
    r->checked = 0;
    if (r->o->csv_path && !(r->csv = fopen(r->o->csv_path, "w"))) {
        perror(r->o->csv_path);
        return -1;
    }
    if (r->o->json_path && !(r->json = fopen(r->o->json_path, "w"))) {
        perror(r->o->json_path);
        if (r->csv) fclose(r->csv);
        r->csv = NULL;
        return -1;
    }
    text_header(r);
    if (r->csv) csv_header(r);
    if (r->json) json_header(r);
    fflush(stdout);
    return 0;
}

static void text_place(const struct bench_place_result *p) {
    char wrong[24] = "N/A";
    if (!p->measured) {
        printf("  %10s %8s %8s %6s", "N/A", "N/A", "N/A", "N/A");
        return;
    }
    if (p->wrong >= 0) snprintf(wrong, sizeof wrong, "%lld", p->wrong);
    printf("  %10.2f %8.2f %8.2f %6s", p->time_us, p->algbw_gbps, p->busbw_gbps, wrong);
}

static void text_row(const struct bench_report *r, const struct bench_row *row) {
    printf("  %10zu %14zu %9s %7s %6d", row->bytes, row->count, row->dtype >= 0 ? bench_dtype_name(row->dtype) : "none",
           row->redop >= 0 ? bench_redop_name(row->redop) : "none", row->root);
    for (int p = 0; p < BENCH_NUM_PLACEMENTS; p++) text_place(&row->place[p]);
    printf(" ");
    for (int p = 0; p < BENCH_NUM_PLACEMENTS; p++) {
        const struct bench_place_result *pl = &row->place[p];
        if (pl->measured) printf(" %7.3f", frac_of_memcpy(r, pl->busbw_gbps));
        else printf(" %7s", "N/A");
    }
    for (int p = 0; r->o->stats && p < BENCH_NUM_PLACEMENTS; p++) {
        const struct bench_place_result *pl = &row->place[p];
        if (pl->measured && pl->has_stats)
            printf("  %10.2f %10.2f %10.2f %10.2f", pl->min_us, pl->median_us, pl->p99_us, pl->max_us);
        else printf("  %10s %10s %10s %10s", "N/A", "N/A", "N/A", "N/A");
    }
    if (row->algo && row->auto_ran[0]) printf("  %s:%-8s", row->algo, row->auto_ran);
    else if (row->algo) printf("  %-8s", row->algo);
    if (r->o->timestamps) { /* -S: when the row was measured, local time */
        char when[32];
        time_t now = time(NULL);
        struct tm tm;
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tm));
        printf("  %s", when);
    }
    printf("\n");
}

static void csv_row(const struct bench_report *r, const struct bench_row *row, int p) {
    const struct bench_place_result *pl = &row->place[p];
    const struct bench_wiring *w = r->w;
    FILE *f = r->csv;
    fprintf(f, "%s,%s,%d,%d,%s,%s,%s,%s,", w->library, r->op_name, r->nranks, w->nhosts, w->transport,
            row->algo ? row->algo : w->algo,
            row->dtype >= 0 ? bench_dtype_name(row->dtype) : "", row->redop >= 0 ? bench_redop_name(row->redop) : "");
    if (row->root >= 0) fprintf(f, "%d", row->root);
    fprintf(f, ",%zu,%zu,%s,%.3f,%.6f,%.6f,", row->bytes, row->count, placement_names[p], pl->time_us, pl->algbw_gbps,
            pl->busbw_gbps);
    if (pl->wrong >= 0) fprintf(f, "%lld", pl->wrong);
    if (pl->has_stats) fprintf(f, ",%.3f,%.3f,%.3f,%.3f", pl->min_us, pl->median_us, pl->p99_us, pl->max_us);
    else fputs(",,,,", f);
    fprintf(f, ",%.4f,%.6f\n", r->memcpy.gbps, frac_of_memcpy(r, pl->busbw_gbps));
}

static void json_number_or_null(FILE *f, const char *key, int have, double v) {
    if (have) fprintf(f, ", \"%s\": %.3f", key, v);
    else fprintf(f, ", \"%s\": null", key);
}

static void json_row(struct bench_report *r, const struct bench_row *row, int p) {
    const struct bench_place_result *pl = &row->place[p];
    FILE *f = r->json;
    fprintf(f, "%s\n  {\"size_bytes\": %zu, \"count\": %zu, \"dtype\": \"%s\", \"redop\": \"%s\", \"root\": %d, "
               "\"placement\": \"%s\", \"time_us\": %.3f, \"algbw_gbps\": %.6f, \"busbw_gbps\": %.6f, \"wrong\": ",
            r->json_rows++ ? "," : "", row->bytes, row->count, row->dtype >= 0 ? bench_dtype_name(row->dtype) : "none",
            row->redop >= 0 ? bench_redop_name(row->redop) : "none", row->root, placement_names[p], pl->time_us,
            pl->algbw_gbps, pl->busbw_gbps);
    if (pl->wrong >= 0) fprintf(f, "%lld", pl->wrong);
    else fputs("null", f);
    json_number_or_null(f, "min_us", pl->has_stats, pl->min_us);
    json_number_or_null(f, "median_us", pl->has_stats, pl->median_us);
    json_number_or_null(f, "p99_us", pl->has_stats, pl->p99_us);
    json_number_or_null(f, "max_us", pl->has_stats, pl->max_us);
    fprintf(f, ", \"busbw_frac_memcpy\": %.6f", frac_of_memcpy(r, pl->busbw_gbps));
    if (row->algo) { /* -A's list: which algorithm this row measured */
        fputs(", \"algo\": ", f);
        json_string(f, row->algo);
    }
    fputc('}', f);
}

void bench_report_row(struct bench_report *r, const struct bench_row *row) {
    text_row(r, row);
    for (int p = 0; p < BENCH_NUM_PLACEMENTS; p++) {
        const struct bench_place_result *pl = &row->place[p];
        if (!pl->measured) continue;
        r->busbw_sum += pl->busbw_gbps;
        r->busbw_rows++;
        if (pl->wrong >= 0) {
            r->checked = 1;
            r->wrong_total += pl->wrong;
        }
        if (r->csv) csv_row(r, row, p);
        if (r->json) json_row(r, row, p);
    }
    fflush(stdout);
    if (r->csv) fflush(r->csv);
    if (r->json) fflush(r->json);
}

static int close_file(FILE *f, const char *path) {
    if (!f) return 0;
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "%s: could not write the whole file\n", path);
        return -1;
    }
    return 0;
}

int bench_report_close(struct bench_report *r) {
    double avg = r->busbw_rows ? r->busbw_sum / (double)r->busbw_rows : 0.0;
    if (r->checked) printf("# Out of bounds values : %lld %s\n", r->wrong_total, r->wrong_total ? "FAILED" : "OK");
    else printf("# Out of bounds values : N/A (not checked)\n");
    printf("# Avg bus bandwidth    : %g \n", avg);
    if (r->o->memory_report) { /* -M */
        struct rusage ru;
        char bufs[32], peak[32];
        bench_format_bytes(r->buffer_bytes, bufs, sizeof bufs);
        getrusage(RUSAGE_SELF, &ru);
        bench_format_bytes((size_t)ru.ru_maxrss * 1024, peak, sizeof peak);
        printf("# Memory               : buffers %s per rank (send and receive%s), rank 0's peak resident set %s\n",
               bufs, r->o->device ? ", GPU memory" : r->o->shared ? ", the library's shared allocation" : "", peak);
    }
    if (r->o->steady)
        printf("# Steady               : %ld blocks timed again, %ld s waited, %ld kept slow, %ld waits ended slow "
               "(fastest probe %.1f us, factor %.2f)\n",
               r->steady_redone, r->steady_waited_s, r->steady_kept_slow, r->steady_gave_up, r->steady_best_us,
               r->o->steady);
    printf("#\n");
    fflush(stdout);
    if (r->json) {
        fputs("\n ],\n \"wrong_total\": ", r->json);
        if (r->checked) fprintf(r->json, "%lld", r->wrong_total);
        else fputs("null", r->json);
        fprintf(r->json, ", \"avg_busbw_gbps\": %.6f", avg);
        if (r->o->steady)
            fprintf(r->json,
                    ", \"steady\": {\"redone\": %ld, \"waited_s\": %ld, \"kept_slow\": %ld, "
                    "\"waits_ended_slow\": %ld, \"fastest_probe_us\": %.3f}",
                    r->steady_redone, r->steady_waited_s, r->steady_kept_slow, r->steady_gave_up, r->steady_best_us);
        fputs("}\n", r->json);
    }
    int st = close_file(r->csv, r->o->csv_path);
    st |= close_file(r->json, r->o->json_path);
    r->csv = r->json = NULL;
    return st;
}
