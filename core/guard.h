/* guard.h — the public entry points outside core/ that are fallible (error.h's first kind)
 * but built on code whose checks are sp_fail: SP_GUARD(fail) as the first statement of
 * such a function makes an sp_fail anywhere below it, in this thread, return `fail` from
 * the function with the message in sp_last_error() instead of ending the process.
 *
 * Only when no sp_try is active: inside one (sp_train's loop, an embedding program's own
 * sp_try) the guard does nothing and an sp_fail goes to that sp_try as before, so the
 * calls inside a step cost one thread-local test. Outside, it costs one setjmp. What the
 * function allocated before the failing check is its to free: put construction checks
 * before allocation, as the constructors do. The function must not hold a lock across an
 * sp_fail (the same rule as sp_try's). Not part of scanprop.h. */
#ifndef SP_GUARD_H
#define SP_GUARD_H

#include <setjmp.h>

typedef struct sp_guard {
    jmp_buf frame;
    void *outer;   /* the frame active before (NULL: none) */
    int armed;     /* 1: this guard's frame is the active one */
} sp_guard;

/* 1 when no sp_try or guard was active and g's frame now is; 0 otherwise. */
int sp_guard_enter(sp_guard *g);
/* Restores the frame active before g (on every way out of the guarded function). */
void sp_guard_leave(sp_guard *g);
/* 1 inside an sp_try or a guarded call in this thread. */
int sp_try_active(void);
/* The apps' layer (core/error.h's third kind): from now on no guard of this process arms,
 * and sp_refuse outside sp_try is sp_fail (core/error.h), so a refused call ends the
 * program with its one line and exit 2, as the apps document
 * (sp_flags_parse and sp_run_parse call it: main() has no status to look at). */
void sp_guard_off(void);

#define SP_GUARD(fail)                                                            \
    __attribute__((cleanup(sp_guard_leave))) sp_guard sp_guard_frame_;            \
    if (!sp_guard_enter(&sp_guard_frame_)) {                                      \
    } else if (setjmp(sp_guard_frame_.frame))                                     \
        return fail

#endif
