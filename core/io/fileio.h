/* fileio.h — opening files a user named, and replacing them atomically. Every file the
 * library and the apps open goes through here (tests/test_apps.c checks the sources):
 * readers use sp_open_regular / sp_open_read, outputs sp_out_*, checkpoints sp_atomic_*.
 *
 * Reading: sp_open_regular refuses anything that is not a regular file (FIFO, device,
 * directory, socket) before it can block: it checks the type with stat, opens with
 * O_NONBLOCK and checks again with fstat, then restores blocking reads. Errors name
 * the path and errno's text, EACCES included ("cannot open X: Permission denied").
 *
 * Writing: sp_atomic_begin / sp_atomic_commit replace `path` only after the whole new
 * content is on disk (temp file "<target>.tmp.<pid>" in the target's directory,
 * fsync, rename, fsync of the directory), so an interrupted or failed save leaves the
 * old file intact. The target must be absent or a regular file; a symbolic link is
 * followed and the file it points to is replaced (the link stays a link). Between
 * begin and commit/abort, SIGINT and SIGTERM remove the temp file before the process
 * dies of the signal as usual; begin also removes stale "<target>.tmp.<pid>" files
 * whose process no longer exists (left by SIGKILL or a crash). Saves are serialised
 * process-wide. All return SP_OK / SP_ERR (or -1) with sp_last_error() set. */
#ifndef SP_FILEIO_H
#define SP_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include "core/error.h"

/* A file descriptor (O_CLOEXEC, blocking) of the regular file `path`, its stat in *st;
 * -1 with "cannot open <path>: <reason>" or "<path>: not a regular file (a FIFO)". */
int sp_open_regular(const char *path, struct stat *st) SP_MUST_CHECK;
/* The regular file `path` as a FILE for reading ("rb"); NULL with "<what>: <path>: not a
 * regular file (a directory)" or "<what>: cannot open <path>: <errno text>" (what may be NULL). The one way
 * the program opens a file it reads by stdio (a FIFO never blocks it). */
FILE *sp_open_read(const char *path, const char *what) SP_MUST_CHECK;
/* While on, every path sp_open_regular (and so sp_open_read) opens is recorded, each
 * once, in order of first opening: the runner names the files a rank read (its ranks
 * compare their contents) — but not what the machine says of itself (/proc, /sys),
 * which differs between ranks by nature. sp_opened_files: the recorded paths (valid
 * until the next recording opens another) and how many; on again starts a new list. */
void sp_open_record(bool on);
int sp_opened_files(const char *const **paths);
/* sp_open_read for a text file (action lists, profiles): a NUL byte anywhere in it is
 * refused, "<what>: <path>: line L, byte B: a NUL byte (expected text)" (B counts from 1
 * in the line), so no reader silently ends a line early. The FILE is at its start. */
FILE *sp_open_text(const char *path, const char *what) SP_MUST_CHECK;
/* Exactly n bytes at offset off; SP_ERR naming path and `what` on a short read. */
int sp_pread_full(int fd, void *buf, size_t n, off_t off, const char *path, const char *what) SP_MUST_CHECK;
/* "a FIFO", "a directory", "a character device", ... for messages. */
const char *sp_file_kind(mode_t mode);

/* Would a save to path be allowed (absent or a regular file, or a symlink to one, in a
 * writable directory)? For apps, to refuse --save before hours of training. */
int sp_check_save_target(const char *path) SP_MUST_CHECK;

typedef struct sp_atomic_file {
    int fd;          /* write the new content here                        */
    char *target;    /* the file replaced (the symlink's target if a link)  */
    char *tmp;       /* target + ".tmp.<pid>"                             */
} sp_atomic_file;

int sp_atomic_begin(sp_atomic_file *a, const char *path) SP_MUST_CHECK;
/* write(2) all n bytes to a->fd (retrying short writes); SP_ERR with errno's text. */
int sp_atomic_write(sp_atomic_file *a, const void *buf, size_t n) SP_MUST_CHECK;
/* fsync, close, rename over the target. On failure the temp file is removed and the
 * target untouched. Always ends the save (no abort needed after it). */
int sp_atomic_commit(sp_atomic_file *a) SP_MUST_CHECK;
/* Give up: remove the temp file, leave the target as it was. */
void sp_atomic_abort(sp_atomic_file *a);

/* An output file (a log, trace, CSV, SVG, PNG): written to out->f, which collects the
 * content in memory, and put in place atomically (sp_atomic_*) by sp_out_flush or
 * sp_out_commit, so a full disk or a kill leaves the previous file whole. Open checks
 * the target first, as --save does: absent or a regular file (a FIFO, device or
 * directory is refused, never opened) in a writable directory. No lock is held between
 * open and commit, so an output may stay open across checkpoint saves (--log). what: the
 * flag, for messages ("--log"): "<what> <path>: cannot open for writing: <reason>",
 * "<what> <path>: write failed: <errno text> (the existing file is unchanged)". */
typedef struct sp_out {
    FILE *f;       /* write here (NULL after commit/abort)  */
    char *buf;     /* open_memstream's buffer               */
    size_t len;
    char *path, *what;
} sp_out;

int sp_out_open(sp_out *out, const char *path, const char *what) SP_MUST_CHECK;
/* Replace the file with everything written so far; out->f stays open for more. */
int sp_out_flush(sp_out *out) SP_MUST_CHECK;
/* Flush, then close: SP_OK or SP_ERR (the old file whole); always ends the output. */
int sp_out_commit(sp_out *out) SP_MUST_CHECK;
/* Give up: nothing written, the file as it was. */
void sp_out_abort(sp_out *out);

#endif
