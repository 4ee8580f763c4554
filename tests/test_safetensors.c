/* test_safetensors.c — the safetensors reader against hand-assembled bytes, the writer
 * by round trip, every corrupt-file class (an error status and its message), model
 * checkpoints, atomic saves, and the file and device defects of issue 19. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "schedulers/backward/engine.h"
#include "core/model.h"
#include "core/io/safetensors.h"
#include "core/io/model_io.h"
#include "layers/layers.h"
#include "layers/zoo.h"
#include "optim/optim.h"
#include "optim/prune.h"
#include "tests/testutil.h"

/* Fallible calls return SP_OK / SP_ERR (or NULL) with the message in sp_last_error(). */
#define OK(call) cr_assert_eq((call), SP_OK, "%s", sp_last_error())

static void assert_error_has(const char *needle)
{
    cr_assert(strstr(sp_last_error(), needle), "error \"%s\" lacks \"%s\"", sp_last_error(), needle);
}

/* ---------------------------------------------------------------- helpers */

#define tmp_path tu_tmp_path

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

    cr_assert_eq(memcmp(sp_st_find(f, "w")->data, w, sizeof w), 0, "data maps the tensor's bytes");
    cr_assert_eq(sp_st_find(f, "d")->offset, 8 + strlen(header) + 40);
    float got[4];
    OK(sp_st_read_f32(f, "w", got, 2, (int[]){2, 2}));
    cr_assert_eq(memcmp(got, w, sizeof w), 0);
    int32_t gi[3];
    OK(sp_st_read_i32(f, "ids", gi, 1, (int[]){3}));
    cr_assert(gi[0] == 7 && gi[1] == -3 && gi[2] == 2147483647);
    float gd[2];
    OK(sp_st_read_f32(f, "d", gd, 1, (int[]){2}));
    cr_assert(gd[0] == 0.1f && gd[1] == -1e10f, "F64 converted: %g %g", gd[0], gd[1]);
    float gh[4];
    OK(sp_st_read_f32(f, "h", gh, 1, (int[]){4}));
    cr_assert(gh[0] == 1.0f && gh[1] == -2.0f && gh[2] == ldexpf(1.0f, -24) && isinf(gh[3]),
              "F16: %g %g %g %g", gh[0], gh[1], gh[2], gh[3]);
    float gb;
    OK(sp_st_read_f32(f, "b", &gb, 1, (int[]){1}));
    cr_assert_eq(gb, 1.0f);
    int32_t gu;
    OK(sp_st_read_i32(f, q->name, &gu, 0, NULL));
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
    OK(sp_st_save(path, 3, names, ts, meta));

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
    OK(sp_st_read_f32(f, "conv.weight", ga, 4, (int[]){2, 3, 2, 2}));
    OK(sp_st_read_f32(f, "odd \"name\"\\", gb, 1, (int[]){5}));
    OK(sp_st_read_f32(f, "x", gc, 2, (int[]){1, 1}));
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
    OK(sp_st_write(path, 2, e, NULL));
    sp_st_file *f = sp_st_open(path);
    int32_t gy[4], gu[3];
    OK(sp_st_read_i32(f, "y", gy, 1, (int[]){4}));
    OK(sp_st_read_i32(f, "u", gu, 2, (int[]){1, 3}));
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

ParameterizedTest(bad_case *c, safetensors_corrupt, header)
{
    static unsigned char zeros[64];
    const char *path = tmp_path(c->name);
    write_st(path, c->header, zeros, c->ndata);
    sp_clear_error();
    cr_assert_null(sp_st_open(path), "%s was accepted", c->name);
    assert_error_has(path);   /* one line naming the file */
    cr_assert_null(strchr(sp_last_error(), '\n'));
}

Test(safetensors_corrupt, file_shorter_than_length_field)
{
    const char *path = tmp_path("short.safetensors");
    write_bytes(path, "\x10\0\0\0\0", 5);
    cr_assert_null(sp_st_open(path));
    assert_error_has("too short");
}

Test(safetensors_corrupt, header_length_beyond_file)
{
    const char *path = tmp_path("long.safetensors");
    unsigned char b[16] = {200};
    memcpy(b + 8, "{}      ", 8);
    write_bytes(path, b, sizeof b);
    cr_assert_null(sp_st_open(path));
    assert_error_has("header length 200 exceeds the 8 bytes after it");
}

Test(safetensors_corrupt, truncated_data)
{
    /* A valid file cut in the middle of its data. */
    float v[8] = {0};
    sp_tensor t = sp_tensor_view(v, 1, (int[]){8});
    const sp_tensor *ts[] = {&t};
    const char *path = tmp_path("cut.safetensors");
    OK(sp_st_save(path, 1, (const char *[]){"v"}, ts, NULL));
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(truncate(path, st.st_size - 5), 0);
    cr_assert_null(sp_st_open(path));
    assert_error_has("run past the end");
}

