/* gen_seeds.c — writes the seed corpora of the fuzz targets that do not read
 * graph text: valid checkpoints (fp32, bf16) for fuzz_ckpt's program, token
 * shards and text for fuzz_shard, argument lists for the two CLIs.
 * safetensors files for fuzz_safetensors' program.
 * usage: gen_seeds DIR   (creates DIR/ckpt, DIR/shard, DIR/train_cli, DIR/gcompile_cli,
 * DIR/safetensors) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void put(const char *dir, const char *sub, const char *name, const void *p, size_t n);

/* A safetensors file of fuzz_safetensors' program: its three tensors in
 * dtype dt (element size es), optionally with metadata. */
static void put_st(const char *dir, const char *name, const char *dt, int es, int meta)
{
    static char buf[4096];
    char h[1024];
    int n = snprintf(h, sizeof h,
                     "{%s\"w.a\":{\"dtype\":\"%s\",\"shape\":[4,3],\"data_offsets\":[0,%d]},"
                     "\"h.0.b\":{\"dtype\":\"%s\",\"shape\":[5],\"data_offsets\":[%d,%d]},"
                     "\"h.1.b\":{\"dtype\":\"%s\",\"shape\":[5],\"data_offsets\":[%d,%d]}}",
                     meta ? "\"__metadata__\":{\"format\":\"pt\"}," : "", dt, 12 * es, dt, 12 * es, 17 * es, dt,
                     17 * es, 22 * es);
    while (n % 8)
        h[n++] = ' ';
    for (int i = 0; i < 8; i++)
        buf[i] = (char)(i < 4 ? (unsigned)n >> (8 * i) : 0u);
    memcpy(buf + 8, h, (size_t)n);
    for (int i = 0; i < 22 * es; i++)
        buf[8 + n + i] = (char)(i % es == es - 1 ? 0x3f : i);   /* small finite numbers */
    put(dir, "safetensors", name, buf, (size_t)(8 + n + 22 * es));
}

static void put(const char *dir, const char *sub, const char *name, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/%s/%s", dir, sub, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
        perror(path);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_seeds DIR\n");
        return 1;
    }
    const char *dir = argv[1];
    mkdir(dir, 0777);
    /* checkpoints: [20240326, version, maxT, V, L, NH, C, Vp] + 96 params */
    static unsigned char buf[1024 + 96 * 4];
    int32_t h[256] = {20240326, 3, 16, 32, 2, 2, 4, 64};
    memcpy(buf, h, sizeof h);
    for (int i = 0; i < 96; i++) {
        float x = (float)i * 0.01f;
        memcpy(buf + 1024 + 4 * i, &x, 4);
    }
    put(dir, "ckpt", "fp32.bin", buf, 1024 + 96 * 4);
    h[1] = 5;
    memcpy(buf, h, sizeof h);
    put(dir, "ckpt", "bf16.bin", buf, 1024 + 96 * 2);
    put(dir, "ckpt", "header_only.bin", buf, 1024);
    /* safetensors files of fuzz_safetensors' program */
    put_st(dir, "f32.safetensors", "F32", 4, 1);
    put_st(dir, "bf16.safetensors", "BF16", 2, 0);
    put_st(dir, "f16.safetensors", "F16", 2, 1);
    put_st(dir, "i32.safetensors", "I32", 4, 0);
    /* shards: [20240520, 1, ntok] + ntok uint16 */
    int32_t s[256] = {20240520, 1, 70};
    memcpy(buf, s, sizeof s);
    for (int i = 0; i < 70; i++) {
        uint16_t t = (uint16_t)(i * 7 % 256);
        memcpy(buf + 1024 + 2 * i, &t, 2);
    }
    put(dir, "shard", "tokens.bin", buf, 1024 + 70 * 2);
    const char *text = "the quick brown fox jumps over the lazy dog; the plan is the allocation.\n";
    put(dir, "shard", "text.txt", text, strlen(text));
    /* argument lists, one argument per line */
    static const char *const train[] = {
        "--steps\n20\n--lr\n1e-3", "--help", "--version", "--data\nx.bin\n--val-data\nv.bin\n--val-every\n5",
        "--init\nm.bin\n--save\nout.bin\n--seed\n42", "--gradcheck=8\n--gradcheck-tol\n0.01",
        "--threads\n2\n--profile\n--sample\n64", "--beta1\n0.8\n--beta2\n0.95\n--eps\n1e-6\n--weight-decay\n0.1",
        "--log\nlog.jsonl\n--steps\n-1", "stray",
    };
    static const char *const gc[] = {
        "models/gpt2.graph\n--emit\nsummary", "m.graph\n--config\ntiny\n-D\nB=2\n--target\ncpu\n-o\ntrain",
        "--help", "--version", "m.graph\n--mem\n24GiB\n--gpus\n1\n--precision\nbf16",
        "m.graph\n--schedule\nplain\n--no-reuse\n--no-fuse\n--poison", "m.graph\n--gpu-arch\nsm_80,sm_90\n-v",
        "m.graph\n--emit\nplan-svg\n-o\n-", "m.graph\n--cc\nclang\n--nvcc\nnvcc", "a.graph\nb.graph",
    };
    char name[32];
    for (size_t i = 0; i < sizeof train / sizeof *train; i++) {
        snprintf(name, sizeof name, "args%zu", i);
        put(dir, "train_cli", name, train[i], strlen(train[i]));
    }
    for (size_t i = 0; i < sizeof gc / sizeof *gc; i++) {
        snprintf(name, sizeof name, "args%zu", i);
        put(dir, "gcompile_cli", name, gc[i], strlen(gc[i]));
    }
    return 0;
}
