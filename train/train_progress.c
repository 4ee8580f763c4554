/* train_progress.c — what a training run reports as it goes: the progress bar (a TTY)
 * or periodic lines on stderr, and the --log CSV, kept in memory and replaced atomically
 * at each checkpoint and at the end, so that the log on disk matches the checkpoint a
 * resume starts from. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/io/fileio.h"
#include "core/threads.h"
#include "train/train.h"
#include "train/train_internal.h"

void train_progress_show(progress *p, const char *app, int epoch, int epochs, long step, double loss,
                         double ips, bool force)
{
    if (p->quiet) return;
    double now = sp_now();
    if (!force && now - p->last_print < (p->tty ? 0.1 : 10.0)) return;
    p->last_print = now;
    double frac = p->total_steps ? (double)step / (double)p->total_steps : 0.0;
    double eta = frac > 0 ? (now - p->start) * (1.0 - frac) / frac : 0.0;
    if (p->tty) {
        char bar[31];
        int fill = (int)(frac * 30);
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
        bar[30] = 0;
        fprintf(stderr, "\r%s epoch %d/%d [%s] %ld/%ld loss %.4f %.0f img/s ETA %.0fs   ", app, epoch + 1, epochs,
                bar, step, p->total_steps, loss, ips, eta);
    } else {
        fprintf(stderr, "%s epoch %d/%d step %ld/%ld loss %.4f %.0f img/s ETA %.0fs\n", app, epoch + 1, epochs,
                step, p->total_steps, loss, ips, eta);
    }
}

void train_progress_line(progress *p, const char *fmt, ...)
{
    if (p->quiet) return;
    if (p->tty) fputc('\n', stderr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

#define LOG_HEADER "step,epoch,loss,lr,seconds,test_loss,test_acc\n"

/* A resumed run's log (keep >= 0: the checkpoint's step): the rows of the old log up to
 * that step, in memory (rows past it, which a killed run may have written, are dropped);
 * NULL when there is none. *eval_at_keep: whether one of them is an evaluation at keep. */
static char *log_rows_upto(const char *path, long keep, bool *eval_at_keep)
{
    FILE *f = keep >= 0 ? sp_open_read(path, NULL) : NULL;   /* none yet (or not a file: refused below) */
    if (!f) return NULL;
    size_t len = 0, cap = 4096;
    char *out = sp_xmalloc(cap), line[1024];
    out[0] = 0;
    bool header = true;
    while (fgets(line, sizeof line, f)) {
        if (header) {   /* the header is written anew */
            header = false;
            if (strcmp(line, LOG_HEADER) == 0) continue;
        }
        char *end;
        long step = strtol(line, &end, 10);
        if (end == line || *end != ',' || step > keep) continue;
        size_t n = strlen(line);
        if (line[n - 1] != '\n') continue;   /* a row cut short by a kill */
        const char *loss = strchr(end + 1, ',');   /* after the epoch: empty in an evaluation's row */
        if (step == keep && loss && loss[1] == ',') *eval_at_keep = true;
        if (len + n + 1 > cap) out = sp_xrealloc(out, cap = 2 * (len + n + 1));
        memcpy(out + len, line, n + 1);
        len += n;
    }
    fclose(f);
    return out;
}

/* The --log CSV collects in memory and replaces the file atomically just before each
 * checkpoint save (so the log on disk holds every step of the checkpoint a resume starts
 * from) and at the end. */
int train_log_open(sp_out *out, const char *path, long resumed_step, bool *eval_at_keep, FILE **log)
{
    *log = NULL;
    if (!path) return SP_OK;
    if (sp_out_open(out, path, "--log") != SP_OK) return SP_ERR;
    char *kept = log_rows_upto(path, resumed_step, eval_at_keep);
    fprintf(out->f, LOG_HEADER);
    if (kept) fputs(kept, out->f);
    free(kept);
    *log = out->f;
    return SP_OK;
}

/* An evaluation's row of the --log CSV: the loss column empty, the test columns set. */
void train_log_eval(FILE *log, long step, int epoch, const sp_optim *o, double seconds, double loss, double acc)
{
    if (log) fprintf(log, "%ld,%d,,%.9g,%.6f,%.9g,%.9g\n", step, epoch, sp_optim_get_lr(o), seconds, loss, acc);
}