Test(safetensors_corrupt, missing_file)
{
    const char *path = tmp_path("does-not-exist");
    char want[600];
    cr_assert_null(sp_st_open(path));
    snprintf(want, sizeof want, "cannot open %s: No such file or directory", path);
    cr_assert_str_eq(sp_last_error(), want);
}

Test(safetensors_corrupt, missing_tensor)
{
    const char *path = tmp_path("one.safetensors");
    write_st(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "\0\0\0\0", 4);
    float x = 7.0f;
    sp_st_file *f = sp_st_open(path);
    cr_assert_not_null(f, "%s", sp_last_error());
    cr_assert_eq(sp_st_read_f32(f, "v", &x, 1, (int[]){1}), SP_ERR);
    assert_error_has("no tensor named v");
    cr_assert_eq(x, 7.0f, "dst untouched");
    sp_st_close(f);
}

Test(safetensors_corrupt, float_read_as_labels)
{
    const char *path = tmp_path("f.safetensors");
    write_st(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "\0\0\0\0", 4);
    int32_t y;
    sp_st_file *f = sp_st_open(path);
    cr_assert_not_null(f, "%s", sp_last_error());
    cr_assert_eq(sp_st_read_i32(f, "w", &y, 1, (int[]){1}), SP_ERR);
    assert_error_has("expected an integer dtype");
    sp_st_close(f);
}

