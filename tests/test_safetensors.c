/* test_safetensors.c — the safetensors reader against hand-assembled bytes, the writer
 * by round trip, every corrupt-file class (exit 2), model checkpoints, atomic saves. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "core/model.h"
#include "core/safetensors.h"
#include "layers/layers.h"
#include "tests/testutil.h"

/* sp_fail exits from deep inside a call: what was allocated on the way is still held
 * but no longer referenced, and LeakSanitizer would call it leaked at exit. Tests that
 * end in sp_fail ignore allocations made after this (a no-op without ASan). */
void __lsan_disable(void) __attribute__((weak));
static void exits_2(void)
{
    if (__lsan_disable) __lsan_disable();
}

/* .init of a test that must exit 2: no leak report, the one-line error captured and checked */
static void quiet_exit_2(void)
{
    exits_2();
    tu_capture_stderr();
}

/* ---------------------------------------------------------------- helpers */

static const char *tmp_path(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", tu_tmpdir(), name);
    return p;
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *fp = fopen(path, "wb");
    cr_assert(fp, "cannot create %s", path);
    cr_assert_eq(fwrite(data, 1, n, fp), n);
    fclose(fp);
}

static size_t read_bytes(const char *path, void *buf, size_t cap)
{
    FILE *fp = fopen(path, "rb");
    cr_assert(fp, "cannot open %s", path);
    size_t n = fread(buf, 1, cap, fp);
    fclose(fp);
    return n;
}

/* A safetensors file: 8-byte length, header as given, then the data bytes. */
static void write_st(const char *path, const char *header, const void *data, size_t ndata)
{
    uint64_t h = strlen(header);
    static unsigned char buf[1 << 16];
    cr_assert_lt(8 + h + ndata, sizeof buf);
    memcpy(buf, &h, 8);
    memcpy(buf + 8, header, h);
    if (ndata) memcpy(buf + 8 + h, data, ndata);
    write_bytes(path, buf, 8 + h + ndata);
}

/* Runs fn(arg) in a child; err gets the first line of its stderr. Returns the exit
 * status (-1 if killed). */
static int run_child(void (*fn)(const void *), const void *arg, char *err, size_t len)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        exits_2();
        dup2(fds[1], 2);
        close(fds[0]);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    size_t k = 0;
    ssize_t r;
    while (k + 1 < len && (r = read(fds[0], err + k, len - 1 - k)) > 0) k += (size_t)r;
    err[k] = 0;
    char *nl = strchr(err, '\n');   /* the error is one line; sanitizers may add more */
    if (nl) nl[1] = 0;
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void open_and_close(const void *path)
{
    sp_st_close(sp_st_open(path));
}

/* ---------------------------------------------------------------- reader */

