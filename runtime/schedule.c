/* schedule.c — the learning rate of each step (--warmup, --lr-schedule,
 * --lr-final-frac) and the gradient-clipping factor (--grad-clip), with
 * llm.c's arithmetic. docs/training.md states the formulas.
 */
#include <math.h>
#include <string.h>

#include "gc_runtime_internal.h"

static const char *const names[] = {"constant", "cosine", "linear"};

int gcrt_lr_schedule_parse(const char *s)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, names[i]))
            return i;
    return -1;
}

const char *gcrt_lr_schedule_name(int k) { return k >= 0 && k < 3 ? names[k] : "?"; }

/* Step is 1-based; i = step - 1 is llm.c's 0-based step:
 *   i < warmup:  lr * (i + 1) / warmup
 *   else, with f = (i - warmup) / (steps - warmup) in [0, 1] and
 *   lr_min = lr * final_frac:
 *     constant  lr
 *     cosine    lr_min + (0.5 + 0.5 cos(pi f)) (lr - lr_min)
 *     linear    lr - f (lr - lr_min)
 * computed in double, rounded once to float. */
float gcrt_lr_at(const gcrt_options *o, long step)
{
    double lr = o->lr, i = (double)(step - 1), w = (double)o->warmup, n = (double)o->steps;
    if (i < w)
        return (float)(lr * (i + 1) / w);
    if (o->lr_schedule == GCRT_LR_CONSTANT || n <= w)
        return (float)lr;
    double f = (i - w) / (n - w), lo = lr * o->lr_final_frac;
    f = f < 0 ? 0 : f > 1 ? 1 : f;
    if (o->lr_schedule == GCRT_LR_COSINE)
        return (float)(lo + (0.5 + 0.5 * cos(3.14159265358979323846 * f)) * (lr - lo));
    return (float)(lr - f * (lr - lo));
}

float gcrt_clip_scale(double norm, double clip)
{
    return clip > 0 && norm > clip ? (float)(clip / norm) : 1.0f;
}