Test(safetensors, wrong_shape_message_names_both_shapes)
{
    const char *path = tmp_path("w23.safetensors");
    static unsigned char zeros[24];
    write_st(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", zeros, 24);
    char want[700];
    float x[6];
    sp_st_file *f = sp_st_open(path);
    cr_assert_not_null(f, "%s", sp_last_error());
    cr_assert_eq(sp_st_read_f32(f, "w", x, 2, (int[]){3, 2}), SP_ERR);
    snprintf(want, sizeof want, "%s: w has shape [2, 3], expected [3, 2]", path);
    cr_assert_str_eq(sp_last_error(), want);
    sp_st_close(f);
}

Test(safetensors, bad_json_message_names_file_and_byte)
{
    const char *path = tmp_path("badjson.safetensors");
    write_st(path, "{\"w\" 1}", NULL, 0);
    char want[700];
    cr_assert_null(sp_st_open(path));
    snprintf(want, sizeof want, "%s: bad safetensors header at byte 13: expected ':'", path);
    cr_assert_str_eq(sp_last_error(), want);
}

/* Names and metadata are JSON strings, and JSON text is UTF-8: the reference reader
 * refuses invalid sequences (a stray continuation byte, a truncated sequence, an overlong
 * form, a UTF-16 surrogate, a code point above U+10FFFF); valid ones are kept as is. */
Test(safetensors, invalid_utf8_in_names_and_metadata_refused)
{
    const char *bad[] = {"\x80", "a\xc3", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xff"};
    const char *path = tmp_path("utf8.safetensors");
    char header[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(header, sizeof header, "{\"w%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", bad[i]);
        write_st(path, header, "x", 1);
        cr_assert_null(sp_st_open(path), "name with invalid UTF-8 #%zu accepted", i);
        assert_error_has("invalid UTF-8");
        snprintf(header, sizeof header, "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                 "\"__metadata__\":{\"k\":\"v%s\"}}", bad[i]);
        write_st(path, header, "x", 1);
        cr_assert_null(sp_st_open(path), "metadata with invalid UTF-8 #%zu accepted", i);
        assert_error_has("invalid UTF-8");
    }
    write_st(path, "{\"w\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
             "x", 1);
    sp_st_file *f = sp_st_open(path);
    cr_assert_not_null(f, "%s", sp_last_error());
    cr_assert_not_null(sp_st_find(f, "w\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));
    sp_st_close(f);
}

/* ---------------------------------------------------------------- models */

static sp_model *small_model(int cin, uint64_t seed)
{
    sp_model *m = sp_model_new("tiny");
    sp_model_set_loss(m, sp_softmax_ce());
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
    OK(sp_model_save(a, path));
    OK(sp_model_load(b, path));
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

Test(model_ckpt, wrong_shape_is_one_precise_line)
{
    sp_model *a = small_model(1, 1), *m = small_model(3, 7);
    const char *path = tmp_path("ckpt.safetensors");
    OK(sp_model_save(a, path));
    float before = m->params[0]->value.data[0];
    char want[700];
    cr_assert_eq(sp_model_load(m, path), SP_ERR);
    snprintf(want, sizeof want, "%s: conv1.weight has shape [6, 1, 5, 5], expected [6, 3, 5, 5]", path);
    cr_assert_str_eq(sp_last_error(), want);
    cr_assert_eq(m->params[0]->value.data[0], before, "the model is untouched");
    sp_model_free(a);
    sp_model_free(m);
}

/* A NaN or inf weight (a diverged run's file) is refused at load, naming the tensor and
 * the index, and nothing is overwritten: loaded, it would train to NaN silently. */
/* a's parameters written as sp_model_save lays them out, without its refusal of
 * non-finite values: the file a diverged run of another program could leave */
static void save_raw(const sp_model *a, const char *path)
{
    const char *names[8];
    const sp_tensor *all[8];
    cr_assert_leq(a->nparams, 8);
    for (int i = 0; i < a->nparams; i++) names[i] = a->params[i]->name, all[i] = &a->params[i]->value;
    OK(sp_st_save(path, a->nparams, names, all, NULL));
}

Test(model_ckpt, non_finite_values_refused_naming_tensor_and_index)
{
    sp_model *a = small_model(1, 1), *m = small_model(1, 7);
    const char *path = tmp_path("nan.safetensors");
    float keep = a->params[2]->value.data[3];
    a->params[2]->value.data[3] = NAN;   /* fc.weight[3] */
    cr_assert_eq(sp_model_save(a, path), SP_ERR, "a NaN weight was saved");
    save_raw(a, path);
    float before = m->params[0]->value.data[0];
    cr_assert_eq(sp_model_load(m, path), SP_ERR, "a NaN weight was loaded");
    char want[700];
    snprintf(want, sizeof want, "%s: fc.weight[3] is nan", path);
    assert_error_has(want);
    cr_assert_eq(m->params[0]->value.data[0], before, "the model is untouched");
    a->params[2]->value.data[3] = keep;
    a->params[0]->value.data[5] = -INFINITY;
    save_raw(a, path);
    cr_assert_eq(sp_model_load(m, path), SP_ERR, "an inf weight was loaded");
    assert_error_has("conv1.weight[5] is -inf");
    sp_model_free(a);
    sp_model_free(m);
}

Test(model_ckpt, missing_and_unexpected_names)
{
    float w[6 * 25], extra[2] = {0};
    sp_tensor tw = sp_tensor_view(w, 4, (int[]){6, 1, 5, 5}), te = sp_tensor_view(extra, 1, (int[]){2});
    const sp_tensor *ts[] = {&tw, &te};
    const char *path = tmp_path("partial.safetensors");
    OK(sp_st_save(path, 2, (const char *[]){"conv1.weight", "conv2.bias"}, ts, NULL));
    sp_model *m = small_model(1, 1);
    char want[700];
    cr_assert_eq(sp_model_load(m, path), SP_ERR);
    snprintf(want, sizeof want, "%s: missing tensor conv1.bias (expected shape [6]); and 3 more problems", path);
    cr_assert_str_eq(sp_last_error(), want);

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
    OK(sp_st_save(path, n + 1, names, all, NULL));
    cr_assert_eq(sp_model_load(m, path), SP_ERR);
    snprintf(want, sizeof want, "%s: unexpected tensor conv2.bias (model tiny has no such parameter)", path);
    cr_assert_str_eq(sp_last_error(), want);
    sp_model_free(a);
    sp_model_free(m);
}

/* Issue 24 C.10: a checkpoint of another model said "conv1.weight has shape [6, 1, 5, 5],
 * expected [64, 1, 3, 3]; and 23 more problems" although its metadata names the model. */
Test(model_ckpt, another_models_checkpoint_says_whose)
{
    sp_model *lenet = sp_zoo_lenet(1, 28), *vgg = sp_zoo_vgg11(1, 10);
    sp_model_init(lenet, 1);
    sp_model_init(vgg, 2);
    const char *path = tmp_path("lenet.safetensors");
    OK(sp_model_save(lenet, path));
    char want[700];
    snprintf(want, sizeof want, "%s is a lenet checkpoint, not a vgg11 one", path);
    float before = vgg->params[0]->value.data[0];
    cr_assert_eq(sp_model_load(vgg, path), SP_ERR);
    cr_assert_str_eq(sp_last_error(), want);
    cr_assert_eq(vgg->params[0]->value.data[0], before, "the model is untouched");

    /* the same through the loader of pruned checkpoints (--load), plain and pruned */
    sp_pruning *got = NULL;
    cr_assert_eq(sp_prune_load(vgg, path, &got), SP_ERR);
    cr_assert_str_eq(sp_last_error(), want);
    sp_pruning *pr = sp_prune_magnitude(lenet, NULL, 0.5, SP_PRUNE_GLOBAL);
    OK(sp_prune_save(pr, lenet, path));
    cr_assert_eq(sp_prune_load(vgg, path, &got), SP_ERR);
    cr_assert_str_eq(sp_last_error(), want);
    cr_assert_null(got);
    sp_prune_free(pr);

    /* A file that fits loads whatever name it carries (a renamed or exported model). */
    sp_model *a = small_model(1, 1), *b = small_model(1, 2);
    snprintf(b->name, sizeof b->name, "renamed");
    OK(sp_model_save(a, path));
    OK(sp_model_load(b, path));
    cr_assert_eq(memcmp(a->params[0]->value.data, b->params[0]->value.data, a->params[0]->value.numel * 4), 0);
    /* A file that does not fit and names no model: its first problem, as before. */
    OK(sp_st_save(path, 1, (const char *[]){"conv1.weight"}, (const sp_tensor *[]){&lenet->params[0]->value}, NULL));
    cr_assert_eq(sp_model_load(vgg, path), SP_ERR);
    snprintf(want, sizeof want, "%s: conv1.weight has shape [6, 1, 5, 5], expected [64, 1, 3, 3]; and 17 more problems",
             path);
    cr_assert_str_eq(sp_last_error(), want);
    sp_model_free(a);
    sp_model_free(b);
    sp_model_free(lenet);
    sp_model_free(vgg);
}

/* ---------------------------------------------------------------- atomic saves */

static int save_small(const char *path)
{
    float v[1000];
    for (int i = 0; i < 1000; i++) v[i] = (float)i;
    sp_tensor t = sp_tensor_view(v, 1, (int[]){1000});
    const sp_tensor *ts[] = {&t};
    return sp_st_save(path, 1, (const char *[]){"new"}, ts, NULL);
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

Test(safetensors_atomic, nonexistent_directory_is_an_error)
{
    cr_assert_eq(save_small(tmp_path("no/such/dir/x.safetensors")), SP_ERR);
    assert_error_has("No such file or directory");
}

static void save_with_tiny_file_limit(const void *path)
{
    /* The write fails half way (EFBIG), as on a full disk. */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {256, 256};
    setrlimit(RLIMIT_FSIZE, &rl);
    if (save_small(path) != SP_OK) {
        fprintf(stderr, "%s\n", sp_last_error());
        _exit(2);
    }
}

Test(safetensors_atomic, failed_saves_keep_the_old_file)
{
    const char *path = tmp_path("keep.safetensors");
    const char old[] = "previous checkpoint bytes";
    write_bytes(path, old, sizeof old);
    char err[512], now[128];

    /* The temp name is "<path>.tmp.<pid>": make it a directory so it cannot be created. */
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    cr_assert_eq(mkdir(tmp, 0700), 0);
    cr_assert_eq(save_small(path), SP_ERR);
    assert_error_has("cannot create");
    cr_assert_eq(read_bytes(path, now, sizeof now), sizeof old);
    cr_assert_eq(memcmp(now, old, sizeof old), 0, "old file changed after a failed create");
    cr_assert_eq(rmdir(tmp), 0);

    cr_assert_eq(run_child(save_with_tiny_file_limit, path, err, sizeof err), 2, "stderr: %s", err);
    cr_assert(strstr(err, "unchanged"), "message: %s", err);
    cr_assert_eq(read_bytes(path, now, sizeof now), sizeof old);
    cr_assert_eq(memcmp(now, old, sizeof old), 0, "old file changed after a failed write");
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
    OK(save_small(path));
    char now[16];
    cr_assert_eq(read_bytes(link_path, now, sizeof now), sizeof old);
    cr_assert_str_eq(now, "old");
    sp_st_file *f = sp_st_open(path);
    float v[1000];
    OK(sp_st_read_f32(f, "new", v, 1, (int[]){1000}));
    cr_assert_eq(v[999], 999.0f);
    sp_st_close(f);
    cr_assert(!has_temp_files());
}

/* ------------------------------------------------ issue 19: files and devices */

/* Item 1: a FIFO (or a directory, a device) is refused at once, not opened and waited
 * on. Without the fix sp_st_open blocks in open(2) forever: the timeout fails it. */
Test(files, fifo_directory_and_device_refused_fast, .timeout = 10)
{
    const char *fifo = tmp_path("f.st");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_assert_null(sp_st_open(fifo));
    assert_error_has("not a regular file (a FIFO)");
    cr_assert_null(sp_st_open(tu_tmpdir()));
    assert_error_has("not a regular file (a directory)");
    cr_assert_null(sp_st_open("/dev/null"));
    assert_error_has("not a regular file (a character device)");
    unlink(fifo);
}

static bool is_fifo(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISFIFO(st.st_mode);
}

/* Item 2: --save onto something that is not a regular file is refused and the thing is
 * left as it was (the old code renamed a regular file over it). */
Test(files, save_refuses_non_regular_targets)
{
    const char *fifo = tmp_path("fifo.st"), *dir = tmp_path("dir.st"), *sock = tmp_path("sock.st"),
               *dev = tmp_path("dev.st");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_assert_eq(save_small(fifo), SP_ERR);
    assert_error_has("is a FIFO, not a regular file: refusing to replace it");
    cr_assert(is_fifo(fifo), "the FIFO was replaced");

    cr_assert_eq(mkdir(dir, 0700), 0);
    cr_assert_eq(save_small(dir), SP_ERR);
    assert_error_has("is a directory, not a regular file");

    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(save_small(sock), SP_ERR);
    assert_error_has("is a socket, not a regular file");
    close(fd);

    /* A character device like /dev/null (1, 3), made here when permitted (root). */
    if (mknod(dev, S_IFCHR | 0600, makedev(1, 3)) == 0) {
        cr_assert_eq(save_small(dev), SP_ERR);
        assert_error_has("is a character device, not a regular file");
        struct stat st;
        cr_assert(lstat(dev, &st) == 0 && S_ISCHR(st.st_mode), "the device node was replaced");
        unlink(dev);
    }
    cr_assert(!has_temp_files());
    unlink(fifo);
    unlink(sock);
    rmdir(dir);
}

/* Item 2: a symlink stays a symlink; the file it points to is replaced atomically. */
Test(files, save_through_a_symlink_replaces_its_target)
{
    char sub[600], target[700], link_path[700];
    snprintf(sub, sizeof sub, "%s/real", tu_tmpdir());
    cr_assert_eq(mkdir(sub, 0700), 0);
    snprintf(target, sizeof target, "%s/ck.st", sub);
    snprintf(link_path, sizeof link_path, "%s/latest.st", tu_tmpdir());
    write_bytes(target, "old", 3);
    cr_assert_eq(symlink("real/ck.st", link_path), 0);
    OK(save_small(link_path));
    struct stat st;
    cr_assert(lstat(link_path, &st) == 0 && S_ISLNK(st.st_mode), "the link became a regular file");
    sp_st_file *f = sp_st_open(target);
    cr_assert_not_null(f, "%s", sp_last_error());
    float v[1000];
    OK(sp_st_read_f32(f, "new", v, 1, (int[]){1000}));
    cr_assert_eq(v[123], 123.0f);
    sp_st_close(f);
    cr_assert(!has_temp_files());
    DIR *d = opendir(sub);
    struct dirent *e;
    while ((e = readdir(d))) cr_assert_null(strstr(e->d_name, ".tmp."), "temp left in the target's dir");
    closedir(d);
}

/* A child that saves a 4 MB checkpoint to `path` over and over until killed. */
static pid_t start_saver(const char *path)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        static float v[1 << 20];
        sp_tensor t = sp_tensor_view(v, 1, (int[]){1 << 20});
        const sp_tensor *ts[] = {&t};
        for (int k = 1;; k++) {
            for (int i = 0; i < 1 << 20; i++) v[i] = (float)k;
            if (sp_st_save(path, 1, (const char *[]){"w"}, ts, NULL) != SP_OK) _exit(3);
        }
    }
    return pid;
}

/* The checkpoint at path is complete: loads, and every value is the same save's. */
static void assert_complete_checkpoint(const char *path)
{
    sp_st_file *f = sp_st_open(path);
    cr_assert_not_null(f, "checkpoint damaged: %s", sp_last_error());
    float *v = malloc(sizeof(float) << 20);
    OK(sp_st_read_f32(f, "w", v, 1, (int[]){1 << 20}));
    for (int i = 1; i < 1 << 20; i++) cr_assert_eq(v[i], v[0], "mixed saves at %d", i);
    free(v);
    sp_st_close(f);
}

/* Item 3: SIGINT / SIGTERM while "<path>.tmp.<pid>" exists: the temp file is removed,
 * the process still dies of the signal, the previous checkpoint is intact. */
Test(files, signal_during_save_removes_the_temp_file, .timeout = 60)
{
    const char *path = tmp_path("ck.st");
    const int sigs[] = {SIGTERM, SIGINT};
    for (int s = 0; s < 2; s++) {
        pid_t pid = start_saver(path);
        char tmp[700];
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)pid);
        struct stat st;
        bool seen = false;
        /* wait for a completed save, then for the next save's temp file */
        for (int i = 0; i < 2000000 && !seen; i++) {
            seen = stat(path, &st) == 0 && stat(tmp, &st) == 0;
            if (!seen) usleep(20);
        }
        cr_assert(seen, "the saver never wrote %s", tmp);
        kill(pid, sigs[s]);
        int status;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == sigs[s], "status %#x: not killed by signal %d",
                  status, sigs[s]);
        cr_assert_neq(stat(tmp, &st), 0, "%s left behind after signal %d", tmp, sigs[s]);
        assert_complete_checkpoint(path);
    }
}

/* Item 3: temp files of dead processes (SIGKILL) are removed by the next save to the
 * same target; a live process's temp file and other targets' are left alone. */
Test(files, later_save_removes_stale_temp_files)
{
    const char *path = tmp_path("ck.st");
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    char stale[700], live[700], other[700];
    snprintf(stale, sizeof stale, "%s.tmp.%ld", path, (long)dead);
    snprintf(live, sizeof live, "%s.tmp.1", path);   /* pid 1 is always running */
    snprintf(other, sizeof other, "%s/other.st.tmp.%ld", tu_tmpdir(), (long)dead);
    write_bytes(stale, "x", 1);
    write_bytes(live, "x", 1);
    write_bytes(other, "x", 1);
    OK(save_small(path));
    struct stat st;
    cr_assert_neq(stat(stale, &st), 0, "the dead process's temp file is still there");
    cr_assert_eq(stat(live, &st), 0, "a live process's temp file was removed");
    cr_assert_eq(stat(other, &st), 0, "another target's temp file was removed");
    unlink(live);
    unlink(other);
}

/* Item 3 (SIGKILL): whatever the moment, the old checkpoint is complete and the next
 * save leaves no temp file behind. */
Test(files, sigkill_during_saves_keeps_a_complete_checkpoint, .timeout = 60)
{
    const char *path = tmp_path("kill.st");
    for (int k = 0; k < 5; k++) {
        pid_t pid = start_saver(path);
        usleep(20000 + 7000 * k);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        struct stat st;
        if (stat(path, &st) == 0) assert_complete_checkpoint(path);
    }
    OK(save_small(path));
    cr_assert(!has_temp_files(), "stale temp files survived a later save");
}

/* Peak RSS (bytes) of a child running fn(arg). */
static long child_peak_rss(void (*fn)(const void *), const void *arg, int *exit_code)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        fn(arg);
        _exit(0);
    }
    int status;
    struct rusage ru;
    cr_assert_eq(wait4(pid, &status, 0, &ru), pid);
    *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return ru.ru_maxrss * 1024L;
}

