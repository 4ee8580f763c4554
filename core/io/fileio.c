/* fileio.c — regular-file checks before reading, atomic replacement with temp-file
 * cleanup on SIGINT/SIGTERM and of stale temp files, and output files (sp_out) built in
 * memory and put in place by that atomic replacement. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/io/fileio.h"

const char *sp_file_kind(mode_t mode)
{
    return S_ISREG(mode) ? "a regular file" : S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a FIFO"
           : S_ISCHR(mode) ? "a character device" : S_ISBLK(mode) ? "a block device"
           : S_ISSOCK(mode) ? "a socket" : S_ISLNK(mode) ? "a symbolic link" : "not a regular file";
}

static pthread_mutex_t record_mu = PTHREAD_MUTEX_INITIALIZER;
static bool recording;
static char **recorded;
static int nrecorded, cap_recorded;

void sp_open_record(bool on)
{
    pthread_mutex_lock(&record_mu);
    if (on && !recording) {
        for (int i = 0; i < nrecorded; i++) free(recorded[i]);
        nrecorded = 0;
    }
    recording = on;
    pthread_mutex_unlock(&record_mu);
}

int sp_opened_files(const char *const **paths)
{
    pthread_mutex_lock(&record_mu);
    *paths = (const char *const *)recorded;
    int n = nrecorded;
    pthread_mutex_unlock(&record_mu);
    return n;
}

/* What this machine says of itself (/proc, /sys: free memory, cores) differs between
 * ranks by nature and is no input the ranks must share: not recorded. */
static bool machine_file(const char *path)
{
    return strncmp(path, "/proc/", 6) == 0 || strncmp(path, "/sys/", 5) == 0;
}

static void record(const char *path)
{
    if (machine_file(path)) return;
    pthread_mutex_lock(&record_mu);
    bool seen = !recording;
    for (int i = 0; i < nrecorded && !seen; i++) seen = strcmp(recorded[i], path) == 0;
    if (!seen) {
        if (nrecorded == cap_recorded) {
            cap_recorded = cap_recorded ? 2 * cap_recorded : 16;
            recorded = sp_xrealloc(recorded, (size_t)cap_recorded * sizeof *recorded);
        }
        recorded[nrecorded++] = sp_xstrdup(path);
    }
    pthread_mutex_unlock(&record_mu);
}

int sp_open_regular(const char *path, struct stat *st)
{
    struct stat own;
    if (!st) st = &own;
    /* stat first: opening a FIFO blocks and opening a device can have effects */
    if (stat(path, st) != 0) return sp_error("cannot open %s: %s", path, strerror(errno));
    if (!S_ISREG(st->st_mode)) return sp_error("%s: not a regular file (%s)", path, sp_file_kind(st->st_mode));
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return sp_error("cannot open %s: %s", path, strerror(errno));
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {   /* replaced in between */
        close(fd);
        return sp_error("%s: not a regular file (%s)", path, sp_file_kind(st->st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    record(path);
    return fd;
}

FILE *sp_open_read(const char *path, const char *what)
{
    int fd = sp_open_regular(path, NULL);
    if (fd < 0) {
        if (what && *what) sp_error("%s: %s", what, sp_last_error());
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int err = errno;
        close(fd);
        sp_error("%s%scannot open %s: %s", what ? what : "", what && *what ? ": " : "", path, strerror(err));
    }
    return f;
}

FILE *sp_open_text(const char *path, const char *what)
{
    FILE *f = sp_open_read(path, what);
    if (!f) return NULL;
    char buf[4096];
    size_t n;
    long line = 1, byte = 0;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        for (size_t i = 0; i < n; i++) {
            byte++;
            if (buf[i] == '\n') {
                line++;
                byte = 0;
            } else if (buf[i] == 0) {
                fclose(f);
                sp_error("%s%s%s: line %ld, byte %ld: a NUL byte (expected text)", what ? what : "",
                         what && *what ? ": " : "", path, line, byte);
                return NULL;
            }
        }
    if (ferror(f) || fseek(f, 0, SEEK_SET) != 0) {
        int err = errno;
        fclose(f);
        sp_error("%s%scannot read %s: %s", what ? what : "", what && *what ? ": " : "", path, strerror(err));
        return NULL;
    }
    return f;
}

int sp_pread_full(int fd, void *buf, size_t n, off_t off, const char *path, const char *what)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, off + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return sp_error("%s: read error in %s: %s", path, what, strerror(errno));
        if (r == 0)
            return sp_error("%s: truncated: %s needs %zu bytes at byte %lld, the file ends after %zu",
                            path, what, n, (long long)off, got);
        got += (size_t)r;
    }
    return SP_OK;
}

/* ---------------------------------------------------------------- atomic replace */

static pthread_mutex_t save_lock = PTHREAD_MUTEX_INITIALIZER;
static char cleanup_path[PATH_MAX + 32];
static volatile sig_atomic_t cleanup_active;
static struct sigaction old_int, old_term;
static int hooked_int, hooked_term;

/* Remove the temp file, then die of the signal as if we had not been there. */
static void on_signal(int sig)
{
    int saved = errno;
    if (cleanup_active) unlink(cleanup_path);
    sigaction(sig, sig == SIGINT ? &old_int : &old_term, NULL);
    raise(sig);   /* blocked until we return, then delivered to the old disposition */
    errno = saved;
}

static void hook(int sig, struct sigaction *old, int *hooked)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    *hooked = 0;
    if (sigaction(sig, NULL, old) != 0 || old->sa_handler == SIG_IGN) return;   /* ignored: stay so */
    *hooked = sigaction(sig, &sa, NULL) == 0;
}

