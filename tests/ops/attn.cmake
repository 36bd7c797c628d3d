# Attention family: rotary position embedding (dt_rope) and tiled grouped-query attention
# (dt_attention).
dt_ref(NAME ref_attn SCRIPT tests/ref/ref_attn.py)
dt_test(NAME attn_fd SOURCES ops/attn_fd.c LABELS unit)
dt_test(NAME attn_errors SOURCES ops/attn_errors.c LABELS unit)
dt_test(NAME attn_parity SOURCES ops/attn_parity.c LABELS parity FIXTURES_REQUIRED ref_attn)