static void open_expect_refusal(const void *path)
{
    if (sp_st_open(path)) _exit(1);
    _exit(strstr(sp_last_error(), "bad safetensors header") ? 0 : 4);
}

/* Item 4: a 2 GB file (sparse) with a bad header is refused after reading the header
 * alone: the child peaks far below 100 MB (the old reader held all 2 GB). */
Test(files, refused_2gb_file_costs_only_its_header, .timeout = 60)
{
    const char *path = tmp_path("big.st");
    const uint64_t hlens[] = {1000, 99000000};   /* zero bytes: not JSON; the second near the 100 MB limit */
    for (int i = 0; i < 2; i++) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        cr_assert_geq(fd, 0);
        cr_assert_eq(write(fd, &hlens[i], 8), 8);
        if (ftruncate(fd, 2L << 30) != 0) {
            close(fd);
            cr_skip_test("cannot make a 2 GB sparse file here");
        }
        close(fd);
        int code;
        long peak = child_peak_rss(open_expect_refusal, path, &code);
        cr_assert_eq(code, 0, "not refused for its header (code %d)", code);
        cr_assert_lt(peak, 100L << 20, "peak RSS %ld MB refusing a 2 GB file (header length %llu)", peak >> 20,
                     (unsigned long long)hlens[i]);
    }
    unlink(path);
}