static void unhook(void)
{
    cleanup_active = 0;
    if (hooked_int) sigaction(SIGINT, &old_int, NULL);
    if (hooked_term) sigaction(SIGTERM, &old_term, NULL);
    hooked_int = hooked_term = 0;
}

/* "<dir>" and "<base>" of a path. */
static void split_path(const char *path, char *dir, size_t dlen, const char **base)
{
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, dlen, ".");
    else if (slash == path) snprintf(dir, dlen, "/");
    else snprintf(dir, dlen, "%.*s", (int)(slash - path), path);
    *base = slash ? slash + 1 : path;
}

/* Delete "<target>.tmp.<pid>" files whose process is gone (SIGKILL, crash). */
static void remove_stale(const char *target)
{
    char dir[PATH_MAX];
    const char *base;
    split_path(target, dir, sizeof dir, &base);
    size_t blen = strlen(base);
    DIR *dp = opendir(dir);
    if (!dp) return;
    struct dirent *e;
    while ((e = readdir(dp))) {
        const char *n = e->d_name;
        if (strncmp(n, base, blen) != 0 || strncmp(n + blen, ".tmp.", 5) != 0) continue;
        const char *digits = n + blen + 5;
        char *end;
        long pid = strtol(digits, &end, 10);
        if (!*digits || *end || pid <= 0 || pid > INT_MAX || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;   /* alive (or not ours to judge) */
        struct stat st;
        if (fstatat(dirfd(dp), n, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
            unlinkat(dirfd(dp), n, 0);
    }
    closedir(dp);
}

static void atomic_free(sp_atomic_file *a)
{
    free(a->target);
    free(a->tmp);
    a->target = a->tmp = NULL;
    a->fd = -1;
}

/* The file a save to `path` replaces: path itself, or a symlink's resolved target;
 * refused if it exists and is not a regular file. *keep_mode: its permissions (0 if new). */
static int resolve_target(const char *path, char **out, mode_t *keep_mode)
{
    struct stat st;
    char *target = NULL;
    *keep_mode = 0;
    if (lstat(path, &st) != 0) {
        if (errno != ENOENT) return sp_error("cannot write %s: %s (nothing written)", path, strerror(errno));
        target = strdup(path);
    } else {
        if (S_ISLNK(st.st_mode)) {
            target = realpath(path, NULL);
            if (!target)
                return sp_error("%s: a symbolic link whose target cannot be resolved: %s (nothing written)",
                                path, strerror(errno));
            if (stat(target, &st) != 0) {
                int err = errno;
                free(target);
                return sp_error("cannot write %s: %s (nothing written)", path, strerror(err));
            }
        }
        if (!S_ISREG(st.st_mode)) {
            sp_error("%s%s%s exists and is %s, not a regular file: refusing to replace it (nothing written)",
                     path, target ? " -> " : "", target ? target : "", sp_file_kind(st.st_mode));
            free(target);
            return SP_ERR;
        }
        *keep_mode = st.st_mode & 07777;
        if (!target) target = strdup(path);
    }
    if (!target) return sp_error("%s: out of memory", path);
    *out = target;
    return SP_OK;
}

int sp_check_save_target(const char *path)
{
    char *target;
    mode_t mode;
    if (resolve_target(path, &target, &mode) != SP_OK) return SP_ERR;
    char dir[PATH_MAX];
    const char *base;
    split_path(target, dir, sizeof dir, &base);
    int rc = access(dir, W_OK | X_OK) == 0 ? SP_OK
             : sp_error("cannot write %s: directory %s: %s", path, dir, strerror(errno));
    free(target);
    return rc;
}

int sp_atomic_begin(sp_atomic_file *a, const char *path)
{
    *a = (sp_atomic_file){.fd = -1};
    mode_t keep_mode;
    char *target;
    if (resolve_target(path, &target, &keep_mode) != SP_OK) return SP_ERR;
    size_t tlen = strlen(target) + 32;
    char *tmp = malloc(tlen);
    if (!tmp || tlen > sizeof cleanup_path) {
        free(target);
        free(tmp);
        return sp_error("%s: path too long (nothing written)", path);
    }
    snprintf(tmp, tlen, "%s.tmp.%ld", target, (long)getpid());
    a->target = target;
    a->tmp = tmp;

    pthread_mutex_lock(&save_lock);
    remove_stale(target);
    memcpy(cleanup_path, tmp, strlen(tmp) + 1);
    cleanup_active = 1;
    hook(SIGINT, &old_int, &hooked_int);
    hook(SIGTERM, &old_term, &hooked_term);
    unlink(tmp);   /* our own leftover, if a failed save of this process left one */
    a->fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (a->fd < 0) {
        int err = errno;
        unhook();
        pthread_mutex_unlock(&save_lock);
        sp_error("%s: cannot create %s: %s (nothing written)", path, tmp, strerror(err));
        atomic_free(a);
        return SP_ERR;
    }
    if (keep_mode) fchmod(a->fd, keep_mode);
    return SP_OK;
}

int sp_atomic_write(sp_atomic_file *a, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(a->fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int err = w < 0 ? errno : EIO;   /* kept for the caller's own message (sp_out) */
            sp_error("cannot write %s: %s (the existing file, if any, is unchanged)", a->target,
                     w < 0 ? strerror(err) : "no progress");
            errno = err;
            return SP_ERR;
        }
        p += w;
        n -= (size_t)w;
    }
    return SP_OK;
}

/* Make the rename durable. Best effort: the new file is already complete and in place,
 * and some file systems refuse fsync on directories. */
static void fsync_parent_dir(const char *path)
{
    char dir[PATH_MAX];
    const char *base;
    split_path(path, dir, sizeof dir, &base);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

static void end_save(sp_atomic_file *a, bool remove_tmp)
{
    if (remove_tmp) unlink(a->tmp);
    unhook();
    pthread_mutex_unlock(&save_lock);
    atomic_free(a);
}

int sp_atomic_commit(sp_atomic_file *a)
{
    int err = 0;
    if (fsync(a->fd) != 0) err = errno;
    if (close(a->fd) != 0 && !err) err = errno;
    a->fd = -1;
    if (!err && rename(a->tmp, a->target) != 0) err = errno;
    if (err) {
        sp_error("cannot write %s: %s (the existing file, if any, is unchanged)", a->target, strerror(err));
        end_save(a, true);
        errno = err;
        return SP_ERR;
    }
    fsync_parent_dir(a->target);
    end_save(a, false);
    return SP_OK;
}

void sp_atomic_abort(sp_atomic_file *a)
{
    if (!a->tmp) return;
    if (a->fd >= 0) close(a->fd);
    end_save(a, true);
}

/* ---------------------------------------------------------------- outputs */

int sp_out_open(sp_out *o, const char *path, const char *what)
{
    *o = (sp_out){0};
    char *target;
    mode_t mode;
    /* the checks a save makes, now: nothing that is not a regular file is ever opened */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return sp_error("%s %s: cannot open for writing: it is %s, not a regular file", what, path,
                        sp_file_kind(st.st_mode));
    if (resolve_target(path, &target, &mode) != SP_OK)
        return sp_error("%s %s: cannot open for writing: %s", what, path, sp_last_error());
    char dir[PATH_MAX];
    const char *base;
    split_path(target, dir, sizeof dir, &base);
    int err = access(dir, W_OK | X_OK) == 0 ? 0 : errno;
    free(target);
    if (err) return sp_error("%s %s: cannot open for writing: %s (directory %s)", what, path, strerror(err), dir);
    o->path = strdup(path);
    o->what = strdup(what);
    o->f = o->path && o->what ? open_memstream(&o->buf, &o->len) : NULL;
    if (!o->f) {
        err = errno;
        free(o->path);
        free(o->what);
        *o = (sp_out){0};
        return sp_error("%s %s: cannot open for writing: %s", what, path, strerror(err));
    }
    return SP_OK;
}

int sp_out_flush(sp_out *o)
{
    if (!o->f) return sp_error("%s %s: write failed: the output is closed", o->what, o->path);
    if (fflush(o->f) != 0 || ferror(o->f))
        return sp_error("%s %s: write failed: %s (the existing file is unchanged)", o->what, o->path,
                        strerror(errno ? errno : ENOMEM));
    sp_atomic_file a;
    if (sp_atomic_begin(&a, o->path) != SP_OK)
        return sp_error("%s %s: cannot open for writing: %s", o->what, o->path, sp_last_error());
    if (sp_atomic_write(&a, o->buf, o->len) != SP_OK) {
        int err = errno;
        sp_atomic_abort(&a);
        return sp_error("%s %s: write failed: %s (the existing file is unchanged)", o->what, o->path, strerror(err));
    }
    if (sp_atomic_commit(&a) != SP_OK)
        return sp_error("%s %s: write failed: %s (the existing file is unchanged)", o->what, o->path, strerror(errno));
    return SP_OK;
}

void sp_out_abort(sp_out *o)
{
    if (o->f) fclose(o->f);
    free(o->buf);
    free(o->path);
    free(o->what);
    *o = (sp_out){0};
}

int sp_out_commit(sp_out *o)
{
    int rc = sp_out_flush(o);
    sp_out_abort(o);
    return rc;
}
