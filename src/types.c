#include "types.h"

#include <stdio.h>
#include <strings.h>

/* Block geometry from ggml's ggml-common.h; NULL names mark ids ggml removed (4, 5, 31-33,
 * 36-38) or types whose layout this build does not know (41 Q1_0, 42 Q2_0). */
static const rl_type_info k_types[RL_TYPE_COUNT] = {
    [0] = {"F32", 1, 4},        [1] = {"F16", 1, 2},        [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},     [6] = {"Q5_0", 32, 22},     [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},     [9] = {"Q8_1", 32, 36},     [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},  [12] = {"Q4_K", 256, 144},  [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},  [15] = {"Q8_K", 256, 292},  [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74}, [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},  [21] = {"IQ3_S", 256, 110}, [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},       [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},       [27] = {"I64", 1, 8},       [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},  [30] = {"BF16", 1, 2},      [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},  [39] = {"MXFP4", 32, 17},   [40] = {"NVFP4", 64, 36},
};

/* rawloop's own types, indexed from RL_RAWLOOP_TYPE_BASE */
static const rl_type_info k_rawloop_types[RL_RAWLOOP_TYPE_END - RL_RAWLOOP_TYPE_BASE] = {
    [RL_RQ2 - RL_RAWLOOP_TYPE_BASE] = {"RQ2", RL_QK_RQ2, 20},
    [RL_FP8 - RL_RAWLOOP_TYPE_BASE] = {"FP8", RL_QK, 34},
    [RL_RQ4 - RL_RAWLOOP_TYPE_BASE] = {"RQ4", RL_QK_RQ4, 36},
};

/* Every type the engine computes with, in the order usage text lists them. */
static const uint32_t k_computable[] = {RL_F32,  RL_F16,  RL_BF16, RL_Q8_0, RL_Q4_0, RL_Q4_1,
                                        RL_Q5_0, RL_Q5_1, RL_Q4_K, RL_Q5_K, RL_Q6_K, RL_RQ2,  RL_RQ4,
                                        RL_FP8};

const rl_type_info *rl_type_get(uint32_t type) {
    if (type >= RL_RAWLOOP_TYPE_BASE && type < RL_RAWLOOP_TYPE_END)
        return &k_rawloop_types[type - RL_RAWLOOP_TYPE_BASE];
    if (type >= RL_TYPE_COUNT || k_types[type].name == NULL) return NULL;
    return &k_types[type];
}

const char *rl_type_name(uint32_t type) {
    const rl_type_info *t = rl_type_get(type);
    return t ? t->name : "unknown";
}

bool rl_type_is_float(uint32_t type) {
    return type == RL_F32 || type == RL_F16 || type == RL_BF16;
}

bool rl_type_fp32_act(uint32_t type) {
    return rl_type_is_float(type) || type == RL_FP8;
}

bool rl_type_computable(uint32_t type) {
    for (size_t i = 0; i < sizeof k_computable / sizeof *k_computable; i++)
        if (k_computable[i] == type) return true;
    return false;
}

bool rl_type_is_rawloop(uint32_t type) {
    return type >= RL_RAWLOOP_TYPE_BASE && type < RL_RAWLOOP_TYPE_LIMIT;
}

uint32_t rl_type_from_name(const char *name) {
    for (size_t i = 0; i < sizeof k_computable / sizeof *k_computable; i++)
        if (!strcasecmp(rl_type_name(k_computable[i]), name)) return k_computable[i];
    return UINT32_MAX;
}

uint32_t rl_type_computable_at(size_t i) {
    return i < sizeof k_computable / sizeof *k_computable ? k_computable[i] : UINT32_MAX;
}

void rl_type_computable_names(char *buf, size_t cap, const char *sep) {
    size_t len = 0;
    if (cap) buf[0] = 0;
    for (size_t i = 0; i < sizeof k_computable / sizeof *k_computable && len < cap; i++) {
        int w = snprintf(buf + len, cap - len, "%s%s", i ? sep : "", rl_type_name(k_computable[i]));
        if (w < 0) break;
        len += (size_t)w;
    }
}

size_t rl_row_bytes(uint32_t type, size_t n) {
    const rl_type_info *t = rl_type_get(type);
    if (!t || n % t->blck) return 0;
    return n / t->blck * t->size;
}