#define BIG_N (24 << 20)   /* 96 MB of F32 */

static void load_big(const void *path)
{
    float *dst = malloc(sizeof(float) * (size_t)BIG_N);
    memset(dst, 0x7f, sizeof(float) * (size_t)BIG_N);   /* resident before we measure */
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    sp_st_file *f = sp_st_open(path);
    if (!f || sp_st_read_f32(f, "w", dst, 1, (int[]){BIG_N}) != SP_OK || dst[BIG_N - 1] != 5.0f) _exit(3);
    sp_st_close(f);
    getrusage(RUSAGE_SELF, &after);
    long grew_mb = (after.ru_maxrss - before.ru_maxrss) >> 10;
    _exit(grew_mb < 16 ? 0 : 10 + (int)(grew_mb > 200 ? 200 : grew_mb));
}

/* Item 4: loading a checkpoint reads straight into the destination: the peak grows by
 * far less than the file's size (the old reader held a whole copy: 2× in all). */
Test(files, loading_needs_the_checkpoint_size_once, .timeout = 120)
{
    const char *path = tmp_path("big_valid.st");
    float *v = malloc(sizeof(float) * (size_t)BIG_N);
    for (size_t i = 0; i < (size_t)BIG_N; i++) v[i] = 5.0f;
    sp_tensor t = sp_tensor_view(v, 1, (int[]){BIG_N});
    const sp_tensor *ts[] = {&t};
    OK(sp_st_save(path, 1, (const char *[]){"w"}, ts, NULL));
    free(v);
    int code;
    child_peak_rss(load_big, path, &code);
    cr_assert_eq(code, 0, "load failed (3) or peak RSS grew by %d MB for a 96 MB file", code - 10);
    unlink(path);
}

