/* fuzz.c — the libFuzzer harness; built once per target with -DFZ_RUN=fz_<target>
 * (targets.c), clang -fsanitize=fuzzer,address,undefined: make fuzz. The readers return
 * an error status on a bad input, so a call that exits (libFuzzer: "fuzz target
 * exited"), crashes, trips a sanitizer or leaks is a finding. */
#include "tests/fuzz/targets.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sp_clear_error();
    FZ_RUN(data, size);
    return 0;
}
