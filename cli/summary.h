/* summary.h — what a run leaves on stdout: one JSON object on the last line (the apps'
 * summary, which scripts and tests read), and checked writes (a full disk is one line and
 * exit 2, never a silently truncated result). The keys of a training run's line are
 * written by the runner (cli/run.h, sp_run_summary_*). */
#ifndef SP_SUMMARY_H
#define SP_SUMMARY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "data/data.h"
#include "schedulers/backward/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tiny JSON writer for the last stdout line: keys in the order written. Its calls are
 * fallible (core/error.h's first kind): a NULL argument or a line past the buffer returns
 * SP_ERR (sp_json_writer: a writer of NULLs) with the message; nothing exits. A failed
 * write to stdout in sp_json_end_print returns SP_ERR with "stdout: write failed: ..."
 * (what stdout could not take is dropped: the caller reports it, as the apps do with
 * sp_check, and the check at exit does not repeat it). */
typedef struct sp_json {
    char buf[8192];
    size_t len;
    bool first;
} sp_json;
int sp_json_begin(sp_json *j);
int sp_json_str(sp_json *j, const char *key, const char *v);
int sp_json_num(sp_json *j, const char *key, double v);   /* %.9g; NaN and inf: null */
int sp_json_int(sp_json *j, const char *key, long v);
int sp_json_raw(sp_json *j, const char *key, const char *raw);
int sp_json_end_print(sp_json *j) SP_MUST_CHECK;   /* prints {...}\n on stdout and checks the write */
/* A writer onto j, for an engine's figures (sp_engine_report, sp_engine_plan). */
sp_report_writer sp_json_writer(sp_json *j);

/* --parallel: what each rank read, one value per rank. Of the training set through the
 * loader: "data_rows_read" (samples whose input it read), "data_labels_read" (labels
 * read alone: a pipeline's last stage), "data_bytes_read" (sp_loader_bytes_read: the
 * floats and labels delivered). From the files of a dataset opened for rows
 * (sp_fashion_mnist_rows, sp_cifar10_rows): "data_file_bytes_read" (the headers and the
 * rank's own rows of a raw file; the whole compressed stream of a .gz, which cannot
 * seek) and "data_file_bytes_kept" (of those, the sample and label bytes held), and the
 * same of the test set, "test_file_bytes_read" / "test_file_bytes_kept"; 0 for
 * generated data. Collective: every rank calls it. */
void sp_run_summary_data(sp_json *j, const sp_loader *l, const sp_dataset *train, const sp_dataset *test);

/* The process's resident set now (VmRSS of /proc/self/status), in KiB; -1 if unknown. */
long sp_rss_kib(void);

/* Flushes stdout and checks every write to it succeeded; on failure "write failed: …"
 * and exit 2. Runs at exit by itself once flags are parsed; call it to fail earlier. */
void sp_stdout_check(void);
/* fclose(f) and check that every write to it succeeded ("what": --svg PATH …): one line,
 * exit 2 otherwise. */
void sp_output_close(FILE *f, const char *what);

#ifdef __cplusplus
}
#endif

#endif
