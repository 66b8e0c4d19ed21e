/* ref_train.c — an independent double-precision reference of training
 * fake_model.c's bigram model with llm.c's learning-rate schedule (warmup,
 * then constant, cosine or linear decay) and gradient clipping by global
 * norm, written from the formulas (docs/training.md), not from the runtime.
 *
 *   ref_train INIT.bin SHARD.bin STEPS LR BETA1 BETA2 EPS WD WARMUP SCHEDULE FINAL_FRAC CLIP
 * prints per step: "step loss lr grad_norm". Batches are sequential as in
 * the program: batch i = tokens [i*BT, i*BT + BT + 1), wrapping.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 4, T = 64, V = 256, C = 8, BT = B * T };
enum { P_WTE = 0, P_GAIN = P_WTE + V * C, P_PROJ = P_GAIN + C, P_BIAS = P_PROJ + C * V, NP = P_BIAS + V };

static double p[NP], g[NP], m[NP], v[NP];
static int decays(long i) { return i < P_GAIN || (i >= P_PROJ && i < P_BIAS); }

static double loss_grad(const int *tok, const int *tgt)
{
    double loss = 0, lg[V], x[C], h[C];
    memset(g, 0, sizeof g);
    for (int r = 0; r < BT; r++) {
        for (int c = 0; c < C; c++)
            x[c] = p[P_WTE + tok[r] * C + c], h[c] = x[c] * p[P_GAIN + c];
        double mx = -INFINITY, se = 0;
        for (int k = 0; k < V; k++) {
            lg[k] = p[P_BIAS + k];
            for (int c = 0; c < C; c++)
                lg[k] += h[c] * p[P_PROJ + c * V + k];
            mx = fmax(mx, lg[k]);
        }
        for (int k = 0; k < V; k++)
            se += exp(lg[k] - mx);
        loss += mx + log(se) - lg[tgt[r]];
        for (int k = 0; k < V; k++) {
            double d = (exp(lg[k] - mx) / se - (k == tgt[r])) / BT;
            g[P_BIAS + k] += d;
            for (int c = 0; c < C; c++) {
                g[P_PROJ + c * V + k] += h[c] * d;
                double dh = d * p[P_PROJ + c * V + k];
                g[P_GAIN + c] += dh * x[c];
                g[P_WTE + tok[r] * C + c] += dh * p[P_GAIN + c];
            }
        }
    }
    return loss / BT;
}

static double lr_at(long i, long n, double lr, long w, const char *sched, double frac)
{
    if (i < w)
        return lr * (i + 1) / w;
    if (!strcmp(sched, "constant") || n <= w)
        return lr;
    double f = (double)(i - w) / (double)(n - w), lo = lr * frac;
    if (!strcmp(sched, "cosine"))
        return lo + 0.5 * (1 + cos(M_PI * f)) * (lr - lo);
    return lr - f * (lr - lo);
}

static unsigned char *slurp(const char *path, long *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*n);
    if (b && fread(b, 1, (size_t)*n, f) != (size_t)*n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

int main(int argc, char **argv)
{
    if (argc != 13) {
        fprintf(stderr, "usage: ref_train INIT SHARD STEPS LR B1 B2 EPS WD WARMUP SCHED FRAC CLIP\n");
        return 1;
    }
    long ni, ns;
    unsigned char *init = slurp(argv[1], &ni), *shard = slurp(argv[2], &ns);
    if (!init || !shard || ni != 1024 + 4L * NP || ns < 1024) {
        fprintf(stderr, "ref_train: bad init or shard\n");
        free(init);
        free(shard);
        return 1;
    }
    for (long i = 0; i < NP; i++) {
        float f;
        memcpy(&f, init + 1024 + 4 * i, 4);
        p[i] = f;
    }
    long ntok = (ns - 1024) / 2, steps = atol(argv[3]), warm = atol(argv[9]);
    double lr = atof(argv[4]), b1 = atof(argv[5]), b2 = atof(argv[6]), eps = atof(argv[7]), wd = atof(argv[8]);
    double frac = atof(argv[11]), clip = atof(argv[12]);
    static int tok[BT], tgt[BT];
    long pos = 0;
    for (long s = 0; s < steps; s++) {
        for (int i = 0; i < BT + 1; i++) {
            int t = shard[1024 + 2 * (pos + i)] | shard[1024 + 2 * (pos + i) + 1] << 8;
            if (i < BT)
                tok[i] = t;
            if (i > 0)
                tgt[i - 1] = t;
        }
        pos += BT;
        if (pos + BT + 1 > ntok)
            pos = 0;
        double loss = loss_grad(tok, tgt), norm = 0;
        for (long i = 0; i < NP; i++)
            norm += g[i] * g[i];
        norm = sqrt(norm);
        double scale = clip > 0 && norm > clip ? clip / norm : 1.0;
        double a = lr_at(s, steps, lr, warm, argv[10], frac), t = (double)(s + 1);
        for (long i = 0; i < NP; i++) {
            double gi = g[i] * scale;
            m[i] = b1 * m[i] + (1 - b1) * gi;
            v[i] = b2 * v[i] + (1 - b2) * gi * gi;
            double mh = m[i] / (1 - pow(b1, t)), vh = v[i] / (1 - pow(b2, t));
            p[i] -= a * (mh / (sqrt(vh) + eps) + (decays(i) ? wd * p[i] : 0));
        }
        printf("%ld %.9g %.9g %.9g\n", s + 1, loss, a, norm);
    }
    free(init);
    free(shard);
    return 0;
}