Test(safetensors, reads_hand_assembled_file)
{
    /* w: F32 [2, 2]; ids: I64 [3]; d: F64 [2]; h: F16 [4]; b: BF16 [1]; a name with
     * escapes; unpadded header, tensors not in offset order. */
    const char *header =
        "{\"ids\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[16,40]},"
        " \"w\" : {\"shape\":[2,2],\"dtype\":\"F32\",\"data_offsets\":[0,16]},\n"
        "\"d\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[40,56]},"
        "\"h\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[56,64]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[64,66]},"
        "\"q\\\"\\u00e9\\ud83d\\ude00\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[66,67]},"
        "\"__metadata__\":{\"format\":\"pt\",\"note\":\"a\\nb\"}}";
    unsigned char data[67];
    float w[4] = {1.5f, -2.0f, 0.25f, 1e-30f};
    int64_t ids[3] = {7, -3, 2147483647};
    double d[2] = {0.1, -1e10};
    uint16_t h[4] = {0x3C00, 0xC000, 0x0001, 0x7C00}, b = 0x3F80;
    memcpy(data, w, 16);
    memcpy(data + 16, ids, 24);
    memcpy(data + 40, d, 16);
    memcpy(data + 56, h, 8);
    memcpy(data + 64, &b, 2);
    data[66] = 200;
    const char *path = tmp_path("hand.safetensors");
    write_st(path, header, data, sizeof data);

    sp_st_file *f = sp_st_open(path);
    cr_assert_eq(sp_st_count(f), 6);
    cr_assert_str_eq(sp_st_at(f, 0)->name, "ids", "header order is kept");
    cr_assert_str_eq(sp_st_metadata(f, "format"), "pt");
    cr_assert_str_eq(sp_st_metadata(f, "note"), "a\nb");
    cr_assert_null(sp_st_metadata(f, "absent"));
    cr_assert_null(sp_st_find(f, "absent"));
    const sp_st_tensor *q = sp_st_find(f, "q\"\xc3\xa9\xf0\x9f\x98\x80");
    cr_assert_not_null(q, "escaped name decoded to UTF-8");
    cr_assert_eq(q->ndim, 0);
    cr_assert_eq(q->numel, 1);

    float got[4];
    sp_st_read_f32(f, "w", got, 2, (int[]){2, 2});
    cr_assert_eq(memcmp(got, w, sizeof w), 0);
    int32_t gi[3];
    sp_st_read_i32(f, "ids", gi, 1, (int[]){3});
    cr_assert(gi[0] == 7 && gi[1] == -3 && gi[2] == 2147483647);
    float gd[2];
    sp_st_read_f32(f, "d", gd, 1, (int[]){2});
    cr_assert(gd[0] == 0.1f && gd[1] == -1e10f, "F64 converted: %g %g", gd[0], gd[1]);
    float gh[4];
    sp_st_read_f32(f, "h", gh, 1, (int[]){4});
    cr_assert(gh[0] == 1.0f && gh[1] == -2.0f && gh[2] == ldexpf(1.0f, -24) && isinf(gh[3]),
              "F16: %g %g %g %g", gh[0], gh[1], gh[2], gh[3]);
    float gb;
    sp_st_read_f32(f, "b", &gb, 1, (int[]){1});
    cr_assert_eq(gb, 1.0f);
    int32_t gu;
    sp_st_read_i32(f, q->name, &gu, 0, NULL);
    cr_assert_eq(gu, 200);
    sp_st_close(f);
}

Test(safetensors, round_trip_is_bit_exact)
{
    float a[24], b[5] = {NAN, -0.0f, INFINITY, 1e-45f, -3.5f}, c[1] = {42.0f};
    tu_fill_uniform(a, 24, 3, -10.0f, 10.0f);
    sp_tensor ta = sp_tensor_view(a, 4, (int[]){2, 3, 2, 2}), tb = sp_tensor_view(b, 1, (int[]){5}),
              tc = sp_tensor_view(c, 2, (int[]){1, 1});
    const char *names[] = {"conv.weight", "odd \"name\"\\", "x"};
    const sp_tensor *ts[] = {&ta, &tb, &tc};
    const char *meta[] = {"epoch", "3", "format", "ignored", NULL};
    const char *path = tmp_path("rt.safetensors");
    sp_st_save(path, 3, names, ts, meta);

    unsigned char raw[1024];
    size_t n = read_bytes(path, raw, sizeof raw);
    uint64_t hlen;
    memcpy(&hlen, raw, 8);
    cr_assert_eq(hlen % 8, 0, "header padded to 8 bytes so the data is aligned");
    cr_assert_eq(n, 8 + hlen + 4 * (24 + 5 + 1));

    sp_st_file *f = sp_st_open(path);
    cr_assert_str_eq(sp_st_metadata(f, "format"), "pt");
    cr_assert_str_eq(sp_st_metadata(f, "scanprop_version"), SP_SCANPROP_VERSION);
    cr_assert_str_eq(sp_st_metadata(f, "epoch"), "3");
    float ga[24], gb[5], gc[1];
    sp_st_read_f32(f, "conv.weight", ga, 4, (int[]){2, 3, 2, 2});
    sp_st_read_f32(f, "odd \"name\"\\", gb, 1, (int[]){5});
    sp_st_read_f32(f, "x", gc, 2, (int[]){1, 1});
    cr_assert_eq(memcmp(ga, a, sizeof a), 0);
    cr_assert_eq(memcmp(gb, b, sizeof b), 0, "NaN, -0, inf, denormal kept bit for bit");
    cr_assert_eq(memcmp(gc, c, sizeof c), 0);
    cr_assert_eq(sp_st_find(f, "x")->dtype, SP_ST_F32);
    sp_st_close(f);
}

