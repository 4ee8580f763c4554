/* datatest.h — helpers shared by the dataset suites (test_data.c, test_data_rows.c): a
 * call that must succeed, a call that must be refused with a given message, the suites'
 * short names for testutil.h's temporary files, and the big-endian counts of IDX headers. */
#ifndef SP_DATATEST_H
#define SP_DATATEST_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>
#include "core/error.h"
#include "tests/testutil.h"

/* The call returned SP_OK; otherwise the test fails with its message. */
#define OK(call) cr_assert_eq((call), SP_OK, "%s", sp_last_error())

/* The call failed (NULL / SP_ERR) and its message holds `needle`. */
#define REFUSED(call, needle)                                                                          \
    do {                                                                                               \
        sp_clear_error();                                                                              \
        cr_assert(!(call), #call " succeeded");                                                        \
        cr_assert(strstr(sp_last_error(), needle), "error \"%s\" lacks \"%s\"", sp_last_error(), needle); \
    } while (0)

#define tmp_path tu_tmp_path

#define write_file tu_write_file

/* v as the 4 big-endian bytes of an IDX header field (magic, counts, sizes). */
static inline void put_be32(unsigned char *b, uint32_t v)
{
    for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (24 - 8 * i));
}

#endif
