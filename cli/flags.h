/* flags.h — the command-line flag parser every program of scanprop uses: a table of
 * flags, one line each, and one call. What a flag takes, its valid values, its range and
 * what it needs are data in the table, so --help and the refusals are written from it:
 *
 *   {"hidden", SP_FLAG_INT, &hidden, "hidden size", .range = "1.."},
 *   {"order", SP_FLAG_STR, &order, "task order", .choices = "ooo|list", .needs = "backward=ooo"},
 *
 * A flag that does not apply is refused with one line and exit 2 ("--order needs
 * --backward ooo"), and so is a flag given twice; the training runner's common flags are
 * in cli/run.h. */
#ifndef SP_FLAGS_H
#define SP_FLAGS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SP_FLAG_STR, SP_FLAG_INT, SP_FLAG_LONG, SP_FLAG_DOUBLE, SP_FLAG_BOOL, SP_FLAG_U64 } sp_flag_kind;

typedef struct sp_flag {
    const char *name;      /* without the leading "--"                                      */
    sp_flag_kind kind;
    void *dst;             /* const char **, int *, long *, double *, bool *, uint64_t *    */
    const char *help;
    /* optional (designated initialisers) */
    const char *group;     /* --help heading; NULL: the program's own flags                 */
    const char *choices;   /* STR: the only valid values, "a|b|c"; BOOL: the values --name=V
                            * may take (written to `value`; --help does not list them)    */
    const char *range;     /* INT/LONG/U64/DOUBLE: "LO..HI", "LO.." or "..HI", inclusive       */
    const char *needs;     /* conditions, all must hold: "backward=ooo", "order=a|b", "data"
                            * (that flag given), "!layerpipe" (not given); joined by ','       */
    const char *meta;      /* value placeholder in --help (default N, X or S)                */
    const char *def;       /* the default as --help shows it (default: the current value)    */
    unsigned scope;        /* the training runner's common flags: SP_SCOPE_*; 0 = always     */
    const char **value;    /* BOOL with choices: the V of the last --name=V (left as it was
                            * when --name is given without one)                             */
    const char *const *aliases;   /* STR with choices: pairs {"alias", "choice", …, NULL}:
                            * another value users may type for a choice, stored (and
                            * checked against `needs`) as that choice; --help names them  */
    bool set;              /* given on the command line (filled by the parser)               */
} sp_flag;

/* Parses argv against `flags` (ends with name == NULL). --help prints usage (every
 * default, every valid value, flags grouped) and exits 0; an unknown flag ("did you mean
 * --batch?"), a bad value ("--scheme gpip: expected ...; did you mean gpipe?"), a value out
 * of range, a flag given twice or a flag whose `needs` fail: one line, exit 2. Registers
 * the check of stdout at exit (sp_stdout_check). */
void sp_flags_parse(int argc, char **argv, const char *app, const char *summary, sp_flag *flags);
/* The same, where `others` (NULL-terminated, may be NULL) are flags that exist but not in
 * this program: given one, the refusal says it "does not apply to" the program. */
void sp_flags_parse_among(int argc, char **argv, const char *app, const char *summary, sp_flag *flags,
                          const sp_flag *others);
/* "; did you mean X?" for the value v of a flag whose valid values are choices ("a|b|c"),
 * or "" if none is close (the parser's refusal of a bad value adds it; other refusals of
 * a name from a list may too). Returns buf. */
const char *sp_flag_suggest(const char *value, const char *choices, char *buf, size_t len);
/* Started by mpirun as a rank other than 0 (Open MPI's OMPI_COMM_WORLD_RANK): a refusal of
 * the command line is rank 0's to print, once. Between begin and end (the parse does so
 * itself; the runner around its checks after the parse) such a rank's stderr goes to
 * /dev/null; the exit status is the same on every rank. */
bool sp_flags_quiet_rank(void);
void sp_flags_quiet_begin(void);
void sp_flags_quiet_end(void);
/* After a parse: whether --name was given. */
bool sp_flag_given(const char *name);
/* After a parse: the flags of the table, in order, each with a hash of the value the
 * program will use (given or default: name and full-precision text), so that the MPI
 * ranks of one job can compare their settings (cli/run_parallel.c). Flags
 * named in `skip` ("a|b", may be NULL) are left out. Returns how many were written (at
 * most cap). */
typedef struct sp_flag_digest {
    const char *name;
    uint32_t hash;
} sp_flag_digest;
int sp_flags_digest(sp_flag_digest *out, int cap, const char *skip);
/* The value of --name as the digest hashes it ("" if not a flag of the last parse). */
const char *sp_flag_value_text(const char *name, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