Test(safetensors, integer_entries_round_trip)
{
    int64_t y[4] = {0, 9, -1, 5};
    uint8_t u[3] = {0, 128, 255};
    sp_st_entry e[2] = {{"y", SP_ST_I64, 1, (int[]){4}, y}, {"u", SP_ST_U8, 2, (int[]){1, 3}, u}};
    const char *path = tmp_path("ints.safetensors");
    sp_st_write(path, 2, e, NULL);
    sp_st_file *f = sp_st_open(path);
    int32_t gy[4], gu[3];
    sp_st_read_i32(f, "y", gy, 1, (int[]){4});
    sp_st_read_i32(f, "u", gu, 2, (int[]){1, 3});
    for (int i = 0; i < 4; i++) cr_assert_eq(gy[i], y[i]);
    for (int i = 0; i < 3; i++) cr_assert_eq(gu[i], u[i]);
    sp_st_close(f);
}

/* ---------------------------------------------------------------- corrupt files: exit 2 */

/* Inline strings: Criterion copies parameters into the test's process. */
typedef struct bad_case { char name[32], header[200]; size_t ndata; } bad_case;

static bad_case bad_cases[] = {
    {"bad_json_missing_colon", "{\"w\" {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"bad_json_trailing_comma", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}", 4},
    {"bad_json_unterminated", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4},
    {"bad_json_garbage_after", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4},
    {"bad_json_not_object", "[1, 2]", 0},
    {"bad_json_bad_escape", "{\"w\\q\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"bad_json_lone_surrogate", "{\"\\ud800\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"negative_dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4},
    {"fractional_dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4},
    {"unknown_key", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4},
    {"missing_dtype", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"duplicate_tensor", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                         "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8},
    {"metadata_not_string", "{\"__metadata__\":{\"epoch\":3}}", 0},
    {"unknown_dtype", "{\"w\":{\"dtype\":\"F8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1},
    {"shape_offset_mismatch", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24},
    {"offsets_reversed", "{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4},
    {"offsets_out_of_bounds", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4},
    {"offsets_overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12},
};

ParameterizedTestParameters(safetensors_corrupt, header)
{
    return cr_make_param_array(bad_case, bad_cases, sizeof bad_cases / sizeof *bad_cases);
}

ParameterizedTest(bad_case *c, safetensors_corrupt, header, .exit_code = 2, .init = quiet_exit_2)
{
    static unsigned char zeros[64];
    const char *path = tmp_path(c->name);
    write_st(path, c->header, zeros, c->ndata);
    sp_st_close(sp_st_open(path));
}

Test(safetensors_corrupt, file_shorter_than_length_field, .exit_code = 2, .init = quiet_exit_2)
{
    const char *path = tmp_path("short.safetensors");
    write_bytes(path, "\x10\0\0\0\0", 5);
    sp_st_open(path);
}

Test(safetensors_corrupt, header_length_beyond_file, .exit_code = 2, .init = quiet_exit_2)
{
    const char *path = tmp_path("long.safetensors");
    unsigned char b[16] = {200};
    memcpy(b + 8, "{}      ", 8);
    write_bytes(path, b, sizeof b);
    sp_st_open(path);
}

Test(safetensors_corrupt, truncated_data, .exit_code = 2, .init = quiet_exit_2)
{
    /* A valid file cut in the middle of its data. */
    float v[8] = {0};
    sp_tensor t = sp_tensor_view(v, 1, (int[]){8});
    const sp_tensor *ts[] = {&t};
    const char *path = tmp_path("cut.safetensors");
    sp_st_save(path, 1, (const char *[]){"v"}, ts, NULL);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(truncate(path, st.st_size - 5), 0);
    sp_st_open(path);
}

Test(safetensors_corrupt, missing_file, .exit_code = 2, .init = quiet_exit_2) { sp_st_open(tmp_path("does-not-exist")); }

Test(safetensors_corrupt, missing_tensor, .exit_code = 2, .init = quiet_exit_2)
{
    const char *path = tmp_path("one.safetensors");
    write_st(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "\0\0\0\0", 4);
    float x;
    sp_st_read_f32(sp_st_open(path), "v", &x, 1, (int[]){1});
}

Test(safetensors_corrupt, float_read_as_labels, .exit_code = 2, .init = quiet_exit_2)
{
    const char *path = tmp_path("f.safetensors");
    write_st(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "\0\0\0\0", 4);
    int32_t y;
    sp_st_read_i32(sp_st_open(path), "w", &y, 1, (int[]){1});
}

static void read_wrong_shape(const void *path)
{
    float x[6];
    sp_st_read_f32(sp_st_open(path), "w", x, 2, (int[]){3, 2});
}

Test(safetensors, wrong_shape_message_names_both_shapes)
{
    const char *path = tmp_path("w23.safetensors");
    static unsigned char zeros[24];
    write_st(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", zeros, 24);
    char err[512], want[700];
    cr_assert_eq(run_child(read_wrong_shape, path, err, sizeof err), 2);
    snprintf(want, sizeof want, "scanprop: %s: w has shape [2, 3], expected [3, 2]\n", path);
    cr_assert_str_eq(err, want);
}

static void open_bad_json(const void *path) { open_and_close(path); }

Test(safetensors, bad_json_message_names_file_and_byte)
{
    const char *path = tmp_path("badjson.safetensors");
    write_st(path, "{\"w\" 1}", NULL, 0);
    char err[512], want[700];
    cr_assert_eq(run_child(open_bad_json, path, err, sizeof err), 2);
    snprintf(want, sizeof want, "scanprop: %s: bad safetensors header at byte 13: expected ':'\n", path);
    cr_assert_str_eq(err, want);
}

/* ---------------------------------------------------------------- models */

static sp_model *small_model(int cin, uint64_t seed)
{
    sp_model *m = sp_model_new("tiny");
    sp_model_add(m, sp_conv2d("conv1", cin, 6, 5, 1, 2));
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_flatten());
    sp_model_add(m, sp_linear("fc", 6 * 4 * 4, 10));
    sp_model_init(m, seed);
    return m;
}

Test(model_ckpt, save_then_load_is_bit_exact)
{
    sp_model *a = small_model(1, 1), *b = small_model(1, 2);
    const char *path = tmp_path("model.safetensors");
    cr_assert_neq(memcmp(a->params[0]->value.data, b->params[0]->value.data, 4 * 150), 0);
    sp_model_save(a, path);
    sp_model_load(b, path);
    for (int i = 0; i < a->nparams; i++)
        cr_assert_eq(memcmp(a->params[i]->value.data, b->params[i]->value.data, a->params[i]->value.numel * 4), 0,
                     "%s differs after load", a->params[i]->name);
    sp_st_file *f = sp_st_open(path);
    cr_assert_str_eq(sp_st_metadata(f, "scanprop_model"), "tiny");
    cr_assert_not_null(sp_st_find(f, "conv1.weight"));
    cr_assert_not_null(sp_st_find(f, "fc.bias"));
    sp_st_close(f);
    sp_model_free(a);
    sp_model_free(b);
}

static void load_into_3ch(const void *path)
{
    sp_model *m = small_model(3, 1);
    sp_model_load(m, path);
}

Test(model_ckpt, wrong_shape_is_one_precise_line)
{
    sp_model *a = small_model(1, 1);
    const char *path = tmp_path("ckpt.safetensors");
    sp_model_save(a, path);
    char err[512], want[700];
    cr_assert_eq(run_child(load_into_3ch, path, err, sizeof err), 2);
    snprintf(want, sizeof want, "scanprop: %s: conv1.weight has shape [6, 1, 5, 5], expected [6, 3, 5, 5]\n", path);
    cr_assert_str_eq(err, want);
    sp_model_free(a);
}

Test(model_ckpt, wrong_shape_exits_2, .exit_code = 2, .init = quiet_exit_2)
{
    sp_model *a = small_model(1, 1);
    const char *path = tmp_path("ckpt2.safetensors");
    sp_model_save(a, path);
    load_into_3ch(path);
}

static void load_into_small(const void *path)
{
    sp_model *m = small_model(1, 1);
    sp_model_load(m, path);
}

Test(model_ckpt, missing_and_unexpected_names)
{
    float w[6 * 25], extra[2] = {0};
    sp_tensor tw = sp_tensor_view(w, 4, (int[]){6, 1, 5, 5}), te = sp_tensor_view(extra, 1, (int[]){2});
    const sp_tensor *ts[] = {&tw, &te};
    const char *path = tmp_path("partial.safetensors");
    sp_st_save(path, 2, (const char *[]){"conv1.weight", "conv2.bias"}, ts, NULL);
    char err[512], want[700];
    cr_assert_eq(run_child(load_into_small, path, err, sizeof err), 2);
    snprintf(want, sizeof want,
             "scanprop: %s: missing tensor conv1.bias (expected shape [6]); and 3 more problems\n", path);
    cr_assert_str_eq(err, want);

    /* Only an unexpected name: named as such. */
    sp_model *a = small_model(1, 1);
    int n = a->nparams;
    const char *names[8];
    const sp_tensor *all[8];
    for (int i = 0; i < n; i++) {
        names[i] = a->params[i]->name;
        all[i] = &a->params[i]->value;
    }
    names[n] = "conv2.bias";
    all[n] = &te;
    sp_st_save(path, n + 1, names, all, NULL);
    cr_assert_eq(run_child(load_into_small, path, err, sizeof err), 2);
    snprintf(want, sizeof want, "scanprop: %s: unexpected tensor conv2.bias (model tiny has no such parameter)\n",
             path);
    cr_assert_str_eq(err, want);
    sp_model_free(a);
}

/* ---------------------------------------------------------------- atomic saves */

static void save_small(const void *path)
{
    float v[1000];
    for (int i = 0; i < 1000; i++) v[i] = (float)i;
    sp_tensor t = sp_tensor_view(v, 1, (int[]){1000});
    const sp_tensor *ts[] = {&t};
    sp_st_save(path, 1, (const char *[]){"new"}, ts, NULL);
}

static bool has_temp_files(void)
{
    DIR *d = opendir(tu_tmpdir());
    struct dirent *e;
    bool found = false;
    while ((e = readdir(d))) found |= strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return found;
}

Test(safetensors_atomic, nonexistent_directory_exits_2, .exit_code = 2, .init = quiet_exit_2)
{
    save_small(tmp_path("no/such/dir/x.safetensors"));
}

static void save_with_blocked_temp(const void *path)
{
    /* The temp name is "<path>.tmp.<pid>": make it a directory so it cannot be opened. */
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", (const char *)path, (long)getpid());
    mkdir(tmp, 0700);
    save_small(path);
}

static void save_with_tiny_file_limit(const void *path)
{
    /* The write fails half way (EFBIG), as on a full disk. */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {256, 256};
    setrlimit(RLIMIT_FSIZE, &rl);
    save_small(path);
}

Test(safetensors_atomic, failed_saves_keep_the_old_file)
{
    const char *path = tmp_path("keep.safetensors");
    const char old[] = "previous checkpoint bytes";
    write_bytes(path, old, sizeof old);
    char err[512], now[128];

    cr_assert_eq(run_child(save_with_blocked_temp, path, err, sizeof err), 2, "stderr: %s", err);
    cr_assert(strstr(err, "cannot create"), "message: %s", err);
    cr_assert_eq(read_bytes(path, now, sizeof now), sizeof old);
    cr_assert_eq(memcmp(now, old, sizeof old), 0, "old file changed after a failed create");

    cr_assert_eq(run_child(save_with_tiny_file_limit, path, err, sizeof err), 2, "stderr: %s", err);
    cr_assert(strstr(err, "unchanged"), "message: %s", err);
    cr_assert_eq(read_bytes(path, now, sizeof now), sizeof old);
    cr_assert_eq(memcmp(now, old, sizeof old), 0, "old file changed after a failed write");

    /* The failed child's blocked temp is a directory we made; remove it, then no temp
     * file may be left behind by the failed write. */
    DIR *d = opendir(tu_tmpdir());
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.") && snprintf(p, sizeof p, "%s/%s", tu_tmpdir(), e->d_name) > 0) rmdir(p);
    closedir(d);
    cr_assert(!has_temp_files(), "a temp file was left behind");
}

Test(safetensors_atomic, replaces_by_rename_not_in_place)
{
    /* A hard link to the old file still shows the old bytes after the save: the target
     * name was pointed at a new inode, the old one was never written to. */
    const char *path = tmp_path("swap.safetensors"), *link_path = tmp_path("swap.old");
    const char old[] = "old";
    write_bytes(path, old, sizeof old);
    cr_assert_eq(link(path, link_path), 0);
    save_small(path);
    char now[16];
    cr_assert_eq(read_bytes(link_path, now, sizeof now), sizeof old);
    cr_assert_str_eq(now, "old");
    sp_st_file *f = sp_st_open(path);
    float v[1000];
    sp_st_read_f32(f, "new", v, 1, (int[]){1000});
    cr_assert_eq(v[999], 999.0f);
    sp_st_close(f);
    cr_assert(!has_temp_files());
}
