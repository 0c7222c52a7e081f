// llama.cpp's quantizer (llama_model_quantize) as a command, built against the prebuilt
// libllama of node-llama-cpp, which ships no llama-quantize binary: llama.cpp's own type choice
// per tensor (K-quant mixes, fallbacks for widths that are not a multiple of 256), logged on
// stderr one line per tensor. Used by compare_llamacpp_quant.sh and compare_quant_quality.sh.
//   llamacpp_quantize IN.gguf OUT.gguf TYPE [THREADS]   (TYPE: q8_0 q4_0 q4_k_m q3_k_m q2_k)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr,
            "usage: llamacpp_quantize IN.gguf OUT.gguf q8_0|q4_0|q4_k_m|q3_k_m|q2_k [THREADS]\n");
    return 2;
  }
  static const struct {
    const char* name;
    enum llama_ftype ftype;
  } types[] = {{"q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},
               {"q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},
               {"q4_k_m", LLAMA_FTYPE_MOSTLY_Q4_K_M},
               {"q3_k_m", LLAMA_FTYPE_MOSTLY_Q3_K_M},
               {"q2_k", LLAMA_FTYPE_MOSTLY_Q2_K}};
  struct llama_model_quantize_params p = llama_model_quantize_default_params();
  size_t i = 0;
  while (i < sizeof types / sizeof types[0] && strcmp(argv[3], types[i].name) != 0) ++i;
  if (i == sizeof types / sizeof types[0]) {
    fprintf(stderr, "llamacpp_quantize: unknown type '%s' (q8_0, q4_0, q4_k_m, q3_k_m, q2_k)\n",
            argv[3]);
    return 2;
  }
  p.ftype = types[i].ftype;
  p.nthread = argc > 4 ? atoi(argv[4]) : 0;
  llama_backend_init();
  const uint32_t rc = llama_model_quantize(argv[1], argv[2], &p);
  if (rc != 0) fprintf(stderr, "llamacpp_quantize: %s -> %s failed (%u)\n", argv[1], argv[2], rc);
  return rc != 0;
}