/* Item 5: bytes after the data the offsets cover are refused, naming the offset. */
Test(files, trailing_bytes_after_the_data_refused)
{
    const char *path = tmp_path("trail.st");
    OK(save_small(path));
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    FILE *fp = fopen(path, "ab");
    static const char junk[100];
    cr_assert_eq(fwrite(junk, 1, 100, fp), 100);
    fclose(fp);
    char want[700];
    cr_assert_null(sp_st_open(path));
    snprintf(want, sizeof want, "%s: 100 trailing bytes from byte %lld to the end of the file", path,
             (long long)st.st_size);
    assert_error_has(want);

    /* and a gap between two tensors */
    write_st(path, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                   "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]}}", "abc", 3);
    cr_assert_null(sp_st_open(path));
    assert_error_has("belong to no tensor");
}

/* Item 7: an overflowing shape product is named as such, not as a wrapped "0 elements". */
Test(files, overflowing_shape_says_so)
{
    const char *path = tmp_path("ovf.st");
    write_st(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776,1099511627776],"
                   "\"data_offsets\":[0,0]}}", NULL, 0);
    cr_assert_null(sp_st_open(path));
    assert_error_has("the element count of shape [1099511627776, 1099511627776, 1099511627776] overflows");
    write_st(path, "{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}", NULL, 0);
    cr_assert_null(sp_st_open(path));
    assert_error_has("overflow a 64-bit byte count");
}

