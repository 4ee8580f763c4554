/* fuzz.c — the libFuzzer harness; built once per target with -DFZ_RUN=fz_<target>
 * (targets.c), clang -fsanitize=fuzzer,address,undefined: make fuzz.
 *
 * FZ_WRAP_FAIL: while a reader still reports a bad file with one line and exit(2)
 * (sp_fail), the harness is linked with -Wl,--wrap=sp_fail and a refusal jumps back
 * here instead of ending the process (files it left open are closed; what it
 * allocated is not freed, so leak detection is off in that mode). */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include "tests/fuzz/targets.c"

#ifdef FZ_WRAP_FAIL
static jmp_buf fz_jmp;
static volatile int fz_armed;

void __wrap_sp_fail(const char *fmt, ...);
void __wrap_sp_fail(const char *fmt, ...)
{
    if (fz_armed) longjmp(fz_jmp, 1);
    va_list ap;
    va_start(ap, fmt);
    fputs("scanprop: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

#define FZ_FDS 256
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
#ifdef FZ_WRAP_FAIL
    static unsigned char open_before[FZ_FDS];
    for (int fd = 3; fd < FZ_FDS; fd++) open_before[fd] = fcntl(fd, F_GETFD) != -1;
    if (setjmp(fz_jmp) == 0) {
        fz_armed = 1;
        FZ_RUN(data, size);
    }
    fz_armed = 0;
    for (int fd = 3; fd < FZ_FDS; fd++)
        if (!open_before[fd] && fcntl(fd, F_GETFD) != -1) close(fd);
#else
    FZ_RUN(data, size);
#endif
    return 0;
}
