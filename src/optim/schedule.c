/* Learning-rate schedules: a pure function of the step, so resuming a run needs only the step
 * count (no scheduler state to checkpoint). Formulas and their PyTorch equivalents are in
 * include/dtrain/optim.h; tests/optim/test_optim_parity.c compares them with torch's. */
#include <math.h>
#include "dtrain/optim.h"

#define DT_PI 3.14159265358979323846 /* M_PI is not in strict C11 */

float dt_lr_at(const dt_lr_schedule *s, int64_t step) {
    if (!s) return 0.0f;
    double base = s->base_lr, min = s->min_lr;
    int64_t w = s->warmup_steps > 0 ? s->warmup_steps : 0;
    if (step < 0) step = 0;
    /* warmup: (step + 1) / (W + 1) never gives lr 0 and reaches 1 at step W */
    if (step < w) return (float)(base * (double)(step + 1) / (double)(w + 1));
    int64_t j = step - w;
    int64_t d = s->total_steps - w;
    if (d < 1) d = 1;
    if (j > d) j = d;
    switch (s->kind) {
    case DT_LR_LINEAR:
        return (float)(base + (min - base) * (double)j / (double)d);
    case DT_LR_COSINE:
        return (float)(min + (base - min) * (1.0 + cos(DT_PI * (double)j / (double)d)) / 2.0);
    case DT_LR_STEP: {
        int64_t k = (step - w) / (s->step_size > 0 ? s->step_size : 1);
        return (float)(base * pow((double)s->gamma, (double)k));
    }
    case DT_LR_CONSTANT:
    default:
        return (float)base;
    }
}

dt_status dt_lr_check(const dt_lr_schedule *s) {
    if (!s) return dt_error_set(DT_ERR_INVALID, "lr schedule: NULL");
    if (s->kind < DT_LR_CONSTANT || s->kind > DT_LR_STEP)
        return dt_error_set(DT_ERR_INVALID, "lr schedule: unknown kind %d", (int)s->kind);
    if (!(s->base_lr >= 0 && isfinite(s->base_lr)))
        return dt_error_set(DT_ERR_INVALID, "lr schedule: base_lr %g must be >= 0", s->base_lr);
    if (s->warmup_steps < 0)
        return dt_error_set(DT_ERR_INVALID, "lr schedule: warmup_steps %ld must be >= 0",
                            (long)s->warmup_steps);
    if (s->kind == DT_LR_LINEAR || s->kind == DT_LR_COSINE) {
        if (s->total_steps <= s->warmup_steps)
            return dt_error_set(DT_ERR_INVALID,
                                "lr schedule: total_steps %ld must exceed warmup_steps %ld",
                                (long)s->total_steps, (long)s->warmup_steps);
        if (!(s->min_lr >= 0 && s->min_lr <= s->base_lr))
            return dt_error_set(DT_ERR_INVALID, "lr schedule: min_lr %g must be in [0, base_lr %g]",
                                s->min_lr, s->base_lr);
    }
    if (s->kind == DT_LR_STEP) {
        if (s->step_size <= 0)
            return dt_error_set(DT_ERR_INVALID, "lr schedule: step_size %ld must be > 0",
                                (long)s->step_size);
        if (!(s->gamma >= 0 && isfinite(s->gamma)))
            return dt_error_set(DT_ERR_INVALID, "lr schedule: gamma %g must be >= 0", s->gamma);
    }
    return DT_OK;
}