/* Issue 15 item 2: a program survives every bad file, gets each message, and goes on
 * to load a good one; the message is per thread. */
static void *fail_in_thread(void *arg)
{
    (void)arg;
    if (sp_st_open("/nonexistent/x.st")) return NULL;
    return strstr(sp_last_error(), "/nonexistent/x.st") ? (void *)1 : NULL;
}

Test(errors, caller_survives_bad_files_and_gets_the_message)
{
    const char *bad = tmp_path("bad.st"), *good = tmp_path("good.st"), *fifo = tmp_path("p.st");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    write_st(bad, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "\0\0\0\0", 4);
    const char *paths[] = {tmp_path("absent.st"), fifo, tu_tmpdir(), bad};
    const char *needles[] = {"No such file", "a FIFO", "a directory", "run past the end"};
    for (int i = 0; i < 4; i++) {
        sp_clear_error();
        cr_assert_null(sp_st_open(paths[i]));
        assert_error_has(needles[i]);
    }
    sp_model *m = small_model(1, 1);
    cr_assert_eq(sp_model_load(m, bad), SP_ERR);
    assert_error_has("run past the end");
    cr_assert_eq(sp_model_save(m, tu_tmpdir()), SP_ERR);
    assert_error_has("is a directory");
    OK(sp_model_save(m, good));
    OK(sp_model_load(m, good));

    sp_error("main thread's message");
    pthread_t th;
    void *ok;
    cr_assert_eq(pthread_create(&th, NULL, fail_in_thread, NULL), 0);
    pthread_join(th, &ok);
    cr_assert(ok, "the thread did not see its own message");
    cr_assert_str_eq(sp_last_error(), "main thread's message");
    sp_model_free(m);
    unlink(fifo);
}

/* Issue 15 item 4: the ceiling on one allocation sized by a file. */
Test(errors, file_alloc_ceiling_has_a_clear_message)
{
    sp_set_file_alloc_limit(1000);
    cr_assert_null(sp_file_alloc(1001, 0, "x.bin"));
    cr_assert_str_eq(sp_last_error(), "x.bin: needs 1001 bytes, above the 1000-byte limit on one allocation "
                                      "from a file (SCANPROP_MAX_FILE_ALLOC)");
    void *p = sp_file_alloc(1000, 1, "x.bin");
    cr_assert_not_null(p);
    free(p);
    sp_set_file_alloc_limit(0);
    cr_assert_eq(sp_file_alloc_limit(), (size_t)16 << 30);
}

/* The apps: a FIFO for --load or --dataset and a non-regular --save target are refused
 * with one line and exit 2 before any data is read (the old lenet hung in fopen). */
static int run_app(const char *args, char *out, size_t len)
{
    const char *b = getenv("BUILD");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "timeout 20 %s/%s 2>&1", b ? b : "build", args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t k = fread(out, 1, len - 1, p);
    out[k] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(files, apps_refuse_fifos_and_devices_at_once, .timeout = 60)
{
    const char *fifo = tmp_path("app.st");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    char args[1024], out[4096], want[700];
    snprintf(want, sizeof want, "scanprop: %s: not a regular file (a FIFO)\n", fifo);
    snprintf(args, sizeof args, "lenet --load %s --steps 1 --quiet", fifo);
    cr_assert_eq(run_app(args, out, sizeof out), 2, "%s", out);
    cr_assert_str_eq(out, want);
    snprintf(args, sizeof args, "rnn --dataset %s --steps 1 --quiet", fifo);
    cr_assert_eq(run_app(args, out, sizeof out), 2, "%s", out);
    cr_assert_str_eq(out, want);
    snprintf(args, sizeof args, "lenet --save %s --steps 1 --quiet", fifo);
    cr_assert_eq(run_app(args, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "is a FIFO, not a regular file: refusing to replace it"), "%s", out);
    cr_assert(is_fifo(fifo), "the FIFO was replaced");
    unlink(fifo);
}

/* Issue 24 C.10, as a user meets it: lenet's checkpoint given to vgg11 (--load,
 * --eval-only and --resume) is refused with one line naming both models, exit 2. */
Test(files, apps_name_another_models_checkpoint, .timeout = 120)
{
    const char *ck = tmp_path("lenet.st"), *ck2 = tmp_path("lenet_every.st");
    char args[1024], out[4096], want[700];
    snprintf(args, sizeof args, "lenet --steps 1 --save %s --quiet", ck);
    cr_assert_eq(run_app(args, out, sizeof out), 0, "%s", out);
    snprintf(want, sizeof want, "scanprop: %s is a lenet checkpoint, not a vgg11 one\n", ck);
    const char *loads[] = {"--load %s --steps 1 --quiet", "--load %s --eval-only"};
    for (int i = 0; i < 2; i++) {
        int n = snprintf(args, sizeof args, "vgg11 ");
        snprintf(args + n, sizeof args - (size_t)n, loads[i], ck);
        cr_expect_eq(run_app(args, out, sizeof out), 2, "%s: %s", args, out);
        cr_expect_str_eq(out, want, "%s", args);
    }
    snprintf(args, sizeof args, "lenet --steps 1 --save-every 1 --save %s --quiet", ck2);
    cr_assert_eq(run_app(args, out, sizeof out), 0, "%s", out);
    snprintf(args, sizeof args, "vgg11 --resume %s --steps 2 --quiet", ck2);
    snprintf(want, sizeof want, "scanprop: %s is a lenet checkpoint, not a vgg11 one\n", ck2);
    cr_expect_eq(run_app(args, out, sizeof out), 2, "%s", out);
    cr_expect_str_eq(out, want);
}

/* Issue 15 item 2: construction from user input whose checks use sp_fail (layers,
 * engines, schedules) returns an error under sp_try; the program goes on. */
static void bad_conv(void *arg) { *(sp_layer **)arg = sp_conv2d("c", 1, 6, 0, 1, 0); }
static void bad_engine(void *arg)
{
    if (!(*(sp_engine **)arg = sp_engine_create("nope", NULL))) sp_fail("%s", sp_last_error());
}
static void bad_schedule(void *arg) { *(sp_lr_schedule *)arg = sp_lr_parse("bogus", 0.1); }
static void good_engine(void *arg) { *(sp_engine **)arg = sp_engine_create("linear", NULL); }
static void nested(void *arg)
{
    sp_engine *e = NULL;
    *(int *)arg = sp_try(bad_engine, &e);
    sp_fail("outer failure after an inner one");
}

Test(errors, construction_failures_are_returned_under_sp_try)
{
    sp_layer *l = NULL;
    cr_assert_eq(sp_try(bad_conv, &l), SP_ERR);
    assert_error_has("conv2d c: channels 1 -> 6, kernel 0");
    cr_assert_null(l);
    sp_engine *e = NULL;
    cr_assert_eq(sp_try(bad_engine, &e), SP_ERR);
    assert_error_has("--backward nope: unknown engine");
    sp_clear_error();
    cr_assert_null(sp_engine_create("nope", NULL), "an unknown engine was made");   /* a status: no sp_try needed */
    assert_error_has("--backward nope: unknown engine");
    sp_lr_schedule s;
    cr_assert_eq(sp_try(bad_schedule, &s), SP_ERR);
    assert_error_has("--lr-schedule 'bogus'");
    int inner = 0;
    cr_assert_eq(sp_try(nested, &inner), SP_ERR);
    cr_assert_eq(inner, SP_ERR);
    cr_assert_str_eq(sp_last_error(), "outer failure after an inner one");
    cr_assert_eq(sp_try(good_engine, &e), SP_OK, "%s", sp_last_error());
    cr_assert_not_null(e);
    sp_engine_destroy(e);
}
